"""Bounded reads of regular files under a root, shared by the file loader and the folder
connector.

A path is never opened as a whole: the root is opened, then every component under its
parent's descriptor with ``O_NOFOLLOW`` (folders also with ``O_DIRECTORY``), so a folder or
file swapped for a symlink between a listing (or a ``resolve``) and the read is refused
(``outside_root``), never followed. The file itself is opened with ``O_NONBLOCK`` (a FIFO or
a device cannot block the open), its type and size are checked on the descriptor, and only
then is it read. ``LoadError.reason``: ``not_found`` (missing, or a component is not a
folder), ``outside_root`` (a symlink on the way), ``not_a_file`` (a folder, FIFO, socket or
device), ``unreadable`` (permission or I/O error), ``too_large``.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import attrs

from ragport.domain.documents import BINARY_MEDIA_TYPES
from ragport.domain.errors import LoadError
from ragport.domain.limits import Ceilings, how_to_raise

__all__ = ["FileCaps", "open_folder", "read_file_under"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_BASE = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
_FOLDER = _BASE | _DIRECTORY | _NOFOLLOW
_FILE = _BASE | _NOFOLLOW | _NONBLOCK
# Decided once from the platform (not at each call, so a test that wraps os.open still works).
_SUPPORTED = (
    bool(_NOFOLLOW and _DIRECTORY and _NONBLOCK)
    and os.open in os.supports_dir_fd
    and os.stat in os.supports_dir_fd
    and os.scandir in os.supports_fd
)
_READ_CHUNK = 1 << 20


def _error(exc: OSError, name: str, parent: int | None, *, folder: bool) -> LoadError:
    """The ``LoadError`` for a failed open of ``name`` under ``parent`` (messages carry no
    path: a source id may be sensitive in a log)."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO, errno.EOPNOTSUPP):
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except (OSError, ValueError):
            return LoadError("no such file under the root", reason="not_found")
        if stat.S_ISLNK(info.st_mode):
            return LoadError("a symlink on the path is not followed", reason="outside_root")
        if folder and not stat.S_ISDIR(info.st_mode):
            return LoadError("a component of the path is not a folder", reason="not_found")
        if not folder and not stat.S_ISREG(info.st_mode):
            return LoadError("not a regular file", reason="not_a_file")
        return LoadError("no such file under the root", reason="not_found")
    return LoadError("the file cannot be opened", reason="unreadable")


def _check_part(part: str) -> None:
    if part in ("", ".", "..") or "/" in part or "\x00" in part:
        raise LoadError("not a path under the root", reason="outside_root")


def open_folder(root: Path, parts: Sequence[str]) -> int:
    """A descriptor of the folder ``root/parts...`` (the caller closes it), each component
    opened under its parent without following a symlink; ``LoadError`` otherwise."""
    if not _SUPPORTED:
        raise LoadError(
            "this platform cannot open files relative to a folder without following symlinks",
            reason="unreadable",
        )
    try:
        fd = os.open(root, _FOLDER)
    except OSError as exc:
        raise _error(exc, os.fspath(root), None, folder=True) from None
    try:
        for part in parts:
            _check_part(part)
            try:
                child = os.open(part, _FOLDER, dir_fd=fd)
            except OSError as exc:
                raise _error(exc, part, fd, folder=True) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@attrs.frozen
class FileCaps:
    """The byte cap of a file by its media type: ``binary`` for PDF and DOCX, whose bytes are
    not their text (``BINARY_MEDIA_TYPES``: ``Limits.binary_bytes``), ``text`` for the rest
    (``Limits.parse_bytes``)."""

    text: int
    binary: int

    @classmethod
    def of(cls, text: int, binary: int, ceilings: Ceilings) -> FileCaps:
        """Both caps, each checked against ``ceilings`` (``ValidationError`` naming it)."""
        return cls(ceilings.check("parse_bytes", text), ceilings.check("binary_bytes", binary))

    def read(self, root: Path, parts: Sequence[str], media_type: str | None) -> bytes:
        """``read_file_under`` with the cap of ``media_type``; a refusal names its setting."""
        name = "binary_bytes" if media_type in BINARY_MEDIA_TYPES else "parse_bytes"
        cap = self.binary if name == "binary_bytes" else self.text
        return read_file_under(root, parts, cap, setting=how_to_raise(name))


def read_file_under(
    root: Path, parts: Sequence[str], max_bytes: int, *, setting: str | None = None
) -> bytes:
    """The bytes of the regular file ``root/parts...``, at most ``max_bytes``, or
    ``LoadError`` (see the module docstring). ``parts`` empty names the root: ``not_a_file``.
    ``setting``, where to raise ``max_bytes``, goes into the ``too_large`` message."""
    hint = f" (raise it: {setting})" if setting else ""
    if not parts:
        raise LoadError("not a regular file", reason="not_a_file")
    _check_part(parts[-1])
    parent = open_folder(root, parts[:-1])
    try:
        try:
            fd = os.open(parts[-1], _FILE, dir_fd=parent)
        except OSError as exc:
            raise _error(exc, parts[-1], parent, folder=False) from None
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LoadError("not a regular file", reason="not_a_file")
        if info.st_size > max_bytes:
            raise LoadError(
                f"the file is {info.st_size} bytes, over max_bytes={max_bytes}{hint}",
                reason="too_large",
            )
        os.set_blocking(fd, True)
        data = bytearray()
        while len(data) <= max_bytes:
            chunk = os.read(fd, min(_READ_CHUNK, max_bytes + 1 - len(data)))
            if not chunk:
                break
            data += chunk
    except OSError:
        raise LoadError("the file cannot be read", reason="unreadable") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew while we read it
        raise LoadError(f"the file is over max_bytes={max_bytes}{hint}", reason="too_large")
    return bytes(data)
