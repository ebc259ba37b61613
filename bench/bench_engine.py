"""The engine over a backend with no pushdown: what one retrieve reads, and how long it takes.

``BackendStore(MemoryBackend())`` at 1,000 / 4,000 / 16,000 chunks (100 per source,
``HashEmbedder(256)``): per ``retrieve_context`` (vector leg, top 5), the number of
``rows()`` calls, the rows they returned, and the median wall and process-CPU time over the
queries. Before issue 41 the drift guard read every row of the scope per query (1k / 4k / 16k
rows); the engine now reads the scope's embedder claim from its state instead. What is left
per query is ``MemoryBackend.nearest`` itself (brute-force cosine over every row, as the
port allows): a backend with a ``search_vectors`` pushdown or a lazy index avoids it.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_engine.py [--quick]
(the script only uses names that existed before issue 41, so it runs on an older tree too:
``PYTHONPATH=<old tree> .venv/bin/python bench/bench_engine.py`` gives the "before").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from bench_foundation import WORDS

from ragport import Chunk, RetrievalRequest, Scope
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory.backend import MemoryBackend
from ragport.application import replace_source, retrieve_context
from ragport.engine import BackendStore


class _Counted:
    """A reader that counts ``rows()`` calls and the rows they return."""

    def __init__(self, inner: Any, owner: Counting) -> None:
        self._inner, self._owner = inner, owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def rows(self, **narrow: Any) -> list[Any]:
        found = list(self._inner.rows(**narrow))
        self._owner.calls += 1
        self._owner.rows += len(found)
        return found


class Counting(MemoryBackend):
    """MemoryBackend whose reads count what ``rows()`` returns (writes are not counted)."""

    provider = "counting"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.rows = 0

    @contextmanager
    def read(self, scope: Scope) -> Iterator[Any]:
        with super().read(scope) as reader:
            yield _Counted(reader, self)


def measure(n_chunks: int, n_queries: int) -> dict[str, float]:
    rng = np.random.default_rng(5)
    embedder = HashEmbedder(256)
    backend = Counting()
    store = BackendStore(backend)
    scope = Scope("bench", "engine", f"n{n_chunks}")
    per_source = 100
    for s in range(n_chunks // per_source):
        chunks = [
            Chunk.of(f"src-{s:04d}", i, " ".join(rng.choice(WORDS, size=12)) + f" item{s}-{i}")
            for i in range(per_source)
        ]
        replace_source(
            source_id=f"src-{s:04d}", chunks=chunks, embedder=embedder, store=store, scope=scope
        )
    request = RetrievalRequest(top_k=5)
    queries = [" ".join(rng.choice(WORDS, size=4)) for _ in range(n_queries)]
    retrieve_context(queries[0], embedder=embedder, store=store, scope=scope, request=request)
    backend.calls = backend.rows = 0
    times, cpu = [], []
    for q in queries:
        t0, c0 = time.perf_counter(), time.process_time()
        retrieve_context(q, embedder=embedder, store=store, scope=scope, request=request)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {
        "chunks": n_chunks,
        "rows_calls_per_query": backend.calls / n_queries,
        "rows_read_per_query": backend.rows / n_queries,
        "ms_median": statistics.median(times) * 1e3,
        "cpu_ms_median": statistics.median(cpu) * 1e3,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="1k and 4k chunks, 10 queries")
    args = parser.parse_args(argv)
    sizes = (1_000, 4_000) if args.quick else (1_000, 4_000, 16_000)
    for n in sizes:
        m = measure(n, 10 if args.quick else 30)
        print(
            f"BackendStore(MemoryBackend()) {m['chunks']:>6,} chunks: retrieve_context median "
            f"{m['ms_median']:8.2f} ms/query (CPU {m['cpu_ms_median']:7.2f} ms); rows() calls/query {m['rows_calls_per_query']:.1f}, "
            f"rows read/query {m['rows_read_per_query']:,.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
