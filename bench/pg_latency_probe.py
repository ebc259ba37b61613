"""Retrieve latency on a quiet, already-loaded PostgreSQL store (a probe, not the full bench).

``bench_postgres.py`` rebuilds 100k rows on every run (about 9 minutes). This probe loads the
same corpus once into an embedded server under ``--data`` (the data stays on disk between
invocations; the server is stopped at the end), then times over 200 queries:

- ``bare``: ``SELECT id ... ORDER BY embedding <=> q LIMIT 10`` at pgvector's default ef_search 40;
- ``eq``: the equivalent hand-written query: the same 20 rows and columns with distance, scope
  and live rows, ef_search 200, iterative scans on;
- ``query``: ``store.query(limit=20)``; ``drift``: ``store.foreign_embedders``;
- ``tomb``: ``store.list_invalidated_ids``;
- ``retrieve``: ``retrieve_context(top_k=10, query_candidates=20)``.

Each query runs the six calls in a fresh random order (the first pays for that query
vector's cold HNSW pages); the first of two passes only warms caches and prepared statements.

Run: .venv/bin/python bench/pg_latency_probe.py --data /tmp/ragport-probe [--rows 100000]
(the first run loads the rows: about 4 minutes for 100k).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).parent))
import bench_postgres as B

from ragport import RetrievalRequest
from ragport.adapters.postgres import PostgresStore, embedded_server
from ragport.application import replace_source, retrieve_context

SCHEMA = "probe"  # --schema overrides it


def load(url: str, rows: int, out: Path) -> None:
    corpus = B.Corpus(rows)
    emb = B.PrecomputedEmbedder()
    emb.add(corpus.texts, corpus.vectors)
    store = PostgresStore(url, schema=SCHEMA, create=True)
    store.prepare(B.SCOPE, dimensions=B.DIMS)
    for s in range(len(corpus.sources)):
        replace_source(
            source_id=corpus.sources[s],
            chunks=corpus.chunks(s),
            embedder=emb,
            store=store,
            scope=B.SCOPE,
            batch_size=128,
        )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.records")
        conn.execute("CHECKPOINT")
    np.save(out, corpus.queries(200, np.random.default_rng(B.SEED + 1)))
    store.engine.dispose()


def measure(url: str, qv: np.ndarray) -> None:
    store = PostgresStore(url, schema=SCHEMA)
    queries = [f"q{i}" for i in range(len(qv))]
    emb = B.PrecomputedEmbedder()
    emb.add(queries, qv)
    bare = psycopg.connect(url, autocommit=True)
    eq = psycopg.connect(url, autocommit=True)
    for conn in (bare, eq):
        register_vector(conn)
    eq.execute("SET hnsw.ef_search = 200")
    eq.execute("SET hnsw.iterative_scan = strict_order")
    scope = (B.SCOPE.tenant_id, B.SCOPE.resource_id, B.SCOPE.corpus_id)
    bare_sql, eq_sql = B.bare_topk_sql(SCHEMA), B.equivalent_topk_sql(SCHEMA)
    times: dict[str, list[float]] = {
        k: [] for k in ("bare", "eq", "query", "drift", "tomb", "retrieve")
    }
    rng = np.random.default_rng(7)
    for rep in range(2):  # the first pass warms caches and prepared statements
        for q, v in zip(queries, qv, strict=True):
            calls = {
                "bare": lambda v=v: bare.execute(bare_sql, (*scope, v)).fetchall(),
                "eq": lambda v=v: eq.execute(eq_sql, (v, *scope, v)).fetchall(),
                "query": lambda v=v: store.query(B.SCOPE, v, limit=20),
                "drift": lambda: store.foreign_embedders(B.SCOPE, emb.id, emb.dimensions),
                "tomb": lambda: store.list_invalidated_ids(B.SCOPE),
                "retrieve": lambda q=q: retrieve_context(
                    q,
                    embedder=emb,
                    store=store,
                    scope=B.SCOPE,
                    request=RetrievalRequest(top_k=10, query_candidates=20),
                ),
            }
            # A fresh random order per query: the first call pays for cold HNSW pages.
            for name in rng.permutation(list(calls)):
                t0 = time.perf_counter()
                calls[name]()
                if rep:
                    times[name].append((time.perf_counter() - t0) * 1e3)
    p50 = {k: float(np.percentile(v, 50)) for k, v in times.items()}
    p95 = {k: float(np.percentile(v, 95)) for k, v in times.items()}
    for k in times:
        print(f"{k:9s} p50 {p50[k]:.3f} ms  p95 {p95[k]:.3f} ms")
    print(
        f"retrieve / equivalent raw: p50 {p50['retrieve'] / p50['eq']:.2f}x, p95 "
        f"{p95['retrieve'] / p95['eq']:.2f}x; retrieve / bare: p50 {p50['retrieve'] / p50['bare']:.2f}x"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--schema", default=SCHEMA)
    args = parser.parse_args()
    globals()["SCHEMA"] = args.schema
    args.data.mkdir(parents=True, exist_ok=True)
    queries = args.data / f"queries-{args.rows}.npy"
    with embedded_server(args.data / "data", keep_running=False) as url:
        if not queries.exists():
            load(url, args.rows, queries)
        measure(url, np.load(queries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
