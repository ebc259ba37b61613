"""Network-free rerankers: FakeReranker (term overlap) and EmbeddingReranker (cosine)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragport.domain.errors import AbortedError, ValidationError
from ragport.domain.lexical import tokenize_lexical
from ragport.domain.limits import HARD_LIMITS
from ragport.domain.model import Hit
from ragport.ports.embedder import Embedder
from ragport.ports.runtime import Abort

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
    """Re-scores candidates by cosine similarity with any ``Embedder``.

    The query and the candidates are embedded ``batch_size`` texts per ``embed`` call (default
    8), and ``rerank_interruptible`` (``SupportsInterruptibleRerank``) checks its stop signal
    before each call: a rerank the seam stopped waiting for ends within one batch instead of
    embedding every candidate in a thread nobody waits for. ``load()`` loads the embedder's
    model now, when it has a ``load()`` (``MiniLmEmbedder``), so that a rerank's time budget is
    not spent loading it.
    """

    def __init__(self, embedder: Embedder, *, batch_size: int = 8):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise ValidationError("batch_size must be an integer", field="batch_size")
        if not 1 <= batch_size <= HARD_LIMITS.embed_batch:
            raise ValidationError(
                f"batch_size must be in 1..{HARD_LIMITS.embed_batch}", field="batch_size"
            )
        self._embedder = embedder
        self._batch_size = batch_size

    def __repr__(self) -> str:
        return f"EmbeddingReranker({self._embedder.id})"

    def load(self) -> None:
        """Load the embedder's model now, if it has a ``load()``; otherwise nothing."""
        load = getattr(self._embedder, "load", None)
        if callable(load):
            load()

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[tuple[Hit, float]]:
        return self.rerank_interruptible(query, hits, _NEVER)

    def rerank_interruptible(
        self, query: str, hits: Sequence[Hit], stop: Abort
    ) -> list[tuple[Hit, float]]:
        if not hits:
            return []
        texts = [query, *(hit.text for hit in hits)]
        parts = []
        for start in range(0, len(texts), self._batch_size):
            if stop.is_set():
                raise AbortedError("rerank stopped between embedding batches")
            batch = texts[start : start + self._batch_size]
            parts.append(np.asarray(self._embedder.embed(batch), dtype=np.float32))
        vectors = np.concatenate(parts)
        norms = np.linalg.norm(vectors, axis=1)
        norms[norms == 0] = 1.0
        unit = vectors / norms[:, None]
        scores = unit[1:] @ unit[0]
        order = sorted(range(len(hits)), key=lambda i: (-float(scores[i]), i))
        return [(hits[i], float(scores[i])) for i in order]


class _Never:
    """A stop signal that is never set (a plain ``rerank`` runs to the end)."""

    def is_set(self) -> bool:
        return False


_NEVER = _Never()
