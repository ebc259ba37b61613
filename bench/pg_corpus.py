"""The bench corpus of ``bench_postgres.py`` (seeded; see its docstring) and shared helpers."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from ragport import Chunk, Scope
from ragport.domain.model import chunk_id

DIMS = 384
PER_SOURCE = 100
N_CENTROIDS = 500
TOPICS_PER_SOURCE = 3
NOISE_RANK = 16
N_SUPER_TOPICS = 25
SUBSPACE_SHARE = 0.8
N_TAGS = 20
TOP_K = 10
SEED = 20241203
EMBEDDER_ID = "bench-precomputed:384"
SCOPE = Scope("bench", "pg", "corpus")


def log(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


# -- data ---------------------------------------------------------------------------------------
def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


class Corpus:
    """Clustered vectors, texts, sources and tags for ``n`` chunks (seeded)."""

    def __init__(self, n: int, *, isotropic: bool = False, seed: int = SEED):
        rng = np.random.default_rng(seed)
        self.isotropic = isotropic
        own = _unit(rng.standard_normal((N_CENTROIDS, DIMS)))
        if isotropic:
            self.centroids = own
        else:
            # Real embedding spaces are anisotropic and topics nest: centroids share a common
            # direction (unrelated topics at cosine ~0.15) and one of 25 super-topics (~0.45).
            common = _unit(rng.standard_normal((1, DIMS)))
            supers = _unit(rng.standard_normal((N_SUPER_TOPICS, DIMS)))
            group = rng.integers(0, N_SUPER_TOPICS, N_CENTROIDS)
            self.centroids = _unit(
                np.sqrt(0.15) * common + np.sqrt(0.30) * supers[group] + np.sqrt(0.55) * own
            )
        # Two members of a cluster have cosine ~ 1 / (1 + d sigma^2): 0.6-0.8 across clusters.
        target = rng.uniform(0.6, 0.8, N_CENTROIDS)
        self.sigma = np.sqrt((1.0 / target - 1.0) / DIMS)
        # Real embeddings vary along few directions around a topic: by default most of the
        # noise lies in a per-cluster subspace of NOISE_RANK directions with a decaying
        # spectrum. Isotropic noise makes every cluster a small uniform-random cloud, locally
        # HNSW's worst case again.
        weights = 1.0 / np.sqrt(np.arange(1, NOISE_RANK + 1))
        self.spectrum = weights / np.linalg.norm(weights)
        self.basis = _unit(rng.standard_normal((N_CENTROIDS * NOISE_RANK, DIMS))).reshape(
            N_CENTROIDS, NOISE_RANK, DIMS
        )
        self.popularity = rng.dirichlet(np.full(N_CENTROIDS, 0.5))
        n_sources = -(-n // PER_SOURCE)
        self.sources = [f"src-{s:05d}" for s in range(n_sources)]
        self.source_of = np.arange(n) // PER_SOURCE
        topics = rng.choice(N_CENTROIDS, size=(n_sources, TOPICS_PER_SOURCE), p=self.popularity)
        self.cluster = topics[self.source_of, rng.integers(0, TOPICS_PER_SOURCE, n)]
        self.vectors = self.sample(self.cluster, rng)
        self.tags = rng.integers(0, N_TAGS, n)
        self.texts = random_texts(rng, n)
        self.chunk_index = np.arange(n) % PER_SOURCE

    def sample(self, clusters: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        sigma = self.sigma[clusters, None]
        if self.isotropic:
            return _unit(
                self.centroids[clusters] + rng.standard_normal((len(clusters), DIMS)) * sigma
            )
        out = self.centroids[clusters] + rng.standard_normal((len(clusters), DIMS)) * (
            sigma * np.sqrt(1.0 - SUBSPACE_SHARE)
        )
        z = rng.standard_normal((len(clusters), NOISE_RANK)) * self.spectrum
        z *= sigma * np.sqrt(SUBSPACE_SHARE * DIMS)
        order = np.argsort(clusters, kind="stable")
        bounds = np.flatnonzero(np.diff(clusters[order])) + 1
        for group in np.split(order, bounds):
            out[group] += z[group] @ self.basis[clusters[group[0]]]
        return _unit(out)

    def queries(self, count: int, rng: np.random.Generator) -> np.ndarray:
        return self.sample(rng.choice(N_CENTROIDS, size=count, p=self.popularity), rng)

    def chunk_id(self, i: int) -> str:
        return chunk_id(self.sources[self.source_of[i]], int(self.chunk_index[i]))

    def chunks(self, s: int) -> list[Chunk]:
        rows = range(s * PER_SOURCE, min((s + 1) * PER_SOURCE, len(self.texts)))
        return [
            Chunk.of(
                self.sources[s],
                int(self.chunk_index[i]),
                self.texts[i],
                metadata={"tag": f"t{self.tags[i]:02d}"},
            )
            for i in rows
        ]


def random_texts(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct texts of 300-600 characters drawn from a Zipf vocabulary of 5,000 words."""
    vocab_size = 5_000
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(3, 11, vocab_size)
    vocab = ["".join(rng.choice(letters, size=int(k))) for k in lengths]
    weights = 1.0 / np.arange(1, vocab_size + 1)
    p = weights / weights.sum()
    words = rng.choice(vocab_size, size=n * 90, p=p).tolist()
    targets = rng.integers(300, 601, n).tolist()
    texts: list[str] = []
    cursor = 0
    for i in range(n):
        parts: list[str] = []
        size = 0
        while size < targets[i]:
            word = vocab[words[cursor % len(words)]]
            cursor += 1
            parts.append(word)
            size += len(word) + 1
        texts.append(f"Note {i}: " + " ".join(parts)[: targets[i]].rstrip() + ".")
    return texts


class PrecomputedEmbedder:
    """Maps each known text to its precomputed vector: embedding cost stays out of the timings."""

    id = EMBEDDER_ID
    dimensions = DIMS

    def __init__(self) -> None:
        self._vectors: dict[str, np.ndarray] = {}

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        for t, v in zip(texts, vectors, strict=True):
            self._vectors[t] = v

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, DIMS), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])


# -- helpers ------------------------------------------------------------------------------------
def raw_connection(url: str, *, prepare: bool = True) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True)
    if not prepare:
        conn.prepare_threshold = None
    register_vector(conn)
    return conn


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def exact_top(corpus: Corpus, query: np.ndarray, k: int) -> list[str]:
    """Ids of the exact top-k by cosine (all rows are live and in scope here)."""
    scores = corpus.vectors @ query
    top = np.argpartition(-scores, k)[:k]
    return [corpus.chunk_id(int(i)) for i in top]
