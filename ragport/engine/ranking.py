"""Brute-force cosine ranking: what ``BackendReader.nearest`` returns, for a backend without
a vector index of its own."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt

from ragport.domain.model import Record
from ragport.ports.embedder import Vector
from ragport.ports.store import ScoredRecord

__all__ = ["rank_by_cosine"]


def rank_by_cosine(rows: Iterable[tuple[Record, object]], vector: Vector) -> Iterator[ScoredRecord]:
    """Every ``(record, stored_vector)`` whose record has ``len(vector)`` dimensions, scored by
    cosine similarity (a zero vector scores 0), best first, ties by id then generation.

    ``stored_vector`` is anything ``numpy.asarray`` reads as one row (a float32 array, the
    bytes of one through ``numpy.frombuffer``, a list of floats). The scores are computed at
    once (float32 products, within 1e-6 of float64); the order is produced lazily, so an
    engine that stops after a few rows sorts only the ties it meets.
    """
    q = np.asarray(vector, dtype=np.float32).reshape(-1)
    dims = q.shape[0]
    kept = [(r, v) for r, v in rows if r.dimensions == dims]
    if not kept:
        return iter(())
    matrix = np.array(
        [np.asarray(v, dtype=np.float32).reshape(-1) for _, v in kept], dtype=np.float32
    )
    if matrix.ndim != 2 or matrix.shape[1] != dims:
        raise ValueError("a stored vector's length differs from its record's dimensions")
    norms = np.linalg.norm(matrix, axis=1).astype(np.float64) * float(np.linalg.norm(q))
    dots = (matrix @ q).astype(np.float64)
    scores = np.divide(dots, norms, out=np.zeros(len(kept)), where=norms > 0)
    return _in_order([r for r, _ in kept], scores, np.argsort(-scores, kind="stable"))


def _in_order(
    records: list[Record], scores: npt.NDArray[np.float64], order: npt.NDArray[np.intp]
) -> Iterator[ScoredRecord]:
    """``records`` by descending score; a run of equal scores by id, then generation."""
    ranked = order.tolist()
    values = scores[order].tolist()
    start, size = 0, len(ranked)
    while start < size:
        end = start + 1
        while end < size and values[end] == values[start]:
            end += 1
        run = ranked[start:end]
        if len(run) > 1:
            run.sort(key=lambda i: (records[i].id, records[i].generation))
        for i in run:
            yield ScoredRecord(records[i], values[start])
        start = end
