"""The differential contract on the in-memory stores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragport.adapters.memory import InMemoryStore
from ragport.adapters.memory.backend import MemoryBackend
from ragport.contract_tests import DifferentialContract
from ragport.engine import BackendStore
from ragport.ports.store import ChunkStore


class TestInMemoryStoreAgainstTheEngine(DifferentialContract):
    """InMemoryStore answers as the engine over MemoryBackend."""

    @pytest.fixture
    def store_pair(self) -> Iterator[tuple[ChunkStore, ChunkStore]]:
        yield InMemoryStore(), BackendStore(MemoryBackend())
