"""An access-checked vector query against the same query with an equality metadata filter
selecting the same rows (issue 45, workload 7's target: within 1.2x).

The corpus is the peer benchmark's (``bench/peers/common.py``: 2,000 sources x 10 chunks at
20,000 chunks, 384-d feature-hashed vectors, ``PostgresStore`` with m 24, ef_construction 128,
ef_search 200), written with ``replace_sources`` in batches of 100, each source granted to its
one ``owner_group`` of 20. Each chunk also carries ``team``: groups ``g2k`` and ``g2k+1`` form
team ``kNN``. A query's user is in both groups of one team (2 of 20 groups, 10% of the rows),
so ``{"team": "kNN"}``, an equality filter, selects exactly the rows the grants let the user
read. Each of ``--queries`` queries (six words of a live chunk, its team) runs both ways
through ``retrieve_context(top_k=10)``, in a random order per query; the figures are the two
medians, their ratio (``ratio access/equality-filter``) and each way's recall@10 against the
exact numpy top-10 over the user's rows. Every access answer is checked for a leaked hit.

Run: ``.venv/bin/python bench/bench_pg_access.py DATA_DIR [--chunks 20000] [--queries 200]``
(the embedded server on DATA_DIR keeps the corpus: a second run, from any tree, reuses it;
``--stop`` stops the server at the end). Compare trees in one session, ABBA, on one DATA_DIR.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from _results import figure, note_postgres, ratio, target, write_result  # noqa: E402
from common import (  # noqa: E402
    DIMS,
    EF_SEARCH,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    QUERY_WORDS,
    SEED,
    TOP_K,
    Dataset,
    VectorTable,
    exact_top,
    feature_hash,
    log,
    recall_at_k,
)
from sys_ragport import LookupEmbedder  # noqa: E402

from ragport import Authorization, Chunk, Grant, RetrievalRequest, Scope  # noqa: E402
from ragport.adapters.postgres import (  # noqa: E402
    PostgresStore,
    VectorIndexSettings,
    embedded_server,
    stop_embedded_server,
)
from ragport.application import SourceWrite, replace_sources, retrieve_context  # noqa: E402

SCHEMA = "ragport_access"
SCOPE = Scope("bench", "access", "corpus")


def team(group: str) -> str:
    """``g2k`` and ``g2k+1`` -> ``kNN``."""
    return f"k{int(group[1:]) // 2:02d}"


def members(name: str) -> tuple[str, str]:
    k = int(name[1:])
    return (f"g{2 * k:02d}", f"g{2 * k + 1:02d}")


def _chunks(data: Dataset, s: str) -> list[Chunk]:
    return [
        Chunk.of(
            s,
            i,
            c["text"],
            metadata={
                "tag": c["tag"],
                "owner_group": c["owner_group"],
                "team": team(c["owner_group"]),
            },
        )
        for i, c in enumerate(data.chunks(s, 1))
    ]


def build(store: PostgresStore, data: Dataset, embedder: LookupEmbedder) -> None:
    """The corpus in batches of 100 sources, then one grant per source (its owner group)."""
    for i in range(0, len(data.ids), 100):
        batch = [SourceWrite(source_id=s, chunks=_chunks(data, s)) for s in data.ids[i : i + 100]]
        result = replace_sources(batch, embedder=embedder, store=store, scope=SCOPE)
        assert not result.failures, result.failures
    store.set_source_access(SCOPE, [Grant(s, group_ids=(data.group[s],)) for s in data.ids])
    store.finish_maintenance()


def queries(data: Dataset, n: int) -> list[dict[str, Any]]:
    """``n`` queries: six consecutive words of a chunk, and that chunk's team."""
    rng = np.random.default_rng(SEED + 45)
    out = []
    for s in rng.choice(data.ids, size=n):
        c = data.chunks(str(s), 1)[int(rng.integers(10))]
        words = c["text"].split()[1:]
        start = int(rng.integers(0, len(words) - QUERY_WORDS))
        out.append(
            {"text": " ".join(words[start : start + QUERY_WORDS]), "team": team(c["owner_group"])}
        )
    return out


