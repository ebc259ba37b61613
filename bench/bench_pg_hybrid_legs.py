"""A hybrid query's two legs on two connections (one snapshot) against one after the other.

``PostgresStore.hybrid_query`` with the peers benchmark's data (bench/peers/common.py: its
texts, ``CANDIDATES`` per leg) and ``HashEmbedder`` vectors, on an embedded server of its own.
The two paths run in one process on one store, interleaved ABBA per round (sequential:
``_Snapshot.companion`` offering none, the path of a pool with no idle connection), so load
falls on both alike; it prints each path's p50 / p95 and the ratios.

    OPENBLAS_NUM_THREADS=1 python bench/bench_pg_hybrid_legs.py --chunks 5000

Measured 2026-12-07 on 2 shared cores under nice 19 with other agents' benchmarks running
(load 3-5.8), two connections / one after the other, p50 / p95, 100 queries a round:
- 20,000 chunks: 0.69x / 0.82x (18:54, 2 rounds, before 81d39f9 made the lexical leg
  cheaper), 1.03x / 0.91x (19:19, 2 rounds), 0.91x / 0.82x (19:32, 3 rounds, with 0cc1c24's
  COMMIT in the companion's pipeline and migration 17: 17.4 / 39.5 against 19.0 / 48.1 ms);
- 5,000 chunks, 3 rounds: 0.93x / 0.95x, 0.86x / 1.05x (19:15-19:19), 1.11x / 1.19x and
  0.90x / 0.89x (19:35-19:37, with 0cc1c24).
The legs overlap only on a spare core, and run to run the ratio moves by 0.2 on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent / "peers"))
from common import CANDIDATES, Dataset

from ragport import Chunk, Scope
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, backend, embedded_server
from ragport.application import index_chunks

SCOPE = Scope("bench", "hybrid", "legs")
DIMS = 384
ABBA = ("one after the other", "two connections", "two connections", "one after the other")


def _ingest(store: PostgresStore, data: Dataset) -> None:
    chunks = [Chunk.of(s, i, c["text"]) for s in data.ids for i, c in enumerate(data.chunks(s, 1))]
    for start in range(0, len(chunks), 1000):
        index_chunks(
            chunks=chunks[start : start + 1000],
            embedder=HashEmbedder(dimensions=DIMS),
            store=store,
            scope=SCOPE,
        )
    store.finish_maintenance()


def _run(store: PostgresStore, queries: list[tuple[str, Any]]) -> list[float]:
    times = []
    for text, vector in queries:
        start = time.perf_counter()
        store.hybrid_query(
            SCOPE, vector, text, embedder_id=f"hash-v1:{DIMS}", dimensions=DIMS,
            limit=CANDIDATES, mode="bm25",
        )  # fmt: skip
        times.append((time.perf_counter() - start) * 1000)
    return times


def _measure(store: PostgresStore, queries: list[tuple[str, Any]], rounds: int) -> dict[str, Any]:
    """Each path's times: warmed once each, then ``rounds`` ABBA rounds."""
    offer = backend._Snapshot.companion
    paths = {"two connections": offer, "one after the other": lambda self: None}
    times: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for path in paths.values():  # warm each path's plans and caches (not kept)
            backend._Snapshot.companion = path  # type: ignore[method-assign]
            _run(store, queries)
        for name in ABBA * rounds:
            backend._Snapshot.companion = paths[name]  # type: ignore[method-assign]
            times[name] += _run(store, queries)
    finally:
        backend._Snapshot.companion = offer  # type: ignore[method-assign]
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    data = Dataset(args.chunks // 10)
    texts = [q["text"] for q in data.queries(args.queries)]
    queries = list(zip(texts, HashEmbedder(dimensions=DIMS).embed(texts), strict=True))
    with (
        tempfile.TemporaryDirectory(prefix="ragport-hybrid-legs-") as folder,
        embedded_server(Path(folder) / "data", keep_running=False) as url,
    ):
        store = PostgresStore(url, schema="bench", create=True)
        _ingest(store, data)
        times = _measure(store, queries, args.rounds)
        store.engine.dispose()
    rows = {name: (statistics.median(t), float(np.percentile(t, 95))) for name, t in times.items()}
    for name, (p50, p95) in rows.items():
        print(f"{name:22s} p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  ({len(times[name])} queries)")
    (c50, c95), (s50, s95) = rows["two connections"], rows["one after the other"]
    print(f"two connections / one after the other: p50 {c50 / s50:.2f}x, p95 {c95 / s95:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
