"""Recall@10 of PostgresStore.query against exact search, over independent HNSW builds.

Loads ``bench_postgres.Corpus(N)`` (default 100,000 rows, the same vectors, sources and tags
as ``bench_postgres.py``) into a fresh schema with one binary COPY, without the HNSW index;
grants 10% of the sources to ``alice`` as ``bench_postgres.bench_recall`` does. Then, per
build: drops and re-creates the store's own HNSW index (``VectorIndexes.create``, the
adapter's DDL and build parameters; pgvector draws each build's levels at random, so every
build is a different graph), times the build, and measures ``store.query(limit=10)`` for 200
queries per predicate (ACL + 0.5% filter, ACL only, none): mean recall@10 against numpy's
exact top-10 over the qualifying rows, the worst query, p50 latency of the call, and whether
the planner used the HNSW index for the store's statement.

Run: .venv/bin/python bench/bench_pg_recall.py [--rows N] [--builds 2] [--data DIR]
(``--data DIR``: an embedded server kept running in DIR and reused; default: a temporary
one, stopped at the end). Compare figures measured in one run: the machine is shared.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bench_postgres as bp
import numpy as np
from _results import figure, note_postgres, target, write_result
from psycopg.types.json import Jsonb

from ragport.adapters.postgres import PostgresStore, embedded_server
from ragport.adapters.postgres import reads as pg_reads
from ragport.domain.model import Authorization, Grant

SCOPE = bp.SCOPE


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load(url: str, schema: str, corpus: bp.Corpus) -> PostgresStore:
    """The corpus in ``schema`` by one COPY (generation 1, pointer 1), grants, ANALYZE."""
    store = PostgresStore(url, schema=schema, create=True)
    t, r, c = SCOPE.tenant_id, SCOPE.resource_id, SCOPE.corpus_id
    n = len(corpus.texts)
    with bp.raw_connection(url) as conn:
        conn.autocommit = False
        with conn.cursor() as cur:
            # The rows into records, their vectors into record_vectors (migration 4).
            keys = [
                k
                for (k,) in cur.execute(
                    f"SELECT nextval('\"{schema}\".record_keys') FROM generate_series(1, %s)",
                    (n,),
                ).fetchall()
            ]
            sql = f'COPY "{schema}".records ({bp.COPY_COLUMNS}) FROM STDIN WITH (FORMAT BINARY)'
            with cur.copy(sql) as copy:
                copy.set_types(bp.COPY_TYPES)
                for s in range(len(corpus.sources)):
                    for chunk in corpus.chunks(s):
                        i = s * bp.PER_SOURCE + chunk.index
                        copy.write_row(
                            (
                                t, r, c, chunk.id, 1, chunk.source_id, "chunk", chunk.text,
                                Jsonb(chunk.metadata), keys[i], bp.EMBEDDER_ID, bp.DIMS,
                                None, None, [], [], chunk.index, chunk.start, chunk.end,
                            )
                        )  # fmt: skip
            sql = f'COPY "{schema}".record_vectors ({bp.VECTOR_COLUMNS}) FROM STDIN (FORMAT BINARY)'
            with cur.copy(sql) as copy:
                copy.set_types(bp.VECTOR_TYPES)
                for i in range(n):
                    copy.write_row((t, r, c, keys[i], bp.DIMS, corpus.vectors[i]))
        conn.execute(
            f'INSERT INTO "{schema}".scopes (tenant_id, resource_id, corpus_id, counter, '
            "pointer) VALUES (%s, %s, %s, 1, 1)",
            (t, r, c),
        )
        conn.commit()
    return store


def granted_sources(corpus: bp.Corpus) -> np.ndarray:
    """The same 10% of sources ``bench_postgres.bench_recall`` grants to alice."""
    rng = np.random.default_rng(bp.SEED + 2)
    n = len(corpus.sources)
    granted = np.zeros(n, dtype=bool)
    granted[rng.choice(n, size=max(1, round(n * bp.GRANTED_FRACTION)), replace=False)] = True
    return granted


def grant(store: PostgresStore, corpus: bp.Corpus, granted: np.ndarray) -> None:
    store.set_source_access(
        SCOPE,
        [
            Grant(src, principal_ids=("alice",) if granted[s] else ("bob",))
            for s, src in enumerate(corpus.sources)
        ],
    )


def build_index(url: str, store: PostgresStore) -> float:
    """Drop and re-create the store's HNSW index; seconds the build took."""
    name = f"records_hnsw_{bp.DIMS}"
    with bp.raw_connection(url) as conn:
        conn.execute(f'DROP INDEX IF EXISTS "{store.schema}".{name}')
    indexes = store._indexes  # the adapter's own DDL and parameters
    indexes._dimensions.discard(bp.DIMS)
    t0 = time.perf_counter()
    with store.engine.begin() as conn:
        indexes.create(conn, bp.DIMS)
    seconds = time.perf_counter() - t0
    with bp.raw_connection(url) as conn:
        for table in bp.TABLES:
            conn.execute(f'ANALYZE "{store.schema}".{table}')
    return seconds


def cases(corpus: bp.Corpus, granted: np.ndarray) -> list[tuple[str, Any, Any, np.ndarray]]:
    auth = Authorization("alice", tenant_id=SCOPE.tenant_id)
    acl = granted[corpus.source_of]
    tag = int(bp.FILTER_TAG[1:])
    return [
        ("ACL + filter", auth, {"tag": bp.FILTER_TAG}, acl & (corpus.tags == tag)),
        ("ACL only", auth, None, acl),
        ("no predicate", None, None, np.ones(len(acl), dtype=bool)),
    ]


