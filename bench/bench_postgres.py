"""PostgreSQL + pgvector benchmarks for PostgresStore (issue 3).

Data (seeded numpy rng): N chunks (default 100,000) of 384-dimension float32 vectors that
cluster like real embeddings. 500 topic centroids on the unit sphere with skewed popularity
(Dirichlet 0.5); centroids share a common direction and one of 25 super-topics, so unrelated
chunks sit at cosine ~0.1 as in real embedding spaces. Each source (100 chunks) draws 3
topics; a chunk is normalise(centroid + noise), the noise chosen per cluster so two chunks of
one cluster have cosine 0.6-0.8 (mean 0.71), 80% of it in a 16-direction subspace per
cluster. ``--isotropic`` uses independent centroids and isotropic noise instead (the plain
recipe: each cluster is then a small uniform-random cloud, locally HNSW's worst case). Texts
are 300-600 characters of Zipf-distributed synthetic words (the generated ``tsvector`` column
is part of the write cost); every chunk carries ``{"tag": "tNN"}``, 20 equally likely tags.

1. Ingest: rows/s through ``replace_source`` (one call per 100-chunk source; a precomputed
   embedder keeps embedding out) into one fresh schema, against raw binary
   ``COPY ... FROM STDIN (FORMAT BINARY)`` of the same rows and columns into a second fresh
   schema: the rows into ``records`` and their vectors into ``record_vectors``, as
   ``records.add`` writes them; and ``replace_source`` with the GIN pending lists merged per
   1,000 rows into a third. The three loads take turns: ten slices of the sources, each slice
   into each schema in a rotating order (one COPY transaction per slice), so a busy spell of
   the machine falls on all three and their indexes grow together. The schemas come from
   ``PostgresStore(create=True)`` and get the adapter's HNSW index (``records_hnsw_384``, on
   ``record_vectors``) *before* loading, so both pay incremental HNSW inserts, the GIN/btree
   indexes of both tables and the generated tsvector. Then ``replace_source`` of an existing
   100-chunk source against the first write of one (median of 10 pairs, ``pg_writes.py``).
2. Retrieve: 200 queries (vectors near random centroids) through
   ``retrieve_context(top_k=10, query_candidates=20)``, interleaved on plain psycopg
   connections with two raw SQL top-k queries. The *raw equivalent* asks the same question
   the way a hand-written query would: the same 20 rows with the same columns and the cosine
   distance, scope and live rows (``retired_generation IS NULL``), at the ``ef_search`` the
   store uses for an unfiltered query (200), with iterative scans on. The *bare* query is the
   cheapest possible top-10 (``SELECT id ... ORDER BY embedding::vector(384) <=> q LIMIT 10``
   at pgvector's default ``ef_search`` 40, which buys its speed with recall: its recall@10 is
   printed too). The ``dimensions`` term lets the planner use the partial HNSW index. Also
   ``store.query`` alone and the drift-guard read ``store.foreign_embedders`` alone (which
   ``retrieve_context`` no longer issues: PostgresStore answers it inside the vector leg).
   For each query the five calls run in a fresh random order (the first pays for that query
   vector's cold HNSW pages); hybrid ``retrieve_context(lexical="bm25")`` runs in a loop of
   its own afterwards.
3. Recall@10 of ``store.query`` against exact answers computed with numpy, for three
   predicates: ACL (grants to 10% of sources) + metadata filter (5% of chunks), ACL only, and
   none. The store's own statement (captured where the store runs its reads on psycopg) is
   re-run on a connection without prepared statements: as planned, with the HNSW scan forced
   and iterative scans on/off, ``ef_search`` 200/400/800, ``relaxed_order`` at 800, and exact
   (no index scans) to cross-check the numpy answers in SQL.
   (Sections 2 and 3 are skipped with ``--writes-only``.)
4. ``delete_source`` of a 1,000-row source in one transaction: statements counted with a
   ``before_cursor_execute`` listener on the store's engine (COPY counted by wrapping psycopg's
   ``Cursor.copy``), median time over 5 runs; a raw ``DELETE`` of another 1,000-row source
   (its rows and their vectors, one statement) for scale.

Run: .venv/bin/python bench/bench_postgres.py [--quick] [--rows N] [--url URL] [--isotropic]
[--writes-only]
(--quick: 10,000 rows; default: an embedded server in a temporary directory, stopped at the
end; with --url the two bench schemas are dropped at the end.) Progress goes to stderr.
Compare ratios measured in one run: these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from _results import note_postgres
from pg_corpus import (  # re-exported: bench_pg_lexical.py and pg_latency_probe.py use them
    DIMS,
    EMBEDDER_ID,
    PER_SOURCE,
    SCOPE,
    SEED,
    TOP_K,
    Corpus,
    PrecomputedEmbedder,
    exact_top,
    log,
    pct,
    raw_connection,
)
from pg_recall import FILTER_TAG, GRANTED_FRACTION, N_RECALL_QUERIES, print_recall
from pg_writes import (
    DELETE_ROWS,
    DELETE_RUNS,
    StatementCounter,
    bench_delete,
    bench_replace,
    write_json,
)
from psycopg.types.json import Jsonb

from ragport import RetrievalRequest, WriteOptions
from ragport.adapters.postgres import PostgresStore, WriteSettings, embedded_server
from ragport.adapters.postgres.indexes import HNSW_EF_CONSTRUCTION, HNSW_M
from ragport.application import replace_source, retrieve_context

__all__ = [  # what bench_pg_lexical, bench_pg_recall and pg_latency_probe use
    "DIMS",
    "EMBEDDER_ID",
    "FILTER_TAG",
    "GRANTED_FRACTION",
    "N_RECALL_QUERIES",
    "PER_SOURCE",
    "SCOPE",
    "SEED",
    "TOP_K",
    "Corpus",
    "PrecomputedEmbedder",
    "main",
    "raw_connection",
]

N_QUERIES = 200
CANDIDATES = 20
CALLS = ("retrieve", "bare", "raw", "store", "drift")
INGEST_SEGMENTS = 10
"""The loads alternate in this many turns (see ``bench_ingest``)."""
# The raw COPY writes what ``records.add`` writes: the rows into ``records`` and their vectors
# into ``record_vectors`` (migration 4), under keys from the schema's own sequence.
COPY_COLUMNS = (
    "tenant_id, resource_id, corpus_id, id, generation, source_id, kind, text, metadata, "
    "row_key, embedder_id, dimensions, retired_generation, content_hash, lineage, roots, "
    "chunk_index, start_offset, end_offset"
)
COPY_TYPES = [
    "text", "text", "text", "text", "int8", "text", "text", "text", "jsonb", "int8", "text",
    "int4", "int8", "text", "text[]", "text[]", "int4", "int4", "int4",
]  # fmt: skip
VECTOR_COLUMNS = "tenant_id, resource_id, corpus_id, row_key, dimensions, embedding"
VECTOR_TYPES = ["text", "text", "text", "int8", "int4", "vector"]
TABLES = ("records", "record_vectors")

_SCOPE_SQL = "v.tenant_id = %s AND v.resource_id = %s AND v.corpus_id = %s AND v.dimensions = 384"
_COLUMNS = ", ".join(
    "r." + c
    for c in [
        "id",
        "source_id",
        "kind",
        "text",
        "metadata",
        "embedder_id",
        "dimensions",
        "generation",
        "retired_generation",
        "content_hash",
        "lineage",
        "roots",
        "chunk_index",
        "start_offset",
        "end_offset",
    ]
)
_JOIN = (
    "r.tenant_id = {a}.tenant_id AND r.resource_id = {a}.resource_id "
    "AND r.corpus_id = {a}.corpus_id AND r.row_key = {a}.row_key"
)


def bare_topk_sql(schema: str) -> str:
    """The cheapest raw top-10: ids only (params: tenant, resource, corpus, vector)."""
    return (
        "SELECT r.id FROM (SELECT v.tenant_id, v.resource_id, v.corpus_id, v.row_key "
        f'FROM "{schema}".record_vectors v WHERE {_SCOPE_SQL} '
        f"ORDER BY v.embedding::vector({DIMS}) <=> %s LIMIT {TOP_K}) x "
        f'JOIN "{schema}".records r ON {_JOIN.format(a="x")}'
    )


def equivalent_topk_sql(schema: str) -> str:
    """The raw query for retrieve's answer: the candidate rows with the store's columns and
    distance, live rows of the scope (params: vector, tenant, resource, corpus, vector)."""
    return (
        f"SELECT {_COLUMNS}, v.embedding::vector({DIMS}) <=> %s AS distance "
        f'FROM "{schema}".record_vectors v JOIN "{schema}".records r ON {_JOIN.format(a="v")} '
        f"WHERE {_SCOPE_SQL} AND r.retired_generation IS NULL "
        f"ORDER BY v.embedding::vector({DIMS}) <=> %s LIMIT {CANDIDATES}"
    )


def hnsw_ddl(schema: str) -> str:
    """The adapter's own partial HNSW index (ragport.adapters.postgres.indexes.VectorIndexes)."""
    return (
        f'CREATE INDEX IF NOT EXISTS records_hnsw_{DIMS} ON "{schema}".record_vectors '
        f"USING hnsw ((embedding::vector({DIMS})) vector_cosine_ops) "
        f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) WHERE dimensions = {DIMS}"
    )


