"""``FileDocumentLoader``: regular files under one root, never outside it.

``resolve`` finds the real path (symlinks inside the root are allowed); ``load`` then opens
that path component by component under the root's descriptor without following any symlink
(``ragport.adapters._files``), so a folder swapped for a symlink after ``resolve`` is refused,
and a FIFO cannot block the open.
"""

from __future__ import annotations

import os
from pathlib import Path

from ragport.adapters._files import FileCaps
from ragport.domain.documents import media_type_for
from ragport.domain.errors import LoadError, ValidationError
from ragport.domain.limits import DEFAULT_CEILINGS, DEFAULT_LIMITS, Ceilings, check_ceilings
from ragport.ports.documents import LoadedDocument

__all__ = ["FileDocumentLoader"]


class FileDocumentLoader:
    """Reads files under ``root`` only: a path that resolves outside it (through ``..`` or a
    symlink), or that meets a symlink when it is opened, is ``LoadError(reason="outside_root")``.

    ``load(path)`` takes a path relative to the root (or an absolute one inside it); the media
    type comes from the suffix; ``source_id`` is the resolved path relative to the root in
    POSIX form, so ``a/../b.md`` and ``b.md`` are one source. Files over their cap are
    ``LoadError(reason="too_large")`` without being read, the message naming the setting that
    raises it: ``max_bytes`` (``parse_bytes``, 1 MiB), or for PDF and DOCX, whose bytes are not
    their text, ``binary_max_bytes`` (``binary_bytes``, 8 MiB; their parsers cap the text). A
    missing path (or one holding a NUL) is ``not_found``; a folder, FIFO, socket or device is
    ``not_a_file``; a permission or I/O error is ``unreadable``. Both caps are checked against
    ``ceilings`` (default: the hard 8 MiB; ``Ceilings(parse_bytes=...)`` raises it).
    """

    def __init__(
        self,
        *,
        root: str | os.PathLike[str],
        max_bytes: int = DEFAULT_LIMITS.parse_bytes,
        ceilings: Ceilings = DEFAULT_CEILINGS,
        binary_max_bytes: int = DEFAULT_LIMITS.binary_bytes,
    ):
        try:
            resolved = Path(root).resolve(strict=True)
        except OSError:
            raise ValidationError("root does not exist", field="root") from None
        if not resolved.is_dir():
            raise ValidationError("root is not a folder", field="root")
        self._root = resolved
        self._caps = FileCaps.of(max_bytes, binary_max_bytes, check_ceilings(ceilings))

    @property
    def root(self) -> Path:
        return self._root

    def resolve(self, uri: str | os.PathLike[str]) -> Path:
        """The real path of ``uri`` under the root; ``LoadError`` when missing or outside."""
        path = Path(uri)
        candidate = path if path.is_absolute() else self._root / path
        try:
            resolved = candidate.resolve(strict=True)
        # missing, a symlink loop, a permission problem, a NUL in the path (ValueError)
        except (OSError, RuntimeError, ValueError):
            raise LoadError("no such file under the root", reason="not_found") from None
        if not resolved.is_relative_to(self._root):
            raise LoadError("the path resolves outside the loader's root", reason="outside_root")
        return resolved

    def source_id_for(self, uri: str | os.PathLike[str]) -> str:
        """The source id ``load(uri)`` gives: the resolved path relative to the root."""
        return self.resolve(uri).relative_to(self._root).as_posix()

    def load(self, uri: str) -> LoadedDocument:
        resolved = self.resolve(uri)
        relative = resolved.relative_to(self._root)
        media_type = media_type_for(resolved.name)
        data = self._caps.read(self._root, relative.parts, media_type)
        source_id = relative.as_posix()
        return LoadedDocument(data, media_type, source_id, {"path": source_id})
