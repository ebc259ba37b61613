"""The differential contract on the SQLite example store (examples/sqlite_store): its
``search_vectors`` pushdown against the engine's generic path on the same file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ragport_sqlite import SqliteBackend

from ragport.contract_tests import DifferentialContract
from ragport.engine import BackendStore
from ragport.ports.store import ChunkStore


class TestSqliteBackendPushdowns(DifferentialContract):
    """BackendStore(SqliteBackend) with and without its pushdown, on one file."""

    differential_examples = 30

    @pytest.fixture
    def store_pair(self, tmp_path: Path) -> Iterator[tuple[ChunkStore, ChunkStore]]:
        backend = SqliteBackend(tmp_path / "store.db")
        yield BackendStore(backend), BackendStore(backend, pushdown=False)
