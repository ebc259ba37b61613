"""A million rows, interactive (issue 28): hybrid, vector-only and lexical latency and recall@10.

Loads N rows (default 1,000,000) into schema ``prof`` of an embedded server in DIR (kept
running and reused by later runs with the same N and DIR) by COPY, the bulk-load path
``bench_pg_lexical.load_copy`` takes: the texts (Zipf words) with metadata ``{"tag":
"tNNN"}`` (200 tags, 0.5% of rows each, spread over sources), the GIN index on ``tsv`` built
after the COPY, the BM25 statistics backfilled once; then ``pg_corpus.Corpus(N)``'s clustered
384-dimension vectors COPYed into ``record_vectors`` and the store's HNSW index
(m 24, ef_construction 128, or ``--hnsw-m`` / ``--hnsw-ef-construction``) built after the load with ``maintenance_work_mem`` ``--build-memory``
(default 4GB; the index of a million rows is about 2 GB). Every load step's time is printed.

Then, over ``--queries`` queries (default 80) whose terms are the first four words of a random
row's text (so they follow the corpus' Zipf law, the commonest words included) and whose
vectors are that row's, perturbed: ``retrieve_context`` hybrid (``lexical="bm25"``) and
vector-only (top 10 of 20 candidates), and the lexical statement alone (k 20, as the store
runs it), each query's three calls in a fresh random order; p50 / p95 / p99 of each. Then
recall@10 of ``store.query`` against numpy's exact answer for three predicates: grants to 10%
of sources plus one tag (0.05% of rows qualify), grants only (10%), and none, over 40 query
vectors near the corpus' centroids.

Run: .venv/bin/python bench/bench_pg_million.py [N] DIR [--queries Q] [--build-memory 4GB]
[--hnsw-m 24] [--hnsw-ef-construction 128] [--stop]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text

from ragport import Authorization, Grant, RetrievalRequest
from ragport.adapters.postgres import (
    PostgresStore,
    VectorIndexSettings,
    embedded_server,
    queries,
    reads,
)
from ragport.adapters.postgres import predicate as pr
from ragport.adapters.postgres.indexes import HNSW_EF_CONSTRUCTION, HNSW_M, HnswBuild
from ragport.application import retrieve_context

sys.path.insert(0, str(Path(__file__).parent))
import pg_corpus as bp
from _results import figure, note_postgres, target, write_result
from bench_pg_lexical import SCOPE, S, add_vectors, load_copy, tag_of

TAGS = 200
GRANTED = 0.10
RECALL_QUERIES = 40


def _pct(ms: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(ms), q))


def latency(
    store: PostgresStore, texts: list[str], vectors: np.ndarray, n: int
) -> dict[str, list[float]]:
    rng = np.random.default_rng(bp.SEED + 1)
    picks = rng.integers(0, len(texts), n)
    qs = [" ".join(texts[p].split()[:4]) for p in picks]
    qvecs = vectors[picks] + rng.standard_normal(vectors[picks].shape).astype(np.float32) * 0.02
    emb = bp.PrecomputedEmbedder()
    emb.add(qs, qvecs)
    hybrid = RetrievalRequest(top_k=bp.TOP_K, query_candidates=20, lexical="bm25")
    vector = RetrievalRequest(top_k=bp.TOP_K, query_candidates=20)
    times: dict[str, list[float]] = {"hybrid": [], "vector": [], "lexical": []}
    with store.engine.connect() as conn:
        raw = reads.RawRead(conn.connection)

        def run(leg: str, q: str) -> None:
            if leg == "lexical":
                params = pr.scope_params(SCOPE, k=20, query=q)
                sql = queries.lexical_sql(S, "english", pr.predicate(S, params, None, None))
                reads.fetch_generic(raw, sql, params)
            else:
                request = hybrid if leg == "hybrid" else vector
                retrieve_context(q, embedder=emb, store=store, scope=SCOPE, request=request)

        for q in qs[:5]:  # warm pools, plans and the hottest pages
            for leg in times:
                run(leg, q)
        for i, q in enumerate(qs):
            for leg in rng.permutation(list(times)):
                t0 = time.perf_counter()
                run(str(leg), q)
                times[str(leg)].append((time.perf_counter() - t0) * 1e3)
            if (i + 1) % 20 == 0:
                bp.log(f"  {i + 1} queries")
    return times


def recall(store: PostgresStore, vectors: np.ndarray, rows: int) -> dict[str, tuple[float, float]]:
    rng = np.random.default_rng(bp.SEED + 2)
    n_sources = -(-rows // bp.PER_SOURCE)
    granted = np.zeros(n_sources, dtype=bool)
    granted[rng.choice(n_sources, size=round(n_sources * GRANTED), replace=False)] = True
    sources = [f"src-{s:06d}" for s in range(n_sources)]
    t0 = time.perf_counter()
    store.set_source_access(
        SCOPE,
        [
            Grant(src, principal_ids=("alice",) if granted[s] else ("bob",))
            for s, src in enumerate(sources)
        ],
    )
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"ANALYZE {S}.grants"))
    bp.log(f"grants for {n_sources:,} sources: {time.perf_counter() - t0:.0f} s")
    index = np.arange(rows)
    acl = granted[index // bp.PER_SOURCE]
    tag = tag_of(int(rng.integers(0, rows)), TAGS)
    tagged = np.array([tag_of(i, TAGS) == tag for i in range(rows)])
    alice = Authorization("alice", tenant_id=SCOPE.tenant_id)
    cases: list[tuple[str, Any, Any, np.ndarray]] = [
        ("ACL + filter", alice, {"tag": tag}, acl & tagged),
        ("ACL only", alice, None, acl),
        ("no predicate", None, None, np.ones(rows, dtype=bool)),
    ]
    ids = [f"src-{i // bp.PER_SOURCE:06d}#{i % bp.PER_SOURCE + 1:04d}" for i in range(rows)]
    corpus_queries = _centroid_queries(rows, rng)
    out: dict[str, tuple[float, float]] = {}
    for name, authorization, flt, mask in cases:
        keep = np.flatnonzero(mask)
        matrix = vectors[keep]
        got: list[float] = []
        ms: list[float] = []
        for q in corpus_queries:
            t0 = time.perf_counter()
            found = store.query(
                SCOPE, q, limit=bp.TOP_K, authorization=authorization, metadata_filter=flt
            )
            ms.append((time.perf_counter() - t0) * 1e3)
            top = np.argsort(-(matrix @ q), kind="stable")[: bp.TOP_K]
            truth = {ids[keep[j]] for j in top}
            got.append(len({s.record.id for s in found} & truth) / max(1, len(truth)))
        out[name] = (float(np.mean(got)), float(np.median(ms)))
        bp.log(
            f"  recall@10 {name} ({mask.mean():.3%} qualify): {out[name][0]:.3f}, p50 {out[name][1]:.1f} ms"
        )
    return out


def _centroid_queries(rows: int, rng: np.random.Generator) -> np.ndarray:
    """Query vectors near the corpus' popular centroids (``Corpus.queries``), without
    regenerating a million rows: the centroids depend only on the seed."""
    return bp.Corpus(bp.PER_SOURCE).queries(RECALL_QUERIES, rng)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", type=int, nargs="?", default=1_000_000)
    ap.add_argument("data", type=Path)
    ap.add_argument("--queries", type=int, default=80)
    ap.add_argument("--build-memory", default="4GB")
    ap.add_argument("--hnsw-m", type=int, default=HNSW_M)
    ap.add_argument("--hnsw-ef-construction", type=int, default=HNSW_EF_CONSTRUCTION)
    ap.add_argument("--stop", action="store_true", help="stop the server at the end (data kept)")
    args = ap.parse_args()
    with embedded_server(args.data, keep_running=not args.stop) as url:
        note_postgres(url)
        store = PostgresStore(
            url,
            schema="prof",
            create=True,
            vector_index=VectorIndexSettings(
                m=args.hnsw_m, ef_construction=args.hnsw_ef_construction
            ),
        )
        loaded = args.data / "ragport-bench-load.json"  # how this data was loaded, kept
        t0 = time.perf_counter()
        fresh = store.current_generation(SCOPE) == 0
        if fresh:
            texts = load_copy(store, args.rows, tags=TAGS)
        else:
            texts = bp.random_texts(np.random.default_rng(bp.SEED + 7), args.rows)
        t1 = time.perf_counter()
        build = HnswBuild(args.hnsw_m, args.hnsw_ef_construction)
        vectors = add_vectors(store, args.rows, build_memory=args.build_memory, build=build)
        t2 = time.perf_counter()
        if fresh:
            loaded.write_text(json.dumps({"texts_s": t1 - t0, "vectors_s": t2 - t1}))
        load = json.loads(loaded.read_text()) if loaded.exists() else {}
        bp.log(f"load (of this data): {load}")
        times = latency(store, texts, vectors, args.queries)
        for leg, ms in times.items():
            bp.log(
                f"{leg}: p50 {_pct(ms, 50):.1f} ms, p95 {_pct(ms, 95):.1f} ms, p99 {_pct(ms, 99):.1f} ms"
            )
        found = recall(store, vectors, args.rows)
        store.engine.dispose()
    figures: dict[str, dict[str, object]] = {}
    for leg, ms in times.items():
        for q in (50, 95, 99):
            figures[f"{leg}_p{q}_ms"] = figure(f"{leg} p{q}, {args.rows:,} rows", "ms", _pct(ms, q))
    for name, (value, _ms) in found.items():
        key = name.lower().replace(" + ", "_").replace(" ", "_")
        figures[f"recall_{key}"] = figure(f"recall@10, {name}", "", value)
    if load:
        figures["load_texts_s"] = figure(
            "load by COPY: texts, GIN, statistics", "s", load["texts_s"]
        )
        figures["load_vectors_s"] = figure(
            "load by COPY: vectors, HNSW build after it", "s", load["vectors_s"]
        )
    targets = [
        target("hybrid_p50_ms", "<=", 100),
        target("hybrid_p95_ms", "<=", 300),
        target("vector_p50_ms", "<=", 10),
        target("lexical_p95_ms", "<=", 200),
        target("recall_acl_filter", ">=", 0.95),
        target("recall_acl_only", ">=", 0.95),
        target("recall_no_predicate", ">=", 0.95),
    ]
    write_result(
        "pg_million",
        figures=figures,
        targets=targets,
        quick=args.rows < 1_000_000,
        details={
            "rows": args.rows,
            "queries": args.queries,
            "build_memory": args.build_memory,
            "hnsw_m": args.hnsw_m,
            "hnsw_ef_construction": args.hnsw_ef_construction,
        },
    )


if __name__ == "__main__":
    main()
