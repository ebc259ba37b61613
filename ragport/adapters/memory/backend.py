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

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from ragport.adapters.lexical.analyzers import make_analyzer
from ragport.adapters.memory.lexical import ScopeLexicon
from ragport.adapters.memory.search import EMPTY, answer
from ragport.adapters.memory.snapshot import Snapshot, access_mask
from ragport.adapters.memory.top_k import top
from ragport.adapters.memory.unit_of_work import SnapshotReader, SnapshotWriter
from ragport.domain.model import Scope, Tombstone
from ragport.engine.history import history_of
from ragport.engine.rules import forgotten_set, screened_sources
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
        # Each scope's committed snapshot, and one reader of it: a reader holds nothing but
        # the snapshot, its scope and this backend, so every read of that snapshot shares it.
        self._scopes: dict[Scope, Snapshot] = {}
        self._readers: dict[Scope, SnapshotReader] = {}
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
            self._readers[scope] = SnapshotReader(snap, scope, self)

    def read(self, scope: Scope) -> SnapshotReader:
        """The scope's committed snapshot (the reader is its own context manager): one dict
        read once the scope has a reader; ``_install`` replaces it with the snapshot, under
        the same lock, so a reader never outlives the snapshot it reads as the current one."""
        reader = self._readers.get(scope)
        if reader is not None:
            return reader
        with self._lock:
            reader = self._readers.get(scope)
            if reader is None:
                snap = self._scopes.setdefault(scope, _empty())
                reader = self._readers[scope] = SnapshotReader(snap, scope, self)
            return reader

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
        """The vector leg over the view's snapshot (at ``admission.pointer``); ``vector`` is
        what the engine hands a pushdown: a finite 1-D float32 array."""
        snap = view.snap if view.committed else view.snap.copy()  # ``_committed``, inline
        index = snap.index(vector.shape[0])
        rows = index.rows
        if not rows:
            return EMPTY
        flt = admission.metadata_filter
        fmask = None
        if flt is not None:
            fmask = np.fromiter((flt.matches(r.metadata) for r in rows), bool, count=len(rows))
        who = admission.authorization
        amask = None if who is None else access_mask(snap, index, who)
        mask = amask if fmask is None else (fmask if amask is None else amask & fmask)
        # Rows are unit vectors: the cosine is (row . q) / |q|. Ranking by row . q and
        # dividing only the finalists' scores costs no numpy call to scale q (dividing by 0
        # or by 1.0 would change nothing).
        norm = math.sqrt(vector.dot(vector))  # what np.linalg.norm computes, unwrapped
        # A finite float32 |q|^2 bounds |q| far below float32's range, and the rows are
        # finite unit vectors (or zero): every score is finite.
        finite = math.isfinite(norm)
        scores = index.matrix @ vector  # this read's own array: the last top() may change it
        screened: tuple[str, ...] = ()
        if admission.report_denied and who is not None:
            unfiltered = top(scores, fmask, limit, finite=finite)
            screened = screened_sources(rows[i] for i, _ in unfiltered)
        return answer(rows, top(scores, mask, limit, finite=finite, scratch=True), norm, screened)

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
