"""The command line when its reader goes away or the user presses Ctrl-C: the work is
finished or stopped cleanly, never a traceback (real processes, the session PostgreSQL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ragport.cli import EXIT_INTERRUPTED, EXIT_OK, main


@pytest.fixture
def corpus(tmp_path, pg_url, pg_schema, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    store = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *store]) == EXIT_OK
    capsys.readouterr()
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}

    def files(n: int) -> Path:
        root = tmp_path / "docs"
        root.mkdir(exist_ok=True)
        for i in range(n):
            (root / f"doc-{i:04}.md").write_text(f"# Doc {i}\n\nThe topic of {i} is item{i}.\n")
        return root

    def sources() -> list[str]:
        code = main(["sources", "--corpus", "kb", "--json", *store])
        out = capsys.readouterr().out
        return [row["source_id"] for row in json.loads(out)["items"]] if code == EXIT_OK else []

    def ingest(root: Path) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "ragport.cli", "ingest", str(root), "--root", str(root)]
        # SIGINT as a terminal delivers it: a test run started in the background by a shell
        # without job control (`.ci/run &`) inherits SIGINT ignored, and Python then leaves
        # it ignored, so Ctrl-C would never reach the command.
        return subprocess.Popen(
            [*argv, "--corpus", "kb", "--embedder", "hash", *store],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip

    return files, sources, ingest


def test_ingest_into_a_closed_pipe_finishes_every_file(corpus):
    """`ragport ingest | head -1`: the reader leaves after one line; every file is still
    ingested and the exit status is the work's (0), with nothing on stderr."""
    files, sources, ingest = corpus
    proc = ingest(files(40))
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_OK, err
    assert b"Traceback" not in err and b"BrokenPipe" not in err
    assert len(sources()) == 40


@pytest.mark.slow
def test_ctrl_c_during_ingest_exits_130_quietly_and_a_rerun_finishes(corpus):
    files, sources, ingest = corpus
    # 600 files: with the GIN merge off the writer's path (the maintenance thread) writes
    # got faster, and a run of 150 small files once ended before the signal arrived (a
    # clean-clone run of .ci/run, two test workers busy).
    root = files(600)
    proc = ingest(root)
    assert proc.stdout is not None
    proc.stdout.readline()  # the first file is done: the run is under way
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    # Most files are left when the signal is sent; a run that finished first is a failure to
    # see (raise the file count), not a pass.
    assert proc.returncode != EXIT_OK, "the run finished before the signal arrived"
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert b"Traceback" not in err and b"interrupted" in err
    done = len(sources())
    assert 1 <= done < 600
    rerun = ingest(root)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == EXIT_OK, err
    assert len(sources()) == 600
