"""The in-memory vector leg's top-k: the best ``limit`` scores of a matrix-vector product,
ties by position (an ``Index`` holds its rows in id order, so ties by position are ties by id).
"""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["top"]


_SORT_IN_PYTHON = 64
"""Up to this many finalists are ordered in Python: fewer numpy calls for the usual top-k."""
_SCORE = operator.itemgetter(1)
_GROUPS = 256
"""Score groups for the threshold of ``top``: one column maximum each (see ``_floor``)."""
_GROUP_LIMIT = _GROUPS // 8
"""Up to this limit the group maxima give a tight threshold (a few rows past ``limit``)."""


def _floor(scores: np.ndarray, limit: int) -> float | None:
    """A score that at least ``limit`` of the (finite) ``scores`` reach, close to the
    ``limit``-th best; ``None`` when there are too few rows to group or ``limit`` is too large.

    Row i of the first ``rows * _GROUPS`` belongs to group ``i % _GROUPS``: those scores as a
    (rows, _GROUPS) view, whose column maxima numpy takes in one vectorised pass. Each
    group's maximum is one of its rows, so the ``limit``-th largest maximum is reached by at
    least ``limit`` rows (one per group), and every row that scores above it, ties at the cut
    and rows past the last full group included, scores at least it. That costs a pass over the
    scores and a partition of 256 values instead of a partition of every score.
    """
    rows = scores.shape[0] // _GROUPS
    if rows < 2 or limit > _GROUP_LIMIT:
        return None
    best = np.maximum.reduce(scores[: rows * _GROUPS].reshape(rows, _GROUPS), axis=0)
    best.partition(_GROUPS - limit)
    return best.item(_GROUPS - limit)  # type: ignore[no-any-return]


_BY_ARGMAX = 10
"""Up to this limit, finite scores are ranked by ``limit`` argmax passes (``_by_argmax``):
fewer numpy calls than a threshold, which is what a query pays for after the matrix-vector
product has emptied the caches (measured on the development VM, after a product: 22 vs
63 us at 10,000 rows and limit 5, 119 vs 233 us at 100,000; from limit 20 on the grouped
threshold is cheaper)."""
_NEG_INF = float("-inf")


def _by_argmax(scores: np.ndarray, limit: int, *, scratch: bool) -> list[tuple[int, float]]:
    """The best ``limit`` of ``scores`` (finite, more than ``limit`` of them), ties by
    position: ``argmax`` returns the first position of the maximum. Each pick is set to
    -inf for the next pass; unless ``scores`` is ``scratch`` (no one reads it afterwards),
    the picks are written back before returning, so ``scores`` ends unchanged.
    """
    if not scores.flags.writeable:
        scores = scores.copy()
        scratch = True
    found: list[tuple[int, float]] = []
    argmax, item = scores.argmax, scores.item
    try:
        for _ in range(limit):
            i = int(argmax())
            found.append((i, item(i)))
            scores[i] = _NEG_INF
    finally:
        if not scratch:
            for i, score in found:
                scores[i] = score
    return found


def top(
    scores: np.ndarray,
    mask: np.ndarray | None,
    limit: int,
    *,
    finite: bool = False,
    scratch: bool = False,
) -> list[tuple[int, float]]:
    """Positions and scores of the best ``limit`` rows allowed by ``mask``; ties by id.

    An ``Index`` holds its rows in id order, so ties by id are ties by position. ``finite``:
    the caller knows that no score is NaN or infinite, which lets a small top-k come from
    argmax passes (``_by_argmax``) and a larger one from a threshold of group maxima
    (``_floor``); else (a NaN has no place in an order) every score is partitioned, as numpy
    orders NaN. ``scratch``: the caller never reads ``scores`` again, so they may be left
    changed (else they end as they came).
    """
    if mask is None:
        positions = None
    else:
        positions = mask.nonzero()[0]
        scores = scores[positions]  # a copy: this call's own scratch
        scratch = True
    size = scores.shape[0]
    if size == 0:
        return []
    if size > limit and finite and limit <= _BY_ARGMAX:
        found = _by_argmax(scores, limit, scratch=scratch)
        if positions is None:
            return found
        return [(int(positions[pos]), score) for pos, score in found]
    if size > limit:
        kth = _floor(scores, limit) if finite else None
        if kth is None:
            part = scores.copy()  # np.partition's own copy, without its Python wrapper
            part.partition(size - limit)
            kth = part[size - limit]
        keep = (scores >= kth).nonzero()[0]  # every tie at the cut, in position order
    else:
        keep = np.arange(size)
    if keep.shape[0] <= _SORT_IN_PYTHON:
        # keep is in position order and Python's sort is stable (reverse=True too), so ties
        # stay in position order.
        # (``item`` reads one score as a Python float: for these few rows, cheaper than
        # gathering them into an array first.)
        item = scores.item
        found = sorted([(i, item(i)) for i in keep.tolist()], key=_SCORE, reverse=True)[:limit]
    else:
        # A stable sort of the scores keeps ties in position order.
        order = keep[np.argsort(-scores[keep], kind="stable")[:limit]]
        found = list(zip(order.tolist(), scores[order].tolist(), strict=True))
    if positions is None:
        return found
    return [(int(positions[pos]), score) for pos, score in found]
