"""The SQLite example store (examples/sqlite_store) against InMemoryStore: one vector query.

One scope of 20,000 chunks (200 sources of 100, 384-dimension SHA-256 vectors, written in
one unit of work per store, outside the timing). Per store, ``store.query(scope, v, limit=10)``
over 100 query vectors, alternating the stores query by query (a change in the machine's load
reaches all of them); median wall and process-CPU time per query. The SQLite store runs with
its ``search_vectors`` pushdown (its first query after a commit builds the scope's matrix:
reported apart as "cold") and, for a few queries, without any pushdown
(``BackendStore(backend, pushdown=False)``: the engine walks ``nearest()``, every row). Also
a ``retrieve_context`` (vector leg, top 5) on the store without pushdowns, counting the
``rows()`` calls it makes: 0 (the drift guard reads the scope's embedder claim).

Target (issue 41): the SQLite store's vector query within 3x InMemoryStore's.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_sqlite_example.py [--quick]
(--quick: 2,000 chunks, 30 queries).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _results import figure, ratio, target, write_result

from ragport import RetrievalRequest, Scope
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application import retrieve_context
from ragport.domain.model import Record
from ragport.engine import BackendStore

DIMS = 384
PER_SOURCE = 100
SCOPE = Scope("bench", "sqlite", "corpus")
EMBEDDER = HashEmbedder(DIMS)


def _write(store: Any, chunks: int) -> None:
    """``chunks`` records with SHA-256 vectors, one unit of work, one generation."""
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((chunks, DIMS)).astype(np.float32)
    with store.unit_of_work(SCOPE) as uow:
        generation = uow.generations.stage()
        records = [
            Record(
                id=f"src-{i // PER_SOURCE:04d}#{i % PER_SOURCE + 1:04d}",
                scope=SCOPE,
                source_id=f"src-{i // PER_SOURCE:04d}",
                kind="chunk",
                text=f"chunk {i} of the bench corpus",
                embedder_id=EMBEDDER.id,
                dimensions=DIMS,
                generation=generation,
            )
            for i in range(chunks)
        ]
        uow.records.add(records, vectors)
        uow.generations.publish(generation)
        uow.commit()


def _timed(call: Callable[[], object]) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    call()
    return (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3


def _counting_backend(path: Path) -> Any:
    """The example's backend (examples/sqlite_store, put on sys.path here), counting the
    rows() calls of its read views."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "sqlite_store"))
    from ragport_sqlite import SqliteBackend

    class CountingBackend(SqliteBackend):
        rows_calls = 0

        def read(self, scope: Scope) -> Any:
            return _Counted(super().read(scope), self)

    return CountingBackend(path)


class _Counted:
    def __init__(self, block: Any, backend: Any) -> None:
        self._block, self._backend = block, backend

    def __enter__(self) -> Any:
        view = self._block.__enter__()
        rows, backend = view.rows, self._backend

        def counted(**kw: Any) -> Any:
            backend.rows_calls += 1
            return rows(**kw)

        view.rows = counted
        return view

    def __exit__(self, *exc: Any) -> Any:
        return self._block.__exit__(*exc)


def run(chunks: int, queries: int, generic_queries: int) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    qvecs = rng.standard_normal((queries, DIMS)).astype(np.float32)
    memory = InMemoryStore()
    with tempfile.TemporaryDirectory(prefix="ragport-bench-sqlite-") as tmp:
        backend = _counting_backend(Path(tmp) / "store.db")
        sqlite, generic = BackendStore(backend), BackendStore(backend, pushdown=False)
        t0 = time.perf_counter()
        _write(memory, chunks)
        _write(sqlite, chunks)
        print(f"wrote {chunks:,} chunks to both stores in {time.perf_counter() - t0:.1f} s")
        cold = _timed(lambda: sqlite.query(SCOPE, qvecs[0], limit=10))
        memory.query(SCOPE, qvecs[0], limit=10)  # builds its matrix too
        times: dict[str, list[tuple[float, float]]] = {"memory": [], "sqlite": []}
        for q in qvecs:
            times["memory"].append(_timed(lambda q=q: memory.query(SCOPE, q, limit=10)))
            times["sqlite"].append(_timed(lambda q=q: sqlite.query(SCOPE, q, limit=10)))
        same = all(
            [s.record.id for s in memory.query(SCOPE, q, limit=10)]
            == [s.record.id for s in sqlite.query(SCOPE, q, limit=10)]
            for q in qvecs[:10]
        )
        times["generic"] = [
            _timed(lambda q=q: generic.query(SCOPE, q, limit=10)) for q in qvecs[:generic_queries]
        ]
        backend.rows_calls = 0
        request = RetrievalRequest(top_k=5)
        retrieve_context(
            "chunk of the corpus", embedder=EMBEDDER, store=generic, scope=SCOPE, request=request
        )
        rows_calls = backend.rows_calls
    out: dict[str, Any] = {"chunks": chunks, "cold_ms": cold[0], "same_hits": same}
    out["rows_calls_per_retrieve"] = rows_calls
    for name, samples in times.items():
        out[f"{name}_ms"] = [w for w, _ in samples]
        out[f"{name}_cpu_ms"] = [c for _, c in samples]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 chunks, 30 queries")
    args = parser.parse_args(argv)
    chunks, queries, generic = (2_000, 30, 3) if args.quick else (20_000, 100, 5)
    found = run(chunks, queries, generic)
    med = {k: statistics.median(v) for k, v in found.items() if isinstance(v, list)}
    n = f"{chunks:,}"
    print(
        f"vector query over {n} chunks, median ms (CPU ms): InMemoryStore "
        f"{med['memory_ms']:.2f} ({med['memory_cpu_ms']:.2f}); SQLite with its pushdown "
        f"{med['sqlite_ms']:.2f} ({med['sqlite_cpu_ms']:.2f}), cold {found['cold_ms']:.0f}; "
        f"SQLite without pushdowns {med['generic_ms']:.0f} ({med['generic_cpu_ms']:.0f}); "
        f"ratio {med['sqlite_ms'] / med['memory_ms']:.2f}x; same hits: {found['same_hits']}; "
        f"rows() calls in a retrieve without pushdowns: {found['rows_calls_per_retrieve']}"
    )
    write_result(
        "sqlite_example",
        quick=args.quick,
        figures={
            "memory_ms": figure(
                f"InMemoryStore: vector query, {n} chunks", "ms", samples=found["memory_ms"]
            ),
            "sqlite_ms": figure(
                f"SQLite example, search_vectors pushdown: vector query, {n} chunks",
                "ms",
                samples=found["sqlite_ms"],
            ),
            "sqlite_cold_ms": figure(
                "SQLite example: first query after a commit", "ms", found["cold_ms"]
            ),
            "generic_ms": figure(
                f"SQLite example without pushdowns: vector query, {n} chunks",
                "ms",
                samples=found["generic_ms"],
            ),
            "ratio": ratio(
                "SQLite example / InMemoryStore, vector query",
                med["sqlite_ms"],
                med["memory_ms"],
                ("sqlite_ms", "memory_ms"),
            ),
            "rows_calls": figure(
                "rows() calls in one retrieve_context without pushdowns",
                "",
                found["rows_calls_per_retrieve"],
            ),
        },
        targets=[target("ratio", "<=", 3.0), target("rows_calls", "<=", 0)],
        details={"same_hits": found["same_hits"]},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
