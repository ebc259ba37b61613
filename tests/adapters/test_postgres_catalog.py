"""The PostgreSQL schema as the catalog sees it: tenant-first keys, indexes, storage, migrations.

Everything here reads ``pg_catalog`` / ``information_schema`` of a freshly migrated schema, so
it checks what the server really holds, not what the migration code intends.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStatusStore, PostgresStore
from ragport.adapters.postgres.schema import MIGRATIONS
from ragport.domain.errors import StoreError

SCOPE = ragport.Scope("tenant-1", "kb", "docs")
BOOKKEEPING = "schema_migrations"
ALL_VERSIONS = sorted(MIGRATIONS)
EXPECTED_TABLES = {
    "scopes",
    "records",
    "grants",
    "tombstones",
    "ingestion_status",
    "sync_checkpoints",
    "lexical_stats",
    "lexical_terms",
    "lexical_term_totals",
    "lexical_stat_totals",
    "record_vectors",
    "lexical_batches",
    "live_ids",
    "vector_writes",
}


def _rows(engine, sql: str, **params):
    with engine.connect() as conn:
        return conn.execute(text(sql), params).all()


def _tables(engine, schema: str) -> set[str]:
    rows = _rows(
        engine,
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = :s AND c.relkind IN ('r', 'p')",
        s=schema,
    )
    return {r.relname for r in rows}


def _schema_exists(engine, schema: str) -> bool:
    return bool(_rows(engine, "SELECT 1 FROM pg_namespace WHERE nspname = :s", s=schema))


def _indexes(engine, schema: str, table: str):
    """(name, access method, unique, first key column or None, opclass, key expression 1)."""
    return _rows(
        engine,
        """
        SELECT i.relname AS name, am.amname AS am, x.indisunique AS is_unique,
               a.attname AS first_column, oc.opcname AS opclass,
               pg_get_indexdef(x.indexrelid, 1, true) AS key1, x.indnkeyatts AS nkeys
        FROM pg_index x
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_class t ON t.oid = x.indrelid
        JOIN pg_namespace n ON n.oid = t.relnamespace
        JOIN pg_am am ON am.oid = i.relam
        LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = x.indkey[0]
        LEFT JOIN pg_opclass oc ON oc.oid = x.indclass[0]
        WHERE n.nspname = :s AND t.relname = :t
        """,
        s=schema,
        t=table,
    )


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True)


def test_every_key_and_unique_index_starts_with_tenant_id(store, pg_engine, pg_schema):
    """Keys and unique indexes lead with tenant_id. If this fails, check schema.py _v1."""
    constraints = _rows(
        pg_engine,
        """
        SELECT t.relname AS table_name, con.conname AS name, con.contype AS kind,
               (SELECT attname FROM pg_attribute
                 WHERE attrelid = con.conrelid AND attnum = con.conkey[1]) AS first_column,
               (SELECT attname FROM pg_attribute
                 WHERE attrelid = con.confrelid AND attnum = con.confkey[1]) AS first_ref_column
        FROM pg_constraint con
        JOIN pg_class t ON t.oid = con.conrelid
        JOIN pg_namespace n ON n.oid = t.relnamespace
        WHERE n.nspname = :s AND con.contype IN ('p', 'u', 'f', 'x')
        """,
        s=pg_schema,
    )
    checked = [c for c in constraints if c.table_name != BOOKKEEPING]
    primary_keys = {c.table_name for c in checked if c.kind == "p"}
    assert primary_keys == EXPECTED_TABLES, "every ragport table has a primary key"
    wrong = [
        (c.table_name, c.name, c.first_column)
        for c in checked
        if c.first_column != "tenant_id" or (c.kind == "f" and c.first_ref_column != "tenant_id")
    ]
    assert wrong == [], f"constraints not led by tenant_id: {wrong}"

    unique_indexes = [
        (table, ix)
        for table in _tables(pg_engine, pg_schema) - {BOOKKEEPING}
        for ix in _indexes(pg_engine, pg_schema, table)
        if ix.is_unique
    ]
    names = {ix.name for _, ix in unique_indexes}
    assert {"records_pkey", "records_row_key", "live_ids_pkey"} <= names, "the keys exist"
    # Migration 9 replaced records_live_id by live_ids (retirement as a HOT update).
    assert "records_live_id" not in names
    wrong_ix = [
        (t, ix.name, ix.first_column) for t, ix in unique_indexes if ix.first_column != "tenant_id"
    ]
    assert wrong_ix == [], f"unique indexes not led by tenant_id (None = expression): {wrong_ix}"


def test_every_table_but_bookkeeping_has_a_not_null_tenant_id(store, pg_engine, pg_schema):
    """Every table carries tenant_id NOT NULL. If this fails, check schema.py _v1."""
    tables = _tables(pg_engine, pg_schema)
    assert tables == EXPECTED_TABLES | {BOOKKEEPING}
    rows = _rows(
        pg_engine,
        "SELECT table_name, is_nullable FROM information_schema.columns "
        "WHERE table_schema = :s AND column_name = 'tenant_id'",
        s=pg_schema,
    )
    with_tenant = {r.table_name: r.is_nullable for r in rows}
    assert set(with_tenant) == tables - {BOOKKEEPING}
    assert set(with_tenant.values()) == {"NO"}


def test_records_columns_types_storage_and_generated_tsvector(store, pg_engine, pg_schema):
    """Columns, STORAGE PLAIN vectors in record_vectors, generated tsv. If this fails, check
    schema.py _v1 and _v4."""
    cols = {
        r.column_name: r
        for r in _rows(
            pg_engine,
            "SELECT column_name, data_type, udt_name, is_generated, generation_expression "
            "FROM information_schema.columns WHERE table_schema = :s AND table_name = 'records'",
            s=pg_schema,
        )
    }
    expected_udt = {
        "tenant_id": "text",
        "resource_id": "text",
        "corpus_id": "text",
        "id": "text",
        "source_id": "text",
        "kind": "text",
        "text": "text",
        "metadata": "jsonb",
        "row_key": "int8",
        "embedder_id": "text",
        "dimensions": "int4",
        "generation": "int8",
        "retired_generation": "int8",
        "content_hash": "text",
        "lineage": "_text",
        "tsv": "tsvector",
    }
    assert {k: cols[k].udt_name for k in expected_udt if k in cols} == expected_udt
    assert "embedding" not in cols, "vectors live in record_vectors"
    assert cols["tsv"].is_generated == "ALWAYS"
    assert "to_tsvector" in cols["tsv"].generation_expression
    assert "text" in cols["tsv"].generation_expression

    storage = _rows(
        pg_engine,
        "SELECT attname, attstorage, attgenerated FROM pg_attribute "
        "WHERE attrelid = CAST(:rel AS regclass) AND attname IN ('embedding', 'tsv')",
        rel=f'"{pg_schema}".records',
    )
    vectors = _rows(
        pg_engine,
        "SELECT attname, attstorage FROM pg_attribute "
        "WHERE attrelid = CAST(:rel AS regclass) AND attname = 'embedding'",
        rel=f'"{pg_schema}".record_vectors',
    )
    by_name = {r.attname: r for r in storage}
    assert [r.attstorage for r in vectors] == ["p"], "embedding is STORAGE PLAIN (no TOAST)"
    assert by_name["tsv"].attgenerated == "s", "tsv is a STORED generated column"


def test_records_has_gin_indexes_on_lineage_and_tsv(store, pg_engine, pg_schema):
    """GIN on records.lineage and .tsv. If this fails, check schema.py _v1."""
    gin = {
        ix.first_column
        for ix in _indexes(pg_engine, pg_schema, "records")
        if ix.am == "gin" and ix.nkeys == 1
    }
    assert {"lineage", "tsv"} <= gin


def test_first_write_of_a_dimension_creates_its_cosine_hnsw_index(store, pg_engine, pg_schema):
    """8-dim write -> HNSW cosine index on record_vectors. If this fails, check indexes.py
    VectorIndexes.ensure."""
    assert not [ix for ix in _indexes(pg_engine, pg_schema, "record_vectors") if ix.am == "hnsw"]
    ragport.application.replace_source(
        source_id="doc",
        chunks=[ragport.Chunk.of("doc", 0, "hello vector index")],
        embedder=HashEmbedder(dimensions=8),
        store=store,
        scope=SCOPE,
    )
    assert not [ix for ix in _indexes(pg_engine, pg_schema, "records") if ix.am == "hnsw"]
    hnsw = [ix for ix in _indexes(pg_engine, pg_schema, "record_vectors") if ix.am == "hnsw"]
    assert len(hnsw) == 1
    (ix,) = hnsw
    assert ix.opclass == "vector_cosine_ops"
    assert ix.first_column is None, "an expression index (the column itself is untyped vector)"
    assert ix.key1.replace(" ", "") in {"(embedding::vector(8))", "((embedding)::vector(8))"}


def test_migrations_are_idempotent_and_recorded(pg_engine, pg_schema):
    """upgrade applies every migration once, then []. If this fails, check schema.py upgrade."""
    store = PostgresStore(pg_engine, schema=pg_schema)
    assert store.upgrade() == ALL_VERSIONS
    assert store.upgrade() == []
    assert store.upgrade() == []
    PostgresStore(pg_engine, schema=pg_schema, create=True)
    PostgresStatusStore(pg_engine, schema=pg_schema, create=True)
    versions = _rows(pg_engine, f'SELECT version FROM "{pg_schema}".schema_migrations')
    assert [r.version for r in versions] == ALL_VERSIONS
    assert store.current_generation(SCOPE) == 0


def test_a_schema_with_a_migration_this_ragport_does_not_know_is_refused(pg_engine, pg_schema):
    """A schema a later ragport upgraded (a migration number this build does not know) is
    refused before any read or write: this build could not keep what that migration changed
    (as a build from before migration 9 would not keep ``live_ids``). If this fails, check
    connections.py Connections.check_schema."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    assert store.current_generation(SCOPE) == 0
    newer = max(ALL_VERSIONS) + 1
    with pg_engine.begin() as conn:
        conn.execute(
            text(f"INSERT INTO \"{pg_schema}\".schema_migrations VALUES (:v, 'later')"),
            {"v": newer},
        )
    later = PostgresStore(pg_engine, schema=pg_schema)
    with pytest.raises(StoreError, match=f"migrations \\[{newer}\\]"):
        later.current_generation(SCOPE)


