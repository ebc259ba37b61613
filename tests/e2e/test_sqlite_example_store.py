"""The example third-party store of docs/adapters.md passes the whole StorageBackendContract.

``ragport_sqlite`` lives in examples/sqlite_store (on pytest's ``pythonpath``); in your own
project it would be an installed package. docs/adapters.md quotes this file in full.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ragport_sqlite import SqliteBackend

from ragport.contract_tests import StorageBackendContract


class TestSqliteBackend(StorageBackendContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[SqliteBackend]:
        yield SqliteBackend(tmp_path / "ragport.sqlite3")  # a new, empty file per test
