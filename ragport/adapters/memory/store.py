"""``InMemoryStore``: the generation engine over ``SnapshotBackend``.

Every rule (visibility, the forgotten predicate, the grant rule and its denial report, retire,
rekey, tombstone strength, history, the drift guard) is ``ragport.engine.BackendStore``'s; the
backend answers the search legs and the look-ups from copy-on-write snapshots per scope: a
search matrix per dimension built once per committed snapshot, numpy masks for the filter and
the grants before the top-k, one BM25 index per scope (``backend.py``).
"""

from __future__ import annotations

from ragport.adapters.memory.backend import SnapshotBackend
from ragport.engine import BackendStore

__all__ = ["InMemoryStore"]


class InMemoryStore(BackendStore):
    """A thread-safe, transactional ChunkStore held in process memory (the reference fake)."""

    def __init__(self, *, lexical_language: str | None = None) -> None:
        """``lexical_language``: ``None`` (language-neutral tokens) or ``"english"`` (stop
        words removed, Snowball-stemmed, like PostgreSQL's ``english`` configuration)."""
        super().__init__(SnapshotBackend(lexical_language=lexical_language))
