"""``FileDocumentLoader``: regular files under one root, never outside it."""

from __future__ import annotations

import os
from pathlib import Path

from ragport.adapters._files import read_regular_file
from ragport.domain.documents import media_type_for
from ragport.domain.errors import LoadError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.ports.documents import LoadedDocument

__all__ = ["FileDocumentLoader"]


class FileDocumentLoader:
    """Reads files under ``root`` only: a path that resolves outside it (through ``..`` or a
    symlink) is ``LoadError(reason="outside_root")``.

    ``load(path)`` takes a path relative to the root (or an absolute one inside it); the media
    type comes from the suffix; ``source_id`` is the resolved path relative to the root in
    POSIX form, so ``a/../b.md`` and ``b.md`` are one source. Files over ``max_bytes`` are
    ``LoadError(reason="too_large")`` without being read.
    """

    def __init__(
        self, *, root: str | os.PathLike[str], max_bytes: int = DEFAULT_LIMITS.parse_bytes
    ):
        try:
            resolved = Path(root).resolve(strict=True)
        except OSError:
            raise ValidationError("root does not exist", field="root") from None
        if not resolved.is_dir():
            raise ValidationError("root is not a folder", field="root")
        self._root = resolved
        self._max_bytes = check_limit("parse_bytes", max_bytes)

    @property
    def root(self) -> Path:
        return self._root

    def resolve(self, uri: str | os.PathLike[str]) -> Path:
        """The real path of ``uri`` under the root; ``LoadError`` when missing or outside."""
        path = Path(uri)
        candidate = path if path.is_absolute() else self._root / path
        try:
            resolved = candidate.resolve(strict=True)
        except (OSError, RuntimeError):  # missing, a symlink loop, a permission problem
            raise LoadError("no such file under the root", reason="not_found") from None
        if not resolved.is_relative_to(self._root):
            raise LoadError("the path resolves outside the loader's root", reason="outside_root")
        return resolved

    def source_id_for(self, uri: str | os.PathLike[str]) -> str:
        """The source id ``load(uri)`` gives: the resolved path relative to the root."""
        return self.resolve(uri).relative_to(self._root).as_posix()

    def load(self, uri: str) -> LoadedDocument:
        resolved = self.resolve(uri)
        data = read_regular_file(resolved, self._max_bytes)
        source_id = resolved.relative_to(self._root).as_posix()
        return LoadedDocument(data, media_type_for(resolved.name), source_id, {"path": source_id})
