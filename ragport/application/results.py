"""Results of the use cases: frozen attrs classes."""

from __future__ import annotations

import attrs

from ragport.domain.model import Citation, Hit, Trust

__all__ = ["CompactResult", "IndexResult", "ReplaceResult", "RetrievalResult", "RollbackResult"]


@attrs.frozen
class IndexResult:
    """``indexed`` records written; ``source_ids`` the distinct sources they belong to."""

    indexed: int
    source_ids: tuple[str, ...]


@attrs.frozen
class ReplaceResult:
    """``deleted`` previously visible records retired, ``indexed`` new ones written,
    ``skipped`` when the content hash matched, ``generation`` the one written (or current)."""

    source_id: str
    deleted: int
    indexed: int
    skipped: bool
    generation: int


@attrs.frozen
class RetrievalResult:
    """Rendered context: ``text`` holds ``[citation-id] text`` blocks for ``hits`` in order.

    ``truncated`` is True when the byte or token ceiling stopped rendering (top-k alone is not
    truncation); ``dropped`` counts the hits within top-k that the ceiling left out.
    """

    query: str
    trust: Trust
    text: str
    hits: tuple[Hit, ...]
    citations: tuple[Citation, ...]
    truncated: bool
    dropped: int = 0


@attrs.frozen
class RollbackResult:
    """The scope now shows snapshot ``generation``; counts of rows discarded and restored."""

    generation: int
    discarded: int
    restored: int


@attrs.frozen
class CompactResult:
    """``purged`` retired rows removed; rollback stays possible to ``floor`` and above."""

    purged: int
    floor: int
