"""The Embedder port: text in, unit-length float32 vectors out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["Embedder", "Vector", "VectorMatrix"]

Vector: TypeAlias = npt.NDArray[np.float32]
"""One embedding, shape ``(d,)``."""
VectorMatrix: TypeAlias = npt.NDArray[np.float32]
"""Many embeddings, shape ``(n, d)``."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one fixed model and dimension.

    Promises (checked by ``EmbedderContract``):

    - ``id`` names the model and dimension (e.g. ``"hash-v1:256"``) and never changes for an
      instance; stored records carry it, and retrieval refuses to mix vectors of two ids.
    - ``dimensions`` is a positive int equal to ``embed(...).shape[1]``.
    - ``embed(texts)`` returns a C-contiguous ``float32`` array of shape ``(len(texts), d)``,
      finite, one row per text in input order; an empty input gives shape ``(0, d)``.
    - The same text gives the same vector (within 1e-6) on every call and in every process,
      and the same row alone as in any batch (within 1e-5); a text twice in a batch gives two
      equal rows. Distinct texts with features give pairwise distinct vectors.
    - Rows are L2-normalised (norm 1 within 1e-3), or exactly zero for text with no features.
    - Failures raise; an embedder never returns fewer rows than texts.
    """

    @property
    def id(self) -> str:
        """The model and dimension, e.g. ``"hash-v1:256"``; stable for the instance."""
        ...

    @property
    def dimensions(self) -> int:
        """The vector length: ``embed(...).shape[1]``."""
        ...

    def embed(self, texts: Sequence[str]) -> VectorMatrix:
        """One finite, L2-normalised ``float32`` row per text, in input order; distinct texts
        with features give pairwise distinct rows."""
        ...
