"""check_vectors: an embedder's answer is refused when any value is not finite, and only then."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ragport.application._support import check_vectors
from ragport.domain.errors import EmbedderError

F32_MAX = float(np.finfo(np.float32).max)


@pytest.mark.parametrize(
    "bad",
    [[np.nan], [np.inf], [-np.inf], [np.inf, -np.inf], [F32_MAX, np.nan]],
    ids=["nan", "inf", "-inf", "inf-and-minus-inf", "huge-and-nan"],
)
def test_a_non_finite_value_anywhere_is_an_embedder_error(bad: list[float]) -> None:
    """Any nan or infinity in any row is an EmbedderError, with no numpy warning on the way.

    If this fails, check the finite test in check_vectors (application/_support.py): the
    quick sum of squares must fall back to the elementwise test, never pass a bad row.
    """
    vectors = np.ones((3, 8), dtype=np.float32)
    vectors[2, : len(bad)] = bad
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(EmbedderError):
            check_vectors(vectors, rows=3, dimensions=8)


def test_large_finite_values_pass_although_their_squares_overflow() -> None:
    """Rows of float32's largest values are finite and accepted (their sum of squares is not).

    If this fails, check_vectors treats an overflowing sum of squares as a non-finite value.
    """
    vectors = np.full((2, 8), F32_MAX, dtype=np.float32)
    vectors[1] = -F32_MAX
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = check_vectors(vectors, rows=2, dimensions=8)
    assert out.shape == (2, 8) and np.array_equal(out, vectors)
