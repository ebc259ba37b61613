"""Vectors in ``record_vectors`` (migration 4): written once, never rewritten.

Deleting or replacing a source, retiring ids, rollback, compaction and re-pointing change
``records`` rows only: every vector row that survives a write keeps its heap version (``xmin``
and ``ctid``), every record has exactly one vector row and no vector row outlives its record,
and the lexical statistics stay equal to a recomputation (random sequences, hypothesis). A
database written at version 3 upgrades in place, plain and partitioned.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres import schema as migrations
from ragport.adapters.postgres.extension import pgvector
from tests.adapters.test_postgres_bm25 import EMB
from tests.adapters.test_postgres_lexical_stats import (
    _apply,
    _check_scores,
    _check_statistics,
    _op,
    _words,
)

SOURCES = ["s0", "s1", "s2", "s3"]


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")


def _vectors(store: PostgresStore, scope: ragport.Scope) -> dict[int, tuple[str, str]]:
    """row_key -> (xmin, ctid) of the scope's vector rows."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                f'SELECT row_key, xmin::text AS x, ctid::text AS c FROM "{store.schema}".'
                "record_vectors WHERE tenant_id = :t AND resource_id = :r AND corpus_id = :c"
            ),
            {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
        ).all()
    return {row.row_key: (row.x, row.c) for row in rows}


def _check_vectors(
    store: PostgresStore, scope: ragport.Scope, before: dict[int, tuple[str, str]], step: str = ""
) -> dict[int, tuple[str, str]]:
    """One vector row per record and none without one; surviving vector rows unchanged."""
    after = _vectors(store, scope)
    with store.engine.connect() as conn:
        keys = conn.execute(
            text(
                f'SELECT row_key FROM "{store.schema}".records '
                "WHERE tenant_id = :t AND resource_id = :r AND corpus_id = :c"
            ),
            {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
        ).all()
    assert sorted(k for (k,) in keys) == sorted(after), f"{step}: records and vectors pair 1:1"
    rewritten = {k for k in before.keys() & after.keys() if before[k] != after[k]}
    assert not rewritten, f"{step}: a write created a new version of a vector row"
    return after


def _repoint(store: PostgresStore, scope: ragport.Scope, source: str) -> None:
    target = f"{source}-moved-{uuid.uuid4().hex[:6]}"
    with contextlib.suppress(ragport.ValidationError):  # a collision or a forgotten id
        ragport.application.repoint_source(scope=scope, store=store, from_id=source, to_id=target)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=st.lists(
        st.one_of(_op, st.tuples(st.just("repoint"), st.sampled_from(SOURCES))),
        min_size=1,
        max_size=10,
    ),
    query=st.lists(_words, min_size=1, max_size=1),
)
def test_random_writes_keep_vectors_and_statistics(
    store: PostgresStore, pg_schema: str, ops: list[tuple], query: list[str]
) -> None:
    """Replace, delete, retire, forget, rollback, compaction and re-pointing in any order: vector
    rows are never rewritten nor orphaned, statistics equal a recomputation at every pointer.
    If this fails, check statements.delete_records / rekey_update and unit_of_work.add."""
    scope = ragport.Scope("tenant-1", "kb", "v" + uuid.uuid4().hex[:12])
    s = f'"{pg_schema}"'
    seen: dict[int, tuple[str, str]] = {}
    for op in ops:
        if op[0] == "repoint":
            _repoint(store, scope, op[1])
        else:
            _apply(store, scope, op)
        seen = _check_vectors(store, scope, seen, op[0])
        _check_statistics(store, scope, s)
    _check_scores(store, scope, s, query[0].split(), 3)


def test_each_write_path_leaves_vector_rows_untouched(store: PostgresStore) -> None:
    """Each write path in turn, vectors checked after each; the broken variant (an UPDATE of a
    vector row) is caught. If this fails, check the write named in the assertion."""
    scope = ragport.Scope("tenant-1", "kb", "paths")

    def replace(source: str, texts: list[str]) -> None:
        chunks = [ragport.Chunk.of(source, i, t) for i, t in enumerate(texts)]
        ragport.application.replace_source(
            source_id=source, chunks=chunks, embedder=EMB, store=store, scope=scope
        )

    replace("a", ["apple brook", "brook cedar"])
    replace("b", ["cedar delta", "delta echo"])
    replace("c", ["echo fox"])
    seen = _check_vectors(store, scope, {})
    assert len(seen) == 5
    steps: list[tuple[str, Any]] = [
        ("replace existing", lambda: replace("a", ["apple brook", "brook cedar golf"])),
        (
            "delete",
            lambda: ragport.application.delete_source(source_id="b", store=store, scope=scope),
        ),
        (
            "repoint",
            lambda: ragport.application.repoint_source(
                scope=scope, store=store, from_id="c", to_id="d"
            ),
        ),
        (
            "rollback",
            lambda: ragport.application.rollback_generation(store=store, scope=scope, to=3),
        ),
        ("compact", lambda: ragport.application.compact(store=store, scope=scope, keep=0)),
    ]
    for name, step in steps:
        step()
        seen = _check_vectors(store, scope, seen, name)
    assert [r.id for r in store.get_by_source(scope, "d")] == ["d#0001"]
    hits = store.query(scope, EMB.embed(["echo fox"])[0], limit=1)
    assert [h.record.id for h in hits] == ["d#0001"], "a re-pointed record keeps its vector"
    with store.engine.begin() as conn:  # the broken variant: rewrite one vector row
        conn.execute(
            text(
                f'UPDATE "{store.schema}".record_vectors SET dimensions = dimensions '
                "WHERE row_key = :k"
            ),
            {"k": next(iter(seen))},
        )
    with pytest.raises(AssertionError):
        _check_vectors(store, scope, seen)