def measure(
    url: str, store: PostgresStore, corpus: bp.Corpus, granted: np.ndarray, queries: np.ndarray
) -> list[dict[str, Any]]:
    ids = [corpus.chunk_id(i) for i in range(len(corpus.texts))]
    captured: list[tuple[str, Any]] = []
    fetch = pg_reads.fetch

    def capture(conn: Any, sql: str, params: Any, **kwargs: Any) -> Any:
        if "ORDER BY" in sql and "<=>" in sql:
            captured.append((pg_reads.pyformat(sql), dict(params)))
        return fetch(conn, sql, params, **kwargs)

    out = []
    pg_reads.fetch = capture
    try:
        for name, authorization, metadata_filter, mask in cases(corpus, granted):
            rows = np.flatnonzero(mask)
            matrix = corpus.vectors[rows]
            recall, seconds, hnsw = [], [], 0
            for q in queries:
                captured.clear()
                t0 = time.perf_counter()
                found = store.query(
                    SCOPE, q, limit=bp.TOP_K, authorization=authorization,
                    metadata_filter=metadata_filter,
                )  # fmt: skip
                seconds.append(time.perf_counter() - t0)
                top = np.argsort(-(matrix @ q), kind="stable")[: bp.TOP_K]
                truth = {ids[rows[j]] for j in top}
                recall.append(len({s.record.id for s in found} & truth) / bp.TOP_K)
            statement, params = captured[-1]
            with bp.raw_connection(url, prepare=False) as conn:
                ef = "800" if authorization and metadata_filter else "400"
                conn.execute(f"SET hnsw.ef_search = {ef}")
                plan = " ".join(r[0] for r in conn.execute("EXPLAIN " + statement, params))
                hnsw = f"records_hnsw_{bp.DIMS}" in plan
            out.append(
                {
                    "case": name,
                    "qualifying": len(rows),
                    "pct": 100.0 * mask.mean(),
                    "recall": statistics.mean(recall),
                    "worst": min(recall),
                    "poor": sum(1 for x in recall if x < 0.5),
                    "p50_ms": statistics.median(seconds) * 1e3,
                    "p95_ms": float(np.percentile(seconds, 95)) * 1e3,
                    "plan_hnsw": hnsw,
                }
            )
    finally:
        pg_reads.fetch = fetch
    return out


def run(url: str, rows: int, builds: int) -> dict[str, list[dict[str, Any]]]:
    note_postgres(url)
    measured: dict[str, list[dict[str, Any]]] = {}
    schema = f"bench_recall_{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    corpus = bp.Corpus(rows)
    log(f"corpus of {rows:,} rows built in {time.perf_counter() - t0:.0f} s; loading {schema}")
    store = load(url, schema, corpus)
    granted = granted_sources(corpus)
    grant(store, corpus, granted)
    with bp.raw_connection(url) as conn:
        for table in bp.TABLES:
            conn.execute(f'VACUUM ANALYZE "{schema}".{table}')
        conn.execute(f'ANALYZE "{schema}".grants')
    queries = corpus.queries(bp.N_RECALL_QUERIES, np.random.default_rng(bp.SEED + 2))
    try:
        for build in range(1, builds + 1):
            seconds = build_index(url, store)
            log(f"build {build}: HNSW index built in {seconds:.1f} s")
            for case in measure(url, store, corpus, granted, queries):
                measured.setdefault(case["case"], []).append(case)
                print(
                    f"build {build} (HNSW build {seconds:.1f} s, {rows:,} rows): "
                    f"{case['case']} ({case['qualifying']:,} rows, {case['pct']:.2f}%): "
                    f"recall@{bp.TOP_K} {case['recall']:.3f} (worst {case['worst']:.1f}, "
                    f"{case['poor']} < 0.5), store.query p50 {case['p50_ms']:.2f} ms, "
                    f"p95 {case['p95_ms']:.2f} ms, plan uses HNSW: {case['plan_hnsw']}",
                    flush=True,
                )
    finally:
        store.engine.dispose()
        with bp.raw_connection(url) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    log(f"total {time.perf_counter() - t0:.0f} s")
    return measured


def write_json(measured: dict[str, list[dict[str, Any]]], rows: int, builds: int) -> None:
    """Recall@10 per predicate over the builds; issue 17's target: at least 0.95 each."""
    figures: dict[str, dict[str, Any]] = {}
    for name, cases in measured.items():
        key = name.replace(" + ", "_").replace(" ", "_").lower()
        figures[f"recall_{key}"] = figure(
            f"recall@10, {name} ({cases[0]['pct']:.2f}% of {rows:,} rows), {builds} HNSW builds",
            "",
            samples=[c["recall"] for c in cases],
        )
        figures[f"p50_{key}"] = figure(
            f"store.query p50, {name}", "ms", samples=[c["p50_ms"] for c in cases]
        )
    targets = [target(k, ">=", 0.95) for k in figures if k.startswith("recall_")]
    write_result("pg_recall", figures=figures, targets=targets, quick=rows < 100_000)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--builds", type=int, default=2, help="independent HNSW builds")
    parser.add_argument("--data", default=None, help="embedded server data dir (kept running)")
    args = parser.parse_args(argv)
    if args.data:
        with embedded_server(Path(args.data), keep_running=True) as url:
            measured = run(url, args.rows, args.builds)
    else:
        with (
            tempfile.TemporaryDirectory(prefix="ragport-bench-recall-") as tmp,
            embedded_server(Path(tmp) / "data", keep_running=False) as url,
        ):
            measured = run(url, args.rows, args.builds)
    write_json(measured, args.rows, args.builds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
