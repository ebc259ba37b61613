"""Progress of long commands (ingest, reindex, sync): a rich bar on stderr, or plain lines.

The bar is drawn only when stderr is a terminal (and rich is installed); it shows done/total,
the chunks embedded and their smoothed rate, an ETA (``ragport.cli.pace``: it holds still
while the work comes in lumps), the elapsed time and the stages running now: the files being
parsed, the embedder call in flight (the group's first file and how many more), the file being
written. Without a terminal a line on stderr every ``HEARTBEAT_S`` seconds says the same, so
a pipe or a log file sees a long run alive and a short one sees nothing; progress never goes
to stdout: ``--json`` output stays pure data. With ``--json`` on a terminal stdout the JSON
lines are the progress, so there is no bar then either. Given ``advice``, a run the first ETA
says will last ``ESTIMATE_MIN_S`` or more gets one line on stderr (whatever else is shown)
with the rate, the estimate and how to go faster. ``console()`` is the one seam: the tests
hand it a forced-terminal rich Console writing into a buffer to see the bar.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ragport.cli.output import escape_controls
from ragport.cli.pace import Pace

__all__ = ["ESTIMATE_MIN_S", "HEARTBEAT_S", "Tracker", "console", "track", "wanted"]


def console() -> Any | None:
    """A rich Console on stderr when stderr is a terminal and rich is installed, else None."""
    if not sys.stderr.isatty():
        return None
    try:
        from rich.console import Console
    except ImportError:  # pragma: no cover - rich is in the cli extra
        return None
    from ragport.cli.output import raw_stream

    return Console(file=raw_stream(sys.stderr))


def wanted(*, json_out: bool) -> bool:
    """No bar when ``--json`` prints to a terminal (its lines are the progress)."""
    return not (json_out and sys.stdout.isatty())


HEARTBEAT_S = 15.0
"""Without a terminal, a plain progress line on stderr at most this often (seconds)."""

ESTIMATE_MIN_S = 60.0
"""A run whose first ETA is at least this long (seconds) gets the estimate line."""

_NAME = 32  # a file name in the stage text keeps its last this many characters
_DOING = 90  # the whole stage text at most


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _about(seconds: float) -> str:
    """``17 minutes``, ``1 h 05 min``: an estimate's rounding."""
    minutes = max(1, round(seconds / 60))
    if minutes < 60:
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _per_second(rate: float) -> str:
    """``6.1``, ``0.25``: one decimal, two below 1."""
    return f"{rate:.1f}" if rate >= 1 else f"{rate:.2f}"


def _short(name: str) -> str:
    return name if len(name) <= _NAME else "…" + name[-(_NAME - 1) :]


class _Stages:
    """What runs now: files parsing, the embedder call, the file writing (or, serially, the
    one file read, embedded and written), and how long the embedder has been busy."""

    def __init__(self) -> None:
        self.parsing: dict[str, None] = {}  # in start order
        self.embedding: str | None = None
        self.embedding_since = 0.0
        self.embedding_busy = 0.0
        self.writing: str | None = None
        self.reading: str | None = None

    def start(self, name: str, stage: str, now: float) -> None:
        if stage == "parsing":
            self.parsing[name] = None
        elif stage == "embedding":
            self.embedding, self.embedding_since = name, now
        elif stage == "writing":
            self.writing = name
        else:  # "reading" (serial ingest), or a stage this display does not know
            self.reading = f"{stage} {name}"

    def end(self, name: str, stage: str, now: float) -> None:
        if stage == "parsing":
            self.parsing.pop(name, None)
        elif stage == "embedding" and self.embedding is not None:
            self.embedding_busy += now - self.embedding_since
            self.embedding = None
        elif stage == "writing":
            self.writing = None
        else:
            self.reading = None

    def busy(self, now: float) -> float:
        """Seconds the embedder has worked so far."""
        running = now - self.embedding_since if self.embedding is not None else 0.0
        return self.embedding_busy + running

    def text(self) -> str:
        parts = []
        if self.parsing:
            first = next(iter(self.parsing))
            parts.append(
                f"parsing {_short(first)}"
                if len(self.parsing) == 1
                else f"parsing {len(self.parsing)} files"
            )
        if self.embedding is not None:
            parts.append(f"embedding {_short(self.embedding)}")
        if self.writing is not None:
            parts.append(f"writing {_short(self.writing)}")
        if self.reading is not None:
            parts.append(self.reading)
        text = " · ".join(parts)
        return text if len(text) <= _DOING else text[: _DOING - 1] + "…"


