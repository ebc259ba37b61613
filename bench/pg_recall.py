"""Recall@10 of ``store.query`` against exact answers (section 3 of ``bench_postgres.py``)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
from pg_corpus import DIMS, SCOPE, SEED, TOP_K, Corpus, raw_connection

from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres import reads as pg_reads
from ragport.domain.model import Authorization, Grant

FILTER_TAG = "t07"
GRANTED_FRACTION = 0.10
# Raw re-runs of the store's own statement: as planned with the store's settings; with the
# HNSW ordered scan forced (enable_sort = off) and iterative scans on, off, or a larger
# ef_search; and exact (the HNSW index dropped inside the statement's transaction, rolled
# back after: a sequential scan and sort, each row's record checked through its key) as an
# SQL cross-check of the numpy truth.
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
    "exact": (f"DROP INDEX {{schema}}.records_hnsw_{DIMS}",),
}
N_RECALL_QUERIES = 200
N_EXACT = 25


def _setting(setting: str, schema: str) -> str:
    if setting.startswith("DROP INDEX"):  # rolled back with the mode's transaction
        return setting.format(schema=f'"{schema}"')
    return f"SET LOCAL {setting}"


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
                for qi, q in enumerate(qvecs):
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
                        if mode == "exact" and qi >= N_EXACT:
                            continue  # a sequential scan per query: a sample is enough
                        with conn.transaction(force_rollback=True):
                            for setting in settings:
                                conn.execute(_setting(setting, store.schema))
                            t0 = time.perf_counter()
                            answers[mode] = {row[0] for row in conn.execute(statement, params)}
                            seconds[mode].append(time.perf_counter() - t0)
                    same += answers["planned"] == answers["store"]
                    for mode, answer in answers.items():
                        recall[mode].append(len(answer & truth) / TOP_K)
                        counts[mode].append(len(answer))
                plans = {}
                for mode in ("planned", "hnsw", "exact"):
                    with conn.transaction(force_rollback=True):
                        for setting in RAW_MODES[mode]:
                            conn.execute(_setting(setting, store.schema))
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


def print_recall(url: str, store: PostgresStore, corpus: Corpus) -> list[dict[str, Any]]:
    """Section 3's printed lines; returns the measured cases."""
    granted = max(1, round(len(corpus.sources) * GRANTED_FRACTION))
    cases = bench_recall(url, store, corpus)
    for case in cases:
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
            f"{ms['relaxed_ef800']:.2f} ms; exact SQL (HNSW dropped, first {N_EXACT} queries, plan uses HNSW: "
            f"{case['exact_hnsw']}): recall {r['exact']:.3f}, {ms['exact']:.2f} ms; store SQL "
            f"re-run equals store.query in {case['same_as_store']}/{N_RECALL_QUERIES}",
            flush=True,
        )
    return cases
