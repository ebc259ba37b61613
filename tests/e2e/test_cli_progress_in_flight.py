"""The progress display shows work in flight (issue 26): while one big file embeds, the bar
names that file (not the one before), counts chunks embedded with their rate, and its clock
and ETA keep moving; without a terminal a plain heartbeat line on stderr says the same."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from doubles import CountingEmbedder
from rich.console import Console

import ragport.cli.ingest as cli_ingest
import ragport.cli.progress as progress
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.application.ingest import IngestOptions
from ragport.bootstrap.ingest import collect_documents, ingest_files
from ragport.cli import EXIT_OK, main
from ragport.domain.model import Scope


class SlowEmbedder(CountingEmbedder):
    """A HashEmbedder (through the shared double) whose every call takes ``delay`` seconds
    (an embedder on a busy CPU)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self._delay = delay

    def embed(self, texts: Sequence[str]) -> Any:
        time.sleep(self._delay)
        return super().embed(texts)


class Recorder:
    """An IngestProgress that records what it hears, with the thread it heard it on."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str | int]] = []
        self.lock = threading.Lock()

    def working(self, source_id: str, stage: str) -> None:
        with self.lock:
            self.events.append((stage, source_id))

    def embedded(self, chunks: int) -> None:
        with self.lock:
            self.events.append(("embedded", chunks))


def _folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a-small.md").write_text("# Small\n\nA short note.\n")
    words = " ".join(f"word{i % 997} sentence{i % 113}." for i in range(30_000))
    (docs / "b-big.md").write_text("# Big\n\n" + words + "\n")  # ~600 chunks of 1,000 chars
    return docs


@pytest.mark.parametrize("workers", [1, 2])
def test_ingest_files_reports_the_file_in_flight_and_every_embed_call(tmp_path, workers):
    """The reports name the big file while it embeds, after the small one's outcome came out,
    and the embedded counts add up to the chunks written.

    If this fails, check IngestProgress calls in ingest_files (ragport/bootstrap/ingest.py)
    and in pipeline's embed / write steps (pipeline.py), and embed_batches' on_embedded."""
    docs = _folder(tmp_path)
    recorder = Recorder()
    scope = Scope("t", "r", "c")
    outcomes = []
    for outcome in ingest_files(
        collect_documents([docs], root=docs), root=docs, store=InMemoryStore(),
        status_store=InMemoryStatusStore(), embedder=HashEmbedder(), scope=scope,
        options=IngestOptions(workers=workers, progress=recorder),
    ):  # fmt: skip
        with recorder.lock:
            recorder.events.append(("outcome", outcome.source_id or ""))
        outcomes.append(outcome)
    assert [o.state for o in outcomes] == ["indexed", "indexed"]
    chunks = sum(o.chunks for o in outcomes)
    assert chunks > 300
    assert sum(n for kind, n in recorder.events if kind == "embedded") == chunks
    stages = [(k, v) for k, v in recorder.events if k != "embedded"]
    big = [k for k, v in stages if isinstance(v, str) and v.startswith("b-big.md")]
    assert ("embedding" in big) if workers > 1 else ("reading" in big)
    if workers > 1:
        # several embed calls for the big file: the count moves while it is in flight
        assert sum(1 for k, _ in recorder.events if k == "embedded") >= 2
    # the big file is reported as in flight before its own outcome
    first_big = next(i for i, (k, v) in enumerate(stages) if str(v).startswith("b-big.md"))
    big_done = stages.index(("outcome", "b-big.md"))
    assert first_big < big_done


def test_the_bar_names_the_embedding_file_and_counts_chunks_while_the_clock_runs(
    tmp_path, monkeypatch, capsys
):
    """On a terminal, while the big file embeds (each call 0.4 s), the auto-refreshing bar
    shows `embedding b-big.md`, a growing chunk count with a rate, and an ETA.

    If this fails, check Tracker.working / embedded and track()'s auto_refresh and stats
    column (ragport/cli/progress.py), and that _ingest passes progress=bar."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    docs = _folder(tmp_path)
    buffer = io.StringIO()
    monkeypatch.setattr(
        progress,
        "console",
        lambda: Console(file=buffer, force_terminal=True, width=160, color_system=None),
    )
    monkeypatch.setattr(cli_ingest, "_embedder", lambda *a, **k: SlowEmbedder(0.4))
    code = main(["ingest", str(docs), "--store", "memory://", "--workers", "2"])
    assert code == EXIT_OK
    drawn = buffer.getvalue()
    assert "embedding b-big.md" in drawn
    assert " chunks (" in drawn and "/s), ETA" in drawn
    # frames drawn while the big file was in flight: the count grew between refreshes
    counts = {
        int(part.split(" chunks")[0].split()[-1].replace(",", ""))
        for part in drawn.split("\r")
        if " chunks (" in part and "embedding b-big.md" in part
    }
    assert len(counts) >= 2, counts


