"""One bounded read of a regular file, shared by the file loader and the folder connector."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ragport.domain.errors import LoadError

__all__ = ["read_regular_file"]


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file at ``path`` (a final symlink is not followed), at most
    ``max_bytes``, or ``LoadError`` (``not_found``, ``not_a_file``, ``too_large``)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        raise LoadError("the file cannot be opened", reason="not_found") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise LoadError("not a regular file", reason="not_a_file")
        if info.st_size > max_bytes:
            raise LoadError(
                f"the file is {info.st_size} bytes, over max_bytes={max_bytes}",
                reason="too_large",
            )
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew while we read it
        raise LoadError(f"the file is over max_bytes={max_bytes}", reason="too_large")
    return data
