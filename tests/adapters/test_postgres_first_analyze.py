"""A corpus queried right after its first load: the store analyses the new tables itself.

Without column statistics the planner takes a scope for about one row, and the vector
statement's per-candidate visibility check (``queries._nearest``) walked the scope's rows
once per candidate: 120 ms at 1,104 rows instead of 2-8 ms, growing with the square of the
corpus, until autovacuum's next pass (the "stalled" SIGKILL propagation test spent minutes
there). ``VectorIndexes.analyze_once`` now runs after the first commit that leaves
``FIRST_ANALYZE_ROWS`` rows. These tests read the catalog and EXPLAIN ANALYZE's discarded rows,
not the time.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pgvector.psycopg import register_vector
from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore, reads
from ragport.adapters.postgres._driver import driver_connection
from ragport.adapters.postgres.indexes import FIRST_ANALYZE_ROWS
from ragport.adapters.postgres.reads import pyformat
from ragport.contract_tests._support import ContractEmbedder, publish_sources

EMB = ContractEmbedder()


def _analysed(engine: Any, schema: str) -> set[str]:
    """Tables with column statistics, and those with none whose size ANALYZE recorded (an
    empty table: reltuples 0 instead of -1, never analysed)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT DISTINCT tablename AS name FROM pg_catalog.pg_stats WHERE schemaname = :s "
                "UNION SELECT relname FROM pg_catalog.pg_class WHERE relnamespace = "
                "to_regnamespace(:s) AND relkind IN ('r', 'p') AND reltuples >= 0 "
                "AND relname = 'tombstones'"
            ),
            {"s": schema},
        ).all()
    return {row.name for row in rows}


def _load(store: PostgresStore, scope: ragport.Scope, rows: int, word: str = "walrus") -> None:
    """``rows`` chunks in one unit of work, without ``prepare`` (a bulk write of its own)."""
    per = 4
    publish_sources(
        store,
        scope,
        {f"s{i:05d}": [f"{word} {i} part {j}" for j in range(per)] for i in range(rows // per)},
    )
    store.finish_maintenance()  # a growth re-analysis runs on the store's maintenance thread


@pytest.mark.parametrize("partitions", [None, 4])
def test_the_first_load_past_the_threshold_is_analysed_and_a_small_one_is_not(
    pg_engine, pg_schema, partitions
):
    """Below ``FIRST_ANALYZE_ROWS`` nothing is analysed (a small corpus pays one catalog read
    per commit, no ANALYZE); the commit that crosses it analyses records, record_vectors and
    tombstones, partitioned or not. If this fails, check ScopeTransaction.commit and
    VectorIndexes.analyze_once."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True, partitions=partitions)
    scope = ragport.Scope("acme", "kb", "fresh-" + uuid.uuid4().hex[:6])
    _load(store, scope, 40)
    assert not {"records", "record_vectors"} & _analysed(pg_engine, pg_schema)
    assert 40 < FIRST_ANALYZE_ROWS <= 400
    _load(store, ragport.Scope("acme", "kb", "more"), 400)  # one tenant's rows count
    assert {"records", "record_vectors", "tombstones"} <= _analysed(pg_engine, pg_schema)


def _discarded(node: dict[str, Any]) -> int:
    """Rows a plan node's filters discarded over all its loops, in the whole subtree."""
    loops = int(node.get("Actual Loops", 1))
    own = sum(
        int(float(node.get(key, 0)) * loops)
        for key in ("Rows Removed by Filter", "Rows Removed by Join Filter")
    )
    return own + sum(_discarded(child) for child in node.get("Plans", ()))


@pytest.mark.parametrize("rows", [400, 1_200])
def test_a_vector_query_right_after_the_first_load_checks_each_candidate_once(
    pg_engine, pg_schema, pg_url, rows
):
    """Right after a 400- or 1,200-row load, the vector statement of a plain retrieve discards far
    fewer rows than candidates x rows (the per-candidate visibility check uses the row key,
    not a walk over the scope). If this fails, check that the first load is analysed
    (analyze_once) before blaming the statement in queries._nearest."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    scope = ragport.Scope("acme", "kb", "docs")
    _load(store, scope, rows)
    captured: list[tuple[str, dict[str, Any]]] = []
    original = reads.fetch

    def spy(conn: Any, sql: str, params: Any, *, prepare: bool | None = None) -> list[Any]:
        captured.append((sql, dict(params)))
        return original(conn, sql, params, prepare=prepare)

    request = ragport.RetrievalRequest(top_k=32, query_candidates=128)
    reads.fetch = spy  # type: ignore[assignment]
    try:
        found = ragport.application.retrieve_context(
            "walrus 7 part 1", embedder=EMB, store=store, scope=scope, request=request
        )
    finally:
        reads.fetch = original  # type: ignore[assignment]
    assert len(found.hits) == 32
    sql, params = next(c for c in reversed(captured) if "<=>" in c[0])
    with pg_engine.connect() as conn:
        dbapi = driver_connection(conn)
        register_vector(dbapi)
        with dbapi.cursor() as cur:
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + pyformat(sql), params)
            plan = cur.fetchone()[0][0]["Plan"]
        conn.rollback()
    assert _discarded(plan) < 10 * rows, _discarded(plan)


def _corpora_in_statistics(engine: Any, schema: str, column: str = "corpus_id") -> str:
    """``records.column``'s most common values (elements, for a tsvector) as text."""
    with engine.connect() as conn:
        value = conn.execute(
            text(
                "SELECT coalesce(string_agg(coalesce(most_common_vals::text, '') || "
                "coalesce(most_common_elems::text, ''), ' '), '') FROM pg_catalog.pg_stats "
                "WHERE schemaname = :s AND tablename = 'records' AND attname = :a"
            ),
            {"s": schema, "a": column},
        ).scalar_one()
    return str(value)


def test_a_corpus_loaded_after_the_last_analyse_is_analysed_once_it_is_a_fifth_of_the_table(
    pg_engine, pg_schema
):
    """After the first ANALYZE, the store analyses again once it has written ANALYZE_GROWTH
    of the rows that ANALYZE saw: a new corpus of the same size as the first one then shows
    in the statistics at once (not a minute later, from autovacuum). If this fails, check
    VectorIndexes.analyze_after_commit's growth rule."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    _load(store, ragport.Scope("acme", "kb", "first"), 1_200)
    assert "first" in _corpora_in_statistics(pg_engine, pg_schema)
    _load(store, ragport.Scope("acme", "kb", "small"), 40)  # under the growth: no ANALYZE
    assert "small" not in _corpora_in_statistics(pg_engine, pg_schema)
    words = _corpora_in_statistics(pg_engine, pg_schema, "tsv")
    assert "walrus" in words and "narwhal" not in words  # the first ANALYZE's lexemes
    _load(store, ragport.Scope("acme", "kb", "second"), 1_200, word="narwhal")
    seen = _corpora_in_statistics(pg_engine, pg_schema)
    assert "second" in seen and "first" in seen, seen
    # The re-analysis skipped the tsvector columns (UNPLANNED_COLUMNS): their statistics
    # are the first ANALYZE's; a full one would have seen "narwhal" in half the rows.
    assert _corpora_in_statistics(pg_engine, pg_schema, "tsv") == words
    with pg_engine.begin() as conn:  # the full one sees it: the check above can fail
        conn.execute(text(f'ANALYZE "{pg_schema}".records'))
    assert "narwhal" in _corpora_in_statistics(pg_engine, pg_schema, "tsv")
