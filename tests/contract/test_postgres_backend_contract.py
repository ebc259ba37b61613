"""PostgreSQL as a backend of the narrow storage port: ``StorageBackendContract`` (the whole
``ChunkStoreContract`` through the generation engine) on ``PostgresBackend``, its driver-failure
section included (the schema dropped under it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from ragport.adapters.postgres import PostgresStore, WriteSettings
from ragport.adapters.postgres.backend import PostgresBackend
from ragport.contract_tests import StorageBackendContract
from ragport.contract_tests.chunk_store.failures import BreakStore
from ragport.ports.store import ChunkStore


class TestPostgresBackend(StorageBackendContract):
    @pytest.fixture
    def backend(self, pg_engine: Any, pg_schema: str) -> Iterator[PostgresBackend]:
        store = PostgresStore(
            pg_engine, schema=pg_schema, create=True, writes=WriteSettings(maintenance_delay=None)
        )
        yield PostgresBackend.of(store)

    @pytest.fixture
    def break_store(self, pg_engine: Any, pg_schema: str) -> BreakStore:
        """Dropping the schema makes every later statement fail on the server."""

        def drop_schema(store: ChunkStore) -> None:
            with pg_engine.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{pg_schema}" CASCADE'))

        return drop_schema
