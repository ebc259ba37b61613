"""Progress of long commands (ingest, reindex, sync)."""

from __future__ import annotations

import shutil
import sys
import time


class _Progress:
    """A progress bar (done / total, rate, current item) on a terminal, else nothing."""

    def __init__(self, total: int, enabled: bool, unit: str = "files") -> None:
        self.total = total
        self.enabled = enabled and total > 0
        self.unit = unit
        self.done = 0
        self.started = time.perf_counter()

    def show(self, current: str) -> None:
        if not self.enabled:
            return
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        width = 24
        filled = int(width * self.done / self.total)
        bar = "#" * filled + "-" * (width - filled)
        rate = self.done / elapsed
        line = f"[{bar}] {self.done}/{self.total} {rate:.1f} {self.unit}/s {current}"
        columns = shutil.get_terminal_size().columns
        sys.stdout.write("\r" + line[: columns - 1].ljust(columns - 1))
        sys.stdout.flush()

    def clear(self) -> None:
        if self.enabled:
            sys.stdout.write("\r" + " " * (shutil.get_terminal_size().columns - 1) + "\r")
            sys.stdout.flush()