def test_without_a_terminal_a_heartbeat_line_names_the_work_in_flight(monkeypatch, capsys):
    """No terminal: a plain line on stderr at most every HEARTBEAT_S seconds with done/total,
    chunks and their rate, the ETA and the file in flight; none before the interval.

    If this fails, check Tracker._show's plain branch in ragport/cli/progress.py."""
    now = [100.0]
    tracker = progress.Tracker(
        None, None, description="ingest", unit="files", total=6, plain=True, clock=lambda: now[0]
    )
    tracker.working("docs/big.pdf", "embedding")
    for done in (1, 2, 3):  # a file every 4 s
        now[0] += 4.0
        tracker.update(done=done)
    assert capsys.readouterr().err == ""  # before the first interval: silent
    now[0] = 100.0 + progress.HEARTBEAT_S
    tracker.embedded(64)
    err = capsys.readouterr().err
    assert err.startswith("ingest: 3/6 files, 64 chunks (")
    # 3 files left at 0.25 files/s, 3 s after the last one came (they come every 4 s)
    assert "ETA 0:09" in err and "now embedding docs/big.pdf" in err
    now[0] += 1.0
    tracker.embedded(64)
    assert capsys.readouterr().err == ""  # at most one line per interval
    silent = progress.Tracker(None, None, description="ingest", unit="files", plain=False)
    silent.working("x", "embedding")
    now[0] += 100
    silent.update(done=1)
    assert capsys.readouterr().err == ""


class StageRecorder(Recorder):
    """A Recorder that also hears the ends of stages and keeps the ones still open."""

    def __init__(self) -> None:
        super().__init__()
        self.open: dict[tuple[str, str], int] = {}

    def working(self, source_id: str, stage: str) -> None:
        super().working(source_id, stage)
        with self.lock:
            key = (stage, source_id)
            self.open[key] = self.open.get(key, 0) + 1

    def finished(self, source_id: str, stage: str) -> None:
        with self.lock:
            key = (stage, source_id)
            assert self.open.get(key), f"{key} finished but never started"
            self.open[key] -= 1
            if not self.open[key]:
                del self.open[key]


@pytest.mark.parametrize("workers", [1, 2])
def test_every_stage_ingest_files_starts_is_finished_before_its_outcome(tmp_path, workers):
    """Each stage reported with working() is reported finished() (a file that fails to parse
    too), a file's write (serially: its whole reading) is over when its outcome comes out, and
    nothing is left open at the end: a display shows what runs now, not what ran last (the bar
    of issue 43 said `writing X` for 20-40 s while the next group embedded).

    If this fails, check _stage in ragport/bootstrap/ingest.py and its uses in pipeline.py."""
    docs = _folder(tmp_path)
    (docs / "c-empty.md").write_text("")
    recorder = StageRecorder()
    states = []
    for outcome in ingest_files(
        collect_documents([docs], root=docs), root=docs, store=InMemoryStore(),
        status_store=InMemoryStatusStore(), embedder=HashEmbedder(), scope=Scope("t", "r", "c"),
        options=IngestOptions(workers=workers, progress=recorder),
    ):  # fmt: skip
        states.append(outcome.state)
        with recorder.lock:
            assert ("writing", outcome.source_id) not in recorder.open
            assert ("reading", outcome.source_id) not in recorder.open
    assert states == ["indexed", "indexed", "failed"]
    assert recorder.open == {}
    stages = {stage for stage, _ in recorder.events if stage != "embedded"}
    assert stages == ({"reading"} if workers == 1 else {"parsing", "embedding", "writing"})
