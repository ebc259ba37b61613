"""Scale-out benchmarks (issue 14): read replica throughput, partitioned vs plain schema.

Two servers on 127.0.0.1 in streaming replication (``tests/support/pg_cluster.py``: initdb,
``pg_basebackup -R``), both on this machine.

1. Ingest: rows/s through ``replace_source`` (100-chunk sources, ``HashEmbedder(384)``) of
   N rows over 10 tenants into a plain schema and into one created with ``partitions=10``.
2. Retrieve: p50/p95 of vector-only ``retrieve_context(top_k=10)`` (one tenant's scope per
   query, 200 queries) on each schema.
3. Throughput: queries/s of ``store.query`` from 2 client processes for ``--seconds`` each,
   against the primary alone and against primary + replica (``read_url``).
4. The primary's forget probe (a replica read that returned rows looks up the primary's
   ``forgotten`` tombstones for them): vector-only ``retrieve_context`` on the replica, 200
   pairs interleaved ABBA, with the probe and with it switched off (``PostgresBackend.
   _on_replica`` patched to answer ``False``: what a replica read cost before it).

Run: .venv/bin/python bench/bench_scale_out.py [--rows N] [--seconds S]
(figures and the partitioned-ingest target, within 10% of plain, go to
``bench/results/scale_out.json``; ``results/quick/`` below 100,000 rows)
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from _results import figure, note_postgres, ratio, target, write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore

TENANTS = 10
EMB = HashEmbedder(dimensions=384)
WORDS = [f"w{i}" for i in range(2000)]


def _log(*args: object) -> None:
    print(*args, file=sys.stderr, flush=True)


def _ingest(store: PostgresStore, rows: int, rng: np.random.Generator) -> float:
    per_source = 100
    start = time.perf_counter()
    for n in range(rows // per_source):
        tenant = f"tenant{n % TENANTS}"
        scope = ragport.Scope(tenant, "kb", "docs")
        sid = f"s{n}"
        chunks = [
            ragport.Chunk.of(sid, i, " ".join(rng.choice(WORDS, size=50)))
            for i in range(per_source)
        ]
        ragport.application.replace_source(
            source_id=sid, chunks=chunks, embedder=EMB, store=store, scope=scope
        )
    return rows / (time.perf_counter() - start)


def _retrieve(store: PostgresStore, rng: np.random.Generator) -> list[float]:
    """Per-query times (ms) of 200 vector-only retrieves, sorted."""
    times = []
    for _ in range(200):
        scope = ragport.Scope(f"tenant{rng.integers(TENANTS)}", "kb", "docs")
        query = " ".join(rng.choice(WORDS, size=6))
        start = time.perf_counter()
        ragport.application.retrieve_context(
            query,
            embedder=EMB,
            store=store,
            scope=scope,
            request=ragport.RetrievalRequest(top_k=10),
        )
        times.append(time.perf_counter() - start)
    return sorted(t * 1000 for t in times)


def _client(args: tuple[str, str | None, str, float, int]) -> int:
    url, read_url, schema, seconds, seed = args
    store = PostgresStore(url, read_url=read_url, schema=schema)
    rng = np.random.default_rng(seed)
    vectors = EMB.embed([" ".join(rng.choice(WORDS, size=6)) for _ in range(50)])
    done, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        scope = ragport.Scope(f"tenant{rng.integers(TENANTS)}", "kb", "docs")
        store.query(scope, vectors[done % len(vectors)], limit=10)
        done += 1
    return done


def _probe_cost(url: str, read_url: str, rng: np.random.Generator) -> dict[str, list[float]]:
    """Per-query times (ms) of vector-only retrieves on the replica, with the primary's forget
    probe (``probe``) and without it (``none``), 200 pairs interleaved ABBA."""
    from ragport.adapters.postgres.backend import PostgresBackend

    store = PostgresStore(url, read_url=read_url, schema="plain")
    switch = {"probe": PostgresBackend._on_replica, "none": lambda *_: False}
    times: dict[str, list[float]] = {"probe": [], "none": []}
    try:
        for n in range(220):
            for mode in ("probe", "none", "none", "probe")[:: 1 if n % 2 else -1]:
                PostgresBackend._on_replica = switch[mode]
                scope = ragport.Scope(f"tenant{rng.integers(TENANTS)}", "kb", "docs")
                start = time.perf_counter()
                ragport.application.retrieve_context(
                    " ".join(rng.choice(WORDS, size=6)), embedder=EMB, store=store, scope=scope
                )
                if n >= 20:  # the first 20 pairs warm the pools up
                    times[mode].append((time.perf_counter() - start) * 1000)
    finally:
        PostgresBackend._on_replica = switch["probe"]
        store.engine.dispose()
    return times


def _throughput(url: str, read_url: str | None, schema: str, seconds: float) -> float:
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        counts = pool.map(_client, [(url, read_url, schema, seconds, s) for s in (1, 2)])
    return sum(counts) / seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    from pg_cluster import Cluster

    cluster = Cluster()
    try:
        primary = cluster.primary()
        replica = cluster.replica_of(primary)
        rng = np.random.default_rng(7)
        note_postgres(primary.url)
        results = {}
        samples: dict[str, list[float]] = {}
        for name, partitions in (("plain", None), ("partitioned", TENANTS)):
            store = PostgresStore(primary.url, schema=name, create=True, partitions=partitions)
            store.prepare(ragport.Scope("tenant0", "kb", "docs"), dimensions=384)
            _log(f"ingest {name} ...")
            rate = _ingest(store, args.rows, rng)
            times = _retrieve(store, rng)
            p50, p95 = statistics.median(times), times[int(len(times) * 0.95)]
            results[name] = (rate, p50, p95)
            samples[name] = times
            _log(f"{name}: ingest {rate:.0f} rows/s, retrieve p50 {p50:.1f} ms p95 {p95:.1f} ms")
            store.engine.dispose()
        time.sleep(2)  # let the replica replay the load
        alone = _throughput(primary.url, None, "plain", args.seconds)
        both = _throughput(primary.url, replica.url, "plain", args.seconds)
        samples.update(_probe_cost(primary.url, replica.url, rng))
        print(f"rows {args.rows} over {TENANTS} tenants, 384 dimensions, HashEmbedder")
        print("| schema | ingest rows/s | retrieve p50 ms | p95 ms |")
        print("|---|---|---|---|")
        for name, (rate, p50, p95) in results.items():
            print(f"| {name} | {rate:.0f} | {p50:.1f} | {p95:.1f} |")
        print(f"store.query, 2 client processes, {args.seconds:g} s each:")
        print(f"| primary alone | {alone:.0f} q/s |")
        print(f"| primary + replica (reads on the replica) | {both:.0f} q/s |")
        write_json(args, results, samples, alone, both)
    finally:
        cluster.close()
    return 0


def write_json(
    args: argparse.Namespace,
    results: dict[str, tuple[float, float, float]],
    samples: dict[str, list[float]],
    alone: float,
    both: float,
) -> None:
    figures = {
        "plain_ingest_rps": figure("ingest, plain schema", "rows/s", results["plain"][0]),
        "partitioned_ingest_rps": figure(
            f"ingest, partitioned schema (partitions={TENANTS})",
            "rows/s",
            results["partitioned"][0],
        ),
        "ingest_ratio": ratio(
            "partitioned / plain ingest",
            results["partitioned"][0],
            results["plain"][0],
            ("partitioned_ingest_rps", "plain_ingest_rps"),
        ),
        "plain_retrieve_ms": figure(
            "retrieve_context, plain schema (200 queries)", "ms", samples=samples["plain"]
        ),
        "partitioned_retrieve_ms": figure(
            "retrieve_context, partitioned schema", "ms", samples=samples["partitioned"]
        ),
        "primary_qps": figure("store.query, 2 clients, primary alone", "q/s", alone),
        "replica_qps": figure("store.query, 2 clients, reads on the replica", "q/s", both),
        "probe_ms": figure(
            "retrieve_context on the replica, forget probe on the primary",
            "ms",
            samples=samples["probe"],
        ),
        "no_probe_ms": figure(
            "the same, probe switched off (interleaved)", "ms", samples=samples["none"]
        ),
        "probe_ratio": ratio(
            "with / without the forget probe (medians)",
            statistics.median(samples["probe"]),
            statistics.median(samples["none"]),
            ("probe_ms", "no_probe_ms"),
        ),
    }
    write_result(
        "scale_out",
        figures=figures,
        targets=[target("ingest_ratio", ">=", 0.9)],
        quick=args.rows < 100_000,
        details={
            "rows": args.rows,
            "tenants": TENANTS,
            "seconds": args.seconds,
            "p95_ms": {name: r[2] for name, r in results.items()},
        },
    )


if __name__ == "__main__":
    raise SystemExit(main())
