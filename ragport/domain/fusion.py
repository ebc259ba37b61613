"""Reciprocal-rank fusion: combine ranked lists without comparing their scores.

Weighted RRF: each leg's contribution ``1 / (k + rank)`` is multiplied by its weight (1 for
a leg the weights do not name, so no weights is plain RRF). A leg of weight 0 takes no part:
an id only it ranked is not a candidate at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

import attrs

from ragport.domain.errors import ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit

__all__ = ["FusedCandidate", "check_weights", "fuse_ranked", "fuse_reciprocal_rank"]

K = TypeVar("K", bound=Hashable)


@attrs.frozen
class FusedCandidate:
    """One fused id: its RRF score and the legs that ranked it (in the order given)."""

    id: str
    score: float
    legs: tuple[str, ...]


def check_weights(weights: Mapping[str, float] | None, *, field: str = "weights") -> None:
    """Weights are finite numbers >= 0 keyed by leg name (``ValidationError(field=field)``)."""
    if weights is None:
        return
    if not isinstance(weights, Mapping):
        raise ValidationError("weights must map a leg name to a number", field=field)
    for name, weight in weights.items():
        if (
            not isinstance(name, str)
            or isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise ValidationError(
                "every weight must be a finite number >= 0 keyed by a leg name", field=field
            )


def fuse_ranked(
    legs: Mapping[str, Sequence[K]],
    *,
    k: int,
    tie_key: Callable[[K], object],
    weights: Mapping[str, float] | None = None,
) -> list[tuple[K, float, tuple[str, ...]]]:
    """Weighted RRF over any hashable keys: score = sum of w / (k + rank), ranks from 1.

    ``weights`` maps a leg name to its weight (default 1; a leg of weight 0 is left out). A
    key repeated inside one leg counts at its best rank only. Ties are broken by ``tie_key``,
    so the result is deterministic.
    """
    check_limit("rrf_k", k)
    check_weights(weights)
    if weights is not None and legs and not any(weights.get(leg, 1.0) for leg in legs):
        raise ValidationError("at least one leg must weigh more than 0", field="weights")
    scores: dict[K, float] = {}
    found_by: dict[K, list[str]] = {}
    for leg, ranked in legs.items():
        weight = 1.0 if weights is None else float(weights.get(leg, 1.0))
        if weight == 0:
            continue
        seen: set[K] = set()
        for rank, key in enumerate(ranked, start=1):
            if key in seen:
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
            found_by.setdefault(key, []).append(leg)
    ordered = sorted(scores, key=lambda key: (-scores[key], tie_key(key)))
    return [(key, scores[key], tuple(found_by[key])) for key in ordered]


def fuse_reciprocal_rank(
    legs: Mapping[str, Sequence[str]],
    *,
    k: int = DEFAULT_LIMITS.rrf_k,
    weights: Mapping[str, float] | None = None,
) -> tuple[FusedCandidate, ...]:
    """Fuse ranked id lists (leg name -> ids, best first) by reciprocal rank; ties by id.

    ``weights`` (leg name -> weight >= 0, default 1 each) makes it weighted RRF.
    """
    if not isinstance(legs, Mapping):
        raise ValidationError("legs must map a leg name to ranked ids", field="legs")
    for name, ranked in legs.items():
        if isinstance(ranked, str) or not all(isinstance(i, str) for i in ranked):
            raise ValidationError(f"leg {name!r} must be a sequence of ids", field="legs")
    return tuple(
        FusedCandidate(key, score, found)
        for key, score, found in fuse_ranked(legs, k=k, tie_key=lambda key: key, weights=weights)
    )
