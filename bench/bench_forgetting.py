"""Forgetting and moving benchmarks (issue 6): deletion propagation and re-pointing.

1. Tombstoning 1,001 ids through ``DeletionPropagator.propagate``: one source (3 chunks) with
   1,000 derived records resting on it, so the closure is the source + 1,000 records. Each run
   uses a fresh scope (seeded in one transaction, outside the timing). Statements are counted
   with a ``before_cursor_execute`` listener on the store's engine: all of ``propagate``, the
   ones inside its unit of work (lock, closure reads, tombstone inserts) and the tombstone
   INSERTs alone. Median wall time over the runs. No handlers, so this is the tombstone path.
2. Re-pointing 10,000 chunk rows of one source with ``repoint_source(page_size=4096)``,
   page after page until the cursor is ``None``: pages, time per page, total time, rows/s.
   Rows carry 384-dimension float32 vectors and 300-500 characters of text (PostgreSQL keeps
   a generated tsvector on them; since migration 4 the vectors and their HNSW index are in
   ``record_vectors``, so a re-keyed row is a new version of the narrow ``records`` row only,
   its vector untouched). The rows are written with one ``records.add`` (outside the timing).
3. The same two measurements on the in-memory store, for comparison.

Run: .venv/bin/python bench/bench_forgetting.py [--quick] [--url URL]
(default: an embedded server in a temporary directory, stopped at the end; --quick: 1 run
and 1,000 rows.) Compare figures measured in one run: these machines are shared and noisy.
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
from _results import figure, note_postgres, target, write_result
from sqlalchemy import event, text

from ragport import Authorization, Grant, Scope
from ragport.adapters.memory import InMemoryStore
from ragport.adapters.postgres import PostgresStore, embedded_server
from ragport.application import create_deletion_propagator, repoint_source
from ragport.application.propagation import TOMBSTONE_BATCH
from ragport.domain import Record
from ragport.domain.model import chunk_id

TENANT = "bench"
ADMIN = Authorization("admin", TENANT)
DIMS = 384
EMBEDDER_ID = f"bench-random:{DIMS}"
DERIVED = 1_000
REPOINT_ROWS = 10_000
PAGE_SIZE = 4_096
WORDS = [
    "policy",
    "leave",
    "payment",
    "approval",
    "security",
    "access",
    "review",
    "contract",
    "warehouse",
    "shipment",
    "dispatcher",
    "manager",
    "quarter",
    "password",
    "rotation",
    "audit",
    "ledger",
    "invoice",
    "customer",
    "freight",
]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    matrix = rng.normal(size=(n, DIMS)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def texts(rng: np.random.Generator, n: int, prefix: str) -> list[str]:
    out = []
    for i in range(n):
        words = rng.choice(WORDS, size=int(rng.integers(40, 60)))
        out.append(f"{prefix} {i} " + " ".join(words))
    return out


def chunk_records(scope: Scope, source: str, bodies: Sequence[str], generation: int) -> list:
    return [
        Record(
            id=chunk_id(source, i),
            scope=scope,
            source_id=source,
            kind="chunk",
            text=body,
            metadata={"n": i},
            embedder_id=EMBEDDER_ID,
            dimensions=DIMS,
            generation=generation,
            chunk_index=i,
            start=0,
            end=len(body),
        )
        for i, body in enumerate(bodies)
    ]


def seed_closure(store: Any, scope: Scope, rng: np.random.Generator) -> None:
    """``doc`` (3 chunks) and DERIVED derived records on it, one transaction, granted to admin."""
    notes = texts(rng, DERIVED, "note")
    with store.unit_of_work(scope) as uow:
        generation = uow.generations.stage()
        chunks = chunk_records(scope, "doc", texts(rng, 3, "doc"), generation)
        uow.records.add(chunks, unit_vectors(rng, len(chunks)))
        derived = [
            Record(
                id=f"note-{n:05d}",
                scope=scope,
                source_id=f"note-{n:05d}",
                kind="derived",
                text=body,
                embedder_id=EMBEDDER_ID,
                dimensions=DIMS,
                generation=generation,
                lineage=("doc",),
                roots=("doc",),
            )
            for n, body in enumerate(notes)
        ]
        uow.records.add(derived, unit_vectors(rng, len(derived)))
        uow.generations.publish(generation)
        uow.grants.set([Grant("doc", principal_ids=("admin",))])
        uow.commit()


def seed_rows(store: Any, scope: Scope, rng: np.random.Generator, rows: int) -> None:
    bodies = texts(rng, rows, "row")
    with store.unit_of_work(scope) as uow:
        generation = uow.generations.stage()
        uow.records.add(chunk_records(scope, "big", bodies, generation), unit_vectors(rng, rows))
        uow.generations.publish(generation)
        uow.commit()


class Statements:
    """Counts statements on an engine; ``inside`` is set while a unit of work is open."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.inside = False
        self.all: list[str] = []
        self.in_uow: list[str] = []

    def _on_execute(self, conn, cursor, statement, parameters, context, executemany) -> None:
        compact = " ".join(statement.split())
        self.all.append(compact)
        if self.inside:
            self.in_uow.append(compact)

    def __getattr__(self, name: str) -> Any:  # the store, seen by the propagator
        return getattr(self.store, name)

    @contextlib.contextmanager
    def unit_of_work(self, scope: Scope) -> Iterator[Any]:
        self.inside = True
        try:
            with self.store.unit_of_work(scope) as uow:
                yield uow
        finally:
            self.inside = False

    @contextlib.contextmanager
    def counting(self) -> Iterator[Statements]:
        self.all, self.in_uow = [], []
        event.listen(self.store.engine, "before_cursor_execute", self._on_execute)
        try:
            yield self
        finally:
            event.remove(self.store.engine, "before_cursor_execute", self._on_execute)