class Tracker:
    """Done / total of one task (``total`` may grow: sync learns it page by page), the stages
    running (``IngestProgress``: ``working`` / ``finished``), the chunks embedded, and the
    smoothed rates and ETA of ``ragport.cli.pace.Pace``.

    Thread-safe: the ingest pipeline reports from its parse and embed threads. On a terminal
    the rich bar redraws itself twice a second from this state (the clock and the ETA move
    while one big call embeds); without one, ``plain`` writes a line on stderr at most every
    ``HEARTBEAT_S`` seconds, so a log shows a long run is alive; with neither the tracker is
    silent (but for the estimate line, given ``advice``).
    """

    def __init__(
        self,
        progress: Any | None,
        task: Any | None,
        *,
        description: str = "",
        unit: str = "",
        total: int | None = None,
        plain: bool = False,
        clock: Callable[[], float] = time.monotonic,
        advice: str | None = None,
    ) -> None:
        self._progress = progress
        self._task = task
        self.active = progress is not None
        self._plain = plain and progress is None
        self._description = description
        self._unit = unit
        self._clock = clock
        self._advice = advice
        self._lock = threading.Lock()
        self._started = clock()
        self._last_line = self._started
        self._pace = Pace(total)
        self._stages = _Stages()
        self._note = ""  # a file that just failed, shown until the next stage starts
        self._estimated = False

    # what the ingest pipeline reports (ragport.bootstrap.ingest.IngestProgress)
    def working(self, source_id: str, stage: str) -> None:
        """``source_id`` started ``stage`` (``parsing``, ``embedding``, ``writing``, or
        ``reading``: the serial ingest's whole file)."""
        with self._lock:
            now = self._clock()
            self._pace.begin(now)
            self._stages.start(source_id, stage, now)
            self._note = ""
        self._show()

    def finished(self, source_id: str, stage: str) -> None:
        """``source_id`` is through ``stage`` (it succeeded or not)."""
        with self._lock:
            self._stages.end(source_id, stage, self._clock())
        self._show()

    def embedded(self, chunks: int) -> None:
        """``chunks`` more chunks were embedded."""
        with self._lock:
            self._pace.embedded(chunks, self._clock())
        self._show()

    def update(
        self, *, done: int, total: int | None = None, item: str = "", chunks: int = 0
    ) -> None:
        """``done`` items are done (``chunks``: the chunks the ones just done wrote);
        ``item`` is shown until the next stage starts."""
        with self._lock:
            pace = self._pace
            if total is not None:
                pace.total = max(total, done)
            pace.finished(done, self._clock(), chunks=chunks)
            if item:
                self._note = item
        self._show()

    # what is drawn
    def doing(self) -> str:
        """The stages running now, or a note about a file that just failed."""
        with self._lock:
            return self._note or self._stages.text()

    def stats(self) -> str:
        """``1,234 chunks (6.1/s), ETA 12:34`` (or the items' rate before any chunk)."""
        with self._lock:
            return self._stats(self._clock())

    def _stats(self, now: float) -> str:
        pace = self._pace
        eta = pace.eta(now)
        if pace.chunks:
            rate = pace.embedding.rate or 0.0
            stats = f"{pace.chunks:,} chunks ({_per_second(rate)}/s)"
        else:
            stats = f"{pace.items.rate or 0.0:.2f} {self._unit}/s"
        return f"{stats}, ETA {'?' if eta is None else _duration(eta)}"

    def _estimate(self, now: float) -> str | None:
        """The one estimate line, at the first ETA of a run that long (else nothing)."""
        if self._advice is None or self._estimated:
            return None
        pace = self._pace
        eta = pace.eta(now)
        if eta is None or pace.total is None:
            return None
        self._estimated = True
        if eta < ESTIMATE_MIN_S:
            return None
        if pace.chunks:
            rate = f"{_per_second(pace.embedding.rate or 0.0)} chunks/s"
            busy = self._stages.busy(now) / max(now - (pace.begun or now), 1e-9)
            if busy > 0:
                rate += f", the embedder busy {min(busy, 1.0):.0%} of the time"
        else:
            rate = f"{pace.items.rate or 0.0:.2f} {self._unit}/s"
        return (
            f"{self._description}: at the current rate ({rate}), about {_about(eta)} for the "
            f"{pace.total - pace.done} {self._unit} left; {self._advice}"
        )

    def _show(self) -> None:
        with self._lock:
            now = self._clock()
            estimate = self._estimate(now)
            pace = self._pace
            done, total = pace.done, pace.total
            heartbeat = None
            if self._plain and now - self._last_line >= HEARTBEAT_S:
                self._last_line = now
                of = f"/{total}" if total is not None else ""
                doing = self._note or self._stages.text()
                heartbeat = (
                    f"{self._description}: {done}{of} {self._unit}, {self._stats(now)}, "
                    f"elapsed {_duration(now - self._started)}"
                    + (f", now {doing}" if doing else "")
                )
        if estimate is not None:
            self._say(estimate)
        if heartbeat is not None:
            print(escape_controls(heartbeat[:240]), file=sys.stderr, flush=True)
        if self._progress is not None:
            fields: dict[str, Any] = {"completed": done}
            if total is not None:
                fields["total"] = total
            self._progress.update(self._task, refresh=True, **fields)  # each event drawn at once

    def refresh(self) -> None:
        """Draw the bar now (it also redraws itself twice a second); nothing without one."""
        if self._progress is not None:
            self._progress.refresh()

    def _say(self, line: str) -> None:
        """``line`` on stderr, above the bar when there is one."""
        if self._progress is not None:
            self._progress.console.print(
                escape_controls(line), markup=False, highlight=False, soft_wrap=True
            )
        else:
            print(escape_controls(line), file=sys.stderr, flush=True)

    def print(self, line: str) -> None:
        """``line`` on stdout; above the bar when the bar shares stdout's terminal."""
        if self._progress is not None and sys.stdout.isatty():
            self._progress.console.print(
                escape_controls(line), markup=False, highlight=False, soft_wrap=True
            )
        else:
            print(line, flush=True)


