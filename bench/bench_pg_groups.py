"""A grant-checked vector query under an authorization of 1,000 groups against 10 (issue 44).

Loads ``bench_postgres.Corpus(N)`` (default 100,000 rows) into a fresh schema with one binary
COPY (``bench_pg_recall.load``), builds the store's own HNSW index, and grants every source to
four groups of a directory: the 10% of sources ``bench_pg_recall`` grants to alice get one of
alice's ten ``team-N`` groups and three directory groups, every other source four directory
groups alice is not in. Two authorizations of alice see exactly the same rows: one holds her
ten ``team-N`` groups, the other the same ten and 990 more that no grant names (a directory
user's long tail). ``--groups`` adds more sizes (the same ten, padded the same way).

Each of 200 queries (``store.query(limit=10)``, vectors near random centroids) runs under
every authorization in a fresh random order; the figure is each size's p50 and its ratio to
the 10-group p50 (target: 1,000 groups within 2x of 10). Every answer is checked: all sizes
return the same hits. The store's statement (captured where it runs its reads) is explained
under the 1,000-group authorization: the grant probe must stay an index scan of
``grants_pkey`` and the vector leg on the HNSW index.

Run: .venv/bin/python bench/bench_pg_groups.py [--rows N] [--queries Q] [--groups 10,1000]
[--data DIR]
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

import bench_pg_recall as recall
import bench_postgres as bp
import numpy as np
from _results import figure, note_postgres, ratio, target, write_result

from ragport.adapters.postgres import PostgresStore, embedded_server
from ragport.adapters.postgres import reads as pg_reads
from ragport.domain.model import Authorization, Grant

SCOPE = bp.SCOPE
BASE = 10
MANY = 1_000
QUERIES = 200
GROUPS_PER_GRANT = 4
DIRECTORY = 5_000
"""Directory groups the grants draw from; alice's long tail (``idle-N``) is not among them."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def team(i: int) -> str:
    return f"team-{i % BASE}"


def grants(corpus: bp.Corpus, granted: np.ndarray) -> list[Grant]:
    """Four groups per source; a granted source's first one is one of alice's ten."""
    rng = np.random.default_rng(bp.SEED + 44)
    out = []
    for s, source in enumerate(corpus.sources):
        groups = [f"dir-{g:05d}" for g in rng.choice(DIRECTORY, GROUPS_PER_GRANT, replace=False)]
        if granted[s]:
            groups[0] = team(s)
        out.append(Grant(source, group_ids=groups))
    return out


def authorization(size: int) -> Authorization:
    """Alice's ten teams, padded with groups no grant names up to ``size``."""
    groups = [team(i) for i in range(BASE)] + [f"idle-{i:05d}" for i in range(size - BASE)]
    return Authorization("alice", SCOPE.tenant_id, group_ids=groups)


def explain(url: str, statement: str, params: dict[str, Any]) -> dict[str, bool]:
    with bp.raw_connection(url, prepare=False) as conn:
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, params))
    nodes = [line for line in plan.splitlines() if "->" in line or "SubPlan" in line]
    log("plan nodes under the largest authorization:\n" + "\n".join(nodes))
    return {
        "grants_pkey": "grants_pkey" in plan,
        "grants_seq_scan": "Seq Scan on grants" in plan,
        "hnsw": f"records_hnsw_{bp.DIMS}" in plan,
    }


def measure(
    url: str, store: PostgresStore, queries: np.ndarray, sizes: Sequence[int]
) -> dict[str, Any]:
    auths = {n: authorization(n) for n in sizes}
    times: dict[int, list[float]] = {n: [] for n in sizes}
    rng = np.random.default_rng(bp.SEED + 45)
    same = hits = 0
    captured: list[tuple[str, dict[str, Any]]] = []
    fetch = pg_reads.fetch

    def capture(conn: Any, sql: str, params: Any, **kwargs: Any) -> Any:
        if "ORDER BY" in sql and "<=>" in sql:
            captured.append((pg_reads.pyformat(sql), dict(params)))
        return fetch(conn, sql, params, **kwargs)

    for q in queries:
        answers: dict[int, list[str]] = {}
        for n in rng.permutation(list(sizes)).tolist():
            t0 = time.perf_counter()
            found = store.query(SCOPE, q, limit=bp.TOP_K, authorization=auths[n])
            times[n].append(time.perf_counter() - t0)
            answers[n] = [s.record.id for s in found]
        same += all(a == answers[sizes[0]] for a in answers.values())
        hits += len(answers[sizes[0]])
    pg_reads.fetch = capture
    try:
        store.query(SCOPE, queries[0], limit=bp.TOP_K, authorization=auths[max(sizes)])
    finally:
        pg_reads.fetch = fetch
    statement, params = captured[-1]
    p50 = {n: statistics.median(v) * 1e3 for n, v in times.items()}
    p95 = {n: float(np.percentile(v, 95)) * 1e3 for n, v in times.items()}
    return {
        "p50_ms": p50,
        "p95_ms": p95,
        "same": same,
        "queries": len(queries),
        "hits": hits,
        "plan": explain(url, statement, params),
    }


