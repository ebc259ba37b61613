"""The differential contract on PostgreSQL: ``PostgresStore`` (its SQL) against the engine's
generic path over ``PostgresBackend`` on the same schema (``pushdown=False``), plain and
partitioned by tenant.

The fixture shape for a backend with pushdowns is ``(BackendStore(backend),
BackendStore(backend, pushdown=False))``; until PostgresStore runs on the engine, its
native methods are the subject. Both stores share one schema: each sequence writes a scope of
its own per store. The lexical leg is not compared: PostgreSQL's ``bm25`` tokenizes with its
text-search configuration (``english``: stemmed, stop words dropped), the engine's generic
``bm25`` with ``tokenize_lexical``, so their scores differ by design.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres.backend import PostgresBackend
from ragport.contract_tests import DifferentialContract
from ragport.engine import BackendStore
from ragport.ports.store import ChunkStore

Pair = Iterator[tuple[ChunkStore, ChunkStore]]


class TestPostgresAgainstTheEngine(DifferentialContract):
    """PostgresStore's SQL against BackendStore(PostgresBackend, pushdown=False)."""

    differential_examples = 12
    differential_steps = 10
    differential_lexical_modes = ()  # bm25 on the english configuration: see the docstring

    @pytest.fixture
    def store_pair(self, pg_engine: Any, pg_schema: str) -> Pair:
        store = PostgresStore(pg_engine, schema=pg_schema, create=True)
        yield store, BackendStore(PostgresBackend.of(store), pushdown=False)


class TestPartitionedPostgresAgainstTheEngine(TestPostgresAgainstTheEngine):
    """The same on a schema partitioned by tenant."""

    @pytest.fixture
    def store_pair(self, pg_engine: Any, pg_schema: str) -> Pair:
        store = PostgresStore(pg_engine, schema=pg_schema, create=True, partitions=4)
        yield store, BackendStore(PostgresBackend.of(store), pushdown=False)
