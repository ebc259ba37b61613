"""Progress of long commands (ingest, reindex, sync): a rich bar on stderr, or nothing.

The bar is drawn only when stderr is a terminal (and rich is installed), so a pipe, a log
file or a test sees no progress at all, and it never goes to stdout: ``--json`` output stays
pure data. With ``--json`` on a terminal stdout the JSON lines are the progress, so there is
no bar then either. ``console()`` is the one seam: the tests hand it a forced-terminal rich
Console writing into a buffer to see the bar.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ragport.cli.output import escape_controls

__all__ = ["Tracker", "console", "track", "wanted"]


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


class Tracker:
    """Done / total of one task; ``total`` may grow (sync learns it page by page)."""

    def __init__(self, progress: Any | None, task: Any | None) -> None:
        self._progress = progress
        self._task = task
        self.active = progress is not None

    def update(self, *, done: int, total: int | None = None, item: str = "") -> None:
        if self._progress is None:
            return
        from rich.markup import escape

        shown = escape(escape_controls(item[-60:]))
        fields: dict[str, Any] = {"completed": done, "item": shown}
        if total is not None:
            fields["total"] = max(total, done)
        self._progress.update(self._task, refresh=True, **fields)

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
    """A ``Tracker`` drawing a transient bar (description, bar, done/total unit, rate, item)
    on ``console()`` while the block runs; a silent one when there is no terminal."""
    out = console() if enabled else None
    if out is None:
        yield Tracker(None, None)
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
        TimeElapsedColumn(),
        TextColumn("{task.fields[item]}"),
        console=out,
        transient=True,
        auto_refresh=False,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    with progress:
        task = progress.add_task(description, total=total, item="")
        yield Tracker(progress, task)
