"""Reranking ports: a reranker, and the runtime a local cross-encoder runs on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ragport.domain.model import Hit

__all__ = ["LocalRerankRuntime", "RerankScorer", "Reranker"]


@runtime_checkable
class Reranker(Protocol):
    """Reorders retrieved hits by relevance to a query.

    Promises (checked by ``RerankerContract``):

    - ``rerank(query, hits)`` returns either the same ``Hit`` objects (a permutation: every
      input exactly once, nothing else) in preferred order, or ``(hit, score)`` pairs with
      finite scores (numbers, not bools) in descending score order (scores never increase);
      an empty input gives an empty output.
    - It receives redacted text only and never rewrites a hit: the caller keeps the objects.
    - The same input gives the same order.
    - Failures raise; ``rerank_hits`` turns every failure, timeout or malformed answer into a
      ``RerankError`` (fail closed: the original order is never silently used instead).
    """

    def rerank(self, query: str, hits: Sequence[Hit]) -> Sequence[Hit | tuple[Hit, float]]:
        """The same hit objects in preferred order, or ``(hit, score)`` pairs (finite), highest
        score first."""
        ...


class RerankScorer(Protocol):
    """A loaded cross-encoder: one score per document, in input order, in one call."""

    def score(self, query: str, documents: Sequence[str]) -> Sequence[float]:
        """One finite relevance score per document of ``documents``, in input order."""
        ...


class LocalRerankRuntime(Protocol):
    """Loads a cross-encoder by model id: local files only unless remote loading is allowed."""

    def load(self, model: str) -> RerankScorer:
        """The scorer for ``model`` (local files unless remote loading is allowed)."""
        ...
