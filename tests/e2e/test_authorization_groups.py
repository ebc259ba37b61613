"""A directory user in many groups (issue 44), on both stores.

An ``Authorization`` holds as many groups as a ``Grant`` (``HARD_LIMITS.group_ids``); a
deployment's per-call ceiling is ``Limits.group_ids`` (default 1,024), checked by
``retrieve_context`` before any store is asked. A caller in 40 or 1,000 groups sees exactly
what its grants allow: chunks of sources granted to one of its groups or to itself, and
derived records only when every root is allowed.
"""

from __future__ import annotations

from typing import Any

import pytest

import ragport
from ragport import Authorization, Chunk, Grant, Limits, Runtime, Scope, ValidationError
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore

SCOPE = Scope("tenant-44", "kb", "docs")
EMB = HashEmbedder(32)
SOURCES = ("team-doc", "other-doc", "own-doc", "nobody-doc")


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> Any:
    """Four sources and three derived records, granted as ``_grants`` says."""
    if request.param == "memory":
        found: Any = InMemoryStore()
    else:
        from ragport.adapters.postgres import PostgresStore

        engine = request.getfixturevalue("pg_engine")
        schema = request.getfixturevalue("pg_schema")
        found = PostgresStore(engine, schema=schema, create=True)
    for source_id in SOURCES:
        ragport.application.replace_source(
            source_id=source_id,
            chunks=[Chunk.of(source_id, 0, f"shared memo text about {source_id}")],
            embedder=EMB,
            store=found,
            scope=SCOPE,
        )
    for record_id, lineage in (
        ("sum-team-own", ["team-doc", "own-doc"]),
        ("sum-team-other", ["team-doc", "other-doc"]),
        ("sum-other", ["other-doc"]),
    ):
        ragport.application.index_derived(
            record_id=record_id,
            text=f"shared memo summary {record_id}",
            lineage=lineage,
            embedder=EMB,
            store=found,
            scope=SCOPE,
        )
    found.set_source_access(SCOPE, _grants())
    return found


def _grants() -> list[Grant]:
    return [
        Grant("team-doc", group_ids=("dir-00001", "team-7", "dir-00002")),
        Grant("other-doc", group_ids=("dir-00003", "dir-00004")),
        Grant("own-doc", principal_ids=("alice",)),
        Grant("nobody-doc", group_ids=("dir-00005",)),
    ]


def _alice(groups: int) -> Authorization:
    """Alice in ``groups`` groups: ``team-7`` and others no grant names."""
    names = ["team-7"] + [f"idle-{i:05d}" for i in range(groups - 1)]
    return Authorization("alice", SCOPE.tenant_id, group_ids=names)


ALLOWED = {"team-doc", "own-doc", "sum-team-own"}


def _seen(store: Any, authorization: Authorization, runtime: Runtime | None = None) -> set[str]:
    result = ragport.application.retrieve_context(
        "shared memo",
        embedder=EMB,
        store=store,
        scope=SCOPE,
        request=ragport.RetrievalRequest(top_k=10),
        authorization=authorization,
        runtime=runtime,
    )
    return {h.id.split("#")[0] for h in result.hits}


@pytest.mark.parametrize("groups", [40, 1_000])
def test_a_caller_in_many_groups_sees_exactly_its_grants(store: Any, groups: int) -> None:
    """40 or 1,000 groups: retrieve_context, store.query and check_source_access agree with
    the grants. If this fails, check GROUP_IDS_MAX (domain), the ACL predicate's GROUP_MATCH
    (PostgreSQL) or decide_access (in memory)."""
    alice = _alice(groups)
    assert len(alice.group_ids) == groups
    assert _seen(store, alice) == ALLOWED
    vector = EMB.embed(["shared memo"])[0]
    found = store.query(SCOPE, vector, limit=10, authorization=alice)
    assert {s.record.id.split("#")[0] for s in found} == ALLOWED
    decisions = store.check_source_access(SCOPE, list(SOURCES), alice)
    assert {s for s, d in decisions.items() if d.allowed} == {"team-doc", "own-doc"}


def test_a_caller_without_the_granted_group_sees_only_its_own(store: Any) -> None:
    """1,000 groups none of which a grant names: only the principal's own source. If this
    fails, check that the group match compares ids, not list sizes."""
    alice = Authorization("alice", SCOPE.tenant_id, group_ids=[f"x-{i}" for i in range(1_000)])
    assert _seen(store, alice) == {"own-doc"}


def test_past_the_per_call_limit_is_refused_before_the_store(store: Any) -> None:
    """2,000 groups is past the default Limits.group_ids (1,024): ValidationError(limit=
    "group_ids"); a deployment that raises the limit is served. If this fails, check
    check_authorization in ragport/application/retrieval_request.py."""
    alice = _alice(2_000)
    with pytest.raises(ValidationError) as info:
        _seen(store, alice)
    assert info.value.limit == "group_ids"
    assert info.value.field == "authorization"
    roomy = Runtime(limits=Limits(group_ids=2_048))
    assert _seen(store, alice, roomy) == ALLOWED


def test_past_the_hard_ceiling_is_refused_where_the_caller_is_built() -> None:
    """One group past HARD_LIMITS.group_ids never reaches a store: the Authorization itself is
    a ValidationError. If this fails, check _group_ids in ragport/domain/model.py."""
    with pytest.raises(ValidationError) as info:
        _alice(ragport.domain.HARD_LIMITS.group_ids + 1)
    assert info.value.limit == "group_ids"
