"""The PostgreSQL store and status store against the same shipped contract suites."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragport.adapters.postgres import PostgresStatusStore, PostgresStore
from ragport.contract_tests import ChunkStoreContract, IngestionStatusStoreContract


class TestPostgresStore(ChunkStoreContract):
    @pytest.fixture
    def store(self, pg_engine, pg_schema) -> Iterator[PostgresStore]:
        yield PostgresStore(pg_engine, schema=pg_schema, create=True)


class TestPostgresStatusStore(IngestionStatusStoreContract):
    @pytest.fixture
    def status_store(self, pg_engine, pg_schema) -> Iterator[PostgresStatusStore]:
        yield PostgresStatusStore(pg_engine, schema=pg_schema, create=True)
