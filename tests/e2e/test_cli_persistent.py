"""The persistent command line on the embedded default: what `ingest` stores, a new process finds.

`ingest` and the first `query` run as ``python -m ragport.cli`` children (the promise is about
processes); the commands after them run through ``main()`` in this process
(tests/support/cli_inprocess.py), a second or more cheaper each."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_inprocess import run_cli


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragport.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


@pytest.fixture
def cli_env(tmp_path: Path):
    """An environment whose user data directory (and so embedded server) is private to the test."""
    env = dict(os.environ)
    env.pop("RAGPORT_STORE", None)
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    yield env
    _run(env, "db", "stop")


def test_ingest_then_query_in_new_processes_uses_the_embedded_server(cli_env, tmp_path):
    """`ragport ingest` in one process, `ragport query` in another finds the stored chunks.

    If this fails, check ragport/bootstrap/stores.py `open_stores` (embedded default) and
    ragport/adapters/postgres/embedded.py (server reuse across processes).
    """
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "zebra.md").write_text("# Zebras\n\nZebras have black and white stripes.\n")
    (docs / "notes.txt").write_text("Penguins live in the southern hemisphere.\n")
    (docs / "ignored.bin").write_bytes(b"\x00\x01")
    data = Path(__file__).resolve().parents[1] / "data"
    (docs / "travel-policy.pdf").write_bytes((data / "travel-policy.pdf").read_bytes())

    ingest = _run(cli_env, "ingest", str(docs), "--corpus", "animals")
    assert ingest.returncode == 0, ingest.stderr
    assert "guides/zebra.md: 1 chunks" in ingest.stdout
    assert "3 document(s)" in ingest.stdout
    assert "ignored.bin" not in ingest.stdout

    query = _run(cli_env, "query", "zebra stripes", "--corpus", "animals", "--json")
    assert query.returncode == 0, query.stderr
    result = json.loads(query.stdout)
    assert result["hits"][0]["source_id"] == "guides/zebra.md"
    assert result["hits"][0]["provenance"]["provider"] == "postgres"
    assert result["text"].startswith("[guides/zebra.md#0001] ")

    expenses = run_cli(
        cli_env, "query", "hotel costs within thirty days", "--corpus", "animals", "--json"
    )
    top = json.loads(expenses.stdout)["hits"][0]
    assert top["source_id"] == "travel-policy.pdf" and top["metadata"]["page"] == 3
    assert top["provenance"]["citation_id"] == "travel-policy.pdf#0003"

    again = run_cli(cli_env, "ingest", str(docs), "--corpus", "animals")
    assert "guides/zebra.md: unchanged" in again.stdout

    status = run_cli(cli_env, "status", "--corpus", "animals")
    assert re.search(r"guides/zebra\.md\s+indexed\s+1/1\s", status.stdout), status.stdout

    deleted = run_cli(cli_env, "delete", "guides/zebra.md", "--corpus", "animals")
    assert deleted.returncode == 0 and "1 record(s) retired" in deleted.stdout
    after = json.loads(run_cli(cli_env, "query", "zebra", "--corpus", "animals", "--json").stdout)
    assert all(hit["source_id"] != "guides/zebra.md" for hit in after["hits"])

    other = run_cli(cli_env, "query", "zebra", "--corpus", "plants", "--json")
    assert other.returncode == 1 and "plants" in other.stderr  # an unknown corpus: nothing found


def test_an_unreachable_server_is_a_typed_error_not_a_traceback(cli_env):
    """A postgresql:// URL nobody listens on exits 3 (store unavailable) with StoreError and no
    traceback.

    If this fails, check the OperationalError mapping in ragport/adapters/postgres/_driver.py.
    """
    done = _run(cli_env, "query", "x", "--store", "postgresql://nobody@127.0.0.1:1/none")
    assert done.returncode == 3
    assert "StoreError" in done.stderr and "Traceback" not in done.stderr
