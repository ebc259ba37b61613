"""Migration 6: the GIN index on records.metadata, and equality filters the index serves.

The upgrade starts from a schema written by the migrations before it (1-3), with data in it,
on a plain and on a hash-partitioned schema, and checks the rows, the index and a filtered
query through the store afterwards.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres import schema as migrations
from ragport.adapters.postgres.extension import pgvector
from ragport.adapters.postgres.filters import compile_filter
from ragport.domain.filters import parse_filter

EMB = HashEmbedder(16)
SCOPE = ragport.Scope("tenant-1", "kb", "old")


def _previous_schema(conn, s: str, partitions: int | None) -> None:
    """The schema as the migrations before 6 leave it, recorded as version 3."""
    statements = [
        *migrations._partitioned(s, migrations._v1(s, "simple", pgvector(conn)), partitions),
        *migrations._v2(s, "simple"),
        *migrations._v3(s),
    ]
    for statement in statements:
        conn.execute(text(statement))
    conn.execute(
        text(
            f"CREATE TABLE {s}.schema_migrations (version integer PRIMARY KEY, "
            "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
    )
    conn.execute(text(f"INSERT INTO {s}.schema_migrations VALUES (1, 'v1'), (2, 'v2'), (3, 'v3')"))


@pytest.mark.parametrize("partitions", [None, 2], ids=["plain", "partitioned"])
def test_upgrade_from_version_3_keeps_data_and_indexes_metadata(
    pg_engine, pg_schema, partitions
) -> None:
    """A version-3 schema with rows upgrades in place: the rows stay, every (partition of)
    records gets the GIN index, and an equality filter reads it and selects what the domain
    rule selects. If this fails, check schema.py _v6 and the $eq branch of filters.py."""
    s = f'"{pg_schema}"'
    with pg_engine.begin() as conn:
        _previous_schema(conn, s, partitions)
    old = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    with pytest.raises(ragport.StoreError):
        old.current_generation(SCOPE)  # the store refuses a schema behind the code
    with pg_engine.begin() as conn:
        # Rows written the way the previous schema's store wrote them (no index on metadata).
        conn.execute(
            text(f"INSERT INTO {s}.scopes VALUES (:t, :r, :c, 1, 1, 0)"),
            {"t": SCOPE.tenant_id, "r": SCOPE.resource_id, "c": SCOPE.corpus_id},
        )
        for i in range(12):
            words = f"note {i}"
            conn.execute(
                text(
                    f"INSERT INTO {s}.records (tenant_id, resource_id, corpus_id, id, "
                    "generation, source_id, kind, text, metadata, embedding, embedder_id, "
                    "dimensions) VALUES (:t, :r, :c, :id, 1, :src, 'chunk', :x, "
                    "CAST(:m AS jsonb), CAST(:v AS vector), :e, 16)"
                ),
                {
                    "t": SCOPE.tenant_id, "r": SCOPE.resource_id, "c": SCOPE.corpus_id,
                    "id": f"s{i}#0001", "src": f"s{i}", "x": words,
                    "m": f'{{"tag": "{"a" if i % 3 == 0 else "b"}", "n": {i}}}',
                    "v": str(EMB.embed([words])[0].tolist()), "e": EMB.id,
                },
            )  # fmt: skip
    store = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    assert store.upgrade() == [v for v in sorted(migrations.MIGRATIONS) if v > 3]
    assert 6 in migrations.MIGRATIONS
    assert store.upgrade() == []
    assert [r.id for r in store.get_by_source(SCOPE, "s3")] == ["s3#0001"]
    with pg_engine.connect() as conn:
        tables = conn.execute(
            text(
                "SELECT c.relname, i.indexrelid::regclass::text AS ix FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                "JOIN pg_class x ON x.oid = i.indexrelid JOIN pg_am a ON a.oid = x.relam "
                "WHERE n.nspname = :n AND a.amname = 'gin' "
                "AND pg_get_indexdef(i.indexrelid) LIKE '%metadata jsonb_path_ops%'"
            ),
            {"n": pg_schema},
        ).all()
    indexed = {row.relname for row in tables}
    expected = {"records"} | ({f"records_p{i}" for i in range(partitions)} if partitions else set())
    assert expected <= indexed
    found = store.query(SCOPE, EMB.embed(["note 1"])[0], limit=20, metadata_filter={"tag": "a"})
    assert sorted(x.record.id for x in found) == [f"s{i}#0001" for i in (0, 3, 6, 9)]
    # The equality compiles to a containment the index serves (no sequential scan allowed).
    sql, params = compile_filter(parse_filter({"tag": "a"}), column="metadata")
    with pg_engine.begin() as conn:
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = " ".join(
            row[0]
            for row in conn.execute(text(f"EXPLAIN SELECT id FROM {s}.records WHERE {sql}"), params)
        )
    assert "records_metadata" in plan or "_metadata_idx" in plan, plan
    # $in: an OR of containments, one index probe per item, then the exact test
    found = store.query(
        SCOPE, EMB.embed(["note 1"])[0], limit=20, metadata_filter={"n": {"$in": [1, 4.0, 99]}}
    )
    assert sorted(x.record.id for x in found) == ["s1#0001", "s4#0001"]
    sql, params = compile_filter(parse_filter({"n": {"$in": [1, 4.0, 99]}}), column="metadata")
    with pg_engine.begin() as conn:
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = " ".join(
            row[0]
            for row in conn.execute(text(f"EXPLAIN SELECT id FROM {s}.records WHERE {sql}"), params)
        )
    assert ("records_metadata" in plan or "_metadata_idx" in plan) and "BitmapOr" in plan, plan


def test_a_migration_released_after_a_later_one_was_applied_still_runs(pg_engine, pg_schema):
    """A schema that recorded a later migration but misses an earlier one (upgraded while that
    one was not yet released) reports the version before the gap, is refused by the store, and
    ``upgrade`` applies exactly the missing migrations. If this fails, check schema.py
    ``current_version`` and the loop of ``upgrade`` (it must test membership, not ``<= max``)."""
    s = f'"{pg_schema}"'
    with pg_engine.begin() as conn:
        _previous_schema(conn, s, None)
        for statement in migrations._v6(s):
            conn.execute(text(statement))
        conn.execute(text(f"INSERT INTO {s}.schema_migrations VALUES (6, 'v6')"))
        assert migrations.current_version(conn, pg_schema) == 3
    store = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    with pytest.raises(ragport.StoreError):
        store.current_generation(SCOPE)
    missing = [v for v in sorted(migrations.MIGRATIONS) if v not in (1, 2, 3, 6)]
    assert missing and store.upgrade() == missing
    assert store.upgrade() == []
    assert store.current_generation(SCOPE) == 0
    with pg_engine.connect() as conn:
        assert migrations.current_version(conn, pg_schema) == migrations.LATEST_VERSION
