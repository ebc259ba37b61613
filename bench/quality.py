"""Retrieval quality on the Cranfield development split, through ragport's public API.

Configurations: BM25 only (the store's lexical leg), MiniLM only (``retrieve_context``
vector leg), hybrid RRF (both legs), and hybrid followed by each local reranker. Metrics:
nDCG@10 (graded gains 1-4) and recall@10, averaged over the judged development queries.

Run: .venv/bin/python bench/quality.py [--store memory|postgres] [--limit-queries N]
Document vectors are cached in bench/out/ (keyed by text hash), so a second run skips the
~1-2 minutes of MiniLM embedding on two cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from ragport import Chunk, Scope, index_chunks, retrieve_context
from ragport.adapters.embedders import MiniLmEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.adapters.rerankers import EmbeddingReranker, FakeReranker

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


def load() -> tuple[list[dict[str, str]], list[dict[str, str]], dict[str, dict[str, int]]]:
    corpus = [json.loads(line) for line in (DATA / "corpus.jsonl").read_text().splitlines()]
    queries = [json.loads(line) for line in (DATA / "queries.jsonl").read_text().splitlines()]
    qrels: dict[str, dict[str, int]] = {}
    for line in (DATA / "qrels.tsv").read_text().splitlines()[1:]:
        qid, did, gain = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(gain)
    return corpus, [q for q in queries if q["id"] in qrels], qrels


def ndcg(ranked: Sequence[str], gains: dict[str, int], k: int = K) -> float:
    dcg = sum(gains.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall(ranked: Sequence[str], gains: dict[str, int], k: int = K) -> float:
    return len(set(ranked[:k]) & set(gains)) / len(gains) if gains else 0.0


def evaluate(name: str, run: Callable[[str], list[str]], queries, qrels) -> dict[str, float]:
    scores, recalls, times = [], [], []
    for q in queries:
        t0 = time.perf_counter()
        ranked = run(q["text"])
        times.append(time.perf_counter() - t0)
        scores.append(ndcg(ranked, qrels[q["id"]]))
        recalls.append(recall(ranked, qrels[q["id"]]))
    row = {
        "ndcg@10": statistics.mean(scores),
        "recall@10": statistics.mean(recalls),
        "p50_ms": statistics.median(times) * 1e3,
    }
    print(
        f"{name:<44} nDCG@10 {row['ndcg@10']:.3f}  recall@10 {row['recall@10']:.3f}  p50 {row['p50_ms']:.1f} ms"
    )
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=("memory", "postgres"), default="memory")
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument(
        "--language",
        choices=("english", "simple"),
        default="english",
        help="in-memory BM25 analyzer",
    )
    args = parser.parse_args(argv)
    corpus, queries, qrels = load()
    if args.limit_queries:
        queries = queries[: args.limit_queries]
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
            store = PostgresStore(url, schema="quality", create=True)
            stack.callback(store.engine.dispose)
            mode = "fts"
        t0 = time.perf_counter()
        chunks = [Chunk.of(doc["id"], 0, doc["text"]) for doc in corpus]
        index_chunks(chunks=chunks, embedder=embedder, store=store, scope=SCOPE, batch_size=128)
        embedder.save()
        print(
            f"store={args.store} (lexical analyzer: {args.language if args.store == 'memory' else 'PostgreSQL english'}): indexed {len(chunks)} abstracts in {time.perf_counter() - t0:.1f} s; "
            f"{len(queries)} judged development queries"
        )

        def ids(result) -> list[str]:
            return [hit.source_id for hit in result.hits]

        def lexical_only(text: str) -> list[str]:
            found = store.lexical_query(SCOPE, text, limit=K, mode=mode)
            return [item.record.source_id for item in found]

        # Rendering ceilings at their maximum: ten abstracts must not be cut by the token budget.
        wide = {"max_result_bytes": 524_288, "max_context_tokens": 8_000}

        def vector_only(text: str) -> list[str]:
            return ids(
                retrieve_context(text, embedder=embedder, store=store, scope=SCOPE, top_k=K, **wide)
            )

        def hybrid(reranker=None, candidates: int = 50) -> Callable[[str], list[str]]:
            def run(text: str) -> list[str]:
                return ids(
                    retrieve_context(
                        text,
                        embedder=embedder,
                        store=store,
                        scope=SCOPE,
                        top_k=K,
                        query_candidates=candidates,
                        lexical=mode,
                        reranker=reranker,
                        max_rerank_bytes=262_144,
                        max_rerank_ms=10_000,
                        **wide,
                    )
                )

            return run

        results = {
            f"{'BM25' if mode == 'bm25' else 'PostgreSQL FTS'} only (lexical leg)": evaluate(
                "lexical only", lexical_only, queries, qrels
            ),
            "MiniLM only (vector leg)": evaluate("MiniLM only", vector_only, queries, qrels),
            "hybrid RRF (k=60, 50 candidates per leg)": evaluate(
                "hybrid RRF", hybrid(), queries, qrels
            ),
            "hybrid + EmbeddingReranker(MiniLM)": evaluate(
                "hybrid + EmbeddingReranker(MiniLM)",
                hybrid(EmbeddingReranker(embedder), 20),
                queries,
                qrels,
            ),
            "hybrid + FakeReranker (term overlap)": evaluate(
                "hybrid + FakeReranker", hybrid(FakeReranker(), 20), queries, qrels
            ),
        }
    (CACHE / f"quality-{args.store}.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
