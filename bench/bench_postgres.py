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
   embedder keeps embedding out) into one fresh schema, against one raw binary
   ``COPY ... FROM STDIN (FORMAT BINARY)`` of the same rows and columns, in one transaction,
   into a second fresh schema. Both schemas come from ``PostgresStore(create=True)`` and get
   the adapter's HNSW index (``records_hnsw_384``) *before* loading, so both pay incremental
   HNSW inserts, the GIN/btree indexes and the generated tsvector.
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
   vector's cold HNSW pages); hybrid ``retrieve_context(lexical="fts")`` runs in a loop of
   its own afterwards.
3. Recall@10 of ``store.query`` against exact answers computed with numpy, for three
   predicates: ACL (grants to 10% of sources) + metadata filter (5% of chunks), ACL only, and
   none. The store's own statement (captured where the store runs its reads on psycopg) is
   re-run on a connection without prepared statements: as planned, with the HNSW scan forced
   and iterative scans on/off, ``ef_search`` 200/400/800, ``relaxed_order`` at 800, and exact
   (no index scans) to cross-check the numpy answers in SQL.
4. ``delete_source`` of a 1,000-row source in one transaction: statements counted with a
   ``before_cursor_execute`` listener on the store's engine (COPY counted by wrapping psycopg's
   ``Cursor.copy``), median time over 5 runs; a raw ``DELETE`` of another 1,000-row source for
   scale.

Run: .venv/bin/python bench/bench_postgres.py [--quick] [--rows N] [--url URL] [--isotropic]
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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg.types.json import Jsonb
from sqlalchemy import event

from ragport import Chunk, Scope, delete_source, replace_source, retrieve_context
from ragport.adapters.postgres import PostgresStore, embedded_server
from ragport.adapters.postgres import reads as pg_reads
from ragport.adapters.postgres.indexes import HNSW_EF_CONSTRUCTION, HNSW_M
from ragport.domain.model import Authorization, Grant, chunk_id

DIMS = 384
PER_SOURCE = 100
N_CENTROIDS = 500
TOPICS_PER_SOURCE = 3
NOISE_RANK = 16
N_SUPER_TOPICS = 25
SUBSPACE_SHARE = 0.8
N_TAGS = 20
FILTER_TAG = "t07"
GRANTED_FRACTION = 0.10
N_QUERIES = 200
# Raw re-runs of the store's own statement: as planned with the store's settings; with the
# HNSW ordered scan forced (enable_sort = off) and iterative scans on, off, or a larger
# ef_search; and exact (no index scans: sequential scan and sort) as an SQL cross-check of
# the numpy truth.
RAW_MODES = {
    "planned": ("hnsw.iterative_scan = strict_order", "hnsw.ef_search = 40"),
    "hnsw": ("hnsw.iterative_scan = strict_order", "hnsw.ef_search = 40", "enable_sort = off"),
    "hnsw_off": ("hnsw.iterative_scan = off", "hnsw.ef_search = 40", "enable_sort = off"),
    "hnsw_ef200": (
        "hnsw.iterative_scan = strict_order",
        "hnsw.ef_search = 200",
        "enable_sort = off",
    ),
    "hnsw_ef400": (
        "hnsw.iterative_scan = strict_order",
        "hnsw.ef_search = 400",
        "enable_sort = off",
    ),
    "hnsw_ef800": (
        "hnsw.iterative_scan = strict_order",
        "hnsw.ef_search = 800",
        "enable_sort = off",
    ),
    "relaxed_ef800": (
        "hnsw.iterative_scan = relaxed_order",
        "hnsw.ef_search = 800",
        "enable_sort = off",
    ),
    "exact": ("enable_indexscan = off",),
}
N_RECALL_QUERIES = 200
TOP_K = 10
CANDIDATES = 20
CALLS = ("retrieve", "bare", "raw", "store", "drift")
DELETE_ROWS = 1_000
DELETE_RUNS = 5
SEED = 20241203
EMBEDDER_ID = "bench-precomputed:384"
SCOPE = Scope("bench", "pg", "corpus")
COPY_COLUMNS = (
    "tenant_id, resource_id, corpus_id, id, generation, source_id, kind, text, metadata, "
    "embedding, embedder_id, dimensions, retired_generation, content_hash, lineage, roots, "
    "chunk_index, start_offset, end_offset"
)
COPY_TYPES = [
    "text", "text", "text", "text", "int8", "text", "text", "text", "jsonb", "vector", "text",
    "int4", "int8", "text", "text[]", "text[]", "int4", "int4", "int4",
]  # fmt: skip


