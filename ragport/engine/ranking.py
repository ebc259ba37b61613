"""Brute-force cosine ranking: what ``BackendReader.nearest`` returns, for a backend without
a vector index of its own."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ragport.domain.model import Record
from ragport.ports.embedder import Vector
from ragport.ports.store import ScoredRecord

__all__ = ["rank_by_cosine"]


def rank_by_cosine(rows: Iterable[tuple[Record, object]], vector: Vector) -> list[ScoredRecord]:
    """Every ``(record, stored_vector)`` whose record has ``len(vector)`` dimensions, scored by
    cosine similarity (a zero vector scores 0), best first, ties by id then generation.

    ``stored_vector`` is anything ``numpy.asarray`` reads as one row (a float32 array, the
    bytes of one through ``numpy.frombuffer``, a list of floats).
    """
    q = np.asarray(vector, dtype=np.float64).reshape(-1)
    dims = q.shape[0]
    kept = [(r, v) for r, v in rows if r.dimensions == dims]
    if not kept:
        return []
    matrix = np.stack([np.asarray(v, dtype=np.float64).reshape(-1) for _, v in kept])
    if matrix.shape[1] != dims:
        raise ValueError("a stored vector's length differs from its record's dimensions")
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(q)
    scores = np.divide(matrix @ q, norms, out=np.zeros(len(kept)), where=norms > 0).tolist()
    order = sorted(
        range(len(kept)), key=lambda i: (-scores[i], kept[i][0].id, kept[i][0].generation)
    )
    return [ScoredRecord(kept[i][0], scores[i]) for i in order]