def test_concurrent_upgrades_apply_each_migration_once(pg_engine, pg_schema):
    """Racing upgrades apply each migration once. If this fails, check schema.py upgrade (advisory lock)."""
    results: list[object] = []
    barrier = threading.Barrier(2)

    def run() -> None:
        store = PostgresStore(pg_engine, schema=pg_schema)
        barrier.wait()
        try:
            results.append(store.upgrade())
        except Exception as exc:  # reported through the assertion below
            results.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(map(repr, results)) == sorted([repr(ALL_VERSIONS), "[]"])
    versions = _rows(pg_engine, f'SELECT version FROM "{pg_schema}".schema_migrations')
    assert [r.version for r in versions] == ALL_VERSIONS


def test_unmigrated_schema_raises_store_error_and_creates_nothing(pg_engine, pg_schema):
    """Missing schema: StoreError, nothing created. If this fails, check store.py _check_schema."""
    store = PostgresStore(pg_engine, schema=pg_schema)
    status = PostgresStatusStore(pg_engine, schema=pg_schema)
    assert not _schema_exists(pg_engine, pg_schema), "the constructor touched nothing"
    calls = [
        lambda: store.current_generation(SCOPE),
        lambda: store.get_by_source(SCOPE, "doc"),
        lambda: store.query(SCOPE, [1.0] * 8, limit=3),
        lambda: store.list_embedders(SCOPE),
        lambda: store.unit_of_work(SCOPE).__enter__(),
        lambda: ragport.application.replace_source(
            source_id="doc",
            chunks=[ragport.Chunk.of("doc", 0, "never stored")],
            embedder=HashEmbedder(dimensions=8),
            store=store,
            scope=SCOPE,
        ),
        lambda: status.get(SCOPE, "doc"),
    ]
    for call in calls:
        with pytest.raises(StoreError):
            call()
    assert not _schema_exists(pg_engine, pg_schema)


def test_empty_existing_schema_is_not_migrated_on_use(pg_engine, pg_schema):
    """Empty schema stays empty on use. If this fails, check store.py _check_schema."""
    with pg_engine.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{pg_schema}"'))
    store = PostgresStore(pg_engine, schema=pg_schema)
    with pytest.raises(StoreError):
        store.current_generation(SCOPE)
    with pytest.raises(StoreError):
        ragport.application.replace_source(
            source_id="doc",
            chunks=[ragport.Chunk.of("doc", 0, "never stored")],
            embedder=HashEmbedder(dimensions=8),
            store=store,
            scope=SCOPE,
        )
    assert _tables(pg_engine, pg_schema) == set()
