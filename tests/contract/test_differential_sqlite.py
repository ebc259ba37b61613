"""The differential contract on the SQLite example store (examples/sqlite_store)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ragport_sqlite import SqliteBackend

from ragport.adapters.memory.backend import MemoryBackend
from ragport.contract_tests import DifferentialContract
from ragport.engine import BackendStore
from ragport.ports.store import ChunkStore


class TestSqliteStoreAgainstTheEngine(DifferentialContract):
    """The engine over SQLite answers as the engine over MemoryBackend."""

    differential_examples = 30

    @pytest.fixture
    def store_pair(self, tmp_path: Path) -> Iterator[tuple[ChunkStore, ChunkStore]]:
        yield BackendStore(SqliteBackend(tmp_path / "store.db")), BackendStore(MemoryBackend())
