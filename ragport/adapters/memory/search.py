"""The in-memory vector leg's answer: the snapshot's own records at the top-k's positions.

``SnapshotBackend.search_vectors`` (backend.py) scores the snapshot's per-dimension matrix of
searchable rows (visible at its pointer and not forgotten, in id order: ``Snapshot.index``)
with one matrix-vector product; the metadata filter and the grant rule become boolean masks
over those rows before the top-k (``top_k.top``); ``answer`` hands back the snapshot's own
records (the engine copies or lends them). The lexical leg is the scope's BM25 index
(``lexical.ScopeLexicon``).
"""

from __future__ import annotations

from ragport.domain.model import Record
from ragport.ports.pushdowns import LegAnswer
from ragport.ports.store import ScoredRecord

__all__ = ["EMPTY", "answer"]

EMPTY = LegAnswer(())
_new = object.__new__
# ``ScoredRecord`` and ``LegAnswer`` built through their slots (``snapshot.lend_scored``'s way,
# written out in the loop): the hot read makes one answer and ``limit`` hits per query.
_SET_RECORD = ScoredRecord.__dict__["record"].__set__
_SET_SCORE = ScoredRecord.__dict__["score"].__set__
_SET_HITS = LegAnswer.__dict__["hits"].__set__
_SET_SCREENED = LegAnswer.__dict__["screened"].__set__


def answer(
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
