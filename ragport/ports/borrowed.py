"""Borrowed reads: the guarded vector leg without hand-out copies (optional capability).

A store that declares ``capabilities.borrowed_query`` (with ``capabilities.guarded_query``)
implements ``SupportsBorrowedQuery``; ``retrieve_context`` then reads its vector-only leg
through ``borrowed_query`` and copies each hit's metadata itself.
``ChunkStoreBorrowedQueryContract`` checks that every answer equals ``guarded_query``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ragport.domain.filters import Filter
from ragport.domain.model import AccessDecision, Authorization, Scope
from ragport.ports.embedder import Vector
from ragport.ports.store import GuardedQuery

__all__ = ["SupportsBorrowedQuery"]


@runtime_checkable
class SupportsBorrowedQuery(Protocol):
    """``guarded_query`` without the hand-out copies (declared as
    ``capabilities.borrowed_query``, next to ``capabilities.guarded_query``).

    ``borrowed_query`` answers exactly what ``guarded_query`` answers for the same arguments
    (foreign embedders, records with every field, order and scores, the same ``on_denied``
    report, from one snapshot with ``forgotten`` tombstones on record id, source id, every
    lineage edge and every root applied before ``limit``), but its records may be the store's
    own objects rather than copies that the caller owns. The caller borrows them: it must not
    change them (their metadata included), keep them past the call that asked, or hand them to
    anyone. The store in turn never changes a record it lent once the call returned: a later
    replacement, grant change, forget or delete builds new objects and leaves every field of
    a lent record (nested metadata included) as it was. ``retrieve_context`` is that
    caller: it reads the records' fields, builds each hit on a copy of the metadata, and
    returns only the hits. For a store whose every read builds fresh objects (PostgreSQL) the
    two methods are the same; the in-memory store skips copying five records per query.
    """

    def borrowed_query(
        self,
        scope: Scope,
        vector: Vector,
        *,
        embedder_id: str,
        dimensions: int,
        limit: int,
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None = None,
    ) -> GuardedQuery:
        """What ``guarded_query`` answers (tombstones on ids, sources, lineage and roots); the
        records are lent, not handed out, and the store never changes them afterwards."""
        ...
