"""Constants and helpers the ChunkStore mixins share (scopes, requirements, snapshots)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ragport.contract_tests._support import (
    CONTRACT_DIMENSIONS,
    Batch,
    WrittenSources,
    direction,
    visible_pairs,
)
from ragport.domain.model import Authorization, Scope
from ragport.ports.embedder import Vector
from ragport.ports.store import (
    ChunkStore,
    OptionalCapability,
    ScoredRecord,
    UnitOfWork,
    missing_methods,
)

DIMS = CONTRACT_DIMENSIONS
TENANT = "contract-tenant"
SCOPE = Scope(TENANT, "contract-resource", "contract-corpus")
"""The scope most tests write to."""
OTHER_CORPUS = Scope(TENANT, "contract-resource", "contract-corpus-2")
OTHER_TENANT = Scope("contract-tenant-2", "contract-resource", "contract-corpus")

# Pairs of scopes that a sloppy key (prefix match, LIKE, joined strings, case folding,
# trimmed padding) would confuse. Each pair must behave as two unrelated scopes.
LOOKALIKE_SCOPES: tuple[tuple[str, Scope, Scope], ...] = (
    ("other-corpus", SCOPE, OTHER_CORPUS),
    ("other-tenant", SCOPE, OTHER_TENANT),
    ("corpus-prefix", Scope("t", "r", "c"), Scope("t", "r", "c1")),
    ("tenant-prefix", Scope("t", "r", "c"), Scope("t1", "r", "c")),
    ("resource-prefix", Scope("t", "r", "c"), Scope("t", "r1", "c")),
    ("joined-colon", Scope("a:b", "c", "d"), Scope("a", "b:c", "d")),
    ("joined-slash", Scope("a/b", "c", "d"), Scope("a", "b/c", "d")),
    ("like-wildcard", Scope("t", "r", "c_"), Scope("t", "r", "c1")),
    ("like-percent", Scope("t", "r", "c%"), Scope("t", "r", "cx")),
    ("case", Scope("t", "r", "corpus"), Scope("t", "r", "Corpus")),
    ("padding", Scope("t", "r", "c"), Scope("t", "r", "c ")),
)
ALL_SCOPES: tuple[Scope, ...] = tuple(
    dict.fromkeys(
        [SCOPE, OTHER_CORPUS, OTHER_TENANT, *(s for _, a, b in LOOKALIKE_SCOPES for s in (a, b))]
    )
)
"""The scopes the suite's constants name: the emptiness checks always cover them, besides
every scope the builders recorded a write to (``_support.WrittenSources``)."""

ALICE = Authorization("alice", TENANT)
READER_TIMEOUT_S = 10.0
WRITER_TIMEOUT_S = 120.0
QUERY_ALL = 32
"""A ``limit`` above the number of records any test writes to one scope."""


class _Boom(Exception):
    """Raised inside a unit of work to prove it rolls back."""


# --------------------------------------------------------------------------- helpers


def _require_transactions(store: ChunkStore) -> None:
    if not store.capabilities.transactions:
        pytest.skip(
            f"{type(store).__name__} declares capabilities.transactions = False, so it promises "
            "no atomic unit of work to test; declare it and this test must pass"
        )


def _require_generations(store: ChunkStore) -> None:
    if not store.capabilities.generations:
        pytest.skip(
            f"{type(store).__name__} declares capabilities.generations = False, so it promises "
            "no generation snapshots to test; declare it and this test must pass"
        )


def _require_acl(store: ChunkStore) -> None:
    if store.capabilities.authorization != "acl":
        pytest.skip(
            f"{type(store).__name__} declares capabilities.authorization = "
            f"{store.capabilities.authorization!r}, not 'acl', so it promises no grant "
            "enforcement to test; declare 'acl' and this test must pass"
        )


def _require_guarded_query(store: ChunkStore) -> None:
    if not store.capabilities.guarded_query:
        pytest.skip(
            f"{type(store).__name__} declares capabilities.guarded_query = False (the optional "
            "SupportsGuardedQuery), so retrieval reads its drift guard and tombstones "
            "separately; declare and define it and this test must pass"
        )
    _require_implemented(store, "guarded_query")


def _require_borrowed_query(store: ChunkStore) -> None:
    if not store.capabilities.borrowed_query:
        pytest.skip(
            f"{type(store).__name__} declares capabilities.borrowed_query = False (the optional "
            "SupportsBorrowedQuery), so retrieval reads through guarded_query; declare and "
            "define it and this test must pass"
        )
    _require_implemented(store, "borrowed_query")


def _require_implemented(store: ChunkStore, capability: OptionalCapability) -> None:
    missing = missing_methods(store).get(capability)
    assert not missing, (
        f"{type(store).__name__} declares the {capability!r} capability but its class defines "
        f"no {', '.join(missing or ())}: implement them or stop declaring it"
    )


def _pairs(results: Sequence[ScoredRecord]) -> frozenset[tuple[str, str]]:
    return frozenset((r.record.id, r.record.text) for r in results)


def _ids(results: Sequence[ScoredRecord]) -> list[str]:
    return [r.record.id for r in results]


def _query_pairs(store: ChunkStore, scope: Scope, vector: Vector) -> frozenset[tuple[str, str]]:
    return _pairs(store.query(scope, vector, limit=QUERY_ALL))


def _snapshot(store: ChunkStore, scope: Scope, sources: Sequence[str], probe: Vector) -> Any:
    """What a reader sees: (pairs by source, pairs by query, pointer)."""
    return (
        visible_pairs(store, scope, sources),
        _query_pairs(store, scope, probe),
        store.current_generation(scope),
    )


def _add(uow: UnitOfWork, batch: Batch) -> None:
    uow.records.add(batch.records, batch.vectors)


def _assert_scope_empty(store: ChunkStore, scope: Scope, source_ids: Sequence[str]) -> None:
    """No pointer, counter, visible record, embedder, tombstone, or record or grant of any of
    ``source_ids`` in ``scope``."""
    probe = direction(DIMS, 1.0)
    assert store.current_generation(scope) == 0, f"{scope} has a generation before any write"
    assert not store.query(scope, probe, limit=QUERY_ALL), f"{scope} has records before any write"
    for source_id in source_ids:
        assert not store.get_by_source(scope, source_id), f"{scope} has records of {source_id!r}"
    assert store.list_embedders(scope) == frozenset(), f"{scope} reports embedders"
    assert store.list_invalidated_ids(scope) == frozenset(), f"{scope} has tombstones"
    with store.unit_of_work(scope) as uow:
        assert list(uow.tombstones.list()) == [], f"{scope} has tombstones"
        assert dict(uow.grants.get(list(source_ids))) == {}, f"{scope} has grants"
        assert uow.generations.counter() == 0, f"{scope} has a generation counter"


def _assert_store_empty(store: ChunkStore, written: WrittenSources) -> None:
    """Every scope of the suite's constants and every (scope, source) ``written`` is empty."""
    for scope in dict.fromkeys([*ALL_SCOPES, *written.scopes()]):
        _assert_scope_empty(store, scope, written.sources(scope))


def _run_in_thread(
    fn: Callable[[], Any], timeout: float
) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``fn`` in a thread and wait up to ``timeout`` for it.

    The dict gets ``value`` or ``error`` once ``fn`` finishes, and ``blocked`` says whether it
    was still running when the wait ended (a reader waiting for a writer).
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # reported by the test, not swallowed
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="contract-reader", daemon=True)
    thread.start()
    thread.join(timeout)
    outcome["blocked"] = thread.is_alive()
    return thread, outcome


def _reader_result(thread: threading.Thread, outcome: dict[str, Any], what: str) -> Any:
    thread.join(READER_TIMEOUT_S)
    assert not outcome["blocked"], (
        f"a reader blocked while {what}: readers must not wait for writers"
    )
    if "error" in outcome:
        raise AssertionError(f"the reader thread failed while {what}") from outcome["error"]
    return outcome["value"]
