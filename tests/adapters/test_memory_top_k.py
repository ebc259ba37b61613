"""The in-memory store's top-k: best scores first, ties by position (= record id), any mask."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ragport.adapters.memory.store import _top


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
    path, fewer the Python one). If this fails, check _top in adapters/memory/store.py.
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
