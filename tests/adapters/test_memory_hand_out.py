"""The in-memory store's hand-out copy: every field of the stored record, metadata unshared."""

from __future__ import annotations

import attrs

from ragport.adapters.memory.snapshot import hand_out, hand_out_scored
from ragport.domain.model import Record, Scope
from ragport.ports.store import ScoredRecord


def _every_field_set() -> Record:
    return Record(
        id="doc-sum",
        scope=Scope("t", "r", "c"),
        source_id="doc-sum",
        kind="derived",
        text="a summary",
        metadata={"heading": ["A", "B"], "tags": {"lang": ["en"]}, "n": 1.5},
        embedder_id="hash-v1:8",
        dimensions=8,
        generation=3,
        retired_generation=5,
        content_hash="a" * 64,
        lineage=("doc", "other"),
        roots=("doc", "other"),
        chunk_index=2,
        start=10,
        end=19,
    )


def test_hand_out_copies_every_field_and_shares_no_metadata() -> None:
    """The copy equals the record on every attrs field and shares no dict or list with it.

    If this fails, a field was added to Record and not to hand_out in
    adapters/memory/snapshot.py (an unset slot raises AttributeError here).
    """
    record = _every_field_set()
    assert all(getattr(record, a.name) != a.default for a in attrs.fields(Record)), (
        "the fixture must set every field to a non-default value"
    )
    copy = hand_out(record)
    assert copy is not record
    for field in attrs.fields(Record):
        assert getattr(copy, field.name) == getattr(record, field.name), field.name
    assert copy == record
    assert copy.metadata is not record.metadata
    assert copy.metadata["heading"] is not record.metadata["heading"]
    assert copy.metadata["tags"]["lang"] is not record.metadata["tags"]["lang"]
    copy.metadata["tags"]["lang"].append("xx")
    assert record.metadata["tags"]["lang"] == ["en"]


def test_hand_out_scored_equals_the_constructor_on_a_copy() -> None:
    """``hand_out_scored`` equals ``ScoredRecord(hand_out(record), score)`` on every field.

    If this fails, a field was added to ScoredRecord and not to hand_out_scored in
    adapters/memory/snapshot.py (an unset slot raises AttributeError here).
    """
    record = _every_field_set()
    scored = hand_out_scored(record, 0.25)
    assert scored == ScoredRecord(record, 0.25)
    for field in attrs.fields(ScoredRecord):
        getattr(scored, field.name)  # every slot set
    assert scored.record is not record
    assert scored.record.metadata is not record.metadata
