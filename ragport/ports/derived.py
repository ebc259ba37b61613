"""The DerivedArtifactHandler port: what a derived layer does when sources vanish or move."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ragport.domain.model import Scope

__all__ = ["DerivedArtifactHandler"]


@runtime_checkable
class DerivedArtifactHandler(Protocol):
    """A layer of derived artifacts (summaries, notes, caches) kept consistent with sources.

    Promises (checked by ``DerivedArtifactHandlerContract``):

    - ``kind`` is a short stable name used as the key in result ``layers``.
    - ``on_propagate(source_id, ids, scope)`` stops serving everything in ``ids`` (the
      source's lineage closure) in exactly ``scope`` and returns how many artifacts it
      touched; calling it again with the same arguments is safe (idempotent).
    - ``on_repoint(from_id, to_id, scope)`` re-files artifacts of ``from_id`` under ``to_id``
      and returns how many moved; it never re-embeds.
    - Failures raise; they never carry document text.
    """

    @property
    def kind(self) -> str:
        """A short stable name: the key of this layer's count in ``layers``."""
        ...

    def on_propagate(self, source_id: str, ids: Sequence[str], scope: Scope) -> int:
        """Stop serving every id of ``ids`` (the closure of ``source_id``) in ``scope``;
        returns how many artifacts it touched. Idempotent."""
        ...

    def on_repoint(self, from_id: str, to_id: str, scope: Scope) -> int:
        """Re-file the artifacts of ``from_id`` under ``to_id`` in ``scope`` (never
        re-embedding); returns how many moved."""
        ...
