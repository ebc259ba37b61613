"""The use cases end to end on PostgresStore, compared with InMemoryStore on the same scenario.

One deterministic scenario runs against both adapter pairs (store + status store). It asserts
the expected behaviour as it goes (so both adapters are checked on their own) and returns a log
of everything observable: hit ids, texts, scores, provenance, generations, result objects and
ingestion statuses. The two logs must match, scores within float tolerance.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from flat_options import flat, flat_write
from sqlalchemy import text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.adapters.postgres import PostgresStatusStore, PostgresStore
from ragport.contract_tests.plugin import FixedClock

DOCS = ragport.Scope("acme", "kb", "docs")
NOTES = ragport.Scope("acme", "kb", "notes")
ACL = ragport.Scope("acme", "kb", "acl")
FOREIGN = ragport.Scope("globex", "kb", "docs")
EMB = HashEmbedder(dimensions=64)
SECRET = "sk-LIVE-4242"
QUERY = "vacation days approval"
NOW = datetime(2024, 5, 17, 9, 30, tzinfo=UTC)

HANDBOOK = [
    "vacation days accrue monthly for every employee",
    "vacation requests need manager approval two weeks ahead",
    "unused vacation days carry over until march",
]
SECURITY = [
    "security badges must be worn inside the office",
    "report lost security badges to the front desk",
]


CLOCK = FixedClock(NOW)


def chunks(source: str, texts: list[str], **metadata: Any) -> list[ragport.Chunk]:
    return [
        ragport.Chunk.of(source, i, t, metadata={**metadata, "n": i}) for i, t in enumerate(texts)
    ]


def observe(result: ragport.RetrievalResult) -> list[tuple]:
    """Hits as comparable tuples: (scope, id, source, text, metadata, rank, score)."""
    return [
        (
            (h.provenance.tenant_id, h.provenance.resource_id, h.provenance.corpus_id),
            h.id,
            h.source_id,
            h.text,
            h.metadata,
            h.retrieval_rank,
            round(h.score, 6),
        )
        for h in result.hits
    ]


def statuses(status_store, scope: ragport.Scope) -> list[tuple]:
    """Every status of ``scope``, paging two at a time through the use case."""
    out: list[tuple] = []
    cursor = None
    while True:
        page = ragport.application.list_ingestion_status(
            store=status_store, scope=scope, limit=2, cursor=cursor
        )
        out.extend(
            (s.source_id, s.state, s.bytes, s.chunks_total, s.chunks_indexed, s.error, s.updated_at)
            for s in page.items
        )
        if page.cursor is None:
            return out
        cursor = page.cursor


def scenario(store, status_store) -> list[tuple[str, Any]]:
    """Run every use case on ``store``; assert behaviour; return the observable log."""
    log: list[tuple[str, Any]] = []

    def note(label: str, value: Any) -> Any:
        log.append((label, value))
        return value

    def replace(source, items, scope=DOCS, **kw):
        return ragport.application.replace_source(
            source_id=source,
            chunks=items,
            embedder=EMB,
            store=store,
            scope=scope,
            **flat_write(status_store=status_store, clock=CLOCK, **kw),
        )

    def retrieve(query=QUERY, **kw):
        if "scopes" not in kw:
            kw.setdefault("scope", DOCS)
        return ragport.application.retrieve_context(
            query, embedder=EMB, store=store, **flat(clock=CLOCK, **kw)
        )

    # -- replace_source and plain retrieval --------------------------------------------------
    note("replace handbook", replace("handbook", chunks("handbook", HANDBOOK, team="hr")))
    note("replace security", replace("security", chunks("security", SECURITY, team="sec")))
    first = note("retrieve", observe(retrieve(top_k=5)))
    assert len(first) == 5 and {h[2] for h in first[:2]} == {"handbook"}
    assert note("generation", store.current_generation(DOCS)) == 2

    # -- content hash skip -----------------------------------------------------------------
    digest = "ab" * 32
    note(
        "hash v1", replace("faq", chunks("faq", ["how to apply for vacation"]), content_hash=digest)
    )
    skipped = note(
        "hash again",
        replace("faq", chunks("faq", ["how to apply for vacation"]), content_hash=digest),
    )
    assert skipped.skipped and skipped.generation == 3

    # -- metadata_filter -------------------------------------------------------------------
    sec = note("filter team", observe(retrieve(metadata_filter={"team": "sec"}, top_k=10)))
    assert sec and {h[2] for h in sec} == {"security"}
    typed = [
        ragport.Chunk.of("typed", 0, "vacation flag true", metadata={"flag": True, "num": 1}),
        ragport.Chunk.of("typed", 1, "vacation flag one", metadata={"flag": 1, "num": 1.5}),
    ]
    note("replace typed", replace("typed", typed))
    flag = note("filter bool", observe(retrieve(metadata_filter={"flag": True}, top_k=10)))
    assert [h[1] for h in flag] == ["typed#0001"], "true is not 1"
    num = note("filter number", observe(retrieve(metadata_filter={"num": 1.0}, top_k=10)))
    assert [h[1] for h in num] == ["typed#0001"], "1 equals 1.0"
    nested = note("filter two keys", observe(retrieve(metadata_filter={"team": "hr", "n": 1})))
    assert [h[1] for h in nested] == ["handbook#0002"]
    assert note("filter none", observe(retrieve(metadata_filter={"team": "nobody"}))) == []

    # -- secrets: redacted at write and at read --------------------------------------------
    creds = ["vacation portal password is " + SECRET + " keep it safe"]
    note("replace creds", replace("creds", chunks("creds", creds), secrets=[SECRET]))
    stored = note("stored creds", [r.text for r in store.get_by_source(DOCS, "creds")])
    assert stored == ["vacation portal password is [REDACTED] keep it safe"]
    note("replace leaky", replace("leaky", chunks("leaky", ["vacation token tok-77 inside"])))
    redacted = note("retrieve redacted", retrieve(secrets=["tok-77", SECRET], top_k=10))
    assert "tok-77" not in redacted.text and SECRET not in redacted.text
    assert any("[REDACTED]" in h.text for h in redacted.hits if h.source_id == "leaky")
    note("redacted text", (redacted.text, observe(redacted)))

    # -- authorization with grants ---------------------------------------------------------
    store.set_source_access(
        DOCS,
        [
            ragport.Grant("handbook", principal_ids=["alice"]),
            ragport.Grant("security", group_ids=["staff"]),
            ragport.Grant("faq", principal_ids=["bob"], access_version=2),
        ],
    )
    alice = ragport.Authorization("alice", "acme")
    carol = ragport.Authorization("carol", "acme", group_ids=["staff"])
    denials: list[Any] = []
    as_alice = note(
        "alice", observe(retrieve(authorization=alice, top_k=10, on_access_denied=denials.append))
    )
    assert as_alice and {h[2] for h in as_alice} == {"handbook"}
    as_carol = note("carol", observe(retrieve(authorization=carol, top_k=10)))
    assert {h[2] for h in as_carol} == {"security"}
    bob_v1 = ragport.Authorization("bob", "acme", access_version=1)
    bob_v2 = ragport.Authorization("bob", "acme", access_version=2)
    assert note("bob v1", observe(retrieve(authorization=bob_v1, top_k=10))) == []
    assert {h[2] for h in note("bob v2", observe(retrieve(authorization=bob_v2)))} == {"faq"}
    note("denials", sorted((d.source_id, d.reason, d.hits) for d in denials))
    decisions = store.check_source_access(DOCS, ["handbook", "security", "faq", "nope"], alice)
    note("decisions", sorted((k, v.allowed, v.reason) for k, v in decisions.items()))

    # 10 denied records nearer to the query than the one allowed record; top_k=1 still finds it.
    near = [f"{QUERY} confidential variant {i}" for i in range(10)]
    note("replace denied", replace("plans", chunks("plans", near), scope=ACL))
    note(
        "replace allowed",
        replace("memo", chunks("memo", ["approval memo for days off"]), scope=ACL),
    )
    store.set_source_access(ACL, [ragport.Grant("memo", principal_ids=["alice"])])
    unfiltered = note("acl unfiltered", observe(retrieve(scope=ACL, top_k=11)))
    assert [h[2] for h in unfiltered] == ["plans"] * 10 + ["memo"], "the denied ones are nearer"
    top1 = note(
        "acl top1",
        observe(retrieve(scope=ACL, authorization=alice, top_k=1, query_candidates=1)),
    )
    assert [h[1] for h in top1] == ["memo#0001"]

    # -- multi-scope retrieval (same ids in two scopes, and another tenant) ----------------
    note(
        "replace notes",
        replace("handbook", chunks("handbook", ["vacation notes for approval"]), scope=NOTES),
    )
    note("replace foreign", replace("handbook", chunks("handbook", HANDBOOK), scope=FOREIGN))
    multi = note("multi", observe(retrieve(scopes=[DOCS, NOTES], top_k=10)))
    scopes_seen = {h[0] for h in multi}
    assert scopes_seen == {("acme", "kb", "docs"), ("acme", "kb", "notes")}
    both = [h for h in multi if h[1] == "handbook#0001"]
    assert len(both) == 2, "the same id in two scopes is two hits"
    with pytest.raises(ragport.domain.errors.ScopeError):
        retrieve(scopes=[DOCS, FOREIGN], authorization=alice)

    # -- delete_source, rollback_generation ------------------------------------------------
    before_delete = note("gen before delete", store.current_generation(DOCS))
    note(
        "delete",
        ragport.application.delete_source(
            source_id="security",
            store=store,
            scope=DOCS,
            write_options=ragport.WriteOptions(status_store=status_store),
        ),
    )
    assert note("after delete", store.get_by_source(DOCS, "security")) == []
    gone = note("retrieve after delete", observe(retrieve(top_k=10)))
    assert "security" not in {h[2] for h in gone}
    rolled = note(
        "rollback",
        ragport.application.rollback_generation(store=store, scope=DOCS, to=before_delete),
    )
    assert rolled.generation == before_delete and rolled.restored == 2
    back = note("after rollback", [(r.id, r.text) for r in store.get_by_source(DOCS, "security")])
    assert [t for _, t in back] == SECURITY
    assert "security" in {
        h[2] for h in note("retrieve after rollback", observe(retrieve(top_k=10)))
    }

    # -- compact ---------------------------------------------------------------------------
    note("handbook v2", replace("handbook", chunks("handbook", ["vacation policy version two"])))
    note(
        "handbook v3",
        replace("handbook", chunks("handbook", ["vacation policy version three", "and approval"])),
    )
    compacted = note("compact", ragport.application.compact(store=store, scope=DOCS, keep=0))
    assert compacted.purged >= 3
    with pytest.raises(ragport.ValidationError) as info:
        ragport.application.rollback_generation(store=store, scope=DOCS, to=compacted.floor - 1)
    note("rollback below floor", (type(info.value).__name__, info.value.field, info.value.limit))
    note("handbook after compact", [r.text for r in store.get_by_source(DOCS, "handbook")])

    # -- index_chunks ----------------------------------------------------------------------
    batch = chunks("glossary", ["vacation: paid days off", "approval: a manager's yes"]) + chunks(
        "faq", ["how to apply for vacation", "who approves days off"]
    )
    gen_before = store.current_generation(DOCS)
    indexed = note(
        "index_chunks",
        ragport.application.index_chunks(
            chunks=batch,
            embedder=EMB,
            store=store,
            scope=DOCS,
            runtime=ragport.Runtime(clock=CLOCK),
            write_options=ragport.WriteOptions(status_store=status_store, batch_size=2),
        ),
    )
    assert indexed.indexed == 4 and store.current_generation(DOCS) == gen_before + 2
    note("glossary", [(r.id, r.text, r.generation) for r in store.get_by_source(DOCS, "glossary")])
    note("faq", [(r.id, r.text, r.generation) for r in store.get_by_source(DOCS, "faq")])
    note("retrieve after index", observe(retrieve(top_k=10)))

    # -- a failed replace is recorded, the previous version stays ------------------------------
    class Broken:
        id = EMB.id
        dimensions = EMB.dimensions

        def embed(self, texts):
            return np.full((len(texts), EMB.dimensions), np.nan, dtype=np.float32)

    with pytest.raises(ragport.domain.errors.EmbedderError):
        ragport.application.replace_source(
            source_id="glossary",
            chunks=chunks("glossary", ["never stored"]),
            embedder=Broken(),
            store=store,
            scope=DOCS,
            runtime=ragport.Runtime(clock=CLOCK),
            write_options=ragport.WriteOptions(status_store=status_store),
        )
    assert len(store.get_by_source(DOCS, "glossary")) == 2

    # -- list_ingestion_status ----------------------------------------------------------------
    listed = note("statuses", statuses(status_store, DOCS))
    states = {s[0]: s[1] for s in listed}
    assert states["glossary"] == "failed" and states["handbook"] == "indexed"
    assert "security" not in states, "delete_source cleared its status"
    note("acl statuses", statuses(status_store, ACL))
    note("embedders", sorted(store.list_embedders(DOCS)))
    note("final generation", {s: store.current_generation(s) for s in (DOCS, NOTES, ACL, FOREIGN)})
    return log


def _same(label: str, a: Any, b: Any) -> None:
    """Deep equality with float tolerance (scores come from float32 on one side)."""
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, abs=1e-4), label
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        assert len(a) == len(b), f"{label}: {a!r} != {b!r}"
        for x, y in zip(a, b, strict=True):
            _same(label, x, y)
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{label}: {a!r} != {b!r}"
        for k in a:
            _same(f"{label}.{k}", a[k], b[k])
    elif isinstance(a, ragport.RetrievalResult):
        _same(label, observe(a), observe(b))
    else:
        assert a == b, f"{label}: postgres {a!r} != memory {b!r}"


@pytest.fixture
def pg_pair(pg_engine, pg_schema):
    return (
        PostgresStore(pg_engine, schema=pg_schema, create=True),
        PostgresStatusStore(pg_engine, schema=pg_schema),
    )


def test_postgres_matches_memory_on_every_use_case(pg_pair):
    """Same scenario, same observable results on both stores. If this fails, check ragport/adapters/postgres/store.py."""
    pg_log = scenario(*pg_pair)
    mem_log = scenario(InMemoryStore(), InMemoryStatusStore())
    assert [label for label, _ in pg_log] == [label for label, _ in mem_log]
    for (label, pg_value), (_, mem_value) in zip(pg_log, mem_log, strict=True):
        _same(label, pg_value, mem_value)


def test_postgres_state_survives_a_new_store_instance(pg_pair, pg_engine, pg_schema):
    """A second PostgresStore on the same schema sees the same data. If this fails, check store.py reads."""
    store, status_store = pg_pair
    scenario(store, status_store)
    again = PostgresStore(pg_engine, schema=pg_schema)
    first = ragport.application.retrieve_context(
        QUERY, embedder=EMB, store=store, scope=DOCS, runtime=ragport.Runtime(clock=CLOCK)
    )
    second = ragport.application.retrieve_context(
        QUERY, embedder=EMB, store=again, scope=DOCS, runtime=ragport.Runtime(clock=CLOCK)
    )
    assert observe(first) == observe(second)
    with pg_engine.connect() as conn:
        rows = (
            conn.execute(text(f'SELECT DISTINCT tenant_id FROM "{pg_schema}".records ORDER BY 1'))
            .scalars()
            .all()
        )
    assert rows == ["acme", "globex"]