def measure(
    store: PostgresStore, embedder: LookupEmbedder, data: Dataset, qs: list[dict[str, Any]]
) -> dict[str, Any]:
    live = [c for s in data.ids for c in data.chunks(s, 1)]
    keys = [f"{c['source']}#{c['chunk'] + 1:04d}" for c in live]
    matrix = embedder.table([c["text"] for c in live])
    teams = np.array([team(c["owner_group"]) for c in live])
    group_of = dict(zip(keys, (c["owner_group"] for c in live), strict=True))
    request = RetrievalRequest(top_k=TOP_K)
    times: dict[str, list[float]] = {"access": [], "filter": []}
    recall: dict[str, list[float]] = {"access": [], "filter": []}
    leaks = 0
    rng = np.random.default_rng(SEED + 46)

    def run(kind: str, q: dict[str, Any]) -> list[str]:
        if kind == "access":
            auth = Authorization("user", SCOPE.tenant_id, group_ids=members(q["team"]))
            req = request
        else:
            auth, req = None, RetrievalRequest(top_k=TOP_K, metadata_filter={"team": q["team"]})
        t0 = time.perf_counter()
        result = retrieve_context(
            q["text"], embedder=embedder, store=store, scope=SCOPE, request=req, authorization=auth
        )
        times[kind].append(time.perf_counter() - t0)
        return [h.id for h in result.hits]

    for q in qs[:5]:  # warm the pool and the caches
        run("access", q), run("filter", q)
    for v in times.values():
        v.clear()
    for q in qs:
        truth = exact_top(matrix, keys, embedder.table([q["text"]])[0], teams == q["team"], TOP_K)
        for kind in rng.permutation(["access", "filter"]).tolist():
            found = run(kind, q)
            recall[kind].append(recall_at_k(found, truth[0]))
            if kind == "access":
                leaks += sum(group_of[k] not in members(q["team"]) for k in found)
    return {
        "p50_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()},
        "p95_ms": {k: float(np.percentile(v, 95)) * 1e3 for k, v in times.items()},
        "recall": {k: float(np.mean(v)) for k, v in recall.items()},
        "leaks": leaks,
        "queries": len(qs),
    }


def report(measured: dict[str, Any], chunks: int) -> None:
    p50, p95, rec = measured["p50_ms"], measured["p95_ms"], measured["recall"]
    for kind, what in (("access", "access-checked"), ("filter", "equality filter, same rows")):
        print(
            f"{chunks:,} chunks, {what} top-{TOP_K}: p50 {p50[kind]:.2f} ms, p95 "
            f"{p95[kind]:.2f} ms, recall@10 {rec[kind]:.3f}",
            flush=True,
        )
    print(
        f"ratio access/equality-filter: {p50['access'] / p50['filter']:.2f}x (p50); "
        f"leaked hits {measured['leaks']} in {measured['queries']} queries",
        flush=True,
    )
    figures = {
        "access_p50": figure(f"access-checked top-10 p50, {chunks:,} chunks", "ms", p50["access"]),
        "filter_p50": figure("equality filter, same rows, p50", "ms", p50["filter"]),
        "ratio": ratio(
            "ratio access/equality-filter (p50)",
            p50["access"],
            p50["filter"],
            ("access_p50", "filter_p50"),
        ),
        "access_recall": figure("access recall@10", "", rec["access"]),
        "filter_recall": figure("equality filter recall@10", "", rec["filter"]),
        "leaks": figure("leaked hits", "", measured["leaks"]),
    }
    write_result(
        "pg_access",
        figures=figures,
        targets=[target("ratio", "<=", 1.2), target("leaks", "<=", 0)],
        quick=chunks < 20_000,
        details={"chunks": chunks, "measured": measured},
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--stop", action="store_true")
    args = parser.parse_args(argv)
    data = Dataset(args.chunks // 10)
    qs = queries(data, args.queries)
    texts = sorted(set(data.texts.values()) | {q["text"] for q in qs})
    embedder = LookupEmbedder(VectorTable(texts, feature_hash(texts)), DIMS)
    with embedded_server(args.data_dir) as url:
        note_postgres(url)
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.grants",)
            ).fetchone()
            n = 0
            if row and row[0]:
                got = conn.execute(f"SELECT count(*) FROM {SCHEMA}.grants").fetchone()
                n = int(got[0]) if got else 0
        index = VectorIndexSettings(
            m=HNSW_M, ef_construction=HNSW_EF_CONSTRUCTION, ef_search=EF_SEARCH
        )
        store = PostgresStore(url, schema=SCHEMA, create=True, vector_index=index)
        try:
            if n < len(data.ids):
                log(f"building {args.chunks:,} chunks in {SCHEMA}")
                build(store, data, embedder)
            measured = measure(store, embedder, data, qs)
        finally:
            store.engine.dispose()
    if args.stop:
        stop_embedded_server(args.data_dir)
    report(measured, args.chunks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
