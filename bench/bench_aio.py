"""AsyncRag's thread limiter vs psycopg's async pool for PostgreSQL reads (issue 27).

Issue 27 ships ``ragport.aio`` on a bounded thread limiter and asks for native async only
where it pays: PostgreSQL reads on psycopg's async pool only if a benchmark shows it beats
the limiter. This is that benchmark.

Corpus: ``--sources`` (default 400) sources of ``--per-source`` (default 50) chunks, 20,000
chunks of 300-600 characters of Zipf-distributed synthetic words (``pg_corpus.random_texts``,
seeded), loaded through the public write path (``ragport.Rag(...).replace_source``) with
``HashEmbedder(384)`` into a fresh schema of a ``PostgresStore`` whose engine pools 10
connections (``pool_size=10, max_overflow=0``). Queries: 40 distinct 3-5 word queries drawn
from the corpus texts; each measured batch is 200 calls (every query 5 times, shuffled),
all started at once.

* **A, the limiter (what ships):** ``AsyncRag(rag, max_threads=10)``, the 200
  ``await arag.retrieve(q)`` under ``asyncio.gather``.
* **B, native async (an upper bound):** the statements one sync retrieve runs, captured per
  query, replayed on ``psycopg_pool.AsyncConnectionPool(min_size=10, max_size=10)`` of
  ``psycopg.AsyncConnection`` (autocommit, pgvector registered, the store's HNSW session
  settings applied once per connection as the store sends them only when they change): per
  call, the query is embedded with the same ``HashEmbedder`` on the loop, then the statements
  run in the same order, with the same parameters and ``prepare`` flags, rows fetched as
  plain tuples. B does none of ragport's own work around the SQL (validation, limits, result
  mapping into records, Python-side access checks, fusion, the ``RetrievalResult``), so its
  gain over A is an UPPER bound on what moving the reads to native async could buy.
* **C, plain threads (reference):** the sync ``rag.retrieve`` on ``ThreadPoolExecutor(10)``.

The brief suggested capturing with SQLAlchemy's ``before_cursor_execute``; the store's reads
bypass SQLAlchemy (``ragport/adapters/postgres/reads.py`` runs them straight on psycopg), so
that event sees none of them (the bench counts it to show it). The statements are captured
one level lower, by wrapping ``psycopg.Cursor.execute`` during one sync retrieve per query;
the parameters it receives are psycopg's own (``%(name)s`` binds, a numpy query vector).

Both modes run: vector-only (the default) and hybrid (``lexical="bm25"``, the mode the
PostgreSQL store declares). ``--rounds`` rounds (default 3); within a round each mode runs
A, B, C in an order rotated per round. Per batch: wall time -> calls/s; per call, latency
from the batch start to the call's end (so it includes waiting for a token, a connection or
a thread: 200 calls share 10); p50/p95 ms; and the bench process's CPU time (all its threads,
``time.process_time``) per call, which is the client's share of the 2 cores: what is left of
the wall time is the server's work and waiting. Printed: calls/s min/median/max, median p50 and
p95, and the ratio B/A (and C/A) of the median calls/s. Written by ``_results.write_result``
to ``bench/results/aio.json`` (``results/quick/`` for a smaller corpus or fewer rounds): A's
and B's calls/s per round and B/A per mode as figures, with the target B/A <= 1.2 (native
async does not pay below it, so the reads stay on the limiter), and every path's summary,
C included, as details.

Bench-only dependency: ``psycopg-pool`` (``.venv/bin/pip install psycopg-pool``); ragport
itself does not depend on it.

Run: .venv/bin/python bench/bench_aio.py [--rounds 3] [--url URL]
(default: an embedded server in a temporary directory, stopped at the end; with --url the
bench schema is dropped at the end.) Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from _results import figure, note_postgres, target, write_result
from pg_corpus import log, pct, random_texts
from pgvector.psycopg import register_vector_async
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import create_engine, event, text

from ragport import Chunk, Rag, Scope
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, embedded_server, queries
from ragport.adapters.postgres.reads import pyformat
from ragport.aio import AsyncRag

SCOPE = Scope("bench", "aio", "corpus")
DIMS = 384
POOL = 10
N_QUERIES = 40
CALLS = 200
MODES: dict[str, dict[str, Any]] = {"vector": {}, "hybrid": {"lexical": "bm25"}}
PATHS = ("A", "B", "C")
PATH_NAMES = {
    "A": "AsyncRag, limiter of 10 threads",
    "B": "psycopg AsyncConnectionPool(10), replayed SQL (upper bound)",
    "C": "sync retrieve on ThreadPoolExecutor(10)",
}
MODE_TEXT = {"vector": "vector", "hybrid": "hybrid (bm25)"}
NATIVE_PAYS = 1.2  # B/A above this and native async reads would be worth their code

Statement = tuple[str, Any, bool | None, int]  # query, params, prepare, rowcount


# -- capture ------------------------------------------------------------------------------------
@contextlib.contextmanager
def capture_psycopg() -> Iterator[list[Statement]]:
    """Record every ``psycopg.Cursor.execute`` (sync) run inside the block, in order."""
    seen: list[Statement] = []
    original = psycopg.Cursor.execute

    def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        out = original(self, query, params, **kw)
        sql = query if isinstance(query, str) else query.as_string(self)
        seen.append((sql, params, kw.get("prepare"), self.rowcount))
        return out

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]


def capture_plans(
    rag: Rag, engine: Any, texts: list[str], options: dict[str, Any]
) -> tuple[dict[str, list[Statement]], dict[str, Any], int]:
    """Per query: the statements one sync retrieve runs (the HNSW session settings split out)."""
    sa_statements = [0]

    def count(*args: Any) -> None:
        sa_statements[0] += 1

    hnsw_sql = pyformat(queries.HNSW_SETTINGS)
    hnsw_params: dict[str, Any] = {}
    plans: dict[str, list[Statement]] = {}
    embedder = rag.embedder
    event.listen(engine, "before_cursor_execute", count)
    try:
        for q in texts:
            with capture_psycopg() as seen:
                result = rag.retrieve(q, **options)
            assert result.hits, "a bench query found nothing"
            kept = []
            for stmt in seen:
                if stmt[0] == hnsw_sql:
                    hnsw_params = dict(stmt[1])
                    continue
                kept.append(stmt)
            vector = embedder.embed([q])[0]
            arrays = [v for s in kept for v in (s[1] or {}).values() if isinstance(v, np.ndarray)]
            assert arrays and all(np.array_equal(a, vector) for a in arrays), (
                "the captured query vector is not HashEmbedder's embedding of the query"
            )
            plans[q] = kept
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return plans, hnsw_params, sa_statements[0]


# -- the three paths ----------------------------------------------------------------------------
async def batch_a(arag: AsyncRag, calls: list[str], options: dict[str, Any]) -> list[float]:
    start = time.perf_counter()

    async def one(q: str) -> float:
        result = await arag.retrieve(q, **options)
        assert result.hits
        return time.perf_counter() - start

    return list(await asyncio.gather(*(one(q) for q in calls)))


async def batch_b(
    pool: AsyncConnectionPool[Any],
    embedder: HashEmbedder,
    plans: dict[str, list[Statement]],
    calls: list[str],
) -> list[float]:
    start = time.perf_counter()

    async def one(q: str) -> float:
        vector = embedder.embed([q])[0]  # pure CPU, on the loop
        async with pool.connection() as conn:
            for sql, params, prepare, rowcount in plans[q]:
                if params:
                    params = {
                        k: (vector if isinstance(v, np.ndarray) else v) for k, v in params.items()
                    }
                cur = await conn.execute(sql, params, prepare=prepare)
                if cur.description is not None:
                    rows = await cur.fetchall()
                    assert len(rows) == rowcount, "the replay read other rows than the store"
        return time.perf_counter() - start

    return list(await asyncio.gather(*(one(q) for q in calls)))


def batch_c(
    rag: Rag, executor: ThreadPoolExecutor, calls: list[str], options: dict[str, Any]
) -> list[float]:
    start = time.perf_counter()

    def one(q: str) -> float:
        assert rag.retrieve(q, **options).hits
        return time.perf_counter() - start

    return list(executor.map(one, calls))


# -- corpus -------------------------------------------------------------------------------------
def load(rag: Rag, sources: int, per_source: int, seed: int) -> list[str]:
    """Load the corpus through ``replace_source``; return the texts (for the queries)."""
    rng = np.random.default_rng(seed)
    texts = random_texts(rng, sources * per_source)
    started = time.perf_counter()
    for s in range(sources):
        source = f"src-{s:04d}"
        chunks = [
            Chunk.of(source, i, texts[s * per_source + i], metadata={"n": s % 7})
            for i in range(per_source)
        ]
        rag.replace_source(source_id=source, chunks=chunks)
        if (s + 1) % 100 == 0:
            log(f"loaded {s + 1}/{sources} sources ({time.perf_counter() - started:.0f} s)")
    return texts


def pick_queries(texts: list[str], count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < count:
        words = rng.choice(texts).split()
        n = rng.randint(3, 5)
        at = rng.randrange(0, max(1, len(words) - n))
        q = " ".join(words[at : at + n])
        if q not in out:
            out.append(q)
    return out


# -- report -------------------------------------------------------------------------------------
def summarise(batches: list[list[float]], cpu_ms: list[float]) -> dict[str, Any]:
    rates = [len(b) / max(b) for b in batches]
    p50 = [pct(b, 50) * 1000 for b in batches]
    p95 = [pct(b, 95) * 1000 for b in batches]
    return {
        "calls_per_s": {"min": min(rates), "median": statistics.median(rates), "max": max(rates)},
        "calls_per_s_runs": rates,
        "p50_ms": {"min": min(p50), "median": statistics.median(p50), "max": max(p50)},
        "p95_ms": {"min": min(p95), "median": statistics.median(p95), "max": max(p95)},
        "client_cpu_ms_per_call": {
            "min": min(cpu_ms),
            "median": statistics.median(cpu_ms),
            "max": max(cpu_ms),
        },
    }


def print_table(summary: dict[str, dict[str, dict[str, Any]]], rounds: int) -> None:
    print(f"{CALLS} concurrent retrieve calls ({N_QUERIES} distinct queries), {rounds} rounds")
    print(
        f"{'mode':7} {'path':4} {'calls/s min/median/max':>26} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'client CPU ms/call':>19}"
    )
    for mode, paths in summary.items():
        for path in PATHS:
            s = paths[path]
            r = s["calls_per_s"]
            print(
                f"{mode:7} {path:4} {r['min']:8.0f} {r['median']:8.0f} {r['max']:8.0f} "
                f"{s['p50_ms']['median']:8.1f} {s['p95_ms']['median']:8.1f} "
                f"{s['client_cpu_ms_per_call']['median']:19.2f}"
            )
        ratio_b = paths["B"]["calls_per_s"]["median"] / paths["A"]["calls_per_s"]["median"]
        ratio_c = paths["C"]["calls_per_s"]["median"] / paths["A"]["calls_per_s"]["median"]
        print(f"{mode:7} B/A {ratio_b:.2f}x  C/A {ratio_c:.2f}x")
    for path in PATHS:
        print(f"  {path}: {PATH_NAMES[path]}")


# -- main ---------------------------------------------------------------------------------------
async def measure(
    rag: Rag,
    engine: Any,
    url: str,
    query_texts: list[str],
    rounds: int,
    seed: int,
) -> tuple[dict[str, dict[str, dict[str, Any]]], int]:
    embedder = rag.embedder
    assert isinstance(embedder, HashEmbedder)
    plans = {}
    hnsw: dict[str, dict[str, Any]] = {}
    sa_count = 0
    for mode, options in MODES.items():
        plans[mode], hnsw[mode], n = capture_plans(rag, engine, query_texts, options)
        sa_count += n
        log(f"{mode}: {len(plans[mode][query_texts[0]])} statements per retrieve on psycopg")
    settings = next(h for h in hnsw.values() if h)
    assert all(not h or h == settings for h in hnsw.values()), "modes differ in HNSW settings"

    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        await register_vector_async(conn)
        await conn.execute(pyformat(queries.HNSW_SETTINGS), settings)

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url,
        min_size=POOL,
        max_size=POOL,
        kwargs={"autocommit": True},
        configure=configure,
        open=False,
    )
    await pool.open(wait=True)
    arag = AsyncRag(rag, max_threads=POOL)
    executor = ThreadPoolExecutor(POOL)
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()

    async def run(path: str, mode: str, calls: list[str]) -> list[float]:
        options = MODES[mode]
        if path == "A":
            return await batch_a(arag, calls, options)
        if path == "B":
            return await batch_b(pool, embedder, plans[mode], calls)
        # C blocks in the executor's threads; the loop only waits.
        return await loop.run_in_executor(None, batch_c, rag, executor, calls, options)

    results: dict[str, dict[str, list[list[float]]]] = {m: {p: [] for p in PATHS} for m in MODES}
    cpus: dict[str, dict[str, list[float]]] = {m: {p: [] for p in PATHS} for m in MODES}
    try:
        base = [q for q in query_texts for _ in range(CALLS // len(query_texts))]
        for mode in MODES:  # warm-up: one unmeasured batch per path
            for path in PATHS:
                await run(path, mode, base)
        for r in range(rounds):
            order = PATHS[r % 3 :] + PATHS[: r % 3]
            for mode in MODES:
                for path in order:
                    calls = base[:]
                    rng.shuffle(calls)
                    cpu = time.process_time()
                    got = await run(path, mode, calls)
                    cpus[mode][path].append((time.process_time() - cpu) / len(calls) * 1000)
                    results[mode][path].append(got)
                    log(f"round {r + 1} {mode} {path}: {len(got) / max(got):.0f} calls/s")
    finally:
        executor.shutdown()
        await pool.close()
    summary = {m: {p: summarise(results[m][p], cpus[m][p]) for p in PATHS} for m in MODES}
    return summary, sa_count


def run(url: str, args: argparse.Namespace, *, drop: bool) -> dict[str, Any]:
    schema = "aio_" + uuid.uuid4().hex[:12]
    sa_url = "postgresql+psycopg://" + url.split("://", 1)[1]
    engine = create_engine(sa_url, pool_size=POOL, max_overflow=0)
    try:
        store = PostgresStore(engine, schema=schema, create=True)
        rag = Rag(store=store, embedder=HashEmbedder(DIMS), scope=SCOPE)
        log(f"loading {args.sources * args.per_source} chunks into schema {schema}")
        started = time.perf_counter()
        texts = load(rag, args.sources, args.per_source, args.seed)
        load_s = time.perf_counter() - started
        with engine.begin() as conn:
            conn.execute(text(f'ANALYZE "{schema}".records'))
            conn.execute(text(f'ANALYZE "{schema}".record_vectors'))
        log(f"loaded in {load_s:.0f} s")
        query_texts = pick_queries(texts, N_QUERIES, args.seed)
        summary, sa_count = asyncio.run(
            measure(rag, engine, url, query_texts, args.rounds, args.seed)
        )
    finally:
        if drop:
            with engine.begin() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()
    print_table(summary, args.rounds)
    ratios = {
        m: {
            "B/A": summary[m]["B"]["calls_per_s"]["median"]
            / summary[m]["A"]["calls_per_s"]["median"],
            "C/A": summary[m]["C"]["calls_per_s"]["median"]
            / summary[m]["A"]["calls_per_s"]["median"],
        }
        for m in summary
    }
    return {
        "chunks": args.sources * args.per_source,
        "sources": args.sources,
        "load_seconds": round(load_s, 1),
        "calls_per_batch": CALLS,
        "distinct_queries": N_QUERIES,
        "pool_size": POOL,
        "rounds": args.rounds,
        "paths": PATH_NAMES,
        "latency": "per call, from the batch start to the call's end (queueing included)",
        "client_cpu": "the bench process's CPU time per call (time.process_time, all threads)",
        "sqlalchemy_statements_during_capture": sa_count,
        "results": summary,
        "ratio_of_medians": ratios,
    }


def figures_and_targets(
    summary: dict[str, dict[str, dict[str, Any]]],
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """A's and B's calls/s (one sample per round) and B/A of the medians, per mode."""
    figures: dict[str, dict[str, Any]] = {}
    targets = []
    for mode, paths in summary.items():
        what = MODE_TEXT[mode]
        figures[f"{mode}_a_calls_per_s"] = figure(
            f"{what}: A, AsyncRag (limiter of {POOL})",
            "calls/s",
            samples=paths["A"]["calls_per_s_runs"],
        )
        figures[f"{mode}_b_calls_per_s"] = figure(
            f"{what}: B, psycopg async pool (upper bound)",
            "calls/s",
            samples=paths["B"]["calls_per_s_runs"],
        )
        figures[f"{mode}_b_over_a"] = figure(
            f"{what}: B / A (medians)",
            "x",
            paths["B"]["calls_per_s"]["median"] / paths["A"]["calls_per_s"]["median"],
            ratio_of=(f"{mode}_b_calls_per_s", f"{mode}_a_calls_per_s"),
        )
        targets.append(target(f"{mode}_b_over_a", "<=", NATIVE_PAYS))
    return figures, targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sources", type=int, default=400)
    parser.add_argument("--per-source", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20241203)
    parser.add_argument("--url", help="an existing PostgreSQL with pgvector (default: embedded)")
    args = parser.parse_args(argv)
    if args.url:
        note_postgres(args.url)
        report = run(args.url, args, drop=True)
    else:
        with tempfile.TemporaryDirectory(prefix="ragport-bench-aio-") as tmp:
            log("starting an embedded server")
            with embedded_server(Path(tmp) / "data", keep_running=False) as url:
                note_postgres(url)
                report = run(url, args, drop=False)
    figures, targets = figures_and_targets(report["results"])
    write_result(
        "aio",
        figures=figures,
        targets=targets,
        quick=args.sources * args.per_source < 20_000 or args.rounds < 3,
        details={**report, "psycopg": psycopg.__version__},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