def log(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


# -- data ---------------------------------------------------------------------------------------
def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


class Corpus:
    """Clustered vectors, texts, sources and tags for ``n`` chunks (seeded)."""

    def __init__(self, n: int, *, isotropic: bool = False, seed: int = SEED):
        rng = np.random.default_rng(seed)
        self.isotropic = isotropic
        own = _unit(rng.standard_normal((N_CENTROIDS, DIMS)))
        if isotropic:
            self.centroids = own
        else:
            # Real embedding spaces are anisotropic and topics nest: centroids share a common
            # direction (unrelated topics at cosine ~0.15) and one of 25 super-topics (~0.45).
            common = _unit(rng.standard_normal((1, DIMS)))
            supers = _unit(rng.standard_normal((N_SUPER_TOPICS, DIMS)))
            group = rng.integers(0, N_SUPER_TOPICS, N_CENTROIDS)
            self.centroids = _unit(
                np.sqrt(0.15) * common + np.sqrt(0.30) * supers[group] + np.sqrt(0.55) * own
            )
        # Two members of a cluster have cosine ~ 1 / (1 + d sigma^2): 0.6-0.8 across clusters.
        target = rng.uniform(0.6, 0.8, N_CENTROIDS)
        self.sigma = np.sqrt((1.0 / target - 1.0) / DIMS)
        # Real embeddings vary along few directions around a topic: by default most of the
        # noise lies in a per-cluster subspace of NOISE_RANK directions with a decaying
        # spectrum. Isotropic noise makes every cluster a small uniform-random cloud, locally
        # HNSW's worst case again.
        weights = 1.0 / np.sqrt(np.arange(1, NOISE_RANK + 1))
        self.spectrum = weights / np.linalg.norm(weights)
        self.basis = _unit(rng.standard_normal((N_CENTROIDS * NOISE_RANK, DIMS))).reshape(
            N_CENTROIDS, NOISE_RANK, DIMS
        )
        self.popularity = rng.dirichlet(np.full(N_CENTROIDS, 0.5))
        n_sources = -(-n // PER_SOURCE)
        self.sources = [f"src-{s:05d}" for s in range(n_sources)]
        self.source_of = np.arange(n) // PER_SOURCE
        topics = rng.choice(N_CENTROIDS, size=(n_sources, TOPICS_PER_SOURCE), p=self.popularity)
        self.cluster = topics[self.source_of, rng.integers(0, TOPICS_PER_SOURCE, n)]
        self.vectors = self.sample(self.cluster, rng)
        self.tags = rng.integers(0, N_TAGS, n)
        self.texts = random_texts(rng, n)
        self.chunk_index = np.arange(n) % PER_SOURCE

    def sample(self, clusters: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        sigma = self.sigma[clusters, None]
        if self.isotropic:
            return _unit(
                self.centroids[clusters] + rng.standard_normal((len(clusters), DIMS)) * sigma
            )
        out = self.centroids[clusters] + rng.standard_normal((len(clusters), DIMS)) * (
            sigma * np.sqrt(1.0 - SUBSPACE_SHARE)
        )
        z = rng.standard_normal((len(clusters), NOISE_RANK)) * self.spectrum
        z *= sigma * np.sqrt(SUBSPACE_SHARE * DIMS)
        order = np.argsort(clusters, kind="stable")
        bounds = np.flatnonzero(np.diff(clusters[order])) + 1
        for group in np.split(order, bounds):
            out[group] += z[group] @ self.basis[clusters[group[0]]]
        return _unit(out)

    def queries(self, count: int, rng: np.random.Generator) -> np.ndarray:
        return self.sample(rng.choice(N_CENTROIDS, size=count, p=self.popularity), rng)

    def chunk_id(self, i: int) -> str:
        return chunk_id(self.sources[self.source_of[i]], int(self.chunk_index[i]))

    def chunks(self, s: int) -> list[Chunk]:
        rows = range(s * PER_SOURCE, min((s + 1) * PER_SOURCE, len(self.texts)))
        return [
            Chunk.of(
                self.sources[s],
                int(self.chunk_index[i]),
                self.texts[i],
                metadata={"tag": f"t{self.tags[i]:02d}"},
            )
            for i in rows
        ]


def random_texts(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct texts of 300-600 characters drawn from a Zipf vocabulary of 5,000 words."""
    vocab_size = 5_000
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(3, 11, vocab_size)
    vocab = ["".join(rng.choice(letters, size=int(k))) for k in lengths]
    weights = 1.0 / np.arange(1, vocab_size + 1)
    p = weights / weights.sum()
    words = rng.choice(vocab_size, size=n * 90, p=p).tolist()
    targets = rng.integers(300, 601, n).tolist()
    texts: list[str] = []
    cursor = 0
    for i in range(n):
        parts: list[str] = []
        size = 0
        while size < targets[i]:
            word = vocab[words[cursor % len(words)]]
            cursor += 1
            parts.append(word)
            size += len(word) + 1
        texts.append(f"Note {i}: " + " ".join(parts)[: targets[i]].rstrip() + ".")
    return texts


class PrecomputedEmbedder:
    """Maps each known text to its precomputed vector: embedding cost stays out of the timings."""

    id = EMBEDDER_ID
    dimensions = DIMS

    def __init__(self) -> None:
        self._vectors: dict[str, np.ndarray] = {}

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        for t, v in zip(texts, vectors, strict=True):
            self._vectors[t] = v

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, DIMS), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])


# -- helpers ------------------------------------------------------------------------------------
def raw_connection(url: str, *, prepare: bool = True) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True)
    if not prepare:
        conn.prepare_threshold = None
    register_vector(conn)
    return conn


_SCOPE_SQL = "tenant_id = %s AND resource_id = %s AND corpus_id = %s AND dimensions = 384"
_COLUMNS = (
    "id, source_id, kind, text, metadata, embedder_id, dimensions, generation, "
    "retired_generation, content_hash, lineage, roots, chunk_index, start_offset, end_offset"
)


def bare_topk_sql(schema: str) -> str:
    """The cheapest raw top-10: ids only (params: tenant, resource, corpus, vector)."""
    return (
        f'SELECT id FROM "{schema}".records WHERE {_SCOPE_SQL} '
        f"ORDER BY embedding::vector({DIMS}) <=> %s LIMIT {TOP_K}"
    )


def equivalent_topk_sql(schema: str) -> str:
    """The raw query for retrieve's answer: the candidate rows with the store's columns and
    distance, live rows of the scope (params: vector, tenant, resource, corpus, vector)."""
    return (
        f"SELECT {_COLUMNS}, embedding::vector({DIMS}) <=> %s AS distance "
        f'FROM "{schema}".records WHERE {_SCOPE_SQL} AND retired_generation IS NULL '
        f"ORDER BY embedding::vector({DIMS}) <=> %s LIMIT {CANDIDATES}"
    )


def hnsw_ddl(schema: str) -> str:
    """The adapter's own partial HNSW index (ragport.adapters.postgres.indexes.VectorIndexes)."""
    return (
        f'CREATE INDEX IF NOT EXISTS records_hnsw_{DIMS} ON "{schema}".records '
        f"USING hnsw ((embedding::vector({DIMS})) vector_cosine_ops) "
        f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) WHERE dimensions = {DIMS}"
    )


def index_definitions(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    rows = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'records' "
        "ORDER BY indexname",
        (schema,),
    ).fetchall()
    return [r[0].replace(f"{schema}.", "S.").replace(f'"{schema}".', "S.") for r in rows]


class StatementCounter:
    """Counts SQL statements on a SQLAlchemy engine and COPY calls on psycopg cursors."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.statements: list[str] = []
        self.copies = 0

    def _on_execute(self, conn, cursor, statement, parameters, context, executemany) -> None:
        self.statements.append(" ".join(statement.split())[:80])

    @contextlib.contextmanager
    def counting(self) -> Iterator[StatementCounter]:
        original = psycopg.Cursor.copy

        def copy(cursor: Any, *args: Any, **kwargs: Any) -> Any:
            self.copies += 1
            return original(cursor, *args, **kwargs)

        fetch = pg_reads.fetch

        def counted_fetch(conn: Any, sql: str, params: Any, **kwargs: Any) -> Any:
            self.statements.append(" ".join(sql.split())[:80])  # reads straight on psycopg
            return fetch(conn, sql, params, **kwargs)

        self.statements, self.copies = [], 0
        event.listen(self.engine, "before_cursor_execute", self._on_execute)
        psycopg.Cursor.copy = copy  # type: ignore[method-assign]
        pg_reads.fetch = counted_fetch
        try:
            yield self
        finally:
            pg_reads.fetch = fetch
            psycopg.Cursor.copy = original  # type: ignore[method-assign]
            event.remove(self.engine, "before_cursor_execute", self._on_execute)


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


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

    # Raw binary COPY first (one statement, one transaction), then a checkpoint.
    log(f"COPY of {n:,} rows into {copy_schema}")
    t, r, c = SCOPE.tenant_id, SCOPE.resource_id, SCOPE.corpus_id
    with raw_connection(url) as conn:
        conn.autocommit = False
        start = time.perf_counter()
        with (
            conn.cursor() as cur,
            cur.copy(
                f'COPY "{copy_schema}".records ({COPY_COLUMNS}) FROM STDIN WITH (FORMAT BINARY)'
            ) as copy,
        ):
            copy.set_types(COPY_TYPES)
            for s, chunks in enumerate(all_chunks):
                for chunk in chunks:
                    i = s * PER_SOURCE + chunk.index
                    copy.write_row(
                        (
                            t, r, c, chunk.id, s + 1, chunk.source_id, "chunk", chunk.text,
                            Jsonb(chunk.metadata), corpus.vectors[i], EMBEDDER_ID, DIMS, None,
                            None, [], [], chunk.index, chunk.start, chunk.end,
                        )
                    )  # fmt: skip
        conn.commit()
        copy_s = time.perf_counter() - start
        conn.autocommit = True
        # Keep autovacuum of the COPY schema out of the replace_source timing.
        conn.execute(f'VACUUM ANALYZE "{copy_schema}".records')
        conn.execute("CHECKPOINT")
    log(f"COPY {n / copy_s:,.0f} rows/s; replace_source of {len(all_chunks)} sources")

    start = time.perf_counter()
    for s, chunks in enumerate(all_chunks):
        replace_source(
            source_id=corpus.sources[s],
            chunks=chunks,
            embedder=embedder,
            store=store,
            scope=SCOPE,
            batch_size=128,
        )
        if (s + 1) % max(1, len(all_chunks) // 10) == 0:
            elapsed = time.perf_counter() - start
            log(f"{(s + 1) * PER_SOURCE:,} rows, {(s + 1) * PER_SOURCE / elapsed:,.0f} rows/s")
    rp_s = time.perf_counter() - start
    with raw_connection(url) as conn:
        analyzed = conn.execute(
            "SELECT last_autoanalyze FROM pg_stat_user_tables "
            "WHERE schemaname = %s AND relname = 'records'",
            (rp_schema,),
        ).fetchone()
        log(f"autovacuum analyzed {rp_schema}.records during the load: {analyzed}")
        conn.execute("CHECKPOINT")
        for schema in (rp_schema, copy_schema):
            conn.execute(f'VACUUM ANALYZE "{schema}".records')
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
            batch_size=128,
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
            retrieve_context(queries[i], embedder=embedder, store=store, scope=SCOPE, top_k=TOP_K)
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
                    top_k=TOP_K,
                    query_candidates=CANDIDATES,
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
                top_k=TOP_K,
                query_candidates=CANDIDATES,
                lexical="fts",
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


def exact_top(corpus: Corpus, query: np.ndarray, k: int) -> list[str]:
    """Ids of the exact top-k by cosine (all rows are live and in scope here)."""
    scores = corpus.vectors @ query
    top = np.argpartition(-scores, k)[:k]
    return [corpus.chunk_id(int(i)) for i in top]


# -- 3. recall with ACL and filter --------------------------------------------------------------
def bench_recall(url: str, store: PostgresStore, corpus: Corpus) -> list[dict[str, Any]]:
    rng = np.random.default_rng(SEED + 2)
    n_sources = len(corpus.sources)
    granted = np.zeros(n_sources, dtype=bool)
    granted[
        rng.choice(n_sources, size=max(1, round(n_sources * GRANTED_FRACTION)), replace=False)
    ] = True
    store.set_source_access(
        SCOPE,
        [
            Grant(src, principal_ids=("alice",) if granted[s] else ("bob",))
            for s, src in enumerate(corpus.sources)
        ],
    )
    with raw_connection(url) as conn:
        conn.execute(f'ANALYZE "{store.schema}".grants')
    auth = Authorization("alice", tenant_id=SCOPE.tenant_id)
    acl = granted[corpus.source_of]
    cases = [
        ("ACL + filter", auth, {"tag": FILTER_TAG}, acl & (corpus.tags == int(FILTER_TAG[1:]))),
        ("ACL only", auth, None, acl),
        ("no predicate", None, None, np.ones(len(acl), dtype=bool)),
    ]
    ids = [corpus.chunk_id(i) for i in range(len(corpus.texts))]
    qvecs = corpus.queries(N_RECALL_QUERIES, rng)
    captured: list[tuple[str, Any]] = []

    results = []
    fetch = pg_reads.fetch

    def capture(conn: Any, sql: str, params: Any, **kwargs: Any) -> Any:
        # Reads run straight on psycopg (ragport.adapters.postgres.reads.fetch), not through SQLAlchemy.
        if "ORDER BY" in sql and "<=>" in sql:
            captured.append((pg_reads.pyformat(sql), dict(params)))
        return fetch(conn, sql, params, **kwargs)

    pg_reads.fetch = capture
    try:
        # A connection without prepared statements: every run is planned afresh.
        with raw_connection(url, prepare=False) as conn:
            for name, authorization, metadata_filter, mask in cases:
                rows = np.flatnonzero(mask)
                matrix = corpus.vectors[rows]
                recall: dict[str, list[float]] = {m: [] for m in ("store", *RAW_MODES)}
                counts: dict[str, list[int]] = {m: [] for m in recall}
                seconds: dict[str, list[float]] = {m: [] for m in RAW_MODES}
                same = 0
                for q in qvecs:
                    captured.clear()
                    found = store.query(
                        SCOPE,
                        q,
                        limit=TOP_K,
                        authorization=authorization,
                        metadata_filter=metadata_filter,
                    )
                    statement, params = captured[-1]
                    top = np.argsort(-(matrix @ q), kind="stable")[:TOP_K]
                    truth = {ids[rows[j]] for j in top}
                    answers = {"store": {s.record.id for s in found}}
                    for mode, settings in RAW_MODES.items():
                        with conn.transaction():
                            for setting in settings:
                                conn.execute(f"SET LOCAL {setting}")
                            t0 = time.perf_counter()
                            answers[mode] = {row[0] for row in conn.execute(statement, params)}
                            seconds[mode].append(time.perf_counter() - t0)
                    same += answers["planned"] == answers["store"]
                    for mode, answer in answers.items():
                        recall[mode].append(len(answer & truth) / TOP_K)
                        counts[mode].append(len(answer))
                plans = {}
                for mode in ("planned", "hnsw", "exact"):
                    with conn.transaction():
                        for setting in RAW_MODES[mode]:
                            conn.execute(f"SET LOCAL {setting}")
                        plan = " ".join(r[0] for r in conn.execute("EXPLAIN " + statement, params))
                        plans[mode] = f"records_hnsw_{DIMS}" in plan
                results.append(
                    {
                        "case": name,
                        "qualifying": len(rows),
                        "qualifying_pct": 100.0 * mask.mean(),
                        "planned_hnsw": plans["planned"],
                        "forced_hnsw": plans["hnsw"],
                        "exact_hnsw": plans["exact"],
                        "recall": {m: statistics.mean(v) for m, v in recall.items()},
                        "min_recall": {m: min(v) for m, v in recall.items()},
                        "count": {m: statistics.mean(v) for m, v in counts.items()},
                        "empty": {m: sum(1 for c in v if c == 0) for m, v in counts.items()},
                        "poor": {m: sum(1 for x in v if x < 0.5) for m, v in recall.items()},
                        "ms": {m: statistics.median(v) * 1e3 for m, v in seconds.items()},
                        "same_as_store": same,
                    }
                )
    finally:
        pg_reads.fetch = fetch
    return results


# -- 4. deletion --------------------------------------------------------------------------------
def bench_delete(
    url: str, store: PostgresStore, corpus: Corpus, embedder: PrecomputedEmbedder
) -> dict[str, Any]:
    rng = np.random.default_rng(SEED + 3)

    def big_source(name: str) -> list[Chunk]:
        clusters = rng.choice(N_CENTROIDS, size=DELETE_ROWS, p=corpus.popularity)
        vectors = corpus.sample(clusters, rng)
        texts = [f"{name} {t}" for t in random_texts(rng, DELETE_ROWS)]
        embedder.add(texts, vectors)
        return [Chunk.of(name, i, t, metadata={"tag": "t00"}) for i, t in enumerate(texts)]

    counter = StatementCounter(store.engine)
    times, raw_times, counts = [], [], []
    for run in range(DELETE_RUNS):
        name = f"del-{run}"
        replace_source(
            source_id=name, chunks=big_source(name), embedder=embedder, store=store, scope=SCOPE
        )
        with counter.counting():
            t0 = time.perf_counter()
            result = delete_source(source_id=name, store=store, scope=SCOPE)
            times.append(time.perf_counter() - t0)
        assert result.deleted == DELETE_ROWS, result
        counts.append((len(counter.statements), counter.copies))
    statements = list(counter.statements)
    with raw_connection(url) as conn:
        for run in range(DELETE_RUNS):
            name = f"rawdel-{run}"
            replace_source(
                source_id=name, chunks=big_source(name), embedder=embedder, store=store, scope=SCOPE
            )
            with conn.transaction():
                t0 = time.perf_counter()
                cur = conn.execute(
                    f'DELETE FROM "{store.schema}".records WHERE tenant_id = %s '
                    "AND resource_id = %s AND corpus_id = %s AND source_id = %s",
                    (SCOPE.tenant_id, SCOPE.resource_id, SCOPE.corpus_id, name),
                )
            raw_times.append(time.perf_counter() - t0)
            assert cur.rowcount == DELETE_ROWS
    return {
        "median_ms": statistics.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "max_ms": max(times) * 1e3,
        "statements": counts[0][0],
        "copies": counts[0][1],
        "counts_stable": len(set(counts)) == 1,
        "statement_list": statements,
        "raw_median_ms": statistics.median(raw_times) * 1e3,
    }


# -- main ---------------------------------------------------------------------------------------
def run(url: str, rows: int, *, isotropic: bool = False) -> None:
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
            f"ratio {100 * ingest['ratio']:.0f}% of COPY (target >= 70%)",
            flush=True,
        )
        statements, copies = statements_per_replace(store, corpus, embedder)
        print(
            f"replace_source of one existing {PER_SOURCE}-chunk source: {statements} SQL "
            f"statements + {copies} COPY (+ COMMIT)",
            flush=True,
        )
        retrieve = bench_retrieve(url, store, corpus, embedder)
        print(
            f"retrieve over {rows:,} rows, {retrieve['queries']} queries: retrieve_context "
            f"(top_k={TOP_K}, candidates={CANDIDATES}) p50 {retrieve['rp_p50']:.2f} ms, p95 "
            f"{retrieve['rp_p95']:.2f} ms; raw equivalent SQL (ef_search 200, {CANDIDATES} rows "
            f"with columns) p50 {retrieve['raw_p50']:.2f} ms, p95 {retrieve['raw_p95']:.2f} ms, "
            f"recall@{TOP_K} {retrieve['raw_recall']:.3f}; ratio p50 {retrieve['ratio_p50']:.2f}x, "
            f"p95 {retrieve['ratio_p95']:.2f}x (target <= 1.5x); bare SQL top-{TOP_K} ids "
            f"(ef_search 40) p50 {retrieve['bare_p50']:.2f} ms, p95 {retrieve['bare_p95']:.2f} "
            f"ms, recall@{TOP_K} {retrieve['bare_recall']:.3f}, ratio p50 "
            f"{retrieve['bare_ratio_p50']:.2f}x; store.query alone p50 "
            f"{retrieve['store_p50']:.2f} ms, p95 {retrieve['store_p95']:.2f} ms; store.foreign_embedders "
            f"(separate drift-guard read, not issued by retrieve_context here) alone p50 "
            f"{retrieve['drift_p50']:.2f} ms; hybrid retrieve_context "
            f"(lexical='fts') p50 {retrieve['hybrid_p50']:.2f} ms, p95 {retrieve['hybrid_p95']:.2f} ms; raw plan uses "
            f"HNSW: {retrieve['uses_hnsw']}; top-{TOP_K} overlap {retrieve['overlap']:.3f}",
            flush=True,
        )
        granted = max(1, round(len(corpus.sources) * GRANTED_FRACTION))
        for case in bench_recall(url, store, corpus):
            r, n, e, ms, poor = (
                case["recall"],
                case["count"],
                case["empty"],
                case["ms"],
                case["poor"],
            )
            print(
                f"recall@{TOP_K}, {case['case']} ({case['qualifying']:,} rows qualify, "
                f"{case['qualifying_pct']:.2f}%; ACL = grants to {granted} of "
                f"{len(corpus.sources)} sources, filter = tag {FILTER_TAG}), {N_RECALL_QUERIES} "
                f"queries: store.query (planner picks HNSW: {case['planned_hnsw']}) mean recall "
                f"{r['store']:.3f} ({poor['store']} queries < 0.5), {n['store']:.2f} results, "
                f"{ms['planned']:.2f} ms; HNSW forced (plan uses HNSW: {case['forced_hnsw']}), "
                f"ef_search 40, iterative on: recall {r['hnsw']:.3f} ({poor['hnsw']} < 0.5), "
                f"{n['hnsw']:.2f} results, {ms['hnsw']:.2f} ms; iterative off: recall "
                f"{r['hnsw_off']:.3f}, {n['hnsw_off']:.2f} results ({e['hnsw_off']} empty), "
                f"{ms['hnsw_off']:.2f} ms; iterative on, ef_search 200: recall "
                f"{r['hnsw_ef200']:.3f} ({poor['hnsw_ef200']} < 0.5), {ms['hnsw_ef200']:.2f} ms; "
                f"ef_search 400: recall {r['hnsw_ef400']:.3f} ({poor['hnsw_ef400']} < 0.5), "
                f"{ms['hnsw_ef400']:.2f} ms; ef_search 800: recall {r['hnsw_ef800']:.3f}, "
                f"{ms['hnsw_ef800']:.2f} ms; relaxed_order at ef_search 800: recall "
                f"{r['relaxed_ef800']:.3f} ({poor['relaxed_ef800']} < 0.5), "
                f"{ms['relaxed_ef800']:.2f} ms; exact SQL (no index scan, plan uses HNSW: "
                f"{case['exact_hnsw']}): recall {r['exact']:.3f}, {ms['exact']:.2f} ms; store SQL "
                f"re-run equals store.query in {case['same_as_store']}/{N_RECALL_QUERIES}",
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
            store.engine.dispose()
        with contextlib.suppress(Exception), raw_connection(url) as conn:
            for schema in (rp_schema, copy_schema):
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    log(f"total {time.perf_counter() - t0:.0f} s")


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
    args = parser.parse_args(argv)
    rows = args.rows or (10_000 if args.quick else 100_000)
    if rows < DELETE_ROWS:
        parser.error(f"--rows must be at least {DELETE_ROWS}")
    if args.url:
        run(args.url, rows, isotropic=args.isotropic)
        return 0
    with tempfile.TemporaryDirectory(prefix="ragport-bench-pg-") as tmp:
        log("starting an embedded server")
        with embedded_server(Path(tmp) / "data", keep_running=False) as url:
            run(url, rows, isotropic=args.isotropic)
    return 0


if __name__ == "__main__":
    sys.exit(main())
