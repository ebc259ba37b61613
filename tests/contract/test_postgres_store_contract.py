"""The PostgreSQL store and status store against the same shipped contract suites."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragport.adapters.postgres import PostgresStatusStore, PostgresStore
from ragport.contract_tests import ChunkStoreContract, IngestionStatusStoreContract


class TestPostgresStore(ChunkStoreContract):
    # A hybrid read costs PostgreSQL several milliseconds (the BM25 statistics pass): race
    # longer than the 5 s default so the snapshot test sees thousands of reads here too.
    hybrid_snapshot_seconds = 12.0

    @pytest.fixture
    def store(self, pg_engine, pg_schema) -> Iterator[PostgresStore]:
        yield PostgresStore(pg_engine, schema=pg_schema, create=True)


class TestPostgresStatusStore(IngestionStatusStoreContract):
    @pytest.fixture
    def status_store(self, pg_engine, pg_schema) -> Iterator[PostgresStatusStore]:
        yield PostgresStatusStore(pg_engine, schema=pg_schema, create=True)