def bench_propagate(store: Any, runs: int, label: str) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    times: list[float] = []
    counts: list[tuple[int, int, int]] = []
    for run in range(runs):
        scope = Scope(TENANT, "forget", f"{label}-{run}-{uuid.uuid4().hex[:8]}")
        seed_closure(store, scope, rng)
        if isinstance(store, PostgresStore):
            counter = Statements(store)
            with counter.counting():
                start = time.perf_counter()
                result = create_deletion_propagator(
                    scope=scope, store=counter, authorization=ADMIN
                ).propagate("doc")
                times.append(time.perf_counter() - start)
            inserts = [
                s for s in counter.in_uow if s.startswith("INSERT INTO") and ".tombstones" in s
            ]
            counts.append((len(counter.all), len(counter.in_uow), len(inserts)))
        else:
            start = time.perf_counter()
            result = create_deletion_propagator(
                scope=scope, store=store, authorization=ADMIN
            ).propagate("doc")
            times.append(time.perf_counter() - start)
        assert result.tombstoned == DERIVED + 1, result.tombstoned
        log(f"{label}: propagate run {run + 1}/{runs}: {times[-1] * 1e3:.1f} ms")
    out: dict[str, Any] = {
        "ids": DERIVED + 1,
        "runs": runs,
        "median_ms": statistics.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "max_ms": max(times) * 1e3,
        "batches": -(-(DERIVED + 1) // TOMBSTONE_BATCH),
        "times_ms": [t * 1e3 for t in times],
    }
    if counts:
        assert len(set(counts)) == 1, counts
        out["statements"], out["in_uow"], out["tombstone_inserts"] = counts[0]
    return out


def bench_repoint(store: Any, rows: int, label: str) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    scope = Scope(TENANT, "repoint", f"{label}-{uuid.uuid4().hex[:8]}")
    log(f"{label}: writing {rows:,} rows of one source")
    started = time.perf_counter()
    seed_rows(store, scope, rng, rows)
    log(f"{label}: written in {time.perf_counter() - started:.1f} s; re-pointing")
    pages: list[tuple[int, float]] = []
    cursor: str | None = None
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        page = repoint_source(
            scope=scope,
            store=store,
            from_id="big",
            to_id="big-renamed",
            page_size=PAGE_SIZE,
            cursor=cursor,
        )
        pages.append((page.moved_chunks, time.perf_counter() - t0))
        cursor = page.cursor
        if cursor is None:
            break
    total = time.perf_counter() - start
    moved = sum(n for n, _ in pages)
    assert moved == rows, (moved, rows)
    assert not store.get_by_source(scope, "big")
    return {
        "rows": rows,
        "page_size": PAGE_SIZE,
        "pages": len(pages),
        "page_rows": [n for n, _ in pages],
        "page_ms": [round(t * 1e3, 1) for _, t in pages],
        "total_s": total,
        "rows_per_s": rows / total,
    }


def report(name: str, propagate: dict[str, Any], repoint: dict[str, Any]) -> None:
    line = (
        f"{name}: propagate {propagate['ids']:,} ids: median {propagate['median_ms']:.1f} ms "
        f"(min {propagate['min_ms']:.1f}, max {propagate['max_ms']:.1f}) over "
        f"{propagate['runs']} runs, {propagate['batches']} tombstone batch(es)"
    )
    if "statements" in propagate:
        line += (
            f"; statements: {propagate['statements']} in propagate, {propagate['in_uow']} in "
            f"the unit of work, {propagate['tombstone_inserts']} tombstone INSERT(s)"
        )
    print(line)
    print(
        f"{name}: repoint {repoint['rows']:,} rows, page_size {repoint['page_size']:,}: "
        f"{repoint['pages']} pages {repoint['page_rows']} in {repoint['page_ms']} ms; "
        f"total {repoint['total_s']:.2f} s, {repoint['rows_per_s']:,.0f} rows/s"
    )


def run_postgres(url: str, runs: int, rows: int) -> tuple[dict[str, Any], dict[str, Any]]:
    note_postgres(url)
    schema = "bench_forget_" + uuid.uuid4().hex[:8]
    store = PostgresStore(url, schema=schema, create=True)
    try:
        store.prepare(Scope(TENANT, "forget", "prepare"), dimensions=DIMS)
        return bench_propagate(store, runs, "postgres"), bench_repoint(store, rows, "postgres")
    finally:
        with store.engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        store.engine.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 run, 1,000 rows (smoke test)")
    parser.add_argument(
        "--url", default=None, help="postgresql:// URL instead of an embedded server"
    )
    args = parser.parse_args(argv)
    runs = 1 if args.quick else 5
    rows = 1_000 if args.quick else REPOINT_ROWS

    memory = InMemoryStore()
    mem_propagate = bench_propagate(memory, runs, "memory")
    mem_repoint = bench_repoint(memory, rows, "memory")
    if args.url:
        pg_propagate, pg_repoint = run_postgres(args.url, runs, rows)
    else:
        with tempfile.TemporaryDirectory(prefix="ragport-bench-forget-") as tmp:
            log("starting an embedded server")
            with embedded_server(Path(tmp) / "data", keep_running=False) as url:
                pg_propagate, pg_repoint = run_postgres(url, runs, rows)
    report("postgres", pg_propagate, pg_repoint)
    report("memory", mem_propagate, mem_repoint)
    ids = f"{pg_propagate['ids']:,}"
    write_result(
        "forgetting",
        quick=args.quick,
        figures={
            "pg_propagate_ms": figure(
                f"PostgreSQL: propagate a deletion to {ids} ids",
                "ms",
                samples=pg_propagate["times_ms"],
            ),
            "pg_propagate_statements": figure(
                "PostgreSQL: statements in propagate", "", pg_propagate.get("statements")
            ),
            "pg_repoint_rows_per_s": figure(
                f"PostgreSQL: repoint_source of {pg_repoint['rows']:,} rows",
                "rows/s",
                pg_repoint["rows_per_s"],
            ),
            "memory_propagate_ms": figure(
                f"in memory: propagate to {ids} ids", "ms", samples=mem_propagate["times_ms"]
            ),
            "memory_repoint_rows_per_s": figure(
                f"in memory: repoint_source of {mem_repoint['rows']:,} rows",
                "rows/s",
                mem_repoint["rows_per_s"],
            ),
        },
        targets=[target("pg_repoint_rows_per_s", ">=", 5000)],
        details={"postgres": {"propagate": pg_propagate, "repoint": pg_repoint}},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
