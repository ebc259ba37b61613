"""Weighted RRF: leg weights in fuse_reciprocal_rank and retrieve_context(fusion_weights=)."""

from __future__ import annotations

import pytest

import ragport
from ragport import Chunk, RetrievalRequest, Scope
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application import replace_source, retrieve_context
from ragport.domain.fusion import fuse_reciprocal_rank

SCOPE = Scope("t", "r", "c")
EMBEDDER = HashEmbedder(64)


def test_weights_scale_each_legs_contribution():
    """score = sum w / (k + rank); an unnamed leg weighs 1; no weights is plain RRF.

    If this fails, check the weight lookup in ragport/domain/fusion.py `fuse_ranked`.
    """
    legs = {"a": ["x", "y"], "b": ["y", "x"]}
    scores = {c.id: c.score for c in fuse_reciprocal_rank(legs, k=60, weights={"b": 3.0})}
    assert scores["y"] == pytest.approx(1 / 62 + 3 / 61)
    assert scores["x"] == pytest.approx(1 / 61 + 3 / 62)
    plain = fuse_reciprocal_rank(legs, k=60)
    assert plain == fuse_reciprocal_rank(legs, k=60, weights={"a": 1, "b": 1})


def test_a_zero_weight_leg_takes_no_part():
    """An id only a weight-0 leg ranked is not a candidate, and that leg is not in .legs.

    If this fails, check that fuse_ranked skips legs whose weight is 0.
    """
    fused = fuse_reciprocal_rank({"a": ["x"], "b": ["x", "only-b"]}, weights={"b": 0})
    assert [(c.id, c.legs) for c in fused] == [("x", ("a",))]


@pytest.mark.parametrize(
    "weights",
    [{"a": -1.0}, {"a": float("nan")}, {"a": float("inf")}, {"a": 0, "b": 0}, {"a": True}],
)
def test_bad_weights_are_refused(weights):
    """Negative, non-finite, boolean or all-zero weights are a ValidationError.

    If this fails, check ragport/domain/fusion.py `check_weights`.
    """
    with pytest.raises(ragport.ValidationError) as info:
        fuse_reciprocal_rank({"a": ["x"], "b": ["y"]}, weights=weights)
    assert info.value.field == "weights"


def _store() -> InMemoryStore:
    store = InMemoryStore()
    texts = {
        "zebra": "zebras have black and white stripes",
        "horse": "horses gallop across open fields",
        "cat": "cats sleep most of the day",
    }
    for source, text in texts.items():
        replace_source(
            source_id=source,
            chunks=[Chunk.of(source, 0, text)],
            embedder=EMBEDDER,
            store=store,
            scope=SCOPE,
        )
    return store


def test_vector_weight_zero_is_lexical_only_retrieval():
    """fusion_weights={"vector": 0} returns only what the lexical leg found, labelled lexical.

    If this fails, check how retrieve_context maps fusion_weights onto the per-scope legs.
    """
    result = retrieve_context("stripes", embedder=EMBEDDER, store=_store(), scope=SCOPE, request=RetrievalRequest(lexical="bm25", fusion_weights={"vector": 0}))  # fmt: skip
    assert [h.source_id for h in result.hits] == ["zebra"]
    assert result.hits[0].provenance.retrieval == "lexical"


def test_fusion_weights_name_only_the_two_legs():
    """A key other than vector/lexical is a ValidationError(field="fusion_weights").

    If this fails, check _check_fusion_weights in ragport/application/retrieval_request.py.
    """
    with pytest.raises(ragport.ValidationError) as info:
        retrieve_context("x", embedder=EMBEDDER, store=_store(), scope=SCOPE, request=RetrievalRequest(lexical="bm25", fusion_weights={"keyword": 1.0}))  # fmt: skip
    assert info.value.field == "fusion_weights"


def test_dropped_counts_hits_the_context_budget_left_out():
    """With a token budget for one block, two of three wanted hits are dropped and counted.

    If this fails, check `dropped` in render (ragport/application/answer.py).
    """
    result = retrieve_context(
        "animals",
        embedder=EMBEDDER,
        store=_store(),
        scope=SCOPE,
        request=RetrievalRequest(top_k=3, max_context_tokens=12),
    )
    assert len(result.hits) == 1 and result.truncated and result.dropped == 2
    full = retrieve_context(
        "animals", embedder=EMBEDDER, store=_store(), scope=SCOPE, request=RetrievalRequest(top_k=3)
    )
    assert len(full.hits) == 3 and full.dropped == 0
