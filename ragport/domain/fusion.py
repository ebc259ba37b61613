"""Reciprocal-rank fusion: combine ranked lists without comparing their scores."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

import attrs

from ragport.domain.errors import ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit

__all__ = ["FusedCandidate", "fuse_ranked", "fuse_reciprocal_rank"]

K = TypeVar("K", bound=Hashable)


@attrs.frozen
class FusedCandidate:
    """One fused id: its RRF score and the legs that ranked it (in the order given)."""

    id: str
    score: float
    legs: tuple[str, ...]


def fuse_ranked(
    legs: Mapping[str, Sequence[K]], *, k: int, tie_key: Callable[[K], object]
) -> list[tuple[K, float, tuple[str, ...]]]:
    """RRF over any hashable keys: score = sum of 1 / (k + rank), ranks starting at 1.

    A key repeated inside one leg counts at its best rank only. Ties are broken by
    ``tie_key``, so the result is deterministic.
    """
    check_limit("rrf_k", k)
    scores: dict[K, float] = {}
    found_by: dict[K, list[str]] = {}
    for leg, ranked in legs.items():
        seen: set[K] = set()
        for rank, key in enumerate(ranked, start=1):
            if key in seen:
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
            found_by.setdefault(key, []).append(leg)
    ordered = sorted(scores, key=lambda key: (-scores[key], tie_key(key)))
    return [(key, scores[key], tuple(found_by[key])) for key in ordered]


def fuse_reciprocal_rank(
    legs: Mapping[str, Sequence[str]], *, k: int = DEFAULT_LIMITS.rrf_k
) -> tuple[FusedCandidate, ...]:
    """Fuse ranked id lists (leg name -> ids, best first) by reciprocal rank; ties by id."""
    if not isinstance(legs, Mapping):
        raise ValidationError("legs must map a leg name to ranked ids", field="legs")
    for name, ranked in legs.items():
        if isinstance(ranked, str) or not all(isinstance(i, str) for i in ranked):
            raise ValidationError(f"leg {name!r} must be a sequence of ids", field="legs")
    return tuple(
        FusedCandidate(key, score, found)
        for key, score, found in fuse_ranked(legs, k=k, tie_key=lambda key: key)
    )
