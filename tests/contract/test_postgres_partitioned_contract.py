"""The PostgreSQL store on a schema partitioned by tenant (``PARTITION BY HASH (tenant_id)``).

The whole ChunkStore and status contract suites run on it; the catalog shows the HNSW index
on every partition; EXPLAIN of a tenant's query shows one partition of ``records``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStatusStore, PostgresStore, reads
from ragport.contract_tests import ChunkStoreContract, IngestionStatusStoreContract
from ragport.contract_tests.chunk_store.failures import BreakStore
from ragport.domain.errors import ValidationError

PARTITIONS = 4


class TestPartitionedPostgresStore(ChunkStoreContract):
    # Its bm25 leg tokenizes with the text-search configuration (english), not tokenize_lexical.
    bm25_tokens = "engine"

    @pytest.fixture
    def store(self, pg_engine, pg_schema) -> Iterator[PostgresStore]:
        yield PostgresStore(pg_engine, schema=pg_schema, create=True, partitions=PARTITIONS)

    @pytest.fixture
    def break_store(self, pg_engine: Any, pg_schema: str) -> BreakStore:
        """Dropping the schema (every partition with it) makes every later statement fail."""

        def drop_schema(store: ragport.ChunkStore) -> None:
            with pg_engine.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{pg_schema}" CASCADE'))

        return drop_schema


class TestPartitionedPostgresStatusStore(IngestionStatusStoreContract):
    @pytest.fixture
    def status_store(self, pg_engine, pg_schema) -> Iterator[PostgresStatusStore]:
        PostgresStore(pg_engine, schema=pg_schema, create=True, partitions=PARTITIONS)
        yield PostgresStatusStore(pg_engine, schema=pg_schema)


def _relations(plan: Any) -> set[str]:
    found = set()
    if isinstance(plan, dict):
        if "Relation Name" in plan:
            found.add(plan["Relation Name"])
        for value in plan.values():
            found |= _relations(value)
    elif isinstance(plan, list):
        for value in plan:
            found |= _relations(value)
    return found


def test_partitions_hold_hnsw_and_a_query_reads_one(
    pg_engine: Any, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HNSW on every record_vectors partition; EXPLAIN of each retrieval statement names one
    partition of each table it reads.

    If this fails, check ``schema._partitioned`` and that every statement binds ``tenant_id``."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True, partitions=PARTITIONS)
    emb = HashEmbedder(dimensions=16)
    for tenant in ("t1", "t2", "t3", "t4", "t5", "t6"):
        scope = ragport.Scope(tenant, "kb", "docs")
        ragport.application.replace_source(
            source_id="doc", chunks=[ragport.Chunk.of("doc", 0, f"leave policy of {tenant}")],
            embedder=emb, store=store, scope=scope,
        )  # fmt: skip
    with pg_engine.connect() as conn:
        parts = conn.execute(
            text(
                "SELECT c.relname, (SELECT count(*) FROM pg_index i JOIN pg_class x "
                "ON x.oid = i.indexrelid JOIN pg_am a ON a.oid = x.relam WHERE i.indrelid = c.oid "
                "AND a.amname = 'hnsw') FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid "
                "WHERE h.inhparent = to_regclass(:t)"
            ),
            {"t": f'"{pg_schema}".record_vectors'},
        ).all()
    assert len(parts) == PARTITIONS and all(n == 1 for _, n in parts)
    captured: list[tuple[str, dict[str, Any]]] = []
    real = reads.fetch

    def spy(conn: Any, sql: str, params: Any, **kw: Any) -> Any:
        captured.append((sql, dict(params)))
        return real(conn, sql, params, **kw)

    monkeypatch.setattr(reads, "fetch", spy)
    ragport.application.retrieve_context("leave policy", embedder=emb, store=store, scope=ragport.Scope("t3", "kb", "docs"), request=ragport.RetrievalRequest(lexical="bm25"))  # fmt: skip
    monkeypatch.undo()
    statements = [(sql, p) for sql, p in captured if ".records" in sql]
    assert statements
    raw = pg_engine.raw_connection()
    try:
        from ragport.adapters.postgres._driver import driver_connection

        dbapi = driver_connection(type("C", (), {"connection": raw})())
        for sql, params in statements:
            row = dbapi.execute("EXPLAIN (FORMAT JSON) " + reads.pyformat(sql), params).fetchone()
            assert row is not None
            plan = row[0] if not isinstance(row[0], str) else json.loads(row[0])
            for table in ("records", "record_vectors"):
                touched = {r for r in _relations(plan) if re.fullmatch(table + r"(_p\d+)?", r)}
                if table == "records" or ".record_vectors" in sql:
                    assert len(touched) == 1 and touched != {table}, (touched, sql[:300])
        dbapi.rollback()
    finally:
        raw.close()


def test_another_layout_for_an_existing_schema_is_refused(pg_engine: Any, pg_schema: str) -> None:
    """Partitions are chosen when the schema is created; naming others later is refused.

    If this fails, check ``schema.upgrade``."""
    PostgresStore(pg_engine, schema=pg_schema, create=True, partitions=2)
    PostgresStore(pg_engine, schema=pg_schema, create=True, partitions=2)  # same: fine
    with pytest.raises(ValidationError) as caught:
        PostgresStore(pg_engine, schema=pg_schema, create=True, partitions=3)
    assert caught.value.field == "partitions"
    with pytest.raises(ValidationError):
        PostgresStore(pg_engine, schema=pg_schema, partitions=0)


def test_checkpoints_and_lexical_statistics_live_in_the_tenant_partition(
    pg_engine: Any, pg_schema: str
) -> None:
    """sync_checkpoints and the BM25 statistics tables are partitioned like records: each
    tenant's rows sit in one partition, the one its records use."""
    from ragport.adapters.postgres import PostgresCheckpointStore

    store = PostgresStore(pg_engine, schema=pg_schema, create=True, partitions=PARTITIONS)
    checkpoints = PostgresCheckpointStore(pg_engine, schema=pg_schema)
    emb = HashEmbedder(dimensions=16)
    for tenant in ("t1", "t2", "t3", "t4", "t5", "t6"):
        scope = ragport.Scope(tenant, "kb", "docs")
        ragport.application.replace_source(
            source_id="doc", chunks=[ragport.Chunk.of("doc", 0, f"leave policy of {tenant}")],
            embedder=emb, store=store, scope=scope,
        )  # fmt: skip
        assert checkpoints.compare_and_set("folder", scope, 0, "{}")
    tables = (
        "records",
        "sync_checkpoints",
        "lexical_stats",
        "lexical_terms",
        "lexical_batches",
        "lexical_term_totals",
        "lexical_stat_totals",
    )
    with pg_engine.connect() as conn:
        for table in tables:
            parts = conn.execute(
                text("SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass(:t)"),
                {"t": f'"{pg_schema}".{table}'},
            ).scalar_one()
            assert parts == PARTITIONS, table
        placed: dict[str, dict[str, set[str]]] = {}
        for table in ("records", "sync_checkpoints", "lexical_stats", "lexical_terms"):
            rows = conn.execute(
                text(f'SELECT tableoid::regclass::text, tenant_id FROM "{pg_schema}".{table}')
            ).all()
            for where, tenant in rows:
                placed.setdefault(tenant, {}).setdefault(table, set()).add(where.split(".")[-1])
    assert len(placed) == 6
    for tenant, by_table in placed.items():
        suffixes = {p.rsplit("_p", 1)[-1] for parts in by_table.values() for p in parts}
        assert len(suffixes) == 1 and set(by_table) >= {"records", "sync_checkpoints"}, (
            tenant,
            by_table,
        )
