"""``EmbedderContract``: the promises of ``ragport.ports.embedder`` as pytest tests.

Subclass it and supply an ``embedder`` fixture::

    class TestMyEmbedder(EmbedderContract):
        @pytest.fixture
        def embedder(self):
            return MyEmbedder(...)

Override a test only by wrapping it in ``pytest.mark.xfail(reason=...)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from ragport.contract_tests._base import ContractSuite, required_fixture
from ragport.ports.embedder import Embedder

__all__ = ["EmbedderContract"]

TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Generations make every replacement visible at once.",
    "Grants decide who may see a source.",
    "Zürich, Kraków and Ōsaka – unicode survives embedding ✓",
    "a",
    "retrieval augmented generation over owned documents",
)
"""Distinct texts, each with features (words), some non-ASCII."""


class EmbedderContract(ContractSuite):
    """Shape, dtype, determinism, normalisation and order of an Embedder's vectors."""

    embedder = required_fixture(
        "EmbedderContract",
        "embedder",
        "return (or yield, then clean up) the Embedder under test",
    )

    def test_satisfies_the_embedder_protocol(self, embedder: Embedder) -> None:
        """Checks ``Embedder.id``, ``Embedder.dimensions``, ``Embedder.embed``: the adapter defines
        every member of the protocol (``isinstance(embedder, Embedder)``).

        If this fails, check that every member of ragport.ports.Embedder is defined.
        """
        assert isinstance(embedder, Embedder)

    def test_id_is_a_stable_non_empty_string(self, embedder: Embedder) -> None:
        """Checks ``Embedder.id``: it is a string that is not blank and does not change, also after
        ``embed`` ran.

        If this fails, check the `id` property: it must name the model and dimension.
        """
        first = embedder.id
        assert isinstance(first, str)
        assert first.strip()
        embedder.embed(list(TEXTS))
        assert embedder.id == first

    def test_dimensions_is_a_positive_int(self, embedder: Embedder) -> None:
        """Checks ``Embedder.dimensions``: it is a positive int (not a bool), equal to the width of
        ``embed``'s output and the same on every read.

        If this fails, check the `dimensions` property and the output width of embed.
        """
        dimensions = embedder.dimensions
        assert isinstance(dimensions, int) and not isinstance(dimensions, bool)
        assert dimensions > 0
        assert embedder.embed(list(TEXTS[:2])).shape[1] == dimensions
        assert embedder.dimensions == dimensions

    def test_embed_returns_a_contiguous_finite_float32_matrix(self, embedder: Embedder) -> None:
        """Checks ``Embedder.embed``: it returns a C-contiguous, finite ``numpy`` ``float32`` array
        of shape ``(len(texts), dimensions)``.

        If this fails, check the dtype (np.float32), shape and contiguity of embed's result.
        """
        out = embedder.embed(list(TEXTS))
        assert isinstance(out, np.ndarray)
        assert out.dtype == np.float32
        assert out.shape == (len(TEXTS), embedder.dimensions)
        assert out.flags["C_CONTIGUOUS"]
        assert np.isfinite(out).all()

    def test_embed_accepts_any_sequence(self, embedder: Embedder) -> None:
        """Checks ``Embedder.embed``: a tuple and a list of the same texts give the same vectors
        (within 1e-6).

        If this fails, check that embed accepts any Sequence[str], not only a list.
        """
        np.testing.assert_allclose(
            embedder.embed(tuple(TEXTS)), embedder.embed(list(TEXTS)), rtol=0, atol=1e-6
        )

    def test_empty_input_gives_zero_rows(self, embedder: Embedder) -> None:
        """Checks ``Embedder.embed``: ``embed([])`` returns a ``float32`` array of shape ``(0, d)``.

        If this fails, check embed's early return for empty input.
        """
        out = embedder.embed([])
        assert isinstance(out, np.ndarray)
        assert out.dtype == np.float32
        assert out.shape == (0, embedder.dimensions)

    def test_embed_is_deterministic(self, embedder: Embedder) -> None:
        """Checks ``Embedder.embed``: the same texts give the same vectors on every call (within
        1e-6).

        If this fails, check for randomness, per-call state or batch-dependent normalisation.
        """
        first = embedder.embed(list(TEXTS))
        for _ in range(2):
            np.testing.assert_allclose(embedder.embed(list(TEXTS)), first, rtol=0, atol=1e-6)

    def test_rows_are_unit_length_or_zero(self, embedder: Embedder) -> None:
        """Checks ``Embedder.embed``: every row has L2 norm 1 (within 1e-3), or is exactly zero, and
        the rows of texts with words all have norm 1.

        If this fails, check the normalisation step of embed.
        """
        out = embedder.embed([*TEXTS, "", "   "]).astype(np.float64)
        for row, text in zip(out, [*TEXTS, "", "   "], strict=True):
            norm = float(np.linalg.norm(row))
            assert norm == pytest.approx(1.0, abs=1e-3) or not row.any(), repr(text)
        assert all(np.linalg.norm(row) == pytest.approx(1.0, abs=1e-3) for row in out[: len(TEXTS)])

    def test_different_texts_give_different_vectors(self, embedder: Embedder) -> None:
        """Checks ``Embedder.embed``: distinct texts with features map to pairwise distinct vectors.

        If this fails, check that embed uses the text (not only its length or a constant).
        """
        out = embedder.embed(list(TEXTS)).astype(np.float64)
        for i in range(len(TEXTS)):
            for j in range(i + 1, len(TEXTS)):
                assert not np.allclose(out[i], out[j], rtol=0, atol=1e-6), (TEXTS[i], TEXTS[j])

    def test_order_is_preserved(self, embedder: Embedder) -> None:
        """Checks ``Embedder.embed``: rows come in input order, so ``embed([a, b])`` equals
        ``embed([b, a])`` reversed (within 1e-6).

        If this fails, check that results are returned in input order (e.g. after batching or
        sorting by length).
        """
        a, b = TEXTS[0], TEXTS[3]
        np.testing.assert_allclose(
            embedder.embed([a, b]), embedder.embed([b, a])[::-1], rtol=0, atol=1e-6
        )

    def test_batch_equals_one_by_one(self, embedder: Embedder) -> None:
        """Checks ``Embedder.embed``: a batch gives the same rows as embedding each text alone
        (within 1e-5).

        If this fails, check for padding or batch statistics leaking between texts.
        """
        batch = embedder.embed(list(TEXTS))
        single = np.vstack([embedder.embed([text]) for text in TEXTS])
        np.testing.assert_allclose(batch, single, rtol=0, atol=1e-5)

    def test_repeated_text_in_a_batch_gives_equal_rows(self, embedder: Embedder) -> None:
        """Checks ``Embedder.embed``: the same text twice in one batch gives two rows, and they are
        equal.

        If this fails, check that embed does not de-duplicate inputs or drop rows.
        """
        out = embedder.embed([TEXTS[1], TEXTS[2], TEXTS[1]])
        assert out.shape[0] == 3
        np.testing.assert_allclose(out[0], out[2], rtol=0, atol=1e-6)
