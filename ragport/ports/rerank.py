"""Reranking ports: a reranker, and the runtime a local cross-encoder runs on; the optional
interruptible forms of both (bounded steps, a stop signal checked between them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ragport.domain.model import Hit
from ragport.ports.runtime import Abort

__all__ = [
    "LocalRerankRuntime",
    "RerankScorer",
    "Reranker",
    "SupportsInterruptibleRerank",
    "SupportsInterruptibleScore",
]


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


@runtime_checkable
class SupportsInterruptibleRerank(Protocol):
    """A reranker that works in bounded steps (model batches) and stops between them on request.

    ``rerank_hits`` calls ``rerank_interruptible`` instead of ``rerank`` when a reranker has it,
    and sets ``stop`` when it stops waiting for the answer (the time budget ran out, or the
    caller aborted). Promises:

    - With ``stop`` never set, the answer is what ``rerank(query, hits)`` answers.
    - ``stop.is_set()`` is checked before each bounded step; once it is set, no further step
      starts and the call raises ``AbortedError``. A call the seam gave up on therefore ends
      within one step, instead of running to completion in a thread nobody waits for.
    """

    def rerank_interruptible(
        self, query: str, hits: Sequence[Hit], stop: Abort
    ) -> Sequence[Hit | tuple[Hit, float]]:
        """As ``Reranker.rerank``; raises ``AbortedError`` between steps once ``stop`` is set."""
        ...


class RerankScorer(Protocol):
    """A loaded cross-encoder: one score per document, in input order, in one call."""

    def score(self, query: str, documents: Sequence[str]) -> Sequence[float]:
        """One finite relevance score per document of ``documents``, in input order."""
        ...


@runtime_checkable
class SupportsInterruptibleScore(Protocol):
    """A scorer that scores in bounded batches and stops between them on request.

    ``LocalReranker.rerank_interruptible`` uses it when its scorer has it (otherwise one
    ``score`` call). With ``stop`` never set it answers what ``score`` answers; ``stop.is_set()``
    is checked before each batch, and once it is set the call raises ``AbortedError``.
    """

    def score_interruptible(
        self, query: str, documents: Sequence[str], stop: Abort
    ) -> Sequence[float]:
        """As ``RerankScorer.score``; raises ``AbortedError`` between batches once ``stop`` is
        set."""
        ...


class LocalRerankRuntime(Protocol):
    """Loads a cross-encoder by model id: local files only unless remote loading is allowed."""

    def load(self, model: str) -> RerankScorer:
        """The scorer for ``model`` (local files unless remote loading is allowed)."""
        ...
