"""The in-memory search pushdowns: one leg over a committed snapshot, ``Admission`` as masks.

The vector leg scores the snapshot's per-dimension matrix of searchable rows (visible at its
pointer and not forgotten, in id order: ``Snapshot.index``) with one matrix-vector product;
the metadata filter and the grant rule become boolean masks over those rows before the top-k
(``top_k.top``). The lexical leg is the scope's BM25 index (``lexical.ScopeLexicon``). Both
hand back the snapshot's own records (the engine copies or lends them).
"""

from __future__ import annotations

import math

import numpy as np

from ragport.adapters.memory.snapshot import Snapshot, access_mask
from ragport.adapters.memory.top_k import top
from ragport.domain.model import Record
from ragport.engine.rules import screened_sources
from ragport.ports.embedder import Vector
from ragport.ports.pushdowns import Admission, LegAnswer
from ragport.ports.store import ScoredRecord

__all__ = ["EMPTY", "search_snapshot"]

EMPTY = LegAnswer(())
_FLOAT32 = np.dtype(np.float32)
_new = object.__new__
# ``ScoredRecord`` and ``LegAnswer`` built through their slots (``snapshot.lend_scored``'s way,
# written out in the loop): the hot read makes one answer and ``limit`` hits per query.
_SET_RECORD = ScoredRecord.__dict__["record"].__set__
_SET_SCORE = ScoredRecord.__dict__["score"].__set__
_SET_HITS = LegAnswer.__dict__["hits"].__set__
_SET_SCREENED = LegAnswer.__dict__["screened"].__set__


def _answer(
    rows: list[Record], found: list[tuple[int, float]], norm: float, screened: tuple[str, ...]
) -> LegAnswer:
    """``LegAnswer`` of the stored ``rows`` at ``found`` (position, score), each score divided
    by ``norm`` unless it is 0 or 1 (which would change nothing)."""
    hits = []
    scaled = norm not in (0.0, 1.0)
    for i, score in found:
        hit = _new(ScoredRecord)
        _SET_RECORD(hit, rows[i])
        _SET_SCORE(hit, score / norm if scaled else score)
        hits.append(hit)
    answer = _new(LegAnswer)
    _SET_HITS(answer, tuple(hits))
    _SET_SCREENED(answer, screened)
    return answer


def search_snapshot(snap: Snapshot, vector: Vector, admission: Admission, limit: int) -> LegAnswer:
    """``search_vectors`` over ``snap`` (committed, at ``admission.pointer``)."""
    q = vector if type(vector) is np.ndarray and vector.dtype is _FLOAT32 else None
    if q is None:
        q = np.asarray(vector, dtype=np.float32)
    if q.ndim != 1:
        q = q.reshape(-1)
    index = snap.index(q.shape[0])
    rows = index.rows
    if not rows:
        return EMPTY
    flt = admission.metadata_filter
    fmask = None
    if flt is not None:
        fmask = np.fromiter((flt.matches(r.metadata) for r in rows), dtype=bool, count=len(rows))
    who = admission.authorization
    amask = None if who is None else access_mask(snap, index, who)
    mask = amask if fmask is None else (fmask if amask is None else amask & fmask)
    # Rows are unit vectors: the cosine is (row . q) / |q|. Ranking by row . q and dividing
    # only the finalists' scores costs no numpy call to scale q (dividing by 0 or by 1.0
    # would change nothing).
    norm = math.sqrt(q.dot(q))  # what np.linalg.norm computes, without its wrapper
    # A finite float32 |q|^2 bounds |q| far below float32's range, and the rows are finite
    # unit vectors (or zero): every score is finite.
    finite = math.isfinite(norm)
    scores = index.matrix @ q
    screened: tuple[str, ...] = ()
    if admission.report_denied and who is not None:
        screened = screened_sources(rows[i] for i, _ in top(scores, fmask, limit, finite=finite))
    return _answer(rows, top(scores, mask, limit, finite=finite), norm, screened)
