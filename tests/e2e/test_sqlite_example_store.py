"""The example third-party store of docs/adapters.md passes the whole ChunkStoreContract.

``ragport_sqlite`` lives in examples/sqlite_store (on pytest's ``pythonpath``); in your own
project it would be an installed package. docs/adapters.md quotes this file in full.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ragport_sqlite import SqliteStore

from ragport.contract_tests import ChunkStoreContract


class TestSqliteStore(ChunkStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqliteStore]:
        yield SqliteStore(tmp_path / "ragport.sqlite3")  # a new, empty file per test
