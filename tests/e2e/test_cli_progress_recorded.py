"""The progress bar on a recorded terminal (issue 43, items 7 and 8): a fake clock and a
scripted run shaped like the pipelined ingest (files parsed ahead, one embedder call per group
of files at a steady rate with jitter, the group written while the next call embeds), drawn
on a forced-terminal rich Console writing into a buffer. Each frame must name the stages that
run at that moment, the ETA must hold still from one redraw to the next and be near the truth,
and a long run must say once, early, how long it will take and how to go faster."""

from __future__ import annotations

import io
import itertools
import random
import re
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from rich.console import Console

import ragport.cli.progress as progress

RATE = 16.0  # chunks per second the scripted embedder manages (MiniLM on a busy laptop)
FILES = 50
REDRAW = 1.0  # seconds between the redraws the script asks for (the bar: twice a second)
CALL = 128  # chunks per embedder call at most (the pipeline's group size)
FRAME = "\r\x1b[2K"  # how rich starts each redraw of a one-line live display
ETA = re.compile(r"ETA (?:(\d+):)?(\d+):(\d\d)")


class Screen(io.TextIOBase):
    """A terminal's output, kept as the writes came (reading it back costs only what is new)."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def text(self, start: int = 0) -> str:
        return "".join(self.writes[start:])


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@attrs.define
class Running:
    """What the script runs at this moment: the frame drawn now must say exactly this."""

    parsing: list[str] = attrs.Factory(list)
    embedding: str | None = None
    writing: str | None = None


@attrs.define
class Frame:
    now: float
    text: str
    running: Running


class Script:
    """Drives a Tracker like ``ingest_files(workers=2)`` drives it, and records each frame."""

    def __init__(self, tracker: Any, screen: Screen, clock: FakeClock) -> None:
        self.tracker, self.screen, self.clock = tracker, screen, clock
        self.running = Running()
        self.frames: list[Frame] = []
        self._seen = 0
        self.done = 0

    def _record(self) -> None:
        drawn = self.screen.text(self._seen)
        self._seen = len(self.screen.writes)
        last = [f for f in drawn.split(FRAME) if f.strip()]
        if last:
            state = attrs.evolve(self.running, parsing=list(self.running.parsing))
            self.frames.append(Frame(self.clock.now, last[-1], state))

    def event(self, method: str, *args: Any, **kwargs: Any) -> None:
        getattr(self.tracker, method)(*args, **kwargs)
        self._record()

    def wait(self, seconds: float) -> None:
        """Time passes; the bar redraws itself meanwhile."""
        end = self.clock.now + seconds
        while self.clock.now + REDRAW < end:
            self.clock.now += REDRAW
            self.tracker.refresh()
            self._record()
        self.clock.now = end

    def parse(self, name: str) -> None:
        self.running.parsing.append(name)
        self.event("working", name, "parsing")
        self.wait(0.3)
        self.running.parsing.remove(name)
        self.event("finished", name, "parsing")

    def embed_start(self, group: list[tuple[str, int]]) -> str:
        label = group[0][0] + (f" (+{len(group) - 1} more)" if len(group) > 1 else "")
        self.running.embedding = label
        self.event("working", label, "embedding")
        return label

    def embed_end(self, label: str, chunks: int) -> None:
        self.event("embedded", chunks)
        self.running.embedding = None
        self.event("finished", label, "embedding")

    def write(self, name: str, chunks: int) -> None:
        self.running.writing = name
        self.event("working", name, "writing")
        self.wait(0.05)
        self.running.writing = None
        self.event("finished", name, "writing")
        self.done += 1
        self.event("update", done=self.done, chunks=chunks)


def _groups(files: int, seed: int) -> list[list[tuple[str, int]]]:
    """Files of 40-50 chunks packed in input order into calls of at most CALL chunks."""
    rng = random.Random(seed)
    groups: list[list[tuple[str, int]]] = [[]]
    for n in range(files):
        chunks = rng.randint(40, 50)
        if sum(c for _, c in groups[-1]) + chunks > CALL:
            groups.append([])
        groups[-1].append((f"docs/f{n:03d}.md", chunks))
    return groups


def _run(script: Script, groups: list[list[tuple[str, int]]], seed: int) -> None:
    """The pipeline's order: the next group is parsed while a group embeds; when a call ends
    the next one starts before the finished group is written."""
    rng = random.Random(seed + 1)
    for name, _ in groups[0]:
        script.parse(name)
    label = script.embed_start(groups[0])
    for k, group in enumerate(groups):
        started = script.clock.now
        duration = sum(c for _, c in group) / RATE * rng.uniform(0.7, 1.3)
        for name, _ in groups[k + 1] if k + 1 < len(groups) else ():
            script.parse(name)
        script.wait(max(started + duration - script.clock.now, 0.0))
        script.embed_end(label, sum(c for _, c in group))
        if k + 1 < len(groups):
            label = script.embed_start(groups[k + 1])
        for name, chunks in group:
            script.write(name, chunks)


@attrs.frozen
class Recorded:
    script: Script
    screen: Screen


@pytest.fixture(scope="module")
def recorded() -> Iterator[Recorded]:
    """One scripted run of FILES files (about 160 s on the fake clock), drawn on a recorded
    terminal; the tests below read it."""
    screen, clock = Screen(), FakeClock()
    groups = _groups(FILES, seed=43)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            progress,
            "console",
            lambda: Console(file=screen, force_terminal=True, width=220, color_system=None),
        )
        with progress.track(
            "ingest", total=FILES, unit="files", clock=clock,
            advice="faster: --embedder, --workers",
        ) as tracker:  # fmt: skip
            script = Script(tracker, screen, clock)
            _run(script, groups, seed=43)
    yield Recorded(script, screen)


def _eta(frame: Frame) -> float | None:
    found = ETA.search(frame.text)
    if found is None:
        return None
    hours, minutes, seconds = found.groups()
    return int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)


def test_each_frame_names_the_stages_running_at_that_moment(recorded):
    """Every frame drawn (by an event or by a redraw) shows `parsing` while a
    file parses, `embedding <group's first file> (+N more)` while that call runs, `writing
    <file>` only while that file is written, and none of them once it is through: never
    `writing` the last file of a group while the next group embeds (the bar of issue 43 said
    `writing X` for 20-40 s).

    If this fails, check _Stages in ragport/cli/progress.py and the working / finished calls
    of the pipeline (ragport/application/pipeline.py, ingest.py progress_stage)."""
    script = recorded.script
    assert len(script.frames) > 300
    seen_all_three = 0
    for frame in script.frames:
        running, text = frame.running, frame.text
        if running.embedding is not None:
            assert f"embedding {running.embedding}" in text, text
        else:
            assert "embedding" not in text, text
        if running.writing is not None:
            assert f"writing {running.writing}" in text, text
        else:
            assert "writing" not in text, text
        if running.parsing:
            assert "parsing" in text, text
        else:
            assert "parsing" not in text, text
        seen_all_three += running.embedding is not None and running.writing is not None
    assert seen_all_three > 0  # a group written while the next one embeds: both shown


def test_the_eta_holds_still_between_redraws_and_is_near_the_truth(recorded):
    """At a steady rate with +-30% jitter per embedder call, the ETA of consecutive frames (a
    redraw or an event apart) differs by at most 25% while more than a minute is left, and
    it stays within 1.5x of the time the scripted run really had left (the bar of issue 43
    swung from 4:15:09 to 52:29 and was off 2-4x). No ETA is shown before the warm-up.

    If this fails, check SmoothedRate and Pace.eta in ragport/cli/pace.py."""
    script = recorded.script
    end = script.frames[-1].now
    start = script.frames[0].now
    timed = [(f.now, _eta(f)) for f in script.frames]
    assert all(eta is None for now, eta in timed if now - start < 9.5)  # warm-up: `ETA ?`
    shown = [(now, eta) for now, eta in timed if eta is not None and eta >= 60]
    assert len(shown) > 100
    for (_, before), (_, after) in itertools.pairwise(shown):
        assert 0.8 <= after / before <= 1.25, (before, after)
    for now, eta in shown:
        assert 1 / 1.5 <= eta / (end - now) <= 1.5, (now - start, eta, end - now)


def test_a_long_run_says_once_early_how_long_and_how_to_go_faster(recorded):
    """With `advice`, the first ETA of a run that long (a minute or more) prints one line above
    the bar: the current rate, about how many minutes for how many files, and the advice.

    If this fails, check Tracker._estimate in ragport/cli/progress.py."""
    script = recorded.script
    drawn = recorded.screen.text()
    lines = [line for line in drawn.split("\n") if "at the current rate" in line]
    assert len(lines) == 1, lines
    line = lines[0][lines[0].index("ingest: at the current rate") :]
    assert re.search(r"\(\d+\.\d+ chunks/s, the embedder busy \d+% of the time\)", line), line
    found = re.search(r"about (\d+) minutes? for the (\d+) files left", line)
    assert found is not None, line
    assert line.endswith("faster: --embedder, --workers")
    # printed early: while most files were left, near the time the run really took
    minutes, left = int(found.group(1)), int(found.group(2))
    assert left >= 0.8 * FILES
    total_minutes = (script.frames[-1].now - script.frames[0].now) / 60
    assert 0.5 * total_minutes <= minutes <= 1.5 * total_minutes
