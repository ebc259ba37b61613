"""The engine's generic BM25 scores what ragport's Bm25Index and rank_bm25 score."""

from __future__ import annotations

import random

import pytest

from ragport.adapters.lexical import Bm25Index
from ragport.domain.lexical import tokenize_lexical
from ragport.engine.bm25 import bm25_scores, counted

WORDS = ["alpha", "beta", "gamma", "delta", "the", "a", "of", "policy", "leave", "payment", "rare"]


def _corpus(seed: int) -> list[str]:
    rng = random.Random(seed)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12))) for _ in range(40)]
    return [*docs, "", "Straße café"]


@pytest.mark.parametrize("seed", range(5))
def test_scores_equal_bm25_index(seed: int) -> None:
    """If this fails, check ragport/engine/bm25.py against adapters/lexical/bm25.py."""
    docs = _corpus(seed)
    index = Bm25Index()
    index.add([f"d{i}" for i in range(len(docs))], docs)
    for query in ("alpha rare", "the the policy", "strasse", "nothing here"):
        expected = dict(index.search(query, limit=len(docs)))
        got = bm25_scores([counted(d) for d in docs], tokenize_lexical(query))
        found = {f"d{i}": s for i, s in enumerate(got) if s is not None}
        assert found.keys() == expected.keys()
        for key, score in found.items():
            assert score == pytest.approx(expected[key], rel=1e-12, abs=1e-12)


def test_scores_equal_rank_bm25() -> None:
    rank_bm25 = pytest.importorskip("rank_bm25")
    docs = _corpus(9)
    tokens = [tokenize_lexical(d) for d in docs]
    reference = rank_bm25.BM25Okapi(tokens).get_scores(tokenize_lexical("alpha beta rare"))
    got = bm25_scores([counted(d) for d in docs], tokenize_lexical("alpha beta rare"))
    for ours, theirs in zip(got, reference, strict=True):
        assert (ours or 0.0) == pytest.approx(theirs, rel=1e-9, abs=1e-12)
