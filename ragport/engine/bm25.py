"""Okapi BM25 over token lists, for the engine's generic lexical leg.

The scores of ``rank_bm25.BM25Okapi(corpus, k1=1.5, b=0.75, epsilon=0.25)`` (and of
ragport's incremental ``Bm25Index``, computed term by term in the same order, so equal to the
last bit wherever no idf is negative): ``idf = log(N - n + 0.5) - log(n + 0.5)``, a negative
idf replaced by ``epsilon`` times the mean raw idf of every term of the corpus, empty
documents counted in ``N`` and in the mean length. Pure Python over one call's documents:
the generic path re-reads the scope per query (correct, not fast; a backend with an index
pushes ``search_lexical`` down); ``counted`` keeps the term counts of recent texts, so a
small scope that does not change is tokenized once, not per query.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from ragport.domain.lexical import tokenize_lexical

__all__ = ["Counted", "bm25_scores", "counted"]

K1, B, EPSILON = 1.5, 0.75, 0.25

Counted = tuple[int, Counter[str]]
"""A document as BM25 reads it: its token count and the count of each term."""


@lru_cache(maxsize=8_192)
def counted(text: str) -> Counted:
    """``text``'s ``tokenize_lexical`` tokens, counted (cached: treat the result as read-only).

    The cache holds 8,192 texts (terms interned: about 4.5 KiB for a 1,000-character chunk,
    some 36 MiB at most); a scope of more rows than that is tokenized per query."""
    tokens = tokenize_lexical(text)
    return len(tokens), Counter(map(sys.intern, tokens))


def bm25_scores(documents: Sequence[Counted], query: Sequence[str]) -> list[float | None]:
    """Per document, its BM25 score for ``query``'s tokens (a repeated query token counts
    each time), or ``None`` when it contains none of them."""
    size = len(documents)
    if not size:
        return []
    frequency: Counter[str] = Counter()
    for _, terms in documents:
        frequency.update(terms.keys())
    wanted = {t: n for t, n in Counter(query).items() if t in frequency}
    if not wanted:
        return [None] * size
    raw = {t: math.log(size - f + 0.5) - math.log(f + 0.5) for t, f in frequency.items()}
    floor = EPSILON * (math.fsum(raw.values()) / len(raw))
    idf = {t: (raw[t] if raw[t] >= 0 else floor) for t in wanted}
    mean_length = sum(length for length, _ in documents) / size
    scores: list[float | None] = []
    for length, terms in documents:
        if wanted.keys().isdisjoint(terms):
            scores.append(None)
            continue
        norm = K1 * (1 - B + B * length / mean_length)
        score = 0.0
        for term, times in wanted.items():
            tf = terms.get(term, 0)
            if tf:
                score += times * idf[term] * (tf * (K1 + 1) / (tf + norm))
        scores.append(score)
    return scores
