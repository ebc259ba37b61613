"""The in-memory storage backends: the narrow port (``MemoryBackend``) and the same with the
snapshot machinery as pushdowns (``SnapshotBackend``, what ``InMemoryStore`` runs on).

Each scope is an immutable ``Snapshot`` (rows and their indexes by source and id) that a write
copies, changes through a ``SnapshotWriter`` and installs on commit, so a read keeps the
snapshot it started with and never waits. One lock per scope serializes writers.
``BackendStore(MemoryBackend())`` runs every rule through the engine's generic path (the
reference backend of ``StorageBackendContract``); ``SnapshotBackend`` also answers the search
legs, the embedders, a source page, history and the tombstone look-ups from the committed
snapshot's cached indexes (``ragport.ports.pushdowns``); its writes are the engine's generic
path (``rows(source_id=)`` and ``rows(ids=)`` are already index look-ups here).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from ragport.adapters.lexical.analyzers import make_analyzer
from ragport.adapters.memory.lexical import ScopeLexicon
from ragport.adapters.memory.search import search_snapshot
from ragport.adapters.memory.snapshot import Snapshot
from ragport.adapters.memory.unit_of_work import SnapshotReader, SnapshotWriter
from ragport.domain.model import Scope, Tombstone
from ragport.engine.history import history_of
from ragport.engine.rules import forgotten_set
from ragport.ports.embedder import Vector
from ragport.ports.history import GenerationChange
from ragport.ports.pushdowns import Admission, LegAnswer
from ragport.ports.store import EmbedderKey

__all__ = ["MemoryBackend", "SnapshotBackend"]


def _empty() -> Snapshot:
    return Snapshot(rows={}, by_source={}, by_id={})


class MemoryBackend:
    """Every scope's snapshot in this process; nothing survives it."""

    provider = "memory-backend"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scopes: dict[Scope, Snapshot] = {}
        self._writers: dict[Scope, threading.Lock] = {}

    def _snapshot(self, scope: Scope) -> Snapshot:
        # A committed scope is one dict read (atomic under the GIL; _install swaps whole
        # snapshots); only a scope's first snapshot is made under the lock.
        snap = self._scopes.get(scope)
        if snap is not None:
            return snap
        with self._lock:
            return self._scopes.setdefault(scope, _empty())

    def _install(self, scope: Scope, snap: Snapshot) -> None:
        with self._lock:
            self._scopes[scope] = snap

    def read(self, scope: Scope) -> SnapshotReader:
        """The scope's committed snapshot (the reader is its own context manager)."""
        return SnapshotReader(self._snapshot(scope), scope, self)

    @contextmanager
    def write(self, scope: Scope) -> Iterator[SnapshotWriter]:
        with self._lock:
            writer = self._writers.setdefault(scope, threading.Lock())
        with writer:
            snap = self._snapshot(scope).copy()
            yield SnapshotWriter(snap, scope, lambda done: self._install(scope, done), self)


def _committed(view: SnapshotReader) -> Snapshot:
    """The view's snapshot, for a read that caches: a writer's copy is copied again (its
    caches would go stale at its next write, and be installed so)."""
    return view.snap if view.committed else view.snap.copy()


class SnapshotBackend(MemoryBackend):
    """``MemoryBackend`` whose committed snapshots answer the reads as pushdowns."""

    provider = "memory"
    lexical_modes = ("bm25",)

    def __init__(self, *, lexical_language: str | None = None) -> None:
        super().__init__()
        self._analyzer: Callable[[str], list[str]] = make_analyzer(lexical_language)
        self._lexicons: dict[Scope, ScopeLexicon] = {}

    def search_vectors(
        self, view: SnapshotReader, vector: Vector, *, admission: Admission, limit: int
    ) -> LegAnswer:
        return search_snapshot(
            view.snap if view.committed else view.snap.copy(), vector, admission, limit
        )  # ``_committed``, inline on the hot read

    def search_lexical(
        self, view: SnapshotReader, text: str, *, mode: str, admission: Admission, limit: int
    ) -> LegAnswer:
        lexicon = self._lexicons.get(view.scope)
        if lexicon is None:
            with self._lock:
                lexicon = self._lexicons.setdefault(view.scope, ScopeLexicon(self._analyzer))
        return lexicon.search(_committed(view), text, limit, admission)

    def embedders(self, view: SnapshotReader) -> frozenset[EmbedderKey]:
        return _committed(view).embedders()

    def source_id_page(
        self, view: SnapshotReader, *, after: str | None, limit: int
    ) -> Sequence[str]:
        ids = sorted({r.source_id for r in _committed(view).visible() if r.kind == "chunk"})
        return [s for s in ids if after is None or s > after][:limit]

    def history(
        self, view: SnapshotReader, *, limit: int, max_ids: int
    ) -> Sequence[GenerationChange]:
        snap = _committed(view)
        return history_of(
            (row.record for row in snap.rows.values()),
            pointer=snap.pointer,
            floor=snap.floor,
            forgotten=snap.forgotten(),
            limit=limit,
            max_ids=max_ids,
        )

    def tombstones_among(self, view: SnapshotReader, ids: Sequence[str]) -> Sequence[Tombstone]:
        kept = view.snap.tombstones
        return [kept[i] for i in ids if i in kept]

    def forgotten_among(self, view: SnapshotReader, ids: Sequence[str]) -> frozenset[str]:
        kept = view.snap.tombstones
        return forgotten_set(kept[i] for i in ids if i in kept)
