"""rollback_generation, compact and publish_generation against the in-memory store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from doubles import NoTransactionsStore
from flat_options import flat_write

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore

SCOPE = ragport.Scope("tenant-1", "kb", "docs")
OTHER = ragport.Scope("tenant-1", "kb", "archive")
ALICE = ragport.Authorization("alice", "tenant-1")
QUERY = "policy handbook guide rules"
SOURCES = ("a", "b", "c")


def put(store: Any, source_id: str, version: str, n: int = 2, **kwargs: Any) -> Any:
    texts = [f"{source_id} policy handbook guide rules {version} part {i}" for i in range(n)]
    chunks: list[ragport.Chunk] = []
    start = 0
    for i, text in enumerate(texts):
        chunks.append(ragport.Chunk.of(source_id, i, text, start=start))
        start += len(text)
    kwargs.setdefault("scope", SCOPE)
    return ragport.application.replace_source(
        source_id=source_id,
        chunks=chunks,
        embedder=HashEmbedder(),
        store=store,
        **flat_write(**kwargs),
    )


def snapshot(store: InMemoryStore, scope: ragport.Scope = SCOPE) -> dict[str, Any]:
    """Every observable piece of content: rows by source and the retrieved (id, text) set."""
    rows = {s: frozenset((r.id, r.text) for r in store.get_by_source(scope, s)) for s in SOURCES}
    result = ragport.application.retrieve_context(
        QUERY,
        embedder=HashEmbedder(),
        store=store,
        scope=scope,
        request=ragport.RetrievalRequest(top_k=32, query_candidates=128),
    )
    return {"rows": rows, "retrieved": frozenset((h.id, h.text) for h in result.hits)}


def delete(store: InMemoryStore, source_id: str) -> Any:
    return ragport.application.delete_source(source_id=source_id, store=store, scope=SCOPE)


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


# -- rollback ------------------------------------------------------------------------------------


def test_rollback_restores_exact_snapshot(store: InMemoryStore) -> None:
    """Rollback restores snapshot p exactly. If this fails, check discard_above/restore_above."""
    assert put(store, "a", "v1").generation == 1
    assert put(store, "b", "v1", n=3).generation == 2
    at_two = snapshot(store)
    assert len(at_two["retrieved"]) == 5

    assert put(store, "a", "v2", n=1).generation == 3
    assert delete(store, "b").generation == 4
    assert put(store, "c", "v1").generation == 5
    assert put(store, "a", "v3", n=4).generation == 6
    assert snapshot(store) != at_two

    result = ragport.application.rollback_generation(store=store, scope=SCOPE, to=2)

    assert result.generation == 2
    assert store.current_generation(SCOPE) == 2
    assert snapshot(store) == at_two


def test_rollback_to_each_earlier_generation(store: InMemoryStore) -> None:
    """Every generation's snapshot is restorable. If this fails, check rollback_generation."""
    snaps = {0: snapshot(store)}
    put(store, "a", "v1")
    snaps[1] = snapshot(store)
    put(store, "a", "v2", n=3)
    snaps[2] = snapshot(store)
    delete(store, "a")
    snaps[3] = snapshot(store)
    put(store, "b", "v1")
    snaps[4] = snapshot(store)
    assert snaps[0] == snaps[3]
    assert snaps[1] != snaps[2] and snaps[2] != snaps[3] and snaps[3] != snaps[4]

    for to in (4, 3, 2, 1, 0):
        ragport.application.rollback_generation(store=store, scope=SCOPE, to=to)
        assert snapshot(store) == snaps[to], to


def test_counter_continues_from_target(store: InMemoryStore) -> None:
    """After rollback to p the next write is p+1. If this fails, check generations.reset."""
    put(store, "a", "v1")
    at_one = snapshot(store)
    put(store, "a", "v2")
    put(store, "b", "v1")
    ragport.application.rollback_generation(store=store, scope=SCOPE, to=1)
    assert snapshot(store) == at_one

    result = put(store, "c", "v1")
    assert result.generation == 2
    assert store.current_generation(SCOPE) == 2
    rows = snapshot(store)["rows"]
    assert {text.split()[-3] for _, text in rows["a"]} == {"v1"}
    assert rows["b"] == frozenset()
    assert len(rows["c"]) == 2


