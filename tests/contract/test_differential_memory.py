"""The differential contract on the in-memory backends: each backend's pushdowns against the
engine's generic path (``pushdown=False``), and InMemoryStore against the plain port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragport.adapters.memory import InMemoryStore
from ragport.adapters.memory.backend import MemoryBackend
from ragport.contract_tests import DifferentialContract
from ragport.engine import BackendStore
from ragport.ports.store import ChunkStore

Pair = Iterator[tuple[ChunkStore, ChunkStore]]


class TestInMemoryStorePushdowns(DifferentialContract):
    """InMemoryStore (SnapshotBackend's pushdowns) against the generic path on its backend."""

    @pytest.fixture
    def store_pair(self) -> Pair:
        store = InMemoryStore()
        yield store, BackendStore(store.backend, pushdown=False)


class TestMemoryBackendPushdowns(DifferentialContract):
    """The plain MemoryBackend, with and without pushdowns (it defines none)."""

    @pytest.fixture
    def store_pair(self) -> Pair:
        backend = MemoryBackend()
        yield BackendStore(backend), BackendStore(backend, pushdown=False)


class TestInMemoryStoreAgainstMemoryBackend(DifferentialContract):
    """InMemoryStore against the engine over the plain MemoryBackend (no shared state)."""

    @pytest.fixture
    def store_pair(self) -> Pair:
        yield InMemoryStore(), BackendStore(MemoryBackend())
