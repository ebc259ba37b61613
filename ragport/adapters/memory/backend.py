"""``MemoryBackend``: the narrow storage port (``ragport.ports.backend``) in process memory.

``BackendStore(MemoryBackend())`` runs the whole ``ChunkStoreContract`` through the generation
engine. It keeps each scope as the in-memory store does: an immutable ``Snapshot`` (rows and
their indexes by source and id) that a write copies, changes through a ``SnapshotWriter`` and
installs on commit, so a read keeps the snapshot it started with and never waits. One lock per
scope serializes writers. ``InMemoryStore`` is the fast in-memory ``ChunkStore`` on the same
snapshots (its own reads: search matrices, BM25, history).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ragport.adapters.memory.snapshot import Snapshot
from ragport.adapters.memory.unit_of_work import SnapshotWriter
from ragport.domain.errors import StoreError
from ragport.domain.model import Scope
from ragport.ports.backend import BackendReader, BackendWriter

__all__ = ["MemoryBackend"]


def _read_only(snap: Snapshot) -> None:
    raise StoreError("a read of MemoryBackend cannot commit")


class MemoryBackend:
    """Every scope's snapshot in this process; nothing survives it."""

    provider = "memory-backend"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scopes: dict[Scope, Snapshot] = {}
        self._writers: dict[Scope, threading.Lock] = {}

    def _snapshot(self, scope: Scope) -> Snapshot:
        with self._lock:
            return self._scopes.get(scope) or Snapshot(rows={}, by_source={}, by_id={})

    def _install(self, scope: Scope, snap: Snapshot) -> None:
        with self._lock:
            self._scopes[scope] = snap

    @contextmanager
    def read(self, scope: Scope) -> Iterator[BackendReader]:
        yield SnapshotWriter(self._snapshot(scope), _read_only)  # only its reads are used

    @contextmanager
    def write(self, scope: Scope) -> Iterator[BackendWriter]:
        with self._lock:
            writer = self._writers.setdefault(scope, threading.Lock())
        with writer:
            snap = self._snapshot(scope).copy()
            yield SnapshotWriter(snap, lambda done: self._install(scope, done))
