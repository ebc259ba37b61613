"""The in-memory store's top-k: best scores first, ties by position (= record id), any mask.

Scores not known to be finite take the exact partition; finite ones take argmax passes up
to limit 10 (``_by_argmax``) and, from 512 scores and limits up to 32, a threshold of group
maxima (``_floor``). Each is checked against a full sort.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ragport.adapters.memory.top_k import _BY_ARGMAX, _GROUP_LIMIT, _GROUPS, _floor
from ragport.adapters.memory.top_k import top as _top


def _reference(scores: np.ndarray, mask: np.ndarray | None, limit: int) -> list[tuple[int, float]]:
    """Sort every allowed row by (-score, position) and keep the first ``limit``."""
    allowed = range(len(scores)) if mask is None else np.flatnonzero(mask).tolist()
    ranked = sorted(allowed, key=lambda i: (-float(scores[i]), i))[:limit]
    return [(i, float(scores[i])) for i in ranked]


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.sampled_from([-1.0, -0.25, 0.0, 0.25, 0.5, 1.0]), max_size=200),
    limit=st.integers(min_value=1, max_value=80),
    masked=st.booleans(),
    seed=st.integers(min_value=0, max_value=2**31),
)
def test_top_matches_a_full_sort_with_ties_by_position(
    values: list[float], limit: int, masked: bool, seed: int
) -> None:
    """``_top`` equals sorting every allowed row by (-score, position), ties included.

    Few distinct values make ties at the cut common (more than 64 finalists takes the numpy
    path, fewer the Python one). If this fails, check top in adapters/memory/top_k.py.
    """
    scores = np.asarray(values, dtype=np.float32)
    mask = np.random.default_rng(seed).random(len(values)) < 0.5 if masked else None
    assert _top(scores, mask, limit) == _reference(scores, mask, limit)


def test_many_ties_at_the_cut_keep_the_first_positions() -> None:
    """Hundreds of rows tied at the cut (the numpy branch): the first positions win, in order.

    If this fails, check the branch of _top for more than _SORT_IN_PYTHON finalists (it must
    sort stably, so that ties stay in position order).
    """
    rng = np.random.default_rng(3)
    scores = np.where(rng.random(5_000) < 0.2, 0.75, 0.5).astype(np.float32)
    scores[[4_000, 17]] = 0.9
    mask = rng.random(5_000) < 0.7
    mask[[4_000, 17]] = True
    for limit in (5, 32):
        assert _top(scores, None, limit) == _reference(scores, None, limit)
        assert _top(scores, mask, limit) == _reference(scores, mask, limit)
    assert [pos for pos, _ in _top(scores, None, 3)][:2] == [17, 4_000]


_LEVELS = [-np.inf, -1.0, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, np.inf]


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(min_value=0, max_value=5 * _GROUPS + 37),
    distinct=st.integers(min_value=1, max_value=len(_LEVELS)),
    infinite=st.booleans(),
    continuous=st.booleans(),
    limit=st.integers(min_value=1, max_value=2 * _GROUP_LIMIT),
    masked=st.booleans(),
    seed=st.integers(min_value=0, max_value=2**31),
)
def test_grouped_threshold_matches_a_full_sort(
    size: int,
    distinct: int,
    infinite: bool,
    continuous: bool,
    limit: int,
    masked: bool,
    seed: int,
) -> None:
    """From 512 rows on (any tail past a multiple of 256), ``_top`` still equals a full sort.

    Few distinct levels make ties at the cut common; scores with infinities are passed as not
    finite (the exact path, which orders them too); limits past ``_GROUP_LIMIT`` and masks
    that leave too few rows take the exact path. If this fails, check ``_floor`` in
    adapters/memory/top_k.py.
    """
    rng = np.random.default_rng(seed)
    levels = np.asarray(_LEVELS if infinite else _LEVELS[1:-1])
    if continuous:
        scores = rng.uniform(-1.0, 1.0, size).astype(np.float32)
    else:
        scores = rng.choice(levels[:distinct], size).astype(np.float32)
    mask = rng.random(size) < 0.7 if masked else None
    finite = bool(np.isfinite(scores).all())
    assert _top(scores, mask, limit, finite=finite) == _reference(scores, mask, limit)
    assert _top(scores, mask, limit) == _reference(scores, mask, limit)


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(min_value=2 * _GROUPS, max_value=6 * _GROUPS + 11),
    limit=st.integers(min_value=1, max_value=_GROUP_LIMIT),
    seed=st.integers(min_value=0, max_value=2**31),
)
def test_floor_is_reached_by_at_least_limit_rows(size: int, limit: int, seed: int) -> None:
    """The grouped threshold is at most the ``limit``-th best score, so no row of the top-k
    scores below it (continuous scores: few ties, the bound must hold on its own).

    If this fails, check that ``_floor`` takes the ``limit``-th largest group maximum.
    """
    scores = np.random.default_rng(seed).normal(size=size).astype(np.float32)
    floor = _floor(scores, limit)
    assert floor is not None
    assert floor <= float(np.sort(scores)[::-1][limit - 1])


def test_floor_declines_what_it_cannot_bound_tightly() -> None:
    """Fewer than two full groups, or a limit past ``_GROUP_LIMIT``: no grouped threshold.

    If this fails, check the guards at the top of ``_floor``.
    """
    scores = np.linspace(-1.0, 1.0, 4 * _GROUPS, dtype=np.float32)
    assert _floor(scores[: 2 * _GROUPS - 1], 5) is None
    assert _floor(scores, _GROUP_LIMIT + 1) is None
    assert _floor(scores, _GROUP_LIMIT) is not None


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(min_value=0, max_value=3 * _GROUPS + 5),
    distinct=st.integers(min_value=1, max_value=7),
    continuous=st.booleans(),
    limit=st.integers(min_value=1, max_value=_BY_ARGMAX + 2),
    masked=st.booleans(),
    frozen=st.booleans(),
    seed=st.integers(min_value=0, max_value=2**31),
)
def test_argmax_passes_match_a_full_sort_and_leave_the_scores_alone(
    size: int,
    distinct: int,
    continuous: bool,
    limit: int,
    masked: bool,
    frozen: bool,
    seed: int,
) -> None:
    """Finite scores and a limit up to ``_BY_ARGMAX`` (and just past it): ``_top`` equals a
    full sort, ties at the cut by position, and the scores are unchanged afterwards (the
    passes set each pick to -inf and write it back), read-only arrays included.

    If this fails, check ``_by_argmax`` in adapters/memory/top_k.py: argmax must return the
    first position of the maximum, and every pick must be written back.
    """
    rng = np.random.default_rng(seed)
    if continuous:
        scores = rng.uniform(-1.0, 1.0, size).astype(np.float32)
    else:
        scores = rng.choice(np.asarray(_LEVELS[1:-1])[:distinct], size).astype(np.float32)
    before = scores.copy()
    if frozen:
        scores.flags.writeable = False
    mask = rng.random(size) < 0.6 if masked else None
    assert _top(scores, mask, limit, finite=True) == _reference(scores, mask, limit)
    assert np.array_equal(scores, before)
