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

    - ``kind`` is a short stable name used as the key in result ``layers``: a non-empty
      ``str`` without surrounding blanks that never changes.
    - ``on_propagate(source_id, ids, scope)`` stops serving everything in ``ids`` (the
      source's lineage closure) in exactly ``scope`` and returns how many artifacts it
      touched, an ``int >= 0`` (not a bool); calling it again with the same arguments is safe
      (idempotent) and returns a count again.
    - ``on_repoint(from_id, to_id, scope)`` re-files artifacts of ``from_id`` under ``to_id``
      and returns how many moved (exactly those; 0 for a layer whose artifacts
      ``repoint_source`` itself moves); it never re-embeds. Like ``on_propagate`` it is
      idempotent: called again after everything moved, it returns a count (``int >= 0``) again.
    - Failures raise; their message and args carry none of the ids they were given (source
      id, ``ids``, ``from_id``, ``to_id``) and no document text, in any scope.
    """

    @property
    def kind(self) -> str:
        """A short stable name, non-empty and without surrounding blanks: the key of this
        layer's count in ``layers``."""
        ...

    def on_propagate(self, source_id: str, ids: Sequence[str], scope: Scope) -> int:
        """Stop serving every id of ``ids`` (the closure of ``source_id``) in ``scope``;
        returns how many artifacts it touched. Idempotent. Errors quote none of the ids."""
        ...

    def on_repoint(self, from_id: str, to_id: str, scope: Scope) -> int:
        """Re-file the artifacts of ``from_id`` under ``to_id`` in ``scope`` (never
        re-embedding); returns how many moved, an ``int >= 0``, also when called again after
        everything moved. Errors quote none of the ids."""
        ...