def run(url: str, rows: int, n_queries: int, sizes: Sequence[int]) -> dict[str, Any]:
    note_postgres(url)
    schema = f"bench_groups_{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    corpus = bp.Corpus(rows)
    log(f"corpus of {rows:,} rows built in {time.perf_counter() - t0:.0f} s; loading {schema}")
    store = recall.load(url, schema, corpus)
    try:
        store.set_source_access(SCOPE, grants(corpus, recall.granted_sources(corpus)))
        with bp.raw_connection(url) as conn:
            for table in (*bp.TABLES, "grants"):
                conn.execute(f'VACUUM ANALYZE "{schema}".{table}')
        seconds = recall.build_index(url, store)
        log(f"HNSW index built in {seconds:.1f} s; {n_queries} queries x {list(sizes)} groups")
        queries = bp.Corpus.queries(corpus, n_queries, np.random.default_rng(bp.SEED + 3))
        measured = measure(url, store, queries, sizes)
    finally:
        store.engine.dispose()
        with bp.raw_connection(url) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    for n in sizes:
        print(
            f"{rows:,} rows, store.query(limit={bp.TOP_K}) under {n:,} groups: "
            f"p50 {measured['p50_ms'][n]:.2f} ms, p95 {measured['p95_ms'][n]:.2f} ms, "
            f"{measured['p50_ms'][n] / measured['p50_ms'][BASE]:.2f}x the {BASE}-group p50",
            flush=True,
        )
    print(
        f"same hits under every size in {measured['same']}/{measured['queries']} queries "
        f"({measured['hits']} hits); plan: {measured['plan']}; total "
        f"{time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    return measured


def write_json(measured: dict[str, Any], rows: int, sizes: Sequence[int]) -> None:
    """Each size's p50, its ratio to 10 groups (target for 1,000: within 2x), the plan."""
    figures: dict[str, dict[str, Any]] = {}
    for n in sizes:
        figures[f"p50_{n}"] = figure(
            f"store.query p50 under {n:,} groups, {rows:,} rows", "ms", measured["p50_ms"][n]
        )
    for n in sizes:
        if n != BASE:
            figures[f"ratio_{n}"] = ratio(
                f"p50 under {n:,} groups / under {BASE}",
                measured["p50_ms"][n],
                measured["p50_ms"][BASE],
                (f"p50_{n}", f"p50_{BASE}"),
            )
    plan = measured["plan"]
    figures["same_hits"] = figure(
        "queries with the same hits under every size", "", measured["same"]
    )
    figures["grant_probe_indexed"] = figure(
        f"grant probe on grants_pkey under {max(sizes):,} groups (1 = yes)",
        "",
        float(plan["grants_pkey"] and not plan["grants_seq_scan"]),
    )
    targets = [
        target("same_hits", ">=", measured["queries"]),
        target("grant_probe_indexed", ">=", 1),
    ]
    if f"ratio_{MANY}" in figures:
        targets.insert(0, target(f"ratio_{MANY}", "<=", 2.0))
    write_result(
        "pg_groups",
        figures=figures,
        targets=targets,
        quick=rows < 100_000,
        details={"rows": rows, "sizes": list(sizes), "measured": measured},
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=QUERIES)
    parser.add_argument(
        "--groups",
        default=f"{BASE},{MANY}",
        help=f"comma-separated authorization sizes; {BASE} and {MANY} are always measured",
    )
    parser.add_argument("--data", default=None, help="embedded server data dir (kept running)")
    args = parser.parse_args(argv)
    sizes = sorted({BASE, MANY, *(int(x) for x in args.groups.split(",") if x.strip())})
    if args.data:
        with embedded_server(Path(args.data), keep_running=True) as url:
            measured = run(url, args.rows, args.queries, sizes)
    else:
        with (
            tempfile.TemporaryDirectory(prefix="ragport-bench-groups-") as tmp,
            embedded_server(Path(tmp) / "data", keep_running=False) as url,
        ):
            measured = run(url, args.rows, args.queries, sizes)
    write_json(measured, args.rows, sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
