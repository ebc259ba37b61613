"""PostgreSQL as a backend of the narrow storage port: ``StorageBackendContract`` (the whole
``ChunkStoreContract`` through the generation engine) on ``PostgresBackend``, with its
pushdowns (PostgreSQL's SQL answers the legs and look-ups) and without (the engine's generic
path over the 15 members), the driver-failure section included (the schema dropped under it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from ragport.adapters.postgres import PostgresBackend, PostgresStore, WriteSettings
from ragport.contract_tests import DifferentialContract, StorageBackendContract
from ragport.contract_tests.chunk_store.failures import BreakStore
from ragport.engine import BackendStore
from ragport.ports.store import ChunkStore


class TestPostgresBackend(StorageBackendContract):
    """``BackendStore(PostgresBackend)``: every pushdown PostgreSQL defines in use."""

    bm25_tokens = "engine"  # the bm25 pushdown tokenizes with PostgreSQL's text search

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

    def test_every_pushdown_is_found(self, backend: PostgresBackend) -> None:
        """The engine calls PostgreSQL's SQL for the legs, look-ups and set-based writes. If
        this fails, check
        the pushdown methods' names on ``PostgresBackend`` (``ragport.ports.pushdowns``)."""
        assert {
            "search_vectors", "search_lexical", "embedders", "source_id_page", "history",
            "forgotten_among", "tombstones_among", "dependents", "prepare", "retire",
            "delete_where", "restore_above", "move", "rename_lineage", "merge_tombstones",
            "revoke_grants", "delete_source",
        } <= set(BackendStore(backend).pushdowns)  # fmt: skip


class TestPostgresBackendGeneric(TestPostgresBackend):
    """``BackendStore(PostgresBackend, pushdown=False)``: the 15 members alone."""

    bm25_tokens = "tokenize_lexical"  # the engine's own BM25

    @pytest.fixture
    def store(self, backend: PostgresBackend) -> Iterator[BackendStore]:
        yield BackendStore(backend, pushdown=False)


class TestPostgresPushdownsAgainstTheGenericPath(DifferentialContract):
    """``BackendStore(PostgresBackend)`` (every pushdown: PostgreSQL's SQL for the legs,
    look-ups and set-based writes) against ``pushdown=False`` on the same schema. The lexical
    leg is compared by what it admits, not by rank: PostgreSQL's ``bm25`` tokenizes with its
    text-search configuration and k1 = 1.2, the engine's generic one with
    ``tokenize_lexical`` and k1 = 1.5 (test_differential_postgres.py)."""

    differential_examples = 12
    differential_steps = 10
    differential_lexical_sets = ("bm25",)

    @pytest.fixture
    def store_pair(self, pg_engine: Any, pg_schema: str) -> Iterator[tuple[ChunkStore, ChunkStore]]:
        store = PostgresStore(
            pg_engine, schema=pg_schema, create=True, writes=WriteSettings(maintenance_delay=None)
        )
        backend = PostgresBackend.of(store)
        yield BackendStore(backend), BackendStore(backend, pushdown=False)
