"""``RerankerContract``: the promises of ``ragport.ports.rerank.Reranker`` as pytest tests.

Subclass it and supply a ``reranker`` fixture::

    class TestMyReranker(RerankerContract):
        @pytest.fixture
        def reranker(self):
            yield MyReranker(...)  # then clean up (close clients, stop servers)

The suite builds its own hits (eight short English passages, about 600 bytes with the query)
and runs every call through ``ragport.application.rerank_hits``, the seam callers use, with
its default caps. An HTTP reranker therefore needs a server that answers within 2 s.
Override a test only by wrapping it in ``pytest.mark.xfail(reason=...)``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from ragport.application.rerank import rerank_hits
from ragport.contract_tests._base import ContractSuite, required_fixture
from ragport.domain.errors import RerankError
from ragport.domain.model import Hit, Provenance
from ragport.ports.rerank import Reranker

__all__ = ["RerankerContract", "contract_hits"]

QUERY = "how long is parental leave"

PASSAGES = (
    "Parental leave lasts up to sixteen weeks at full pay.",
    "The forklift safety course is mandatory for warehouse staff.",
    "Salary bands are reviewed every spring by the pay committee.",
    "Leave requests go to your manager two weeks in advance.",
    "Zürich and Kraków offices close on local public holidays ✓",
    "Parental leave can be split into two blocks within a year.",
    "Expense reports need a receipt for every item over ten euros.",
    "The cafeteria serves lunch from noon until two.",
)
"""Distinct passages: some share words with ``QUERY``, one is non-ASCII."""

_AT = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


def contract_hits(texts: Sequence[str] = PASSAGES) -> tuple[Hit, ...]:
    """Fresh ``Hit`` objects for ``texts``, in retrieval order, with full provenance."""
    hits = []
    for rank, text in enumerate(texts):
        source = f"doc-{rank:02d}"
        chunk = f"{source}#0001"
        hits.append(
            Hit(
                id=chunk,
                source_id=source,
                text=text,
                metadata={"rank": rank, "tags": ["contract"]},
                score=1.0 / (rank + 1),
                retrieval_rank=rank,
                provenance=Provenance(
                    source_id=source,
                    chunk_id=chunk,
                    citation_id=chunk,
                    provider="contract",
                    tenant_id="tenant",
                    resource_id="resource",
                    corpus_id="corpus",
                    retrieval="hybrid",
                    retrieved_at=_AT,
                ),
            )
        )
    return tuple(hits)


def _snapshot(hit: Hit) -> tuple[Any, ...]:
    return (
        hit.id,
        hit.source_id,
        hit.text,
        copy.deepcopy(hit.metadata),
        hit.score,
        hit.retrieval_rank,
        hit.provenance,
        hit.trust,
    )


class _Counting:
    """Delegates to a reranker and counts the calls that reach it."""

    def __init__(self, inner: Reranker):
        self.inner = inner
        self.calls = 0

    def rerank(self, query: str, hits: Sequence[Hit]) -> Sequence[Hit | tuple[Hit, float]]:
        self.calls += 1
        return self.inner.rerank(query, hits)


class _DropsLast:
    """Delegates to a reranker, then loses the last item of its answer."""

    def __init__(self, inner: Reranker):
        self.inner = inner

    def rerank(self, query: str, hits: Sequence[Hit]) -> Sequence[Hit | tuple[Hit, float]]:
        return list(self.inner.rerank(query, hits))[:-1]


class RerankerContract(ContractSuite):
    """Empty input, permutation of the same objects, determinism, caps, provenance intact."""

    reranker = required_fixture(
        "RerankerContract",
        "reranker",
        "return (or yield, then clean up) the Reranker under test",
    )

    def test_satisfies_the_reranker_protocol(self, reranker: Reranker) -> None:
        """Checks ``Reranker.rerank``: the adapter defines it (``isinstance(reranker, Reranker)``).

        If this fails, check that ragport.ports.Reranker's `rerank` is defined.
        """
        assert isinstance(reranker, Reranker)

    def test_empty_input_gives_empty_output(self, reranker: Reranker) -> None:
        """Checks ``Reranker.rerank``, ``rerank_hits``: ``rerank(query, [])`` returns an empty
        sequence, directly and through ``rerank_hits``.

        If this fails, check rerank's early return for no hits (it must not call a model).
        """
        assert len(reranker.rerank(QUERY, [])) == 0
        assert rerank_hits(QUERY, [], reranker=reranker) == ()

    def test_direct_answer_is_a_permutation(self, reranker: Reranker) -> None:
        """Checks ``Reranker.rerank``: the answer holds every given hit object exactly once, bare or
        in a ``(hit, score)`` pair whose score is a finite number (not a bool).

        If this fails, check that rerank returns the objects it was given, not copies, and
        one item per hit with a finite float score.
        """
        hits = contract_hits()
        answer = list(reranker.rerank(QUERY, hits))
        returned = []
        for item in answer:
            if isinstance(item, tuple):
                hit, score = item
                assert isinstance(score, int | float) and not isinstance(score, bool), item
                assert math.isfinite(score), item
            else:
                hit = item
            returned.append(hit)
        assert len(returned) == len(hits)
        assert {id(hit) for hit in returned} == {id(hit) for hit in hits}

    def test_scores_are_in_descending_order(self, reranker: Reranker) -> None:
        """Checks ``Reranker.rerank``: when it answers ``(hit, score)`` pairs, the scores never
        increase.

        If this fails, check the sort of rerank's answer: highest score first.
        """
        answer = list(reranker.rerank(QUERY, contract_hits()))
        scores = [item[1] for item in answer if isinstance(item, tuple)]
        assert scores == sorted(scores, reverse=True)

    def test_output_is_the_same_objects_through_the_seam(self, reranker: Reranker) -> None:
        """Checks ``Reranker.rerank``, ``rerank_hits``: ``rerank_hits`` returns a permutation of the
        very ``Hit`` objects it was given.

        If this fails, check that rerank neither drops, repeats nor copies hits.
        """
        hits = contract_hits()
        out = rerank_hits(QUERY, hits, reranker=reranker)
        assert len(out) == len(hits)
        assert sorted(map(id, out)) == sorted(map(id, hits))
        assert all(any(hit is given for given in hits) for hit in out)

    def test_a_single_hit_comes_back(self, reranker: Reranker) -> None:
        """Checks ``Reranker.rerank``, ``rerank_hits``: one candidate in gives the same one out.

        If this fails, check rerank for off-by-one errors and single-item batches.
        """
        (hit,) = contract_hits(PASSAGES[:1])
        assert rerank_hits(QUERY, [hit], reranker=reranker) == (hit,)

    def test_order_is_deterministic(self, reranker: Reranker) -> None:
        """Checks ``Reranker.rerank``, ``rerank_hits``: the same query and hits give the same order
        on every call.

        If this fails, check for randomness or per-call state in the reranker.
        """
        hits = contract_hits()
        first = [hit.id for hit in rerank_hits(QUERY, hits, reranker=reranker)]
        for _ in range(2):
            again = [hit.id for hit in rerank_hits(QUERY, contract_hits(), reranker=reranker)]
            assert again == first

    def test_oversized_input_is_refused_before_any_call(self, reranker: Reranker) -> None:
        """Checks ``Reranker.rerank``, ``rerank_hits``: an input over ``max_bytes`` is
        ``RerankError`` and the reranker is never called; within the cap it is called once.

        If this fails, check that your tests call the reranker through rerank_hits.
        """
        counting = _Counting(reranker)
        hits = contract_hits()
        with pytest.raises(RerankError):
            rerank_hits(QUERY, hits, reranker=counting, max_bytes=64)
        assert counting.calls == 0
        assert len(rerank_hits(QUERY, hits, reranker=counting)) == len(hits)
        assert counting.calls == 1

    def test_a_truncated_answer_fails_closed(self, reranker: Reranker) -> None:
        """Checks ``Reranker.rerank``, ``rerank_hits``: an answer missing one hit is a
        ``RerankError``, never a partial order.

        If this fails, check that the reranker's answer has exactly one item per hit.
        """
        with pytest.raises(RerankError):
            rerank_hits(QUERY, contract_hits(), reranker=_DropsLast(reranker))

    def test_provenance_and_trust_are_preserved(self, reranker: Reranker) -> None:
        """Checks ``Reranker.rerank``, ``rerank_hits``: every hit keeps its text, metadata, scores,
        provenance and trust (untrusted, inert, injection-capable) through a rerank.

        If this fails, check that rerank does not mutate hits (e.g. their metadata dicts).
        """
        hits = contract_hits()
        before = {id(hit): _snapshot(hit) for hit in hits}
        out = rerank_hits(QUERY, hits, reranker=reranker)
        for hit in out:
            assert _snapshot(hit) == before[id(hit)], hit.id
            assert hit.trust.untrusted and hit.trust.inert and hit.trust.injection_capable
