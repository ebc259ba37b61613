"""Hit.of_record: the same hit the constructor builds, with metadata copied, never shared."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs

from ragport.domain.model import Hit, Provenance, Record, Scope, Trust


def test_of_record_equals_the_constructor_on_every_field_and_copies_metadata() -> None:
    """Every field of ``Hit.of_record`` equals ``Hit(...)``'s; its metadata shares nothing.

    If this fails, a field was added to Hit and not to Hit.of_record (domain/model.py), or
    copy_frozen (domain/values.py) no longer copies nested dicts and lists.
    """
    scope = Scope("t", "r", "c")
    record = Record(
        id="doc#0001",
        scope=scope,
        source_id="doc",
        kind="chunk",
        text="text",
        metadata={"heading": ["A"], "tags": {"lang": ["en"]}, "x": None},
    )
    provenance = Provenance(
        source_id="doc",
        chunk_id="doc#0001",
        citation_id="doc#0001",
        provider="memory",
        tenant_id="t",
        resource_id="r",
        corpus_id="c",
        retrieval="vector",
        retrieved_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    fields = {"score": 0.5, "retrieval_rank": 2, "provenance": provenance, "trust": Trust()}
    fast = Hit.of_record(record, text="redacted text", **fields)
    built = Hit(
        id=record.id,
        source_id=record.source_id,
        text="redacted text",
        metadata=record.metadata,
        **fields,
    )
    for field in attrs.fields(Hit):
        assert getattr(fast, field.name) == getattr(built, field.name), field.name
    assert fast.metadata is not record.metadata
    fast.metadata["heading"].append("scribbled")
    fast.metadata["tags"]["lang"].clear()
    assert record.metadata == {"heading": ["A"], "tags": {"lang": ["en"]}, "x": None}
