"""The ``of_*`` constructors (Hit, Provenance, Citation) equal their classes' constructors."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs
import pytest

from ragport.domain.errors import ValidationError
from ragport.domain.hits import citations_of, ranked_hits
from ragport.domain.model import Citation, Hit, Provenance, Record, Scope, Trust


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
    taken = Hit.of_record(record, text="redacted text", take_metadata=True, **fields)
    assert taken.metadata is record.metadata  # the caller handed its own copy over


def test_provenance_and_citation_of_equal_their_constructors_on_every_field() -> None:
    """``Provenance.of_record`` and ``Citation.of_hit`` equal the constructors' instances.

    If this fails, a field was added to Provenance or Citation and not to its ``of_*``
    constructor (domain/model.py), or one of them takes a field from the wrong place.
    """
    scope = Scope("t", "r", "c")
    record = Record(
        id="sum-1", scope=scope, source_id="sum-1", kind="derived", text="x", lineage=("a", "b")
    )
    at = datetime(2026, 1, 1, tzinfo=UTC)
    fast = Provenance.of_record(
        record, scope, provider="memory", retrieval="hybrid", retrieved_at=at
    )
    built = Provenance(
        source_id="sum-1",
        chunk_id="sum-1",
        citation_id="sum-1",
        provider="memory",
        tenant_id="t",
        resource_id="r",
        corpus_id="c",
        retrieval="hybrid",
        retrieved_at=at,
        lineage=("a", "b"),
    )
    assert fast == built
    for field in attrs.fields(Provenance):
        assert getattr(fast, field.name) == getattr(built, field.name), field.name
    hit = Hit.of_record(
        record, text="x", score=1.0, retrieval_rank=1, provenance=fast, trust=Trust()
    )
    citation = Citation.of_hit(hit)
    expected = Citation(
        id="sum-1", source_id="sum-1", chunk_id="sum-1", provenance=fast, trust=Trust()
    )
    assert citation == expected
    for field in attrs.fields(Citation):
        assert getattr(citation, field.name) == getattr(expected, field.name), field.name


def test_metadata_changed_in_place_after_freezing_is_frozen_again() -> None:
    """A record whose metadata gained a tuple or a set after it was built: ``of_record``
    converts the tuple and refuses the set, as ``Hit(...)`` would; nothing is shared.

    If this fails, check copy_frozen's fallback to freeze_metadata (domain/values.py).
    """
    scope = Scope("t", "r", "c")
    record = Record(id="d#0001", scope=scope, source_id="d", kind="chunk", text="t")
    provenance = Provenance.of_record(
        record, scope, provider="memory", retrieval="vector", retrieved_at=datetime.now(UTC)
    )

    def hit() -> Hit:
        return Hit.of_record(
            record, text="t", score=1.0, retrieval_rank=1, provenance=provenance, trust=Trust()
        )

    record.metadata["pair"] = ("a", "b")
    assert hit().metadata == {"pair": ["a", "b"]}
    record.metadata["nested"] = [{"tags": {"x"}}]
    with pytest.raises(ValidationError):
        hit()


def test_ranked_equals_of_record_with_provenance_for_every_hit_and_field() -> None:
    """``ranked_hits`` builds, per (scope, record, score, retrieval), the hit that
    ``Hit.of_record`` with ``Provenance.of_record`` builds: same fields, ranks from 1,
    replacement texts in order, metadata copied unless taken.

    If this fails, a field was added to Hit or Provenance and not to ranked_hits
    (domain/hits.py).
    """
    at = datetime(2026, 1, 1, tzinfo=UTC)
    scopes = (Scope("t", "r", "c"), Scope("t", "r2", "c2"))
    records = [
        Record(
            id=f"doc#000{i}",
            scope=scopes[i % 2],
            source_id=f"doc{i}",
            kind="chunk",
            text=f"text {i}",
            metadata={"heading": ["A", str(i)], "tags": {"lang": ["en"]}},
            lineage=("root",) if i else (),
        )
        for i in range(3)
    ]
    found = [
        (scopes[i % 2], r, 1.0 - i / 10, ("vector", "lexical", "hybrid")[i])
        for i, r in enumerate(records)
    ]
    trust = Trust()
    for texts in (None, ["one", "two", "three"]):
        for take in (False, True):
            hits = ranked_hits(
                found,
                texts=texts,
                provider="memory",
                retrieved_at=at,
                trust=trust,
                take_metadata=take,
            )
            assert len(hits) == 3
            for rank, ((scope, record, score, leg), hit) in enumerate(
                zip(found, hits, strict=True), start=1
            ):
                expected = Hit.of_record(
                    record,
                    text=record.text if texts is None else texts[rank - 1],
                    score=score,
                    retrieval_rank=rank,
                    provenance=Provenance.of_record(
                        record, scope, provider="memory", retrieval=leg, retrieved_at=at
                    ),
                    trust=trust,
                )
                for field in attrs.fields(Hit):
                    assert getattr(hit, field.name) == getattr(expected, field.name), field.name
                for field in attrs.fields(Provenance):
                    assert getattr(hit.provenance, field.name) == getattr(
                        expected.provenance, field.name
                    ), field.name
                assert (hit.metadata is record.metadata) is take
    copied = ranked_hits(found, provider="memory", retrieved_at=at, trust=trust)
    copied[0].metadata["heading"].append("scribbled")
    assert records[0].metadata["heading"] == ["A", "0"]


def test_citations_of_equals_citation_of_hit_for_every_hit_and_field() -> None:
    """``citations_of`` builds, per hit and in order, what ``Citation.of_hit`` builds.

    If this fails, a field was added to Citation and not to citations_of (domain/hits.py).
    """
    at = datetime(2026, 1, 1, tzinfo=UTC)
    scope = Scope("t", "r", "c")
    records = [
        Record(id=f"d#000{i}", scope=scope, source_id="d", kind="chunk", text=f"t{i}")
        for i in range(3)
    ]
    hits = ranked_hits(
        [(scope, r, 1.0, "vector") for r in records],
        provider="memory",
        retrieved_at=at,
        trust=Trust(),
    )
    citations = citations_of(hits)
    assert len(citations) == 3
    for hit, citation in zip(hits, citations, strict=True):
        expected = Citation.of_hit(hit)
        for field in attrs.fields(Citation):
            assert getattr(citation, field.name) == getattr(expected, field.name), field.name
    assert citations_of([]) == []
