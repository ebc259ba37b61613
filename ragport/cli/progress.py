"""Progress of long commands (ingest, reindex, sync): a rich bar on stderr, or plain lines.

The bar is drawn only when stderr is a terminal (and rich is installed); it shows done/total,
the chunks embedded and their rate, an ETA, the elapsed time (ticking while one big file
embeds) and the file in flight. Without a terminal a line on stderr every ``HEARTBEAT_S``
seconds says the same, so a pipe or a log file sees a long run alive and a short one sees
nothing; progress never goes to stdout: ``--json`` output stays pure data. With ``--json`` on a terminal stdout the JSON lines are the progress, so there is
no bar then either. ``console()`` is the one seam: the tests hand it a forced-terminal rich
Console writing into a buffer to see the bar.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ragport.cli.output import escape_controls

__all__ = ["HEARTBEAT_S", "Tracker", "console", "track", "wanted"]


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


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Tracker:
    """Done / total of one task (``total`` may grow: sync learns it page by page) and the
    work in flight: the file being read, embedded or written and the chunks embedded so far.

    Thread-safe: the ingest pipeline reports from its embed thread. On a terminal the rich
    bar refreshes itself (the clock, rate and ETA move while one big file embeds); without
    one, ``plain`` writes a line on stderr at most every ``HEARTBEAT_S`` seconds, so a log
    shows a long run is alive; with neither the tracker is silent.
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
    ) -> None:
        self._progress = progress
        self._task = task
        self.active = progress is not None
        self._plain = plain and progress is None
        self._description = description
        self._unit = unit
        self._clock = clock
        self._lock = threading.Lock()
        self._started = clock()
        self._last_line = self._started
        self._done = 0
        self._total = total
        self._chunks = 0
        self._item = ""

    # what the ingest pipeline reports (ragport.bootstrap.ingest.IngestProgress)
    def working(self, source_id: str, stage: str) -> None:
        """``source_id`` is being ``stage`` (``reading``, ``embedding``, ``writing``) now."""
        with self._lock:
            self._item = f"{stage} {source_id}"
        self._show()

    def embedded(self, chunks: int) -> None:
        """``chunks`` more chunks were embedded."""
        with self._lock:
            self._chunks += chunks
        self._show()

    def update(self, *, done: int, total: int | None = None, item: str = "") -> None:
        with self._lock:
            self._done = done
            if total is not None:
                self._total = max(total, done)
            if item:
                self._item = item
        self._show()

    def _rates(self) -> tuple[float, float, str]:
        """(items/s, chunks/s, ETA) from the start; the ETA from the items' rate."""
        elapsed = max(self._clock() - self._started, 1e-9)
        rate = self._done / elapsed
        chunk_rate = self._chunks / elapsed
        if self._total is None or self._done == 0:
            eta = "?"
        else:
            eta = _duration((self._total - self._done) / rate) if rate > 0 else "?"
        return rate, chunk_rate, eta

    def _show(self) -> None:
        if self._progress is None and not self._plain:
            return
        with self._lock:
            rate, chunk_rate, eta = self._rates()
            done, total, chunks, item = self._done, self._total, self._chunks, self._item
            now = self._clock()
            if self._progress is None:
                if now - self._last_line < HEARTBEAT_S:
                    return
                self._last_line = now
        of = f"/{total}" if total is not None else ""
        stats = (
            f"{chunks:,} chunks ({chunk_rate:.1f}/s)" if chunks else f"{rate:.2f} {self._unit}/s"
        )
        if self._progress is None:
            line = (
                f"{self._description}: {done}{of} {self._unit}, {stats}, ETA {eta}, "
                f"elapsed {_duration(now - self._started)}" + (f", now {item}" if item else "")
            )
            print(escape_controls(line[:200]), file=sys.stderr, flush=True)
            return
        from rich.markup import escape

        fields: dict[str, Any] = {
            "completed": done,
            "item": escape(escape_controls(item[-60:])),
            "stats": escape(f"{stats}, ETA {eta}"),
        }
        if total is not None:
            fields["total"] = total
        self._progress.update(self._task, refresh=True, **fields)  # each event drawn at once

    def print(self, line: str) -> None:
        """``line`` on stdout; above the bar when the bar shares stdout's terminal."""
        if self._progress is not None and sys.stdout.isatty():
            self._progress.console.print(
                escape_controls(line), markup=False, highlight=False, soft_wrap=True
            )
        else:
            print(line, flush=True)


@contextmanager
def track(
    description: str, *, total: int | None, unit: str, enabled: bool = True
) -> Iterator[Tracker]:
    """A ``Tracker`` drawing a transient bar (description, bar, done/total unit, chunks and
    rate, ETA, elapsed, the work in flight) on ``console()`` while the block runs, refreshed
    twice a second; plain heartbeat lines on stderr when there is no terminal (``enabled``
    False: silent)."""
    out = console() if enabled else None
    if out is None:
        yield Tracker(None, None, description=description, unit=unit, total=total, plain=enabled)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[item]}"),
        console=out,
        transient=True,
        auto_refresh=True,
        refresh_per_second=2,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    with progress:
        task = progress.add_task(description, total=total, item="", stats="")
        tracker = Tracker(progress, task, description=description, unit=unit, total=total)
        yield tracker
        progress.refresh()
