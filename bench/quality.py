"""Retrieval quality on the Cranfield development split, through ragport.application.evaluation.

The same code as ``ragport eval`` (docs/evaluation.md): queries, qrels and metrics from
``ragport.application.evaluation``, each configuration an ``EvalConfig``. Configurations:
lexical only (the store's lexical leg: hybrid with vector weight 0), MiniLM only (vector
leg), hybrid RRF (both legs, 50 candidates per leg), and hybrid followed by each local
reranker (20 candidates per leg). Metrics: nDCG@10 (gain = grade 1-4, linear), recall@10
and MRR@10, averaged over the judged development queries; latency p50/p95 per query.

Run: .venv/bin/python bench/quality.py [--store memory|postgres] [--limit-queries N]
Document vectors are cached in bench/out/ (keyed by text hash), so a second run skips the
~1-2 minutes of MiniLM embedding on two cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import numpy as np
from _results import figure, note_postgres, target, write_result

from ragport import Chunk, Scope
from ragport.adapters.embedders import MiniLmEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.adapters.rerankers import EmbeddingReranker, FakeReranker
from ragport.application import index_chunks
from ragport.application.evaluation import (
    EvalConfig,
    EvalResult,
    evaluate,
    parse_documents,
    parse_qrels,
    parse_queries,
    retriever,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cranfield"
CACHE = Path(__file__).resolve().parent / "out"
SCOPE = Scope("bench", "cranfield", "dev")
K = 10


class CachedEmbedder:
    """Wraps an embedder with an on-disk cache keyed by the SHA-256 of each text."""

    def __init__(self, inner: MiniLmEmbedder, path: Path):
        self._inner = inner
        self._path = path
        self._cache: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path) as data:
                self._cache = {key: data[key] for key in data.files}

    @property
    def id(self) -> str:
        return self._inner.id

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        missing = [i for i, k in enumerate(keys) if k not in self._cache]
        if missing:
            vectors = self._inner.embed([texts[i] for i in missing])
            for i, vector in zip(missing, vectors, strict=True):
                self._cache[keys[i]] = vector
        return np.stack([self._cache[k] for k in keys]).astype(np.float32)

    def save(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(self._path, **self._cache)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=("memory", "postgres"), default="memory")
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument(
        "--limit-docs",
        type=int,
        default=None,
        help="index only the abstracts these queries judge plus the first N others (quick runs)",
    )
    parser.add_argument(
        "--language",
        choices=("english", "simple"),
        default="english",
        help="in-memory BM25 analyzer",
    )
    args = parser.parse_args(argv)
    corpus = parse_documents((DATA / "corpus.jsonl").read_text())
    queries = parse_queries((DATA / "queries.jsonl").read_text())
    qrels, _format = parse_qrels((DATA / "qrels.tsv").read_text())
    queries = [q for q in queries if q.id in qrels]
    if args.limit_queries:
        queries = queries[: args.limit_queries]
    if args.limit_docs is not None:
        judged = {doc_id for q in queries for doc_id in qrels[q.id]}
        others = [doc for doc in corpus if doc.id not in judged][: args.limit_docs]
        keep = judged | {doc.id for doc in others}
        corpus = [doc for doc in corpus if doc.id in keep]
    embedder = CachedEmbedder(MiniLmEmbedder(), CACHE / "cranfield-minilm.npz")
    with ExitStack() as stack:
        if args.store == "memory":
            store = InMemoryStore(lexical_language=args.language)
            mode = "bm25"
        else:
            from ragport.adapters.postgres import PostgresStore, embedded_server

            url = stack.enter_context(
                embedded_server(tempfile.mkdtemp() + "/pg", keep_running=False)
            )
            note_postgres(url)
            store = PostgresStore(url, schema="quality", create=True)
            stack.callback(store.engine.dispose)
            mode = "bm25"
        t0 = time.perf_counter()
        chunks = [Chunk.of(doc.id, 0, doc.text) for doc in corpus]
        index_chunks(chunks=chunks, embedder=embedder, store=store, scope=SCOPE, batch_size=128)
        embedder.save()
        analyzer = args.language if args.store == "memory" else "PostgreSQL english"
        print(
            f"store={args.store} (lexical analyzer: {analyzer}): indexed {len(chunks)} abstracts "
            f"in {time.perf_counter() - t0:.1f} s; {len(queries)} judged development queries"
        )
        configs = [
            EvalConfig(f"{'BM25' if mode == 'bm25' else 'PostgreSQL FTS'} only (lexical leg)",
                       mode="lexical", lexical=mode, candidates=50),
            EvalConfig("MiniLM only (vector leg)", mode="vector"),
            EvalConfig("hybrid RRF (k=60, 50 candidates per leg)", mode="hybrid", lexical=mode,
                       candidates=50),
            EvalConfig("hybrid + EmbeddingReranker(MiniLM)", mode="hybrid", lexical=mode,
                       candidates=20, reranker=EmbeddingReranker(embedder), rerank="embedding"),
            EvalConfig("hybrid + FakeReranker (term overlap)", mode="hybrid", lexical=mode,
                       candidates=20, reranker=FakeReranker(), rerank="fake"),
        ]  # fmt: skip
        results: list[EvalResult] = []
        for config in configs:
            run = retriever(config, embedder=embedder, store=store, scope=SCOPE, depth=K)
            row = evaluate(queries, qrels, run, config, k=K)
            results.append(row)
            print(
                f"{row.config:<44} nDCG@10 {row.ndcg:.3f}  recall@10 {row.recall:.3f}  "
                f"MRR@10 {row.mrr:.3f}  p50 {row.p50_ms:.1f} ms  p95 {row.p95_ms:.1f} ms"
            )
    summary = {
        r.config: {
            "ndcg@10": r.ndcg,
            "recall@10": r.recall,
            "mrr@10": r.mrr,
            "p50_ms": r.p50_ms,
            "p95_ms": r.p95_ms,
            "queries": r.queries,
        }
        for r in results
    }
    (CACHE / f"quality-{args.store}.json").write_text(json.dumps(summary, indent=2))
    names = ("lexical", "vector", "hybrid", "rerank_embedding", "rerank_fake")
    figures: dict[str, dict[str, object]] = {}
    for key, r in zip(names, results, strict=True):
        figures[f"{key}_ndcg"] = figure(f"{r.config}: nDCG@10", "", r.ndcg)
        if not key.startswith("rerank"):  # the rerankers' recall: in details (summary)
            figures[f"{key}_recall"] = figure(f"{r.config}: recall@10", "", r.recall)
    figures["hybrid_mrr"] = figure(f"{results[2].config}: MRR@10", "", results[2].mrr)
    figures["hybrid_p50_ms"] = figure(
        f"{results[2].config}: p50 per query", "ms", results[2].p50_ms
    )
    # The targets RESULTS.md states: the hybrid reaches nDCG@10 0.39 in memory (English
    # analyzer) and 0.392 on PostgreSQL (issue 17), over the 150 judged development queries.
    bound = 0.392 if args.store == "postgres" else 0.39
    name = f"quality_{args.store}" + ("_simple" if args.language == "simple" else "")
    write_result(
        name,
        figures=figures,
        targets=[target("hybrid_ndcg", ">=", bound)],
        details={
            "queries": len(queries),
            "abstracts": len(corpus),
            "analyzer": analyzer,
            "summary": summary,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
