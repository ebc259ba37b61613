"""Records crossing a store's boundary: ``take_in`` what a caller writes, ``hand_out`` what a
read returns. Every store on the engine, and ``InMemoryStore``, copies through these."""

from __future__ import annotations

import attrs

from ragport.domain.model import Record, copy_frozen
from ragport.ports.store import ScoredRecord

__all__ = ["hand_out", "hand_out_scored", "take_in"]


# Record's slot descriptors: setting through them skips the frozen class's __setattr__.
_SET = {a.name: Record.__dict__[a.name].__set__ for a in attrs.fields(Record)}
_new_record = object.__new__


def take_in(record: Record) -> Record:
    """A caller's record entering a store: the constructor runs again (every check), so the
    store's copy shares no metadata dict or list with the caller's."""
    return attrs.evolve(record)


def hand_out(record: Record) -> Record:
    """A copy of a stored record for a caller: its metadata is its own, so writing to what a
    read returned never changes the store.

    A ``Record`` was validated (and its metadata frozen to JSON types) when it was built, and
    it is frozen, so the copy skips the constructor's checks (2 us instead of 16 us a record);
    anything that is not exactly a ``Record`` goes through ``attrs.evolve``. Every field is
    named here (``tests/adapters/test_memory_hand_out.py`` fails when one is missing).
    """
    if type(record) is not Record:
        return attrs.evolve(record)
    out = _new_record(Record)
    _SET["id"](out, record.id)
    _SET["scope"](out, record.scope)
    _SET["source_id"](out, record.source_id)
    _SET["kind"](out, record.kind)
    _SET["text"](out, record.text)
    _SET["metadata"](out, copy_frozen(record.metadata))
    _SET["embedder_id"](out, record.embedder_id)
    _SET["dimensions"](out, record.dimensions)
    _SET["generation"](out, record.generation)
    _SET["retired_generation"](out, record.retired_generation)
    _SET["content_hash"](out, record.content_hash)
    _SET["lineage"](out, record.lineage)
    _SET["roots"](out, record.roots)
    _SET["chunk_index"](out, record.chunk_index)
    _SET["start"](out, record.start)
    _SET["end"](out, record.end)
    return out


_SET_RECORD = ScoredRecord.__dict__["record"].__set__
_SET_SCORE = ScoredRecord.__dict__["score"].__set__


def hand_out_scored(record: Record, score: float) -> ScoredRecord:
    """``ScoredRecord(hand_out(record), score)``: one per hit of every query, so built through
    its slots like ``hand_out`` (a record copy and a Python float need no check;
    ``tests/adapters/test_memory_hand_out.py`` compares it with the constructor)."""
    out = _new_record(ScoredRecord)
    _SET_RECORD(out, hand_out(record))
    _SET_SCORE(out, score)
    return out
