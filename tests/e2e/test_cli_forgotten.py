"""The command line after `ragport forget` (issue 44): a re-ingest of the forgotten file is a
failed entry naming the way back (never `indexed`), `status` and `sources` never report it
`indexed`, and `ragport readmit` lets it be ingested again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ragport
from ragport.adapters.postgres import PostgresStore
from ragport.cli import EXIT_FAILED, EXIT_OK, main

HASH = ["--embedder", "hash"]
SCOPE = ragport.Scope("local", "default", "kb")  # the command line's default tenant and resource


@pytest.fixture
def cli(tmp_path: Path, monkeypatch, pg_url, pg_schema, capsys):
    """Two documents in ``docs``; the store options (``--store``, ``--schema``, ``--corpus``)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "zebra.md").write_text("# Zebras\n\nZebras have black and white stripes.\n")
    (docs / "penguin.md").write_text("# Penguins\n\nPenguins live in the south.\n")
    monkeypatch.chdir(tmp_path)
    store = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *store]) == EXIT_OK
    capsys.readouterr()
    return [*store, "--corpus", "kb"]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _ingest(capsys, cli: list[str]) -> tuple[int, dict[str, dict]]:
    code, out, _ = _run(capsys, "ingest", "docs", "--json", *cli, *HASH)
    return code, {o["source_id"]: o for o in map(json.loads, out.splitlines())}


def _states(capsys, cli: list[str], command: str) -> dict[str, str]:
    code, out, err = _run(capsys, command, "--json", *cli)
    assert code == EXIT_OK, err
    return {item["source_id"]: item["state"] for item in json.loads(out)["items"]}


def test_forget_then_ingest_fails_loudly_until_readmitted(cli, capsys):
    """forget zebra.md; ingest again: zebra.md is a failed entry (ForgottenError, with the
    readmit hint), exit 1, status `forgotten`; readmit; ingest: indexed and found again.

    If this fails, check prepare_document's refusal (ragport/application/documents.py) and
    the readmit command (ragport/cli/lifecycle.py).
    """
    code, first = _ingest(capsys, cli)
    assert code == EXIT_OK and first["zebra.md"]["state"] == "indexed"
    code, _, err = _run(capsys, "forget", "zebra.md", *cli)
    assert code == EXIT_OK, err

    code, again = _ingest(capsys, cli)
    assert code == EXIT_FAILED
    assert again["penguin.md"]["state"] == "unchanged"
    zebra = again["zebra.md"]
    assert (zebra["state"], zebra["reason"]) == ("failed", "ForgottenError")
    assert "readmit" in zebra["error"]
    code, out, _ = _run(capsys, "ingest", "docs", *cli, *HASH)
    assert code == EXIT_FAILED and "ForgottenError" in out and "ragport readmit" in out
    assert _states(capsys, cli, "status") == {"penguin.md": "indexed", "zebra.md": "forgotten"}
    assert "zebra.md" not in _states(capsys, cli, "sources")  # the rag handler removed its rows

    code, out, err = _run(capsys, "readmit", "zebra.md", *cli)
    assert code == EXIT_OK, err
    assert "re-admitted" in out
    code, _, err = _run(capsys, "readmit", "zebra.md", *cli)
    assert code == EXIT_FAILED and "not forgotten" in err
    code, last = _ingest(capsys, cli)
    assert code == EXIT_OK and last["zebra.md"]["state"] == "indexed"
    code, out, err = _run(capsys, "query", "stripes", "--json", *cli, *HASH)
    assert code == EXIT_OK, err
    assert {h["source_id"] for h in json.loads(out)["hits"]} >= {"zebra.md"}


def test_status_and_sources_say_forgotten_not_indexed(cli, capsys, pg_engine, pg_schema):
    """A source a host forgot without the rag handler keeps its rows and its `indexed`
    status row: `ragport status` and `ragport sources` show it `forgotten`.

    If this fails, check _forgotten in ragport/cli/lifecycle.py and list_sources.
    """
    code, _ = _ingest(capsys, cli)
    assert code == EXIT_OK
    store = PostgresStore(pg_engine, schema=pg_schema)
    ragport.application.create_deletion_propagator(
        scope=SCOPE, store=store, authorization=None, as_owner=True
    ).propagate("zebra.md")
    assert _states(capsys, cli, "status") == {"penguin.md": "indexed", "zebra.md": "forgotten"}
    assert _states(capsys, cli, "sources") == {"penguin.md": "indexed", "zebra.md": "forgotten"}
    code, out, err = _run(capsys, "status", *cli)
    assert code == EXIT_OK, err
    assert "1 forgotten" in out and "1 indexed" in out
