"""Foundation benchmarks for the in-memory path.

1. replace_source of a ~1 MB Markdown document (chunk + embed + one transaction), median.
2. 100 queries through retrieve_context over 10,000 chunks, against a bare numpy
   matrix-vector top-k over the same normalised matrix. Query vectors are precomputed for
   both sides, so the ratio measures ragport's own overhead (validation, store predicate,
   rechecks, rendering), not the embedder. The two sides alternate, 9 rounds of 100 queries
   each; the ratio of the medians is printed for wall-clock time and for this process's CPU
   time (which leaves out the time other processes of a shared machine hold the CPU).

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_foundation.py [--quick]
(one BLAS thread: with two, the bare matvec spins against other work on a shared machine).
Compare ratios measured in one run: these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from collections.abc import Sequence

import numpy as np
from _results import figure, ratio, target, write_result

from ragport import Chunk, RetrievalRequest, Scope, WriteOptions
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application import replace_source, retrieve_context
from ragport.domain import chunk_markdown

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
    "key",
    "rotation",
    "audit",
    "ledger",
    "invoice",
    "customer",
    "freight",
    "carrier",
    "customs",
    "border",
    "pallet",
    "forklift",
    "inventory",
    "safety",
    "training",
    "course",
]


def markdown_document(target_chars: int, seed: int = 7) -> str:
    rng = np.random.default_rng(seed)
    parts: list[str] = []
    size = 0
    section = 0
    while size < target_chars:
        section += 1
        parts.append(f"\n## Section {section}\n\n")
        for _ in range(int(rng.integers(2, 6))):
            sentence_count = int(rng.integers(3, 8))
            sentences = []
            for _ in range(sentence_count):
                words = rng.choice(WORDS, size=int(rng.integers(6, 16)))
                sentences.append(" ".join(words).capitalize() + ".")
            parts.append(" ".join(sentences) + "\n\n")
        size = sum(len(p) for p in parts)
    return ("# Handbook\n" + "".join(parts))[:target_chars]


class PrecomputedEmbedder:
    """Answers repeated texts from a cache, keeping embedding out of the timings."""

    def __init__(self, inner: HashEmbedder):
        self._inner = inner
        self._cache: dict[str, np.ndarray] = {}

    @property
    def id(self) -> str:
        return self._inner.id

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self._cache]
        if missing:
            for text, vector in zip(missing, self._inner.embed(missing), strict=True):
                self._cache[text] = np.asarray(vector, dtype=np.float32)
        if len(texts) == 1:  # a query: a fresh (1, d) copy, without np.stack's own overhead
            return self._cache[texts[0]][None, :].copy()
        return np.stack([self._cache[t] for t in texts])


def bench_replace(runs: int) -> dict[str, float]:
    doc = markdown_document(1_000_000)
    embedder = HashEmbedder(256)
    chunk_times, replace_times = [], []
    for run in range(runs):
        store = InMemoryStore()
        scope = Scope("bench", "replace", f"run-{run}")
        t0 = time.perf_counter()
        chunks = chunk_markdown(doc, source_id="handbook")
        t1 = time.perf_counter()
        replace_source(
            source_id="handbook",
            chunks=chunks,
            embedder=embedder,
            store=store,
            scope=scope,
            content_hash=hashlib.sha256(doc.encode()).hexdigest(),
            write_options=WriteOptions(batch_size=128),
        )
        t2 = time.perf_counter()
        chunk_times.append(t1 - t0)
        replace_times.append(t2 - t1)
    return {
        "doc_chars": len(doc),
        "chunks": len(chunks),
        "chunk_ms_median": statistics.median(chunk_times) * 1e3,
        "replace_ms_median": statistics.median(replace_times) * 1e3,
        "chunk_ms": [t * 1e3 for t in chunk_times],
        "replace_ms": [t * 1e3 for t in replace_times],
    }


def bench_retrieve(n_chunks: int, n_queries: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(11)
    base = HashEmbedder(256)
    embedder = PrecomputedEmbedder(base)
    store = InMemoryStore()
    scope = Scope("bench", "retrieve", "corpus")
    per_source = 100
    texts: list[str] = []
    for s in range(n_chunks // per_source):
        chunks = []
        for i in range(per_source):
            words = rng.choice(WORDS, size=20)
            text = " ".join(words) + f" item{s * per_source + i}"
            chunks.append(Chunk.of(f"src-{s:04d}", i, text))
            texts.append(text)
        replace_source(
            source_id=f"src-{s:04d}",
            chunks=chunks,
            embedder=embedder,
            store=store,
            scope=scope,
            write_options=WriteOptions(batch_size=128),
        )
    queries = [" ".join(rng.choice(WORDS, size=4)) for _ in range(n_queries)]
    embedder.embed(queries)  # precompute
    matrix = embedder.embed(texts)
    matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    qvecs = embedder.embed(queries)
    k = 5
    retrieve_context(
        queries[0], embedder=embedder, store=store, scope=scope, request=RetrievalRequest(top_k=k)
    )  # warm index

    request = RetrievalRequest(top_k=k, query_candidates=20)  # built once, as a host does

    def run_ragport() -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        for q in queries:
            retrieve_context(q, embedder=embedder, store=store, scope=scope, request=request)
        return (time.perf_counter() - t0) / len(queries), (time.process_time() - c0) / len(queries)

    def run_numpy() -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        for qv in qvecs:
            scores = matrix @ qv
            top = np.argpartition(scores, -20)[-20:]
            top[np.argsort(-scores[top])][:k]
        return (time.perf_counter() - t0) / len(queries), (time.process_time() - c0) / len(queries)

    ours: list[tuple[float, float]] = []
    bare: list[tuple[float, float]] = []
    for _ in range(repeats):  # alternating: a change in the machine's load reaches both sides
        ours.append(run_ragport())
        bare.append(run_numpy())
    wall_ours = statistics.median(w for w, _ in ours)
    wall_bare = statistics.median(w for w, _ in bare)
    cpu_ours = statistics.median(c for _, c in ours)
    cpu_bare = statistics.median(c for _, c in bare)
    return {
        "chunks": n_chunks,
        "queries": n_queries,
        "ragport_ms_median": wall_ours * 1e3,
        "numpy_ms_median": wall_bare * 1e3,
        "ratio": wall_ours / wall_bare,
        "ragport_cpu_ms_median": cpu_ours * 1e3,
        "numpy_cpu_ms_median": cpu_bare * 1e3,
        "cpu_ratio": cpu_ours / cpu_bare,
        "ragport_ms": [w * 1e3 for w, _ in ours],
        "numpy_ms": [w * 1e3 for w, _ in bare],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer runs (smoke test)")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else 5
    replace = bench_replace(runs)
    print(
        f"replace_source 1 MB Markdown: {replace['doc_chars']:,} chars, "
        f"{replace['chunks']} chunks; "
        f"chunking median {replace['chunk_ms_median']:.1f} ms; "
        f"replace (embed + write) median {replace['replace_ms_median']:.1f} ms over {runs} runs"
    )
    retrieve = bench_retrieve(2_000 if args.quick else 10_000, 100, 1 if args.quick else 9)
    print(
        f"retrieve_context over {retrieve['chunks']:,} chunks, {retrieve['queries']} queries: "
        f"median {retrieve['ragport_ms_median']:.3f} ms/query; bare numpy top-k "
        f"{retrieve['numpy_ms_median']:.3f} ms/query; ratio {retrieve['ratio']:.2f}x "
        f"(process CPU time: {retrieve['ragport_cpu_ms_median']:.3f} / "
        f"{retrieve['numpy_cpu_ms_median']:.3f} ms/query, {retrieve['cpu_ratio']:.2f}x)"
    )
    n = f"{retrieve['chunks']:,}"
    write_result(
        "foundation",
        quick=args.quick,
        figures={
            "chunk_ms": figure(
                "chunk_markdown of 1 MB Markdown", "ms", samples=replace["chunk_ms"]
            ),
            "replace_ms": figure(
                f"replace_source of its {replace['chunks']} chunks (HashEmbedder)",
                "ms",
                samples=replace["replace_ms"],
            ),
            "ragport_ms": figure(
                f"retrieve_context per query, {n} chunks", "ms", samples=retrieve["ragport_ms"]
            ),
            "numpy_ms": figure("bare numpy top-k per query", "ms", samples=retrieve["numpy_ms"]),
            "ratio": ratio(
                "retrieve ratio ragport / bare numpy (wall, medians)",
                retrieve["ragport_ms_median"],
                retrieve["numpy_ms_median"],
                ("ragport_ms", "numpy_ms"),
            ),
            "cpu_ratio": figure("same ratio in process CPU time", "x", retrieve["cpu_ratio"]),
        },
        targets=[target("ratio", "<=", 1.3)],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
