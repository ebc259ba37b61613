"""What `ragport ingest` tells a newcomer (issue 43, items 8 and 9b): an early estimate of a
long run with the options that make it faster, and the files a folder walk skipped for their
type, counted in the summary and named with --verbose (in process, ``main``)."""

from __future__ import annotations

import functools
import itertools
import re
import threading

import pytest

import ragport.cli.ingest as cli_ingest
import ragport.cli.progress as progress
from ragport.cli import EXIT_OK, _parser, main

HASH = ["--embedder", "hash"]


class StepClock:
    """A clock that moves ``step`` seconds each time it is read (a slow machine, on demand)."""

    def __init__(self, step: float) -> None:
        self._ticks = itertools.count()
        self._step = step
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return 1_000.0 + next(self._ticks) * self._step


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    docs = tmp_path / "docs"
    (docs / "img").mkdir(parents=True)
    for n in range(12):
        (docs / f"note{n:02d}.md").write_text(f"# Note {n}\n\nSomething to say, number {n}.\n")
    (docs / "img" / "logo.png").write_bytes(b"\x89PNG")
    (docs / "img" / "photo.png").write_bytes(b"\x89PNG")
    (docs / "data.json").write_text("{}")
    (docs / "Makefile").write_text("all:\n")
    (docs / ".hidden.png").write_bytes(b"\x89PNG")  # hidden: neither ingested nor counted
    return docs


def _clocked(monkeypatch, step: float) -> None:
    monkeypatch.setattr(
        cli_ingest, "track", functools.partial(progress.track, clock=StepClock(step))
    )


def test_a_long_ingest_says_early_how_long_and_which_options_go_faster(folder, monkeypatch, capsys):
    """A run whose first ETA (after three files) is a minute or more prints once on stderr:
    the rate, about how many minutes for how many files left, and the real options that go
    faster (--embedder for an HTTP embedder plugin, --workers with the current count); stdout
    stays the per-file lines and the summary.

    If this fails, check Tracker._estimate (ragport/cli/progress.py) and _advice and the
    track(advice=...) call of _ingest (ragport/cli/ingest.py)."""
    _clocked(monkeypatch, step=3.0)  # each file "takes" about 24 s
    code = main(["ingest", str(folder), "--store", "memory://", "--workers", "1", *HASH])
    assert code == EXIT_OK
    out, err = capsys.readouterr()
    assert "at the current rate" not in out
    lines = [line for line in err.splitlines() if "at the current rate" in line]
    assert len(lines) == 1, err
    line = lines[0]
    found = re.search(r"about (\d+) minutes? for the (\d+) files left", line)
    assert found is not None, line
    assert int(found.group(2)) == 9  # after the warm-up's three files
    assert "--embedder NAME" in line and "--workers N; now 1" in line
    options = {option for action in _ingest_parser()._actions for option in action.option_strings}
    assert {"--embedder", "--workers"} <= options  # the line names options that exist


def test_a_short_ingest_prints_no_estimate(folder, monkeypatch, capsys):
    """A run that is over before a minute is predicted says nothing about its length.

    If this fails, check ESTIMATE_MIN_S and the warm-up (ragport/cli/pace.py)."""
    _clocked(monkeypatch, step=0.01)
    assert main(["ingest", str(folder), "--store", "memory://", "--workers", "1", *HASH]) == 0
    assert "at the current rate" not in capsys.readouterr().err


def _ingest_parser():
    sub = next(a for a in _parser()._actions if a.dest == "command")
    return sub.choices["ingest"]


def test_files_skipped_for_their_type_are_counted_and_named_with_verbose(folder, capsys):
    """A folder's .png, .json and suffix-less files are not ingested; the summary counts them
    by suffix and says --verbose names them, which names each (relative to the root); hidden
    files stay out of both.

    If this fails, check collect_documents(skipped=) in ragport/bootstrap/ingest.py and
    _summary / _kinds in ragport/cli/ingest.py."""
    assert main(["ingest", str(folder), "--store", "memory://", *HASH]) == EXIT_OK
    out = capsys.readouterr().out
    summary = out[out.index("document(s) in corpus") :]
    assert re.search(r"skipped\s+4\s+not a supported type: \.png 2, \.json 1, \(no suffix\) 1", out)
    assert "--verbose names them" in summary
    assert "logo.png" not in out and "hidden" not in out
    assert main(["ingest", str(folder), "--store", "memory://", "--verbose", *HASH]) == EXIT_OK
    out = capsys.readouterr().out
    named = out[out.index("skipped (not a supported type):") :].splitlines()[1:]
    assert [line.strip() for line in named] == [
        "Makefile", "data.json", "img/logo.png", "img/photo.png",
    ]  # fmt: skip
    assert "--verbose names them" not in out and ".hidden.png" not in out


def test_with_json_the_skipped_files_go_to_stderr(folder, capsys):
    """--json keeps stdout one outcome per line; the skipped count (and with --verbose each
    name) goes to stderr.

    If this fails, check the args.json branch at the end of _ingest (ragport/cli/ingest.py)."""
    args = ["ingest", str(folder), "--store", "memory://", "--json", "--verbose", *HASH]
    assert main(args) == EXIT_OK
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 12 and "skipped" not in out
    assert "4 file(s) skipped, not a supported type (.png 2, .json 1, (no suffix) 1)" in err
    assert "skipped img/logo.png" in err