def index_definitions(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    rows = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = ANY(%s) "
        "ORDER BY indexname",
        (schema, list(TABLES)),
    ).fetchall()
    return [r[0].replace(f"{schema}.", "S.").replace(f'"{schema}".', "S.") for r in rows]


# -- 1. ingest ----------------------------------------------------------------------------------
def bench_ingest(
    url: str, corpus: Corpus, embedder: PrecomputedEmbedder, rp_schema: str, copy_schema: str
) -> tuple[PostgresStore, dict[str, Any]]:
    n = len(corpus.texts)
    store = PostgresStore(url, schema=rp_schema, create=True)
    PostgresStore(url, schema=copy_schema, create=True).engine.dispose()
    with raw_connection(url) as conn:
        for schema in (rp_schema, copy_schema):
            conn.execute(hnsw_ddl(schema))
        same = index_definitions(conn, rp_schema) == index_definitions(conn, copy_schema)
        n_indexes = len(index_definitions(conn, rp_schema))
    assert same, "both schemas must carry the same indexes"
    all_chunks = [corpus.chunks(s) for s in range(len(corpus.sources))]
    # The same load with the GIN pending lists merged once per 1,000 rows written, not after
    # every source: the bulk-load setting's share of the gap to COPY, in the same run.
    batched_schema = f"{rp_schema}_m1000"
    batched = PostgresStore(
        url, schema=batched_schema, create=True, writes=WriteSettings(merge_pending_lists=1000)
    )
    with raw_connection(url) as conn:
        conn.execute(hnsw_ddl(batched_schema))
        conn.execute("CHECKPOINT")
    t, r, c = SCOPE.tenant_id, SCOPE.resource_id, SCOPE.corpus_id

    def copy_segment(sources: range) -> float:
        """Raw binary COPY of these sources' rows, one transaction (the rows, then their
        vectors, as records.add writes them, keys from the schema's sequence)."""
        rows = [(s, chunk) for s in sources for chunk in all_chunks[s]]
        with raw_connection(url) as conn:
            conn.autocommit = False
            began = time.perf_counter()
            with conn.cursor() as cur:
                keys = [
                    k
                    for (k,) in cur.execute(
                        f"SELECT nextval('\"{copy_schema}\".record_keys') "
                        "FROM generate_series(1, %s)",
                        (len(rows),),
                    ).fetchall()
                ]
                sql = (
                    f'COPY "{copy_schema}".records ({COPY_COLUMNS}) FROM STDIN WITH (FORMAT BINARY)'
                )
                with cur.copy(sql) as copy:
                    copy.set_types(COPY_TYPES)
                    for (s, chunk), key in zip(rows, keys, strict=True):
                        copy.write_row(
                            (
                                t, r, c, chunk.id, s + 1, chunk.source_id, "chunk", chunk.text,
                                Jsonb(chunk.metadata), key, EMBEDDER_ID, DIMS, None,
                                None, [], [], chunk.index, chunk.start, chunk.end,
                            )
                        )  # fmt: skip
                sql = (
                    f'COPY "{copy_schema}".record_vectors ({VECTOR_COLUMNS}) '
                    "FROM STDIN (FORMAT BINARY)"
                )
                with cur.copy(sql) as copy:
                    copy.set_types(VECTOR_TYPES)
                    for (s, chunk), key in zip(rows, keys, strict=True):
                        i = s * PER_SOURCE + chunk.index
                        copy.write_row((t, r, c, key, DIMS, corpus.vectors[i]))
            conn.commit()
            return time.perf_counter() - began

    def replace_segment(target: PostgresStore, sources: range) -> float:
        began = time.perf_counter()
        for s in sources:
            replace_source(
                source_id=corpus.sources[s],
                chunks=all_chunks[s],
                embedder=embedder,
                store=target,
                scope=SCOPE,
                write_options=WriteOptions(batch_size=128),
            )
        return time.perf_counter() - began

    # The three loads in INGEST_SEGMENTS turns, each turn one slice of the sources into each
    # schema in a rotating order: a busy spell of this shared machine falls on all three
    # alike, and the three indexes grow together (one COPY per turn: as many transactions).
    spent = {"copy": 0.0, "rp": 0.0, "batched": 0.0}
    runs = {
        "copy": copy_segment,
        "rp": lambda sources: replace_segment(store, sources),
        "batched": lambda sources: replace_segment(batched, sources),
    }
    per = -(-len(all_chunks) // INGEST_SEGMENTS)
    log(f"loading {n:,} rows three ways in {INGEST_SEGMENTS} turns")
    for turn in range(INGEST_SEGMENTS):
        sources = range(turn * per, min(len(all_chunks), (turn + 1) * per))
        order = ["copy", "rp", "batched"]
        order = order[turn % 3 :] + order[: turn % 3]
        for name in order:
            spent[name] += runs[name](sources)
        done = sources.stop * PER_SOURCE
        log(
            f"{done:,} rows: COPY {done / spent['copy']:,.0f}, replace_source "
            f"{done / spent['rp']:,.0f}, merge per 1,000 {done / spent['batched']:,.0f} rows/s"
        )
    # The loads' last merges and re-analyses count in their time.
    for name, target in (("rp", store), ("batched", batched)):
        began = time.perf_counter()
        target.finish_maintenance()
        spent[name] += time.perf_counter() - began
    copy_s, rp_s, batched_s = spent["copy"], spent["rp"], spent["batched"]
    batched.engine.dispose()
    log(f"replace_source, merge per 1,000 rows: {n / batched_s:,.0f} rows/s")
    with raw_connection(url) as conn:
        conn.execute(f'DROP SCHEMA "{batched_schema}" CASCADE')
    with raw_connection(url) as conn:
        analyzed = conn.execute(
            "SELECT last_autoanalyze FROM pg_stat_user_tables "
            "WHERE schemaname = %s AND relname = 'records'",
            (rp_schema,),
        ).fetchone()
        log(f"autovacuum analyzed {rp_schema}.records during the load: {analyzed}")
        conn.execute("CHECKPOINT")
        for schema in (rp_schema, copy_schema):
            for table in TABLES:
                conn.execute(f'VACUUM ANALYZE "{schema}".{table}')
            rows = conn.execute(f'SELECT count(*) FROM "{schema}".records').fetchone()
            assert rows is not None and rows[0] == n, (schema, rows)
    return store, {
        "rows": n,
        "sources": len(all_chunks),
        "indexes": n_indexes,
        "copy_s": copy_s,
        "rp_s": rp_s,
        "copy_rps": n / copy_s,
        "rp_rps": n / rp_s,
        "ratio": copy_s / rp_s,
        "batched_rps": n / batched_s,
        "batched_ratio": copy_s / batched_s,
    }


def statements_per_replace(
    store: PostgresStore, corpus: Corpus, embedder: PrecomputedEmbedder
) -> tuple[int, int]:
    """Statements and COPYs of one replace_source of an existing 100-chunk source."""
    counter = StatementCounter(store.engine)
    with counter.counting():
        replace_source(
            source_id=corpus.sources[0],
            chunks=corpus.chunks(0),
            embedder=embedder,
            store=store,
            scope=SCOPE,
            write_options=WriteOptions(batch_size=128),
        )
    return len(counter.statements), counter.copies


# -- 2. retrieve latency ------------------------------------------------------------------------
def bench_retrieve(
    url: str, store: PostgresStore, corpus: Corpus, embedder: PrecomputedEmbedder
) -> dict[str, Any]:
    rng = np.random.default_rng(SEED + 1)
    qvecs = corpus.queries(N_QUERIES, rng)
    queries = [f"query {i}" for i in range(N_QUERIES)]
    embedder.add(queries, qvecs)
    # Hybrid queries: a few words of a random chunk (so the FTS leg has real matches), mapped
    # to the same query vectors.
    picks = rng.integers(0, len(corpus.texts), N_QUERIES)
    hybrid_queries = [" ".join(corpus.texts[p].split()[:4]) + f" h{i}" for i, p in enumerate(picks)]
    embedder.add(hybrid_queries, qvecs)
    hybrid: list[float] = []
    bare_sql, raw_sql = bare_topk_sql(store.schema), equivalent_topk_sql(store.schema)
    scope_args = (SCOPE.tenant_id, SCOPE.resource_id, SCOPE.corpus_id)
    overlap: list[float] = []
    bare_recall, raw_recall = [], []
    with raw_connection(url) as conn, raw_connection(url) as eq:
        eq.execute("SET hnsw.ef_search = 200")
        eq.execute("SET hnsw.iterative_scan = strict_order")
        plan = conn.execute("EXPLAIN " + bare_sql, (*scope_args, qvecs[0])).fetchall()
        uses_hnsw = any(f"records_hnsw_{DIMS}" in row[0] for row in plan)
        for i in range(20):  # warm caches, pools and prepared statements on both sides
            retrieve_context(
                queries[i],
                embedder=embedder,
                store=store,
                scope=SCOPE,
                request=RetrievalRequest(top_k=TOP_K),
            )
            conn.execute(bare_sql, (*scope_args, qvecs[i])).fetchall()
            eq.execute(raw_sql, (qvecs[i], *scope_args, qvecs[i])).fetchall()
        # Each query runs every measured call once, in a fresh random order: whichever runs
        # first pays for the cold HNSW pages of that query vector, the others find them warm,
        # so a fixed order would favour whatever comes later.
        timings: dict[str, list[float]] = {name: [] for name in CALLS}
        for q, qv in zip(queries, qvecs, strict=True):
            answers: dict[str, Any] = {}
            calls = {
                "retrieve": lambda q=q: retrieve_context(
                    q,
                    embedder=embedder,
                    store=store,
                    scope=SCOPE,
                    request=RetrievalRequest(top_k=TOP_K, query_candidates=CANDIDATES),
                ),
                "bare": lambda qv=qv: conn.execute(bare_sql, (*scope_args, qv)).fetchall(),
                "raw": lambda qv=qv: eq.execute(raw_sql, (qv, *scope_args, qv)).fetchall(),
                "store": lambda qv=qv: store.query(SCOPE, qv, limit=CANDIDATES),
                "drift": lambda: store.foreign_embedders(SCOPE, embedder.id, embedder.dimensions),
            }
            for name in rng.permutation(CALLS):
                t0 = time.perf_counter()
                answers[name] = calls[name]()
                timings[name].append(time.perf_counter() - t0)
            truth = set(exact_top(corpus, qv, TOP_K))
            bare_recall.append(len(truth & {r[0] for r in answers["bare"]}) / TOP_K)
            raw_recall.append(len(truth & {r[0] for r in answers["raw"][:TOP_K]}) / TOP_K)
            hits = {h.id for h in answers["retrieve"].hits}
            overlap.append(len(hits & {r[0] for r in answers["raw"]}) / TOP_K)
        ours, bare, raw = timings["retrieve"], timings["bare"], timings["raw"]
        store_only, drift = timings["store"], timings["drift"]
        # Hybrid queries in a loop of their own: the lexical leg reads every row of the scope
        # and would cool the caches the vector calls above are compared in.
        for hq in hybrid_queries:
            t0 = time.perf_counter()
            retrieve_context(
                hq,
                embedder=embedder,
                store=store,
                scope=SCOPE,
                request=RetrievalRequest(top_k=TOP_K, query_candidates=CANDIDATES, lexical="bm25"),
            )
            hybrid.append(time.perf_counter() - t0)
    return {
        "queries": N_QUERIES,
        "uses_hnsw": uses_hnsw,
        "rp_p50": pct(ours, 50) * 1e3,
        "rp_p95": pct(ours, 95) * 1e3,
        "raw_p50": pct(raw, 50) * 1e3,
        "raw_p95": pct(raw, 95) * 1e3,
        "bare_p50": pct(bare, 50) * 1e3,
        "bare_p95": pct(bare, 95) * 1e3,
        "store_p50": pct(store_only, 50) * 1e3,
        "store_p95": pct(store_only, 95) * 1e3,
        "drift_p50": pct(drift, 50) * 1e3,
        "hybrid_p50": pct(hybrid, 50) * 1e3,
        "hybrid_p95": pct(hybrid, 95) * 1e3,
        "ratio_p50": pct(ours, 50) / pct(raw, 50),
        "ratio_p95": pct(ours, 95) / pct(raw, 95),
        "bare_ratio_p50": pct(ours, 50) / pct(bare, 50),
        "bare_recall": statistics.mean(bare_recall),
        "raw_recall": statistics.mean(raw_recall),
        "overlap": statistics.mean(overlap),
    }


def report_reads(
    url: str, store: PostgresStore, corpus: Corpus, embedder: PrecomputedEmbedder, rows: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Sections 2 and 3: retrieve latency against raw SQL, recall."""
    retrieve = bench_retrieve(url, store, corpus, embedder)
    print(
        f"retrieve over {rows:,} rows, {retrieve['queries']} queries: retrieve_context "
        f"(top_k={TOP_K}, candidates={CANDIDATES}) p50 {retrieve['rp_p50']:.2f} ms, p95 "
        f"{retrieve['rp_p95']:.2f} ms; raw equivalent SQL (ef_search 200, {CANDIDATES} rows "
        f"with columns) p50 {retrieve['raw_p50']:.2f} ms, p95 {retrieve['raw_p95']:.2f} ms, "
        f"recall@{TOP_K} {retrieve['raw_recall']:.3f}; ratio p50 {retrieve['ratio_p50']:.2f}x, "
        f"p95 {retrieve['ratio_p95']:.2f}x (target <= 1.1x); bare SQL top-{TOP_K} ids "
        f"(ef_search 40) p50 {retrieve['bare_p50']:.2f} ms, p95 {retrieve['bare_p95']:.2f} "
        f"ms, recall@{TOP_K} {retrieve['bare_recall']:.3f}, ratio p50 "
        f"{retrieve['bare_ratio_p50']:.2f}x; store.query alone p50 "
        f"{retrieve['store_p50']:.2f} ms, p95 {retrieve['store_p95']:.2f} ms; store.foreign_embedders "
        f"(separate drift-guard read, not issued by retrieve_context here) alone p50 "
        f"{retrieve['drift_p50']:.2f} ms; hybrid retrieve_context "
        f"(lexical='bm25') p50 {retrieve['hybrid_p50']:.2f} ms, p95 {retrieve['hybrid_p95']:.2f} ms; raw plan uses "
        f"HNSW: {retrieve['uses_hnsw']}; top-{TOP_K} overlap {retrieve['overlap']:.3f}",
        flush=True,
    )
    return retrieve, print_recall(url, store, corpus)


# -- main ---------------------------------------------------------------------------------------
def run(
    url: str, rows: int, *, isotropic: bool = False, writes_only: bool = False
) -> dict[str, Any]:
    note_postgres(url)
    tag = uuid.uuid4().hex[:8]
    rp_schema, copy_schema = f"bench_rp_{tag}", f"bench_copy_{tag}"
    t0 = time.perf_counter()
    corpus = Corpus(rows, isotropic=isotropic)
    embedder = PrecomputedEmbedder()
    embedder.add(corpus.texts, corpus.vectors)
    assert len(set(corpus.texts)) == rows
    same = corpus.cluster[:-1] == corpus.cluster[1:]
    pairs = np.einsum("ij,ij->i", corpus.vectors[:-1][same], corpus.vectors[1:][same])
    log(
        f"corpus: {rows:,} rows, {len(corpus.sources)} sources, mean text "
        f"{np.mean([len(t) for t in corpus.texts]):.0f} chars, intra-cluster cosine "
        f"mean {pairs.mean():.2f} (built in {time.perf_counter() - t0:.1f} s)"
    )
    store: PostgresStore | None = None
    try:
        store, ingest = bench_ingest(url, corpus, embedder, rp_schema, copy_schema)
        print(
            f"ingest {ingest['rows']:,} rows ({ingest['sources']} sources of {PER_SOURCE}; "
            f"HNSW + {ingest['indexes'] - 1} other indexes present before loading in both): "
            f"replace_source {ingest['rp_rps']:,.0f} rows/s ({ingest['rp_s']:.1f} s); raw "
            f"binary COPY {ingest['copy_rps']:,.0f} rows/s ({ingest['copy_s']:.1f} s); "
            f"ratio {100 * ingest['ratio']:.0f}% of COPY (target >= 90%); with the pending "
            f"lists merged per 1,000 rows {ingest['batched_rps']:,.0f} rows/s, "
            f"{100 * ingest['batched_ratio']:.0f}%",
            flush=True,
        )
        statements, copies = statements_per_replace(store, corpus, embedder)
        print(
            f"replace_source of one existing {PER_SOURCE}-chunk source: {statements} SQL "
            f"statements + {copies} COPY (+ COMMIT)",
            flush=True,
        )
        reads = None if writes_only else report_reads(url, store, corpus, embedder, rows)
        replace = bench_replace(store, corpus, embedder)
        print(
            f"replace_source of an existing {PER_SOURCE}-chunk source median "
            f"{replace['replace_ms']:.1f} ms vs a first write of {PER_SOURCE} chunks "
            f"{replace['first_ms']:.1f} ms: {replace['ratio']:.2f}x (target <= 1.3x)",
            flush=True,
        )
        delete = bench_delete(url, store, corpus, embedder)
        print(
            f"delete_source of a {DELETE_ROWS:,}-row source (one transaction) over "
            f"{rows:,} rows: median {delete['median_ms']:.1f} ms over {DELETE_RUNS} runs "
            f"(min {delete['min_ms']:.1f}, max {delete['max_ms']:.1f}); {delete['statements']} "
            f"SQL statements + {delete['copies']} COPY (+ COMMIT) every run: "
            f"{delete['counts_stable']}; raw DELETE of {DELETE_ROWS:,} rows median "
            f"{delete['raw_median_ms']:.1f} ms",
            flush=True,
        )
        for statement in delete["statement_list"]:
            log(f"delete_source statement: {statement}")
    finally:
        if store is not None:
            with contextlib.suppress(Exception):
                store.finish_maintenance()  # before the schemas (and the server) go
            store.engine.dispose()
        with contextlib.suppress(Exception), raw_connection(url) as conn:
            for schema in (rp_schema, copy_schema):
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    log(f"total {time.perf_counter() - t0:.0f} s")
    return {"rows": rows, "ingest": ingest, "reads": reads, "replace": replace, "delete": delete}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 rows (smoke test)")
    parser.add_argument("--rows", type=int, default=None, help="chunks to load (default 100,000)")
    parser.add_argument(
        "--isotropic",
        action="store_true",
        help="independent centroids and isotropic noise (the plain recipe; harder for HNSW)",
    )
    parser.add_argument(
        "--url", default=None, help="postgresql:// URL instead of an embedded server"
    )
    parser.add_argument(
        "--writes-only",
        action="store_true",
        help="ingest, replacement and deletion only (no retrieve or recall sections)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="40 queries, 2 delete and 3 replace runs instead of 200, 5 and 10 (make bench-quick)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        import pg_recall
        import pg_writes

        global N_QUERIES, DELETE_RUNS
        N_QUERIES = pg_recall.N_RECALL_QUERIES = 40
        pg_recall.N_EXACT = 5
        DELETE_RUNS = pg_writes.DELETE_RUNS = 2
        pg_writes.REPLACE_RUNS = 3
    rows = args.rows or (10_000 if args.quick else 100_000)
    if rows < DELETE_ROWS:
        parser.error(f"--rows must be at least {DELETE_ROWS}")
    if args.url:
        measured = run(args.url, rows, isotropic=args.isotropic, writes_only=args.writes_only)
    else:
        with tempfile.TemporaryDirectory(prefix="ragport-bench-pg-") as tmp:
            log("starting an embedded server")
            with embedded_server(Path(tmp) / "data", keep_running=False) as url:
                measured = run(url, rows, isotropic=args.isotropic, writes_only=args.writes_only)
    if not args.isotropic:  # the isotropic corpus is a sensitivity check, not the headline
        measured["writes_only"] = args.writes_only
        write_json(measured, args.quick or args.smoke or rows < 100_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