def test_rollback_above_pointer_is_refused(store: InMemoryStore) -> None:
    """There is no roll-forward. If this fails, check the pointer check in rollback_generation."""
    put(store, "a", "v1")
    put(store, "a", "v2")
    before = snapshot(store)
    with pytest.raises(ragport.ValidationError) as info:
        ragport.application.rollback_generation(store=store, scope=SCOPE, to=3)
    assert info.value.field == "to"
    assert store.current_generation(SCOPE) == 2
    assert snapshot(store) == before


@pytest.mark.parametrize("bad", [-1, True, "1", 1.0])
def test_rollback_rejects_bad_target(store: InMemoryStore, bad: Any) -> None:
    """to must be a non-negative int. If this fails, check rollback_generation's validation."""
    put(store, "a", "v1")
    with pytest.raises(ragport.ValidationError):
        ragport.application.rollback_generation(store=store, scope=SCOPE, to=bad)


def test_rollback_discards_staged_writes(store: InMemoryStore) -> None:
    """Rollback to the pointer discards staged rows. If this fails, check discard_above."""
    put(store, "a", "v1")
    before = snapshot(store)
    staged = put(store, "a", "v2", advance_generation=False)
    assert staged.generation == 2

    ragport.application.rollback_generation(store=store, scope=SCOPE, to=1)

    assert ragport.application.publish_generation(store=store, scope=SCOPE) == 1
    assert snapshot(store) == before
    assert put(store, "b", "v1").generation == 2


def test_rollback_touches_one_scope_only(store: InMemoryStore) -> None:
    """Rollback of one scope leaves another alone. If this fails, check per-scope generations."""
    put(store, "a", "v1")
    put(store, "a", "v1", scope=OTHER)
    put(store, "a", "v2", scope=OTHER)
    other_before = snapshot(store, OTHER)
    put(store, "a", "v2")

    ragport.application.rollback_generation(store=store, scope=SCOPE, to=1)

    assert snapshot(store, OTHER) == other_before
    assert store.current_generation(OTHER) == 2


def test_grants_and_tombstones_are_not_rolled_back(store: InMemoryStore) -> None:
    """Rollback restores content only. If this fails, check rollback leaves grants/tombstones."""
    put(store, "a", "v1")
    put(store, "b", "v1")
    put(store, "c", "v1")
    store.set_source_access(
        SCOPE,
        [
            ragport.Grant("a", principal_ids=["alice"]),
            ragport.Grant("b", principal_ids=["alice"]),
        ],
    )
    with store.unit_of_work(SCOPE) as uow:
        uow.tombstones.add([ragport.domain.Tombstone("b", "forgotten")])
        uow.commit()

    ragport.application.rollback_generation(store=store, scope=SCOPE, to=2)

    decisions = store.check_source_access(SCOPE, ["a", "b", "c"], ALICE)
    assert {s: d.allowed for s, d in decisions.items()} == {"a": True, "b": True, "c": False}
    assert store.list_invalidated_ids(SCOPE) == frozenset({"b"})
    result = ragport.application.retrieve_context(
        QUERY,
        embedder=HashEmbedder(),
        store=store,
        scope=SCOPE,
        authorization=ALICE,
        request=ragport.RetrievalRequest(top_k=32),
    )
    assert {h.source_id for h in result.hits} == {"a"}
    assert len(store.get_by_source(SCOPE, "b")) == 2


def test_rollback_without_transactions_is_refused(store: InMemoryStore) -> None:
    """Rollback needs transactions. If this fails, check require_transactions in rollback."""
    put(store, "a", "v1")
    put(store, "a", "v2")
    with pytest.raises(ragport.CapabilityError):
        ragport.application.rollback_generation(store=NoTransactionsStore(store), scope=SCOPE, to=1)
    assert store.current_generation(SCOPE) == 2


# -- compact -------------------------------------------------------------------------------------


def _history(store: InMemoryStore) -> dict[int, dict[str, Any]]:
    """g1 a v1; g2 a v2 (retires v1 at 2); g3 b v1; g4 c v1; g5 a v3 (retires v2 at 5)."""
    snaps: dict[int, dict[str, Any]] = {}
    for generation, (source, version) in enumerate(
        [("a", "v1"), ("a", "v2"), ("b", "v1"), ("c", "v1"), ("a", "v3")], start=1
    ):
        assert put(store, source, version).generation == generation
        snaps[generation] = snapshot(store)
    return snaps


