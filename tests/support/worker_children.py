"""The child processes of this test process, from /proc: what a worker test checks is gone.

Only this process's own children count (other test runs on the machine have workers of their
own), and a zombie counts too: a worker that was killed but not reaped is still left behind.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["worker_children"]


def worker_children(script: str) -> list[str]:
    """``pid state`` of each child of this process that runs ``script`` or is a zombie."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone in between
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == me and (state == "Z" or script in cmdline):
            found.append(f"{entry.name} {state}")
    return found