def _live_column(text: Callable[[], str]) -> Any:
    """A rich column showing ``text()`` at every redraw (escaped, no markup)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Live(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text(escape_controls(text()))

    return Live()


@contextmanager
def track(
    description: str,
    *,
    total: int | None,
    unit: str,
    enabled: bool = True,
    clock: Callable[[], float] = time.monotonic,
    advice: str | None = None,
) -> Iterator[Tracker]:
    """A ``Tracker`` drawing a transient bar (description, bar, done/total unit, chunks and
    rate, ETA, elapsed, the stages running) on ``console()`` while the block runs, redrawn
    twice a second; plain heartbeat lines on stderr when there is no terminal (``enabled``
    False: silent). ``advice`` (how to go faster) turns on the estimate line of a long run."""
    out = console() if enabled else None
    if out is None:
        yield Tracker(
            None, None, description=description, unit=unit, total=total, plain=enabled,
            clock=clock, advice=advice,
        )  # fmt: skip
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    tracker: Tracker | None = None

    def stats() -> str:
        return "" if tracker is None else tracker.stats()

    def doing() -> str:
        return "" if tracker is None else tracker.doing()

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        _live_column(stats),
        TimeElapsedColumn(),
        _live_column(doing),
        console=out,
        transient=True,
        auto_refresh=True,
        refresh_per_second=2,
        redirect_stdout=False,
        redirect_stderr=False,
        get_time=clock,
    )
    with progress:
        task = progress.add_task(description, total=total)
        tracker = Tracker(
            progress, task, description=description, unit=unit, total=total, clock=clock,
            advice=advice,
        )  # fmt: skip
        yield tracker
        progress.refresh()
