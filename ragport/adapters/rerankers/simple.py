"""Network-free rerankers: FakeReranker (term overlap) and EmbeddingReranker (cosine)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragport.domain.lexical import tokenize_lexical
from ragport.domain.model import Hit
from ragport.ports.embedder import Embedder

__all__ = ["EmbeddingReranker", "FakeReranker"]


class FakeReranker:
    """Deterministic and network-free: scores by how many distinct query terms a hit contains.

    Ties keep their input order (a stable sort), so equal hits never swap.
    """

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[tuple[Hit, float]]:
        terms = set(tokenize_lexical(query))
        scored = [(hit, float(len(terms.intersection(tokenize_lexical(hit.text))))) for hit in hits]
        return sorted(scored, key=lambda pair: -pair[1])


class EmbeddingReranker:
    """Re-scores candidates by cosine similarity with any ``Embedder`` (one embed call)."""

    def __init__(self, embedder: Embedder):
        self._embedder = embedder

    def __repr__(self) -> str:
        return f"EmbeddingReranker({self._embedder.id})"

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[tuple[Hit, float]]:
        if not hits:
            return []
        vectors = np.asarray(
            self._embedder.embed([query, *(hit.text for hit in hits)]), dtype=np.float32
        )
        norms = np.linalg.norm(vectors, axis=1)
        norms[norms == 0] = 1.0
        unit = vectors / norms[:, None]
        scores = unit[1:] @ unit[0]
        order = sorted(range(len(hits)), key=lambda i: (-float(scores[i]), i))
        return [(hits[i], float(scores[i])) for i in order]
