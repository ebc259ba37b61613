"""``MemoryBackend``: the narrow storage port (``ragport.ports.backend``) in a few dicts.

The reference backend: ``BackendStore(MemoryBackend())`` runs the whole ``ChunkStoreContract``
through the generation engine, and its code is the shortest statement of what a backend owes.
Each scope holds immutable tables; a write works on a copy and installs it on commit, so a
read keeps the tables it started with and never waits. One lock per scope serializes writers.
``InMemoryStore`` stays the fast in-memory ``ChunkStore`` (indexes, BM25, history).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import attrs
import numpy as np

from ragport.domain.model import Grant, Record, Scope, Tombstone
from ragport.engine import rank_by_cosine
from ragport.ports.backend import GenerationState, RowKey
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.store import ScoredRecord

__all__ = ["MemoryBackend"]


@attrs.define
class _Tables:
    rows: dict[RowKey, tuple[Record, np.ndarray]] = attrs.Factory(dict)
    state: GenerationState = attrs.Factory(GenerationState)
    grants: dict[str, Grant] = attrs.Factory(dict)
    tombstones: dict[str, Tombstone] = attrs.Factory(dict)

    def copy(self) -> _Tables:
        return _Tables(dict(self.rows), self.state, dict(self.grants), dict(self.tombstones))


class _Reader:
    def __init__(self, tables: _Tables) -> None:
        self._t = tables

    def state(self) -> GenerationState:
        return self._t.state

    def rows(
        self, *, source_id: str | None = None, ids: Sequence[str] | None = None
    ) -> Iterable[Record]:
        wanted = None if ids is None else set(ids)
        return [
            r
            for r, _ in self._t.rows.values()
            if (source_id is None or r.source_id == source_id)
            and (wanted is None or r.id in wanted)
        ]

    def nearest(self, vector: Vector) -> Iterable[ScoredRecord]:
        return rank_by_cosine(self._t.rows.values(), vector)

    def grants(self, source_ids: Sequence[str] | None = None) -> Mapping[str, Grant]:
        if source_ids is None:
            return dict(self._t.grants)
        return {s: self._t.grants[s] for s in source_ids if s in self._t.grants}

    def tombstones(self) -> Sequence[Tombstone]:
        return list(self._t.tombstones.values())


class _Writer(_Reader):
    def __init__(self, tables: _Tables, install: _Install) -> None:
        super().__init__(tables)
        self._install = install

    def insert(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        for record, vector in zip(records, np.asarray(vectors), strict=True):
            self._t.rows[(record.id, record.generation)] = (record, vector)

    def update(self, changes: Mapping[RowKey, Record]) -> None:
        moved = [(self._t.rows.pop(key), new) for key, new in changes.items()]
        for (_, vector), new in moved:
            self._t.rows[(new.id, new.generation)] = (new, vector)

    def delete(self, keys: Sequence[RowKey]) -> None:
        for key in keys:
            self._t.rows.pop(key, None)

    def set_state(self, state: GenerationState) -> None:
        self._t.state = state

    def put_grants(self, grants: Sequence[Grant]) -> None:
        self._t.grants.update((g.source_id, g) for g in grants)

    def put_tombstones(self, tombstones: Sequence[Tombstone]) -> None:
        self._t.tombstones.update((t.id, t) for t in tombstones)

    def commit(self) -> None:
        self._install(self._t.copy())


class _Install:
    def __init__(self, backend: MemoryBackend, scope: Scope) -> None:
        self._backend, self._scope = backend, scope

    def __call__(self, tables: _Tables) -> None:
        with self._backend._lock:
            self._backend._scopes[self._scope] = tables


class MemoryBackend:
    """Every scope's tables in this process; nothing survives it."""

    provider = "memory-backend"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scopes: dict[Scope, _Tables] = {}
        self._writers: dict[Scope, threading.Lock] = {}

    def _tables(self, scope: Scope) -> _Tables:
        with self._lock:
            return self._scopes.get(scope) or _Tables()

    @contextmanager
    def read(self, scope: Scope) -> Iterator[_Reader]:
        yield _Reader(self._tables(scope))

    @contextmanager
    def write(self, scope: Scope) -> Iterator[_Writer]:
        with self._lock:
            writer = self._writers.setdefault(scope, threading.Lock())
        with writer:
            yield _Writer(self._tables(scope).copy(), _Install(self, scope))