def _version_3(conn: Any, s: str, partitions: int | None) -> None:
    """The schema as migrations 1-3 left it, recorded as version 3."""
    for statement in [
        *migrations._partitioned(s, migrations._v1(s, "simple", pgvector(conn)), partitions),
        *migrations._v2(s, "simple"),
    ]:
        conn.execute(text(statement))
    conn.execute(
        text(
            f"CREATE TABLE {s}.schema_migrations (version integer PRIMARY KEY, "
            "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
    )
    conn.execute(text(f"INSERT INTO {s}.schema_migrations VALUES (1, 'v1'), (2, 'v2'), (3, 'v3')"))


@pytest.mark.parametrize("partitions", [None, 2])
def test_upgrade_from_version_3_moves_vectors_and_keeps_reads_and_writes(
    pg_engine, pg_schema, partitions: int | None
) -> None:
    """A schema written at version 3 (vectors in records, HNSW there) upgrades in place: rows,
    vectors and statistics kept, HNSW rebuilt on record_vectors, then reads and writes work.
    If this fails, check schema.py _v4."""
    s = f'"{pg_schema}"'
    scope = ragport.Scope("tenant-1", "kb", "old")
    texts = [("apple brook", 1, None), ("brook cedar cedar", 1, 2), ("cedar delta", 2, None)]
    with pg_engine.begin() as conn:
        _version_3(conn, s, partitions)
        conn.execute(
            text(f"INSERT INTO {s}.scopes VALUES (:t, :r, :c, 2, 2, 0)"),
            {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
        )
        for i, (words, gen, retired) in enumerate(texts):
            conn.execute(
                text(
                    f"INSERT INTO {s}.records (tenant_id, resource_id, corpus_id, id, "
                    "generation, source_id, kind, text, embedding, embedder_id, dimensions, "
                    "retired_generation) VALUES (:t, :r, :c, :id, :g, :src, 'chunk', :x, "
                    "CAST(:v AS vector), :e, 16, :rg)"
                ),
                {
                    "t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id,
                    "id": f"s{i}#0001", "g": gen, "src": f"s{i}", "x": words,
                    "v": str(EMB.embed([words])[0].tolist()), "e": EMB.id, "rg": retired,
                },
            )  # fmt: skip
        for statement in migrations._v3(s):  # version 3's statistics, backfilled from the rows
            conn.execute(text(statement))
        conn.execute(
            text(
                f"CREATE INDEX records_hnsw_16 ON {s}.records "
                "USING hnsw ((embedding::vector(16)) vector_cosine_ops) WHERE dimensions = 16"
            )
        )
    store = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    assert store.upgrade() == [v for v in sorted(migrations.MIGRATIONS) if v > 3]
    with pg_engine.connect() as conn:
        hnsw = conn.execute(
            text(
                "SELECT tablename FROM pg_indexes WHERE schemaname = :s "
                "AND indexname = 'records_hnsw_16'"
            ),
            {"s": pg_schema},
        ).all()
        kinds = conn.execute(
            text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:t)"),
            {"t": f"{s}.record_vectors"},
        ).scalar_one()
    assert hnsw == [("record_vectors",)]
    assert kinds == ("p" if partitions else "r")
    assert migrations.partition_count(pg_engine.connect(), pg_schema) == partitions
    _check_statistics(store, scope, s)
    for i, (words, _, retired) in enumerate(texts):
        if retired is None:  # each live row is its own nearest neighbour: its vector moved
            hits = store.query(scope, EMB.embed([words])[0], limit=1)
            assert [h.record.id for h in hits] == [f"s{i}#0001"]
    seen = _check_vectors(store, scope, {})
    ragport.application.replace_source(
        source_id="s0", chunks=[ragport.Chunk.of("s0", 0, "apple fox")], embedder=EMB,
        store=store, scope=scope,
    )  # fmt: skip
    ragport.application.delete_source(source_id="s2", store=store, scope=scope)
    ragport.application.repoint_source(scope=scope, store=store, from_id="s0", to_id="s9")
    ragport.application.compact(store=store, scope=scope, keep=0)
    _check_vectors(store, scope, seen)
    _check_statistics(store, scope, s)
    _check_scores(store, scope, s, ["apple", "fox"], 2)
    hits = store.query(scope, EMB.embed(["apple fox"])[0], limit=1)
    assert [h.record.id for h in hits] == ["s9#0001"]
    assert np.isfinite(hits[0].score)


def test_a_schema_with_a_later_migration_but_not_4_gets_4(pg_engine, pg_schema) -> None:
    """Migrations merged out of order: a schema recorded at {1, 2, 3, 6} is not current, and
    upgrade applies 4 (and only the missing ones). If this fails, check schema.upgrade and
    schema.current_version."""
    s = f'"{pg_schema}"'
    with pg_engine.begin() as conn:
        _version_3(conn, s, None)
        for statement in [*migrations._v3(s), *migrations._v6(s)]:
            conn.execute(text(statement))
        conn.execute(text(f"INSERT INTO {s}.schema_migrations VALUES (6, 'v6')"))
        assert migrations.current_version(conn, pg_schema) == 3
    store = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    with pytest.raises(ragport.StoreError):
        store.current_generation(ragport.Scope("tenant-1", "kb", "c"))
    assert store.upgrade() == [v for v in sorted(migrations.MIGRATIONS) if v not in {1, 2, 3, 6}]
    scope = ragport.Scope("tenant-1", "kb", "c")
    ragport.application.replace_source(
        source_id="a", chunks=[ragport.Chunk.of("a", 0, "apple")], embedder=EMB, store=store,
        scope=scope,
    )  # fmt: skip
    assert [h.record.id for h in store.query(scope, EMB.embed(["apple"])[0], limit=1)] == ["a#0001"]