def test_compact_purges_old_retired_rows_and_raises_floor(store: InMemoryStore) -> None:
    """compact(keep=1) purges old rows; floor blocks rollback. If this fails, check compact."""
    snaps = _history(store)
    current = snapshot(store)

    result = ragport.application.compact(store=store, scope=SCOPE, keep=1)

    assert result.purged == 2  # a v1's two rows, retired at generation 2
    # DESIGN: rows retired more than keep=1 generations ago (retired < 5 - 1) go; snapshots
    # from pointer - keep - 1 = 3 on stay restorable.
    assert result.floor == 3
    assert snapshot(store) == current
    assert store.current_generation(SCOPE) == 5
    for to in (0, 1, result.floor - 1):
        with pytest.raises(ragport.ValidationError) as info:
            ragport.application.rollback_generation(store=store, scope=SCOPE, to=to)
        assert info.value.field == "to"
    assert snapshot(store) == current

    ragport.application.rollback_generation(store=store, scope=SCOPE, to=3)
    assert snapshot(store) == snaps[3]


def test_compact_keeps_rows_needed_within_keep(store: InMemoryStore) -> None:
    """compact(keep=3) keeps snapshots back to pointer-3. If this fails, check compact's through."""
    snaps = _history(store)
    ragport.application.compact(store=store, scope=SCOPE, keep=3)
    ragport.application.rollback_generation(store=store, scope=SCOPE, to=2)
    assert snapshot(store) == snaps[2]


def test_compact_is_a_no_op_when_nothing_is_old(store: InMemoryStore) -> None:
    """Compacting twice purges nothing more. If this fails, check compact's floor check."""
    _history(store)
    first = ragport.application.compact(store=store, scope=SCOPE, keep=1)
    second = ragport.application.compact(store=store, scope=SCOPE, keep=1)
    assert second.purged == 0
    assert second.floor == first.floor


def test_compact_without_transactions_is_refused(store: InMemoryStore) -> None:
    """compact needs transactions. If this fails, check require_transactions in compact."""
    _history(store)
    with pytest.raises(ragport.CapabilityError) as info:
        ragport.application.compact(store=NoTransactionsStore(store), scope=SCOPE, keep=1)
    assert info.value.capability == "transactions"
    ragport.application.rollback_generation(store=store, scope=SCOPE, to=1)


def test_compact_rejects_keep_past_ceiling(store: InMemoryStore) -> None:
    """keep is bounded by compact_keep. If this fails, check check_limit in compact."""
    with pytest.raises(ragport.ValidationError) as info:
        ragport.application.compact(
            store=store, scope=SCOPE, keep=ragport.domain.HARD_LIMITS.compact_keep + 1
        )
    assert info.value.limit == "compact_keep"
    with pytest.raises(ragport.ValidationError) as info:
        ragport.application.compact(store=store, scope=SCOPE, keep=-1)
    assert info.value.limit == "compact_keep"


# -- publish -------------------------------------------------------------------------------------


def test_publish_without_staged_writes_keeps_pointer(store: InMemoryStore) -> None:
    """publish with nothing staged changes nothing. If this fails, check publish_generation."""
    assert ragport.application.publish_generation(store=store, scope=SCOPE) == 0
    put(store, "a", "v1")
    before = snapshot(store)
    assert ragport.application.publish_generation(store=store, scope=SCOPE) == 1
    assert snapshot(store) == before


def _names(records: Sequence[ragport.domain.Record]) -> set[str]:
    return {r.id for r in records}


def test_staged_delete_and_replace_publish_as_one(store: InMemoryStore) -> None:
    """A staged replace then publish swaps at once. If this fails, check stage/publish."""
    put(store, "a", "v1")
    put(store, "b", "v1", advance_generation=False)
    put(store, "a", "v2", n=1, advance_generation=False)
    assert _names(store.get_by_source(SCOPE, "a")) == {"a#0001", "a#0002"}
    assert _names(store.get_by_source(SCOPE, "b")) == set()
    assert ragport.application.publish_generation(store=store, scope=SCOPE) == 2
    assert _names(store.get_by_source(SCOPE, "a")) == {"a#0001"}
    assert _names(store.get_by_source(SCOPE, "b")) == {"b#0001", "b#0002"}
