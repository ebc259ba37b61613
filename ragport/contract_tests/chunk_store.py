"""``ChunkStoreContract``: the promises of ``ragport.ports.store`` as pytest tests.

Use it by subclassing and supplying a ``store`` fixture that yields an *empty* store and
cleans up afterwards::

    class TestMyStore(ChunkStoreContract):
        @pytest.fixture
        def store(self):
            store = MyStore(...)
            yield store
            store.drop_everything()

Each capability is a mixin of its own (``ChunkStoreScopeContract``,
``ChunkStoreUnitOfWorkContract``, ...) so an adapter can adopt them one by one;
``ChunkStoreContract`` is all of them plus an isolation canary. Tests that depend on a
declared capability (``transactions``, ``generations``, ``authorization == "acl"``) skip with
a reason when the store does not declare it, and must pass when it does. To record a known gap,
override a test only by wrapping it in ``pytest.mark.xfail(reason=...)``; any other override
fails ``test_contract_tests_are_not_overridden``.

Everything goes through the port: ``store.unit_of_work(scope)`` and the store's read methods.
All data is deterministic (vectors come from SHA-256, see ``_support``).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import numpy as np
import pytest

from ragport.contract_tests._support import (
    CONTRACT_DIMENSIONS,
    CONTRACT_EMBEDDER_ID,
    Batch,
    derived_batch,
    direction,
    hash_vector,
    make_batch,
    publish_sources,
    silent_overrides,
    visible_pairs,
)
from ragport.domain.errors import CapabilityError, ScopeError, ValidationError
from ragport.domain.filters import parse_filter
from ragport.domain.model import (
    AccessDecision,
    Authorization,
    Capabilities,
    Grant,
    Scope,
    Tombstone,
    decide_access,
)
from ragport.ports.embedder import Vector
from ragport.ports.store import (
    ChunkStore,
    OptionalCapability,
    ScoredRecord,
    SupportsGuardedQuery,
    SupportsLexicalSearch,
    declared,
    missing_methods,
    supports,
)

__all__ = [
    "ChunkStoreCapabilityContract",
    "ChunkStoreConcurrencyContract",
    "ChunkStoreContract",
    "ChunkStoreDenialReportContract",
    "ChunkStoreFilterContract",
    "ChunkStoreForgettingContract",
    "ChunkStoreGenerationContract",
    "ChunkStoreGrantContract",
    "ChunkStoreGuardedQueryContract",
    "ChunkStoreHybridSnapshotContract",
    "ChunkStoreLexicalContract",
    "ChunkStoreLineageContract",
    "ChunkStoreQueryContract",
    "ChunkStoreReplaceContract",
    "ChunkStoreRepointContract",
    "ChunkStoreRepointUniquenessContract",
    "ChunkStoreScopeContract",
    "ChunkStoreTombstoneContract",
    "ChunkStoreUnitOfWorkContract",
]

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
"""Every scope the suite writes to: the isolation canary checks they are all empty."""
WELL_KNOWN_SOURCES = (
    *("doc", "shared-src", "a", "b", "c", "s1", "s2", "keep", "gone-src", "partly", "fixed"),
    *("allowed", "denied-00", "s-principal", "s-group", "s-v2", "shared", "own-left", "wide"),
    *("narrow", "summary-1", "d-ok", "en-faq"),
    *(f"f-{n}" for n in range(8)),
    "d",
    *("lex-walrus", "lex-penguin", "lex-secret", "lex-old", "lex-gone"),
    *("lin-src", "lin-other", "lin-moved", *(f"lin-d{n}" for n in range(1, 7))),
    *("rp-from", "rp-to", "rp-other"),
    *("fg-s", "fg-d1", "fg-d1b", "fg-d2", "fg-d3", "fg-x", "uq-a", "uq-b", "uq-c", "hy-s"),
)
"""Sources the suite writes: the canary checks none has records or grants."""

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


def _add(uow: Any, batch: Batch) -> None:
    uow.records.add(batch.records, batch.vectors)


def _assert_scope_empty(store: ChunkStore, scope: Scope) -> None:
    probe = direction(DIMS, 1.0)
    assert store.current_generation(scope) == 0, f"{scope} has a generation before any write"
    assert not store.query(scope, probe, limit=QUERY_ALL), f"{scope} has records before any write"
    for source_id in WELL_KNOWN_SOURCES:
        assert not store.get_by_source(scope, source_id), f"{scope} has records of {source_id!r}"
    assert store.list_embedders(scope) == frozenset(), f"{scope} reports embedders"
    assert store.list_invalidated_ids(scope) == frozenset(), f"{scope} has tombstones"
    with store.unit_of_work(scope) as uow:
        assert list(uow.tombstones.list()) == [], f"{scope} has tombstones"
        assert dict(uow.grants.get(list(WELL_KNOWN_SOURCES))) == {}, f"{scope} has grants"
        assert uow.generations.counter() == 0, f"{scope} has a generation counter"


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


# --------------------------------------------------------------------------- base


class _ChunkStoreContractBase:
    """The required fixture and the checks every ChunkStore mixin carries."""

    @pytest.fixture
    def store(self) -> Iterator[ChunkStore]:
        """The adapter under test. Override it: yield an empty store, clean up afterwards."""
        pytest.fail(
            "ChunkStoreContract needs a `store` fixture: override `store` in your test class "
            "to yield an empty ChunkStore (no records, grants, tombstones or generations in any "
            "scope) and remove whatever the test wrote afterwards"
        )
        yield  # pragma: no cover

    def test_store_fixture_yields_an_empty_store(self, store: ChunkStore) -> None:
        """A fresh store has generation 0 and no records, grants or tombstones in any scope.

        If this fails, check that the `store` fixture yields a new or emptied store.
        """
        for scope in ALL_SCOPES:
            _assert_scope_empty(store, scope)

    def test_contract_tests_are_not_overridden(self) -> None:
        """No contract test is replaced except by wrapping it in xfail(reason=...).

        If this fails, check the listed methods of your test class: delete the override, or
        decorate it with `pytest.mark.xfail(reason="...")` so the gap is visible.
        """
        found = silent_overrides(type(self))
        assert not found, f"contract tests overridden without xfail(reason=...): {found}"


# --------------------------------------------------------------------------- capabilities


class ChunkStoreCapabilityContract(_ChunkStoreContractBase):
    """``capabilities`` and ``provider`` are honest, typed and stable."""

    def test_store_satisfies_the_chunk_store_protocol(self, store: ChunkStore) -> None:
        """The store has every ChunkStore member.

        If this fails, check that the adapter defines every method and property of ChunkStore.
        """
        assert isinstance(store, ChunkStore)

    def test_capabilities_is_a_typed_value(self, store: ChunkStore) -> None:
        """`capabilities` is a Capabilities with well-typed fields, the same on every read.

        If this fails, check that the adapter returns ragport.domain.model.Capabilities.
        """
        caps = store.capabilities
        assert isinstance(caps, Capabilities)
        assert caps.authorization in ("acl", "none")
        assert isinstance(caps.transactions, bool)
        assert isinstance(caps.generations, bool)
        assert isinstance(caps.lexical_modes, tuple)
        assert isinstance(caps.guarded_query, bool)
        assert isinstance(caps.preparation, bool)
        assert all(isinstance(mode, str) and mode for mode in caps.lexical_modes)
        assert store.capabilities == caps

    def test_declared_capabilities_are_implemented(self, store: ChunkStore) -> None:
        """Every optional capability the store declares is defined by its class.

        If this fails, check the listed methods: ``lexical_modes`` promises ``lexical_query``
        and ``hybrid_query``, ``guarded_query=True`` promises ``guarded_query``,
        ``preparation=True`` promises ``prepare``. Define them on the store's class (not
        through ``__getattr__``), or stop declaring the capability.
        """
        missing = missing_methods(store)
        assert not missing, (
            f"{type(store).__name__} declares capabilities its class does not implement: "
            + "; ".join(f"{cap} needs {', '.join(methods)}" for cap, methods in missing.items())
        )
        for capability in declared(store.capabilities):
            assert supports(store, capability), capability

    def test_provider_is_a_stable_non_empty_string(self, store: ChunkStore) -> None:
        """`provider` is a short non-empty string that does not change.

        If this fails, check the adapter's `provider` property (e.g. "memory").
        """
        provider = store.provider
        assert isinstance(provider, str)
        assert provider.strip()
        assert store.provider == provider

    def test_unit_of_work_exposes_scope_and_repositories(self, store: ChunkStore) -> None:
        """A unit of work names its scope and offers the four repositories.

        If this fails, check the object `unit_of_work(scope).__enter__` returns.
        """
        with store.unit_of_work(SCOPE) as uow:
            assert uow.scope == SCOPE
            for name in ("records", "generations", "grants", "tombstones"):
                assert getattr(uow, name) is not None, name
            assert callable(uow.commit)
            assert callable(uow.rollback)


# --------------------------------------------------------------------------- scope


class ChunkStoreScopeContract(_ChunkStoreContractBase):
    """Exact scope: the same ids in two scopes never meet, and nothing matches by prefix."""

    @pytest.mark.parametrize(
        ("first", "second"),
        [(a, b) for _, a, b in LOOKALIKE_SCOPES],
        ids=[name for name, _, _ in LOOKALIKE_SCOPES],
    )
    def test_same_ids_in_two_scopes_never_meet(
        self, store: ChunkStore, first: Scope, second: Scope
    ) -> None:
        """Reads in one scope never return the other scope's records, embedders or pointer.

        If this fails, check that every read and write filters on tenant_id, resource_id and
        corpus_id with exact equality (no LIKE, no prefix, no joined key, no case folding).
        """
        _, first_written = publish_sources(
            store, first, {"shared-src": ["one", "two"]}, embedder_id="contract-first:8"
        )
        assert store.current_generation(second) == 0
        assert not store.get_by_source(second, "shared-src")
        assert not store.query(second, hash_vector("one"), limit=QUERY_ALL)
        assert store.list_embedders(second) == frozenset()

        _, second_written = publish_sources(
            store, second, {"shared-src": ["uno", "dos", "tres"]}, embedder_id="contract-second:8"
        )
        for scope, mine, theirs, embedder_id in (
            (first, first_written["shared-src"], second_written["shared-src"], "contract-first:8"),
            (
                second,
                second_written["shared-src"],
                first_written["shared-src"],
                "contract-second:8",
            ),
        ):
            assert visible_pairs(store, scope, ["shared-src"]) == mine.pairs
            for text in ("one", "uno", "tres"):  # the other scope's own vectors as probes
                results = store.query(scope, hash_vector(text), limit=QUERY_ALL)
                assert _pairs(results) == mine.pairs
                assert all(r.record.scope == scope for r in results)
            assert all(r.scope == scope for r in store.get_by_source(scope, "shared-src"))
            assert store.list_embedders(scope) == frozenset({(embedder_id, DIMS)})
            assert store.current_generation(scope) == 1
            assert not (mine.pairs & theirs.pairs)

    def test_retire_in_one_scope_leaves_the_other(self, store: ChunkStore) -> None:
        """Deleting a source in one corpus leaves the same source id in another corpus visible.

        If this fails, check that retire_source filters on the unit of work's exact scope.
        """
        publish_sources(store, SCOPE, {"doc": ["alpha", "beta"]})
        _, kept = publish_sources(store, OTHER_CORPUS, {"doc": ["alpha", "beta"]})
        publish_sources(store, SCOPE, {"doc": None})
        assert not store.get_by_source(SCOPE, "doc")
        assert not store.query(SCOPE, hash_vector("alpha"), limit=QUERY_ALL)
        assert visible_pairs(store, OTHER_CORPUS, ["doc"]) == kept["doc"].pairs
        assert _query_pairs(store, OTHER_CORPUS, hash_vector("alpha")) == kept["doc"].pairs

    def test_generation_pointer_is_per_scope(self, store: ChunkStore) -> None:
        """Publishing in one scope moves only that scope's pointer and counter.

        If this fails, check that the generation counter and pointer are keyed by exact scope.
        """
        publish_sources(store, SCOPE, {"doc": ["alpha"]})
        publish_sources(store, SCOPE, {"doc": ["beta"]})
        assert store.current_generation(SCOPE) == 2
        assert store.current_generation(OTHER_CORPUS) == 0
        assert store.current_generation(OTHER_TENANT) == 0
        with store.unit_of_work(OTHER_CORPUS) as uow:
            assert uow.generations.counter() == 0
            assert uow.generations.stage() == 1

    def test_grants_and_tombstones_stay_in_their_scope(self, store: ChunkStore) -> None:
        """Grants and tombstones written in one scope are absent from every other scope.

        If this fails, check that the grant and tombstone tables are keyed by exact scope.
        """
        with store.unit_of_work(SCOPE) as uow:
            uow.grants.set([Grant("doc", principal_ids=("alice",))])
            uow.tombstones.add([Tombstone("doc")])
            uow.commit()
        for scope in (OTHER_CORPUS, OTHER_TENANT):
            assert store.list_invalidated_ids(scope) == frozenset()
            with store.unit_of_work(scope) as uow:
                assert dict(uow.grants.get(["doc"])) == {}
                assert list(uow.tombstones.list()) == []
        assert store.list_invalidated_ids(SCOPE) == frozenset({"doc"})


# --------------------------------------------------------------------------- unit of work


_BAD_VECTORS: tuple[tuple[str, Callable[[np.ndarray], Any]], ...] = (
    ("extra-row", lambda v: np.vstack([v, v[:1]])),
    ("missing-row", lambda v: v[:-1]),
    ("extra-column", lambda v: np.hstack([v, v[:, :1]])),
    ("missing-column", lambda v: v[:, :-1]),
    ("one-dimensional", lambda v: v.reshape(-1)),
    ("nan", lambda v: np.where(np.arange(v.size).reshape(v.shape) == v.size - 1, np.nan, v)),
    ("inf", lambda v: np.where(np.arange(v.size).reshape(v.shape) == v.size - 1, np.inf, v)),
    ("minus-inf", lambda v: np.where(np.arange(v.size).reshape(v.shape) == 0, -np.inf, v)),
)


class ChunkStoreUnitOfWorkContract(_ChunkStoreContractBase):
    """A unit of work is all or nothing, and ``records.add`` validates before it writes."""

    def _write_everything(self, uow: Any) -> None:
        generation = uow.generations.stage()
        uow.records.retire_source("doc", generation=generation)
        _add(uow, make_batch(uow.scope, "doc", ["alpha", "beta"], generation=generation))
        uow.generations.publish(generation)
        uow.grants.set([Grant("doc", principal_ids=("alice",))])
        uow.tombstones.add([Tombstone("gone"), Tombstone("fixed", "corrected")])

    def _assert_nothing_written(self, store: ChunkStore) -> None:
        assert not store.get_by_source(SCOPE, "doc")
        assert not store.query(SCOPE, hash_vector("alpha"), limit=QUERY_ALL)
        assert store.list_embedders(SCOPE) == frozenset()
        assert store.current_generation(SCOPE) == 0
        assert store.list_invalidated_ids(SCOPE) == frozenset()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.counter() == 0
            assert uow.generations.current() == 0
            assert dict(uow.grants.get(["doc"])) == {}
            assert list(uow.tombstones.list()) == []

    def test_exception_inside_unit_of_work_leaves_nothing(self, store: ChunkStore) -> None:
        """An exception in the `with` block discards records, pointer, grants and tombstones.

        If this fails, check that the unit of work's __exit__ rolls back on an exception.
        """
        _require_transactions(store)
        with pytest.raises(_Boom), store.unit_of_work(SCOPE) as uow:
            self._write_everything(uow)
            raise _Boom
        self._assert_nothing_written(store)

    def test_leaving_without_commit_rolls_back(self, store: ChunkStore) -> None:
        """Leaving the `with` block without commit() writes nothing.

        If this fails, check that __exit__ rolls back unless commit() was called.
        """
        _require_transactions(store)
        with store.unit_of_work(SCOPE) as uow:
            self._write_everything(uow)
        self._assert_nothing_written(store)

    def test_explicit_rollback_discards_the_work(self, store: ChunkStore) -> None:
        """rollback() before leaving the block discards everything written so far.

        If this fails, check the unit of work's rollback().
        """
        _require_transactions(store)
        with store.unit_of_work(SCOPE) as uow:
            self._write_everything(uow)
            uow.rollback()
        self._assert_nothing_written(store)

    def test_commit_makes_everything_visible(self, store: ChunkStore) -> None:
        """After commit() the records, pointer, grants and tombstones are all visible.

        If this fails, check that commit() persists every repository of the unit of work.
        """
        _require_transactions(store)
        with store.unit_of_work(SCOPE) as uow:
            self._write_everything(uow)
            uow.commit()
        assert visible_pairs(store, SCOPE, ["doc"]) == {("doc#0001", "alpha"), ("doc#0002", "beta")}
        assert store.current_generation(SCOPE) == 1
        assert store.list_invalidated_ids(SCOPE) == frozenset({"gone"})
        with store.unit_of_work(SCOPE) as uow:
            grants = dict(uow.grants.get(["doc", "other"]))
            assert set(grants) == {"doc"}
            assert set(grants["doc"].principal_ids) == {"alice"}
            assert [(t.id, t.reason) for t in uow.tombstones.list()] == [
                ("fixed", "corrected"),
                ("gone", "forgotten"),
            ]
            listed = {(r.id, r.text) for r in uow.records.list_by_source("doc")}
        assert listed == visible_pairs(store, SCOPE, ["doc"])

    def test_readers_do_not_see_an_open_unit_of_work(self, store: ChunkStore) -> None:
        """A reader in another thread sees nothing of an uncommitted unit of work.

        If this fails, check that writes are isolated until commit and reads do not block.
        """
        _require_transactions(store)
        with store.unit_of_work(SCOPE) as uow:
            self._write_everything(uow)
            thread, outcome = _run_in_thread(
                lambda: (
                    _snapshot(store, SCOPE, ["doc"], hash_vector("alpha")),
                    store.list_invalidated_ids(SCOPE),
                ),
                READER_TIMEOUT_S,
            )
            uow.commit()
        seen = _reader_result(thread, outcome, "a unit of work was open")
        assert seen == ((frozenset(), frozenset(), 0), frozenset())

    @pytest.mark.parametrize(
        "foreign", [OTHER_CORPUS, OTHER_TENANT], ids=["other-corpus", "other-tenant"]
    )
    def test_add_rejects_a_record_of_another_scope(self, store: ChunkStore, foreign: Scope) -> None:
        """records.add raises ScopeError for a record whose scope differs, and writes nothing.

        If this fails, check that add compares every record's scope with the unit of work's.
        """
        with store.unit_of_work(SCOPE) as uow:
            generation = uow.generations.stage()
            mine = make_batch(SCOPE, "doc", ["alpha"], generation=generation)
            theirs = make_batch(foreign, "doc", ["beta"], generation=generation)
            with pytest.raises(ScopeError):
                _add(uow, mine + theirs)
            uow.generations.publish(generation)
            uow.commit()
        for scope in (SCOPE, foreign):
            assert not store.get_by_source(scope, "doc")
            assert not store.query(scope, hash_vector("alpha"), limit=QUERY_ALL)

    @pytest.mark.parametrize(
        "mutate", [m for _, m in _BAD_VECTORS], ids=[name for name, _ in _BAD_VECTORS]
    )
    def test_add_rejects_malformed_vectors(
        self, store: ChunkStore, mutate: Callable[[np.ndarray], Any]
    ) -> None:
        """records.add raises ValidationError for a bad shape or non-finite value; writes nothing.

        If this fails, check that add validates the whole matrix (rows, columns, finiteness)
        before writing any row.
        """
        with store.unit_of_work(SCOPE) as uow:
            generation = uow.generations.stage()
            batch = make_batch(SCOPE, "doc", ["alpha", "beta", "gamma"], generation=generation)
            bad = np.ascontiguousarray(mutate(batch.vectors.copy()), dtype=np.float32)
            with pytest.raises(ValidationError):
                uow.records.add(batch.records, bad)
            uow.generations.publish(generation)
            uow.commit()
        assert not store.get_by_source(SCOPE, "doc")
        assert not store.query(SCOPE, hash_vector("alpha"), limit=QUERY_ALL)

    def test_add_rejects_a_record_whose_dimensions_disagree(self, store: ChunkStore) -> None:
        """A record declaring other dimensions than its vector row is a ValidationError.

        If this fails, check that add compares records[i].dimensions with vectors.shape[1].
        """
        with store.unit_of_work(SCOPE) as uow:
            generation = uow.generations.stage()
            batch = make_batch(SCOPE, "doc", ["alpha", "beta"], generation=generation)
            liar = attrs.evolve(batch.records[1], dimensions=DIMS * 2)
            with pytest.raises(ValidationError):
                uow.records.add((batch.records[0], liar), batch.vectors)
            uow.generations.publish(generation)
            uow.commit()
        assert not store.get_by_source(SCOPE, "doc")

    def test_add_rejects_a_live_id_of_another_source(self, store: ChunkStore) -> None:
        """Adding an id that is live for a different source raises ValidationError; nothing changes.

        If this fails, check the id-uniqueness check in add (live rows of other sources).
        """
        _, written = publish_sources(store, SCOPE, {"a": ["alpha"]})
        with store.unit_of_work(SCOPE) as uow:
            generation = uow.generations.stage()
            fresh = make_batch(SCOPE, "b", ["beta", "gamma"], generation=generation)
            stolen = attrs.evolve(fresh.records[1], id="a#0001")
            with pytest.raises(ValidationError):
                uow.records.add((fresh.records[0], stolen), fresh.vectors)
            uow.generations.publish(generation)
            uow.commit()
        assert visible_pairs(store, SCOPE, ["a"]) == written["a"].pairs
        assert not store.get_by_source(SCOPE, "b")
        assert _query_pairs(store, SCOPE, hash_vector("beta")) == written["a"].pairs

    def test_retired_id_may_move_to_another_source(self, store: ChunkStore) -> None:
        """Once a record is retired its id may be written for another source (a rename).

        If this fails, check that the id-uniqueness check only looks at live rows.
        """
        publish_sources(store, SCOPE, {"a": ["alpha"]})
        with store.unit_of_work(SCOPE) as uow:
            generation = uow.generations.stage()
            assert uow.records.retire_source("a", generation=generation) == 1
            fresh = make_batch(SCOPE, "b", ["alpha"], generation=generation)
            _add(uow, Batch((attrs.evolve(fresh.records[0], id="a#0001"),), fresh.vectors))
            uow.generations.publish(generation)
            uow.commit()
        assert not store.get_by_source(SCOPE, "a")
        assert visible_pairs(store, SCOPE, ["b"]) == {("a#0001", "alpha")}


# --------------------------------------------------------------------------- replace


V1 = ("alpha v1", "beta v1")
V2 = ("alpha v2", "beta v2", "gamma v2")


class ChunkStoreReplaceContract(_ChunkStoreContractBase):
    """A replacement is seen whole or not at all: readers see v1 until v2 is committed."""

    def test_reader_sees_the_old_version_until_commit(self, store: ChunkStore) -> None:
        """During a replace a concurrent reader sees exactly v1; after commit exactly v2.

        If this fails, check that retire/add/publish happen in one transaction, that readers
        use the committed pointer, and that reads do not block on an open unit of work.
        """
        _require_transactions(store)
        _require_generations(store)
        first, v1 = publish_sources(store, SCOPE, {"doc": V1})
        probe = hash_vector(V2[0])
        with store.unit_of_work(SCOPE) as uow:
            second = uow.generations.stage()
            assert second > first
            assert uow.records.retire_source("doc", generation=second) == len(V1)
            v2 = make_batch(SCOPE, "doc", V2, generation=second)
            _add(uow, v2)
            uow.generations.publish(second)
            thread, outcome = _run_in_thread(
                lambda: _snapshot(store, SCOPE, ["doc"], probe), READER_TIMEOUT_S
            )
            uow.commit()
        during = _reader_result(thread, outcome, "a replacement was open")
        assert during == (v1["doc"].pairs, v1["doc"].pairs, first)
        assert _snapshot(store, SCOPE, ["doc"], probe) == (v2.pairs, v2.pairs, second)
        after_thread, after_outcome = _run_in_thread(
            lambda: _snapshot(store, SCOPE, ["doc"], probe), READER_TIMEOUT_S
        )
        assert _reader_result(after_thread, after_outcome, "reading after commit") == (
            v2.pairs,
            v2.pairs,
            second,
        )

    def test_abandoned_replace_keeps_the_old_version(self, store: ChunkStore) -> None:
        """A replacement that raises before commit leaves v1 visible and the pointer unchanged.

        If this fails, check that retire_source and publish are rolled back with the records.
        """
        _require_transactions(store)
        _require_generations(store)
        first, v1 = publish_sources(store, SCOPE, {"doc": V1})
        with pytest.raises(_Boom), store.unit_of_work(SCOPE) as uow:
            second = uow.generations.stage()
            uow.records.retire_source("doc", generation=second)
            _add(uow, make_batch(SCOPE, "doc", V2, generation=second))
            uow.generations.publish(second)
            raise _Boom
        probe = hash_vector(V2[0])
        assert _snapshot(store, SCOPE, ["doc"], probe) == (v1["doc"].pairs, v1["doc"].pairs, first)

    def test_replace_reuses_chunk_ids_without_duplicates(self, store: ChunkStore) -> None:
        """After replacing a source its chunk ids appear once each, with the new text.

        If this fails, check that retire_source hides the old rows at the new generation.
        """
        publish_sources(store, SCOPE, {"doc": V1})
        publish_sources(store, SCOPE, {"doc": V2})
        records = store.get_by_source(SCOPE, "doc")
        assert [r.id for r in records] == ["doc#0001", "doc#0002", "doc#0003"]
        assert [r.text for r in records] == list(V2)
        results = store.query(SCOPE, hash_vector(V1[0]), limit=QUERY_ALL)
        assert sorted(_ids(results)) == ["doc#0001", "doc#0002", "doc#0003"]


# --------------------------------------------------------------------------- generations


class ChunkStoreGenerationContract(_ChunkStoreContractBase):
    """Counter, pointer, staging, retirement, rollback and compaction of generations."""

    def test_fresh_scope_starts_at_generation_zero(self, store: ChunkStore) -> None:
        """A scope never written has pointer, counter and floor 0.

        If this fails, check the defaults of the generation repository for an unknown scope.
        """
        _require_generations(store)
        assert store.current_generation(SCOPE) == 0
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.current() == 0
            assert uow.generations.counter() == 0
            assert uow.generations.floor() == 0

    def test_stage_hands_out_one_generation_until_published(self, store: ChunkStore) -> None:
        """stage() returns counter+1 once, repeats it until published, then moves on.

        If this fails, check stage(): reuse counter() while it is above the pointer.
        """
        _require_generations(store)
        with store.unit_of_work(SCOPE) as uow:
            gens = uow.generations
            assert gens.stage() == 1
            assert gens.stage() == 1
            assert (gens.counter(), gens.current()) == (1, 0)
            gens.publish(1)
            assert (gens.counter(), gens.current()) == (1, 1)
            assert gens.stage() == 2
            uow.commit()
        assert store.current_generation(SCOPE) == 1
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.counter() == 2
            assert uow.generations.stage() == 2
            uow.generations.publish(2)
            assert uow.generations.stage() == 3
            uow.commit()
        assert store.current_generation(SCOPE) == 2

    def test_staged_rows_are_invisible_until_published(self, store: ChunkStore) -> None:
        """Rows committed at a staged generation stay hidden until a later publish.

        If this fails, check that reads filter on generation <= pointer, not on the counter.
        """
        _require_generations(store)
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            batch = make_batch(SCOPE, "doc", V1, generation=staged)
            _add(uow, batch)
            uow.commit()
        assert store.current_generation(SCOPE) == 0
        assert not store.get_by_source(SCOPE, "doc")
        assert not store.query(SCOPE, hash_vector(V1[0]), limit=QUERY_ALL)
        assert store.list_embedders(SCOPE) == frozenset()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.stage() == staged
            uow.generations.publish(staged)
            uow.commit()
        assert visible_pairs(store, SCOPE, ["doc"]) == batch.pairs
        assert _query_pairs(store, SCOPE, hash_vector(V1[0])) == batch.pairs

    def test_retire_source_counts_previously_visible_rows(self, store: ChunkStore) -> None:
        """retire_source returns how many rows were visible and are now retired (0 if none).

        If this fails, check the count retire_source returns.
        """
        _require_generations(store)
        publish_sources(store, SCOPE, {"doc": ["one", "two", "three"], "b": ["four"]})
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            assert uow.records.retire_source("doc", generation=staged) == 3
            assert uow.records.retire_source("doc", generation=staged) == 0
            assert uow.records.retire_source("missing", generation=staged) == 0
            uow.generations.publish(staged)
            uow.commit()
        assert not store.get_by_source(SCOPE, "doc")
        assert visible_pairs(store, SCOPE, ["b"]) == {("b#0001", "four")}

    def test_retire_source_drops_an_earlier_staged_write(self, store: ChunkStore) -> None:
        """Retiring a source again at the same staged generation removes the rows staged there.

        If this fails, check that retire_source deletes the source's rows written at `generation`.
        """
        _require_generations(store)
        publish_sources(store, SCOPE, {"doc": V1})
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            uow.records.retire_source("doc", generation=staged)
            _add(uow, make_batch(SCOPE, "doc", V2, generation=staged))
            assert uow.records.retire_source("doc", generation=staged) == 0
            final = make_batch(SCOPE, "doc", ["final"], generation=staged)
            _add(uow, final)
            uow.generations.publish(staged)
            uow.commit()
        assert visible_pairs(store, SCOPE, ["doc"]) == final.pairs
        assert _query_pairs(store, SCOPE, hash_vector(V2[2])) == final.pairs

    def test_rollback_restores_an_earlier_snapshot(self, store: ChunkStore) -> None:
        """discard_above/restore_above/reset(p) restores snapshot p; the counter goes on from p.

        If this fails, check discard_above (rows written above p), restore_above (rows retired
        above p) and reset (pointer and counter).
        """
        _require_generations(store)
        sources = ["a", "b", "c"]
        probe = hash_vector("a one")
        first, _ = publish_sources(store, SCOPE, {"a": ["a one", "a two"], "b": ["b one"]})
        snapshot = _snapshot(store, SCOPE, sources, probe)
        publish_sources(store, SCOPE, {"a": ["a uno", "a dos", "a tres"]})
        publish_sources(store, SCOPE, {"b": None, "c": ["c one"]})
        assert _snapshot(store, SCOPE, sources, probe) != snapshot
        with store.unit_of_work(SCOPE) as uow:
            assert uow.records.discard_above(first) == 4  # a v2 (3) + c (1)
            assert uow.records.restore_above(first) == 3  # a v1 (2) + b (1)
            uow.generations.reset(first)
            uow.commit()
        assert _snapshot(store, SCOPE, sources, probe) == snapshot
        assert store.current_generation(SCOPE) == first
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.counter() == first
            assert uow.generations.stage() == first + 1

    def test_purge_retired_removes_only_rows_retired_through(self, store: ChunkStore) -> None:
        """purge_retired(t) removes rows retired at or below t; later-retired and visible rows stay.

        If this fails, check the purge predicate: retired_generation IS NOT NULL AND <= t.
        """
        _require_generations(store)
        probe = hash_vector("v3 one")
        publish_sources(store, SCOPE, {"doc": ["v1 one", "v1 two"]})
        second, v2 = publish_sources(store, SCOPE, {"doc": ["v2 one", "v2 two", "v2 three"]})
        third, v3 = publish_sources(store, SCOPE, {"doc": ["v3 one"]})
        with store.unit_of_work(SCOPE) as uow:
            assert uow.records.purge_retired(second) == 2  # v1, retired at 2
            assert uow.records.purge_retired(second) == 0
            uow.generations.raise_floor(second)
            uow.commit()
        assert _snapshot(store, SCOPE, ["doc"], probe) == (v3["doc"].pairs, v3["doc"].pairs, third)
        with store.unit_of_work(SCOPE) as uow:  # v2 (retired at 3) must still be restorable
            assert uow.records.discard_above(second) == 1
            assert uow.records.restore_above(second) == 3
            uow.generations.reset(second)
            uow.commit()
        assert visible_pairs(store, SCOPE, ["doc"]) == v2["doc"].pairs

    def test_floor_round_trips(self, store: ChunkStore) -> None:
        """raise_floor(g) makes floor() return g, in the same and in later units of work.

        If this fails, check that the floor is stored per scope and committed.
        """
        _require_generations(store)
        publish_sources(store, SCOPE, {"doc": ["one"]})
        publish_sources(store, SCOPE, {"doc": ["two"]})
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.floor() == 0
            uow.generations.raise_floor(2)
            assert uow.generations.floor() == 2
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.floor() == 2
        with store.unit_of_work(OTHER_CORPUS) as uow:
            assert uow.generations.floor() == 0


# --------------------------------------------------------------------------- grants


GRANTS = (
    Grant("s-principal", principal_ids=("alice",)),
    Grant("s-group", group_ids=("g1",)),
    Grant("s-both", principal_ids=("bob",), group_ids=("g2",)),
    Grant("s-v2", principal_ids=("alice",), group_ids=("g1",), access_version=2),
    Grant("s-empty"),
)
CALLERS = (
    ("alice", Authorization("alice", TENANT)),
    ("alice-v1", Authorization("alice", TENANT, access_version=1)),
    ("alice-v2", Authorization("alice", TENANT, access_version=2)),
    ("bob-g1", Authorization("bob", TENANT, group_ids=("g1",))),
    ("carol-g9", Authorization("carol", TENANT, group_ids=("g9",))),
    ("carol-g9-g2", Authorization("carol", TENANT, group_ids=("g9", "g2"), access_version=1)),
)


class ChunkStoreGrantContract(_ChunkStoreContractBase):
    """Grants round-trip, follow ``decide_access``, and filter queries before top-k."""

    def test_grant_repository_round_trips(self, store: ChunkStore) -> None:
        """grants.set then grants.get returns the grants that exist, by source id.

        If this fails, check the grant repository's set/get and that get omits absent sources.
        """
        with store.unit_of_work(SCOPE) as uow:
            uow.grants.set(GRANTS[:4])
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            found = dict(uow.grants.get(["s-principal", "s-v2", "missing"]))
        assert set(found) == {"s-principal", "s-v2"}
        assert set(found["s-v2"].principal_ids) == {"alice"}
        assert set(found["s-v2"].group_ids) == {"g1"}
        assert found["s-v2"].access_version == 2
        assert found["s-principal"].source_id == "s-principal"

    @pytest.mark.parametrize("caller", [c for _, c in CALLERS], ids=[name for name, _ in CALLERS])
    def test_check_source_access_follows_the_grant_rule(
        self, store: ChunkStore, caller: Authorization
    ) -> None:
        """check_source_access gives one decide_access decision per distinct source id.

        If this fails, check principal/group matching, access_version equality, and that
        missing or empty grants are no_grant.
        """
        _require_acl(store)
        store.set_source_access(SCOPE, GRANTS)
        asked = ["s-principal", "s-group", "s-both", "s-v2", "s-empty", "s-none", "s-group"]
        decisions = dict(store.check_source_access(SCOPE, asked, caller))
        assert set(decisions) == set(asked)
        by_source = {g.source_id: g for g in GRANTS}
        for source_id in set(asked):
            got = decisions[source_id]
            assert isinstance(got, AccessDecision)
            assert got == decide_access(source_id, by_source.get(source_id), caller), source_id

    def test_grant_rule_examples(self, store: ChunkStore) -> None:
        """Spot checks of the grant rule with literal expectations.

        If this fails, check the decision reasons: granted, no_grant, version_mismatch.
        """
        _require_acl(store)
        store.set_source_access(SCOPE, GRANTS)
        ids = ["s-principal", "s-group", "s-v2", "s-empty", "s-none"]
        alice_v1 = dict(store.check_source_access(SCOPE, ids, CALLERS[1][1]))
        assert {k: (v.allowed, v.reason) for k, v in alice_v1.items()} == {
            "s-principal": (True, "granted"),
            "s-group": (False, "no_grant"),
            "s-v2": (False, "version_mismatch"),
            "s-empty": (False, "no_grant"),
            "s-none": (False, "no_grant"),
        }
        bob = dict(store.check_source_access(SCOPE, ids, CALLERS[3][1]))
        assert [k for k, v in sorted(bob.items()) if v.allowed] == ["s-group", "s-v2"]

    def test_set_source_access_replaces_and_empty_grant_revokes(self, store: ChunkStore) -> None:
        """A second grant for a source replaces the first; an empty grant revokes access.

        If this fails, check that set_source_access replaces rather than merges.
        """
        _require_acl(store)
        store.set_source_access(SCOPE, [Grant("doc", principal_ids=("alice",))])
        assert store.check_source_access(SCOPE, ["doc"], ALICE)["doc"].allowed
        store.set_source_access(SCOPE, [Grant("doc", principal_ids=("bob",))])
        assert store.check_source_access(SCOPE, ["doc"], ALICE)["doc"].reason == "no_grant"
        bob = Authorization("bob", TENANT)
        assert store.check_source_access(SCOPE, ["doc"], bob)["doc"].allowed
        store.set_source_access(SCOPE, [Grant("doc")])
        assert store.check_source_access(SCOPE, ["doc"], bob)["doc"] == AccessDecision(
            "doc", False, "no_grant"
        )

    def test_grants_of_another_scope_do_not_apply(self, store: ChunkStore) -> None:
        """A grant in one corpus or tenant decides nothing in another.

        If this fails, check that grant reads filter on the exact scope.
        """
        _require_acl(store)
        store.set_source_access(SCOPE, [Grant("doc", principal_ids=("alice",))])
        for scope in (OTHER_CORPUS, OTHER_TENANT):
            caller = Authorization("alice", scope.tenant_id)
            decision = store.check_source_access(scope, ["doc"], caller)["doc"]
            assert (decision.allowed, decision.reason) == (False, "no_grant")

    def test_query_applies_grants_before_top_k(self, store: ChunkStore) -> None:
        """With limit=1 the one allowed record is returned although ten denied ones are nearer.

        If this fails, check that the grant predicate is part of the query, not a filter
        applied to the top-k results afterwards.
        """
        _require_acl(store)
        probe = direction(DIMS, 1.0)
        denied = {f"denied-{i:02d}": direction(DIMS, 1.0, 0.01 * (i + 1)) for i in range(10)}
        allowed = direction(DIMS, 1.0, 1.0)
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id, vector in [*denied.items(), ("allowed", allowed)]:
                _add(
                    uow,
                    make_batch(SCOPE, source_id, [source_id], generation=staged, vectors=[vector]),
                )
            uow.generations.publish(staged)
            uow.grants.set(
                [Grant("allowed", principal_ids=("alice",))]
                + [Grant(s, principal_ids=("bob",)) for s in list(denied)[:5]]
            )
            uow.commit()
        assert _ids(store.query(SCOPE, probe, limit=1)) == ["denied-00#0001"]
        assert _ids(store.query(SCOPE, probe, limit=1, authorization=ALICE)) == ["allowed#0001"]
        assert _ids(store.query(SCOPE, probe, limit=QUERY_ALL, authorization=ALICE)) == [
            "allowed#0001"
        ]
        bob = Authorization("bob", TENANT)
        assert _ids(store.query(SCOPE, probe, limit=3, authorization=bob)) == [
            "denied-00#0001",
            "denied-01#0001",
            "denied-02#0001",
        ]
        assert not store.query(
            SCOPE, probe, limit=QUERY_ALL, authorization=Authorization("eve", TENANT)
        )

    def test_query_sees_grant_changes_at_once(self, store: ChunkStore) -> None:
        """Revoking or version-bumping a grant hides its records from the next query.

        If this fails, check that the query reads live grants (no stale cache).
        """
        _require_acl(store)
        publish_sources(store, SCOPE, {"doc": ["alpha"]})
        probe = hash_vector("alpha")
        store.set_source_access(SCOPE, [Grant("doc", principal_ids=("alice",), access_version=1)])
        caller = Authorization("alice", TENANT, access_version=1)
        assert _ids(store.query(SCOPE, probe, limit=5, authorization=caller)) == ["doc#0001"]
        store.set_source_access(SCOPE, [Grant("doc", principal_ids=("alice",), access_version=2)])
        assert not store.query(SCOPE, probe, limit=5, authorization=caller)
        store.set_source_access(SCOPE, [Grant("doc")])
        assert not store.query(SCOPE, probe, limit=5, authorization=ALICE)

    def test_derived_record_needs_every_root_allowed(self, store: ChunkStore) -> None:
        """A derived record is visible only to callers allowed on every one of its roots.

        If this fails, check that the query's grant predicate checks a derived record's roots,
        not its own id.
        """
        _require_acl(store)
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            _add(uow, make_batch(SCOPE, "s1", ["first source"], generation=staged))
            _add(uow, make_batch(SCOPE, "s2", ["second source"], generation=staged))
            _add(
                uow,
                derived_batch(
                    SCOPE, "summary-1", "summary of both", roots=("s1", "s2"), generation=staged
                ),
            )
            _add(
                uow,
                derived_batch(
                    SCOPE,
                    "note-1",
                    "note on one",
                    roots=("s1",),
                    lineage=("s1",),
                    generation=staged,
                ),
            )
            _add(
                uow,
                derived_batch(
                    SCOPE,
                    "digest-1",
                    "digest of the summary",
                    roots=("s1", "s2"),
                    lineage=("summary-1",),
                    generation=staged,
                ),
            )
            uow.generations.publish(staged)
            uow.grants.set(
                [
                    Grant("s1", principal_ids=("alice", "bob")),
                    Grant("s2", principal_ids=("alice",)),
                ]
            )
            uow.commit()
        probe = hash_vector("summary of both")

        def visible(caller: Authorization | None) -> set[str]:
            return set(_ids(store.query(SCOPE, probe, limit=QUERY_ALL, authorization=caller)))

        everything = {"s1#0001", "s2#0001", "summary-1", "note-1", "digest-1"}
        assert visible(None) == everything
        assert visible(ALICE) == everything
        assert visible(Authorization("bob", TENANT)) == {"s1#0001", "note-1"}
        assert visible(Authorization("carol", TENANT)) == set()


# --------------------------------------------------------------------------- tombstones


class ChunkStoreTombstoneContract(_ChunkStoreContractBase):
    """Tombstones round-trip, and ``forgotten`` ones withhold ids, sources and lineage."""

    def test_tombstone_add_counts_new_rows_and_lists_by_id(self, store: ChunkStore) -> None:
        """tombstones.add returns how many are new; list() has one row per id, ordered by id.

        If this fails, check duplicate handling (within a call and across calls) and ordering.
        """
        with store.unit_of_work(SCOPE) as uow:
            assert (
                uow.tombstones.add([Tombstone("b"), Tombstone("a"), Tombstone("c", "corrected")])
                == 3
            )
            assert uow.tombstones.add([Tombstone("a"), Tombstone("d"), Tombstone("d")]) == 1
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.tombstones.add([Tombstone("b")]) == 0
            listed = [(t.id, t.reason) for t in uow.tombstones.list()]
        assert listed == [
            ("a", "forgotten"),
            ("b", "forgotten"),
            ("c", "corrected"),
            ("d", "forgotten"),
        ]

    def test_forgotten_id_stays_forgotten(self, store: ChunkStore) -> None:
        """A later `corrected` tombstone for a forgotten id neither adds a row nor un-forgets it.

        If this fails, check that tombstones.add keeps the existing row for an id (insert-if-absent,
        not upsert): replacing the reason would make a forgotten id visible again.
        """
        with store.unit_of_work(SCOPE) as uow:
            assert uow.tombstones.add([Tombstone("doc")]) == 1
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.tombstones.add([Tombstone("doc", "corrected")]) == 0
            uow.commit()
        assert store.list_invalidated_ids(SCOPE) == frozenset({"doc"})
        with store.unit_of_work(SCOPE) as uow:
            assert [(t.id, t.reason) for t in uow.tombstones.list()] == [("doc", "forgotten")]

    def test_list_invalidated_ids_reports_forgotten_only(self, store: ChunkStore) -> None:
        """list_invalidated_ids returns the ids of forgotten tombstones, not corrected ones.

        If this fails, check the reason filter of list_invalidated_ids.
        """
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add(
                [Tombstone("doc#0001"), Tombstone("src"), Tombstone("fixed#0001", "corrected")]
            )
            uow.commit()
        assert store.list_invalidated_ids(SCOPE) == frozenset({"doc#0001", "src"})
        assert store.list_invalidated_ids(OTHER_CORPUS) == frozenset()

    def test_query_withholds_forgotten_ids_sources_and_lineage(self, store: ChunkStore) -> None:
        """query drops records whose id, source id or any lineage entry is forgotten, before top-k.

        If this fails, check the tombstone predicate of query: record id, source_id and every
        lineage element, reason 'forgotten' only, applied before the limit.
        """
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id in ("keep", "gone-src", "partly"):
                _add(
                    uow,
                    make_batch(
                        SCOPE,
                        source_id,
                        [f"{source_id} one", f"{source_id} two"],
                        generation=staged,
                    ),
                )
            _add(uow, make_batch(SCOPE, "fixed", ["fixed one"], generation=staged))
            _add(
                uow, derived_batch(SCOPE, "d-ok", "derived ok", roots=("keep",), generation=staged)
            )
            _add(
                uow,
                derived_batch(
                    SCOPE,
                    "d-lineage",
                    "derived on gone",
                    roots=("keep",),
                    lineage=("keep", "gone-root"),
                    generation=staged,
                ),
            )
            _add(
                uow,
                derived_batch(SCOPE, "d-self", "derived self", roots=("keep",), generation=staged),
            )
            uow.generations.publish(staged)
            uow.tombstones.add(
                [
                    Tombstone("gone-src"),
                    Tombstone("partly#0001"),
                    Tombstone("gone-root"),
                    Tombstone("d-self"),
                    Tombstone("fixed#0001", "corrected"),
                ]
            )
            uow.commit()
        visible = {"keep#0001", "keep#0002", "partly#0002", "fixed#0001", "d-ok"}
        for text in ("keep one", "gone-src one", "derived on gone", "derived self"):
            assert set(_ids(store.query(SCOPE, hash_vector(text), limit=QUERY_ALL))) == visible, (
                text
            )
        for text in ("gone-src two", "partly one", "derived on gone", "derived self"):
            top = store.query(SCOPE, hash_vector(text), limit=1)
            assert len(top) == 1 and top[0].record.id in visible, text

    def test_tombstones_apply_to_their_scope_only(self, store: ChunkStore) -> None:
        """A forgotten tombstone in one corpus does not hide the same ids in another.

        If this fails, check that the query's tombstone predicate is keyed by exact scope.
        """
        _, kept = publish_sources(store, OTHER_CORPUS, {"doc": ["alpha"]})
        publish_sources(store, SCOPE, {"doc": ["alpha"]})
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add([Tombstone("doc")])
            uow.commit()
        assert not store.query(SCOPE, hash_vector("alpha"), limit=QUERY_ALL)
        assert _query_pairs(store, OTHER_CORPUS, hash_vector("alpha")) == kept["doc"].pairs


# --------------------------------------------------------------------------- guarded query


class ChunkStoreGuardedQueryContract(_ChunkStoreContractBase):
    """``guarded_query`` answers ``foreign_embedders`` and ``query`` together, faithfully.

    Only for stores that implement ``SupportsGuardedQuery``; retrieval then trusts it instead
    of its own drift-guard and tombstone reads, so every answer must equal the separate reads.
    """

    @pytest.fixture(autouse=True)
    def _needs_guarded_query(self, store: ChunkStore) -> None:
        _require_guarded_query(store)

    def _guarded(self, store: ChunkStore, scope: Scope, vector: Vector, **kwargs: Any) -> Any:
        assert isinstance(store, SupportsGuardedQuery)
        return store.guarded_query(
            scope, vector, embedder_id=CONTRACT_EMBEDDER_ID, dimensions=DIMS, **kwargs
        )

    def test_guarded_query_equals_the_two_separate_reads(self, store: ChunkStore) -> None:
        """Same foreign embedders as foreign_embedders, same records and scores as query.

        If this fails, compare the guarded statement with query's and foreign_embedders'.
        """
        publish_sources(store, SCOPE, {"a": ["alpha one", "alpha two"], "b": ["beta"]})
        vector = hash_vector("alpha one")
        answer = self._guarded(store, SCOPE, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == frozenset()
        plain = store.query(SCOPE, vector, limit=QUERY_ALL)
        assert _ids(answer.records) == _ids(plain)
        assert sorted(_ids(plain)) == ["a#0001", "a#0002", "b#0001"]
        assert [round(r.score, 5) for r in answer.records] == [round(r.score, 5) for r in plain]
        top = self._guarded(store, SCOPE, vector, limit=1)
        assert _ids(top.records) == _ids(store.query(SCOPE, vector, limit=1)) == ["a#0001"]

    def test_guarded_query_names_every_foreign_embedder(self, store: ChunkStore) -> None:
        """Other embedder ids, other dimensions and rows without an id are all reported.

        If this fails, check the drift-guard part of the guarded statement (visible rows only).
        """
        publish_sources(store, SCOPE, {"a": ["alpha"]})
        publish_sources(store, SCOPE, {"b": ["beta"]}, embedder_id="contract-other:8")
        publish_sources(store, SCOPE, {"c": ["gamma"]}, embedder_id=None)
        publish_sources(store, SCOPE, {"d": ["delta"]}, dimensions=4)
        vector = hash_vector("alpha")
        expected = store.foreign_embedders(SCOPE, CONTRACT_EMBEDDER_ID, DIMS)
        assert expected == frozenset(
            {
                ("contract-other:8", DIMS),
                (None, DIMS),
                (
                    CONTRACT_EMBEDDER_ID,
                    4,
                ),
            }
        )
        answer = self._guarded(store, SCOPE, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == expected
        publish_sources(store, SCOPE, {"b": None, "c": None, "d": None})
        answer = self._guarded(store, SCOPE, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == frozenset()
        assert _ids(answer.records) == ["a#0001"]

    def test_guarded_query_names_a_lone_legacy_row_or_other_dimension(
        self, store: ChunkStore
    ) -> None:
        """One row without an embedder id (or of another dimension) among consistent ones.

        If this fails, check any shortcut the guard takes (PostgreSQL probes the first and last
        (embedder_id, dimensions) in index order, where rows without an id sort last).
        """
        publish_sources(store, SCOPE, {"a": ["alpha", "alpha two"]})
        publish_sources(store, SCOPE, {"z": ["zeta"]}, embedder_id=None)
        vector = hash_vector("alpha")
        answer = self._guarded(store, SCOPE, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == frozenset({(None, DIMS)})
        publish_sources(store, SCOPE, {"z": None})
        publish_sources(store, SCOPE, {"y": ["eta"]}, dimensions=DIMS + 1)
        answer = self._guarded(store, SCOPE, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == frozenset({(CONTRACT_EMBEDDER_ID, DIMS + 1)})
        assert sorted(_ids(answer.records)) == ["a#0001", "a#0002"]

    def test_guarded_query_on_an_empty_or_foreign_only_scope(self, store: ChunkStore) -> None:
        """No rows: nothing foreign, nothing found. Only foreign rows: they are named.

        If this fails, check that the guard still answers when the vector leg finds nothing.
        """
        vector = hash_vector("alpha")
        empty = self._guarded(store, SCOPE, vector, limit=QUERY_ALL)
        assert empty.foreign_embedders == frozenset() and list(empty.records) == []
        publish_sources(store, OTHER_CORPUS, {"d": ["delta"]}, dimensions=4)
        answer = self._guarded(store, OTHER_CORPUS, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == frozenset({(CONTRACT_EMBEDDER_ID, 4)})
        assert list(answer.records) == []
        assert self._guarded(store, SCOPE, vector, limit=QUERY_ALL).foreign_embedders == (
            frozenset()
        )

    def test_guarded_query_withholds_forgotten_ids_sources_and_lineage(
        self, store: ChunkStore
    ) -> None:
        """The promise retrieval relies on to skip its own tombstone re-read.

        If this fails, check that the guarded statement applies the same tombstone predicate
        as query (record id, source id, lineage; 'forgotten' only) before the limit.
        """
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id in ("keep", "gone-src", "partly"):
                _add(
                    uow,
                    make_batch(
                        SCOPE,
                        source_id,
                        [f"{source_id} one", f"{source_id} two"],
                        generation=staged,
                    ),
                )
            _add(
                uow,
                derived_batch(
                    SCOPE,
                    "d-lineage",
                    "derived on gone",
                    roots=("keep",),
                    lineage=("keep", "gone-root"),
                    generation=staged,
                ),
            )
            uow.generations.publish(staged)
            uow.tombstones.add(
                [Tombstone("gone-src"), Tombstone("partly#0001"), Tombstone("gone-root")]
            )
            uow.commit()
        visible = {"keep#0001", "keep#0002", "partly#0002"}
        for text in ("keep one", "gone-src one", "derived on gone", "partly one"):
            answer = self._guarded(store, SCOPE, hash_vector(text), limit=QUERY_ALL)
            assert set(_ids(answer.records)) == visible, text
            top = self._guarded(store, SCOPE, hash_vector(text), limit=1)
            assert len(top.records) == 1 and top.records[0].record.id in visible, text

    def test_guarded_query_applies_grants_and_filters_like_query(self, store: ChunkStore) -> None:
        """Authorization and metadata filter mean exactly what they mean for query.

        If this fails, check that the guarded statement shares query's predicate.
        """
        _require_acl(store)
        publish_sources(
            store,
            SCOPE,
            {"open": ["alpha open"], "closed": ["alpha closed"], "tagged": ["alpha tagged"]},
            metadata={"kind": "note"},
        )
        store.set_source_access(
            SCOPE,
            [
                Grant("open", principal_ids=("ann",)),
                Grant("tagged", principal_ids=("ann",)),
                Grant("closed", principal_ids=("bob",)),
            ],
        )
        auth = Authorization(tenant_id=SCOPE.tenant_id, principal_id="ann")
        vector = hash_vector("alpha closed")
        for kwargs in (
            {"authorization": auth},
            {"metadata_filter": {"kind": "note"}},
            {"authorization": auth, "metadata_filter": {"kind": {"$ne": "note"}}},
        ):
            guarded = self._guarded(store, SCOPE, vector, limit=QUERY_ALL, **kwargs)
            plain = store.query(SCOPE, vector, limit=QUERY_ALL, **kwargs)
            assert _ids(guarded.records) == _ids(plain), kwargs
        denied: list[str] = []
        answer = self._guarded(
            store,
            SCOPE,
            vector,
            limit=QUERY_ALL,
            authorization=auth,
            on_denied=lambda ds: denied.extend(d.source_id for d in ds),
        )
        assert set(_ids(answer.records)) == {"open#0001", "tagged#0001"}
        assert denied == ["closed"]


# --------------------------------------------------------------------------- query


class ChunkStoreQueryContract(_ChunkStoreContractBase):
    """Ordering, limits, cosine scores, metadata filters, dimensions and embedder listing."""

    def test_query_orders_by_score_then_id(self, store: ChunkStore) -> None:
        """Results come by descending score, equal scores by ascending id, at most `limit`.

        If this fails, check the ORDER BY (score DESC, id ASC) and the LIMIT of query.
        """
        probe = direction(DIMS, 1.0)
        tie = direction(DIMS, 0.6, 0.8)
        vectors = {
            "near": direction(DIMS, 1.0, 0.1),
            "tie-b": tie,
            "tie-a": tie,
            "far": direction(DIMS, 0.0, 1.0),
            "opposite": direction(DIMS, -1.0, 0.2),
        }
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id, vector in vectors.items():
                _add(
                    uow,
                    make_batch(SCOPE, source_id, [source_id], generation=staged, vectors=[vector]),
                )
            _add(
                uow, make_batch(SCOPE, "mixed", [f"mixed {i}" for i in range(6)], generation=staged)
            )
            uow.generations.publish(staged)
            uow.commit()
        results = store.query(SCOPE, probe, limit=QUERY_ALL)
        assert len(results) == 11
        for before, after in itertools.pairwise(results):
            assert (before.score, after.record.id) >= (after.score, before.record.id), (
                before.record.id,
                after.record.id,
            )
        ids = _ids(results)
        assert ids[0] == "near#0001"
        assert ids.index("tie-a#0001") + 1 == ids.index("tie-b#0001")
        assert ids[-1] == "opposite#0001"
        for limit in (1, 3, 10):
            assert _ids(store.query(SCOPE, probe, limit=limit)) == ids[:limit]

    def test_query_scores_are_cosine_similarity(self, store: ChunkStore) -> None:
        """Scores equal cosine similarity; a record's own vector (scaled) scores 1 and ranks first.

        If this fails, check the score formula: cosine (1 - cosine distance), not a raw dot
        product or a distance.
        """
        texts = [f"passage {i}" for i in range(8)]
        _, written = publish_sources(store, SCOPE, {"doc": texts})
        batch = written["doc"]
        stored = {r.id: batch.vectors[i].astype(np.float64) for i, r in enumerate(batch.records)}
        for index in (0, 5):
            probe = np.ascontiguousarray(batch.vectors[index] * 3.0, dtype=np.float32)
            results = store.query(SCOPE, probe, limit=QUERY_ALL)
            assert results[0].record.id == batch.records[index].id
            assert results[0].score == pytest.approx(1.0, abs=1e-5)
            unit = probe.astype(np.float64) / np.linalg.norm(probe)
            for found in results:
                expected = float(
                    stored[found.record.id] @ unit / np.linalg.norm(stored[found.record.id])
                )
                assert found.score == pytest.approx(expected, abs=1e-5), found.record.id

    def test_metadata_filter_is_shallow_equality_before_top_k(self, store: ChunkStore) -> None:
        """metadata_filter keeps records equal on every top-level filter key, before the limit.

        If this fails, check that the filter compares whole top-level values (no JSON
        containment, no string coercion), requires every key, and runs before the limit.
        """
        probe = direction(DIMS, 1.0)
        rows = [
            ("near-no-lang", {"kind": "faq"}, direction(DIMS, 1.0, 0.01)),
            ("near-de", {"lang": "de", "kind": "faq"}, direction(DIMS, 1.0, 0.02)),
            (
                "nested-superset",
                {"lang": "en", "tag": {"x": 1, "y": 2}},
                direction(DIMS, 1.0, 0.03),
            ),
            ("list-superset", {"lang": "en", "labels": ["a", "b"]}, direction(DIMS, 1.0, 0.04)),
            ("string-one", {"lang": "en", "n": "1"}, direction(DIMS, 1.0, 0.05)),
            (
                "en-faq",
                {"lang": "en", "kind": "faq", "tag": {"x": 1}, "labels": ["a"], "n": 1},
                direction(DIMS, 1.0, 1.0),
            ),
            ("en-guide", {"lang": "en", "kind": "guide"}, direction(DIMS, 0.0, 1.0)),
        ]
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id, metadata, vector in rows:
                _add(
                    uow,
                    make_batch(
                        SCOPE,
                        source_id,
                        [source_id],
                        generation=staged,
                        metadata=metadata,
                        vectors=[vector],
                    ),
                )
            uow.generations.publish(staged)
            uow.commit()

        def found(metadata_filter: dict[str, Any], limit: int = QUERY_ALL) -> list[str]:
            results = store.query(SCOPE, probe, limit=limit, metadata_filter=metadata_filter)
            return [r.record.source_id for r in results]

        assert found({"lang": "en", "kind": "faq"}, limit=1) == ["en-faq"]
        assert found({"tag": {"x": 1}}) == ["en-faq"]
        assert found({"labels": ["a"]}) == ["en-faq"]
        assert found({"n": 1}) == ["en-faq"]
        assert found({"n": "1"}) == ["string-one"]
        assert found({"kind": "guide"}) == ["en-guide"]
        assert found({"missing": "x"}) == []
        assert sorted(found({"lang": "en"})) == [
            "en-faq",
            "en-guide",
            "list-superset",
            "nested-superset",
            "string-one",
        ]
        assert len(found({})) == len(rows)

    def test_metadata_filter_compares_json_types(self, store: ChunkStore) -> None:
        """A filter value true matches only JSON true, never the number 1 (and 1 never true).

        If this fails, check that the filter compares JSON values with their types (Python's
        `True == 1` is not JSON equality; a SQL store comparing jsonb keeps them apart).
        """
        rows = [
            ("flag-true", {"flag": True}),
            ("flag-one", {"flag": 1}),
            ("flag-zero", {"flag": 0}),
        ]
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id, metadata in rows:
                _add(
                    uow,
                    make_batch(SCOPE, source_id, [source_id], generation=staged, metadata=metadata),
                )
            uow.generations.publish(staged)
            uow.commit()
        probe = hash_vector("flag-true")

        def found(metadata_filter: dict[str, Any]) -> set[str]:
            results = store.query(SCOPE, probe, limit=QUERY_ALL, metadata_filter=metadata_filter)
            return {r.record.source_id for r in results}

        assert found({"flag": True}) == {"flag-true"}
        assert found({"flag": 1}) == {"flag-one"}
        assert found({"flag": False}) == set()

    def test_query_scores_only_records_of_the_query_dimension(self, store: ChunkStore) -> None:
        """Records stored at another dimension are never returned for a query vector.

        If this fails, check that query filters on dimensions == len(vector).
        """
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            wide = make_batch(SCOPE, "wide", ["wide one", "wide two"], generation=staged)
            narrow = make_batch(
                SCOPE,
                "narrow",
                ["narrow one"],
                generation=staged,
                embedder_id="contract-v1:4",
                dimensions=4,
            )
            _add(uow, wide)
            _add(uow, narrow)
            uow.generations.publish(staged)
            uow.commit()
        assert _query_pairs(store, SCOPE, hash_vector("narrow one")) == wide.pairs
        assert _query_pairs(store, SCOPE, hash_vector("narrow one", 4)) == narrow.pairs
        assert store.list_embedders(SCOPE) == frozenset(
            {(CONTRACT_EMBEDDER_ID, DIMS), ("contract-v1:4", 4)}
        )

    def test_list_embedders_reports_visible_rows_only(self, store: ChunkStore) -> None:
        """list_embedders lists (embedder_id, dimensions) of visible rows, not retired or staged.

        If this fails, check that list_embedders applies the generation visibility rule.
        """
        publish_sources(store, SCOPE, {"a": ["one", "two"]}, embedder_id="emb-a:8")
        publish_sources(store, SCOPE, {"b": ["three"]}, embedder_id="emb-b:8")
        assert store.list_embedders(SCOPE) == frozenset({("emb-a:8", DIMS), ("emb-b:8", DIMS)})
        publish_sources(store, SCOPE, {"a": None})
        assert store.list_embedders(SCOPE) == frozenset({("emb-b:8", DIMS)})
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            _add(uow, make_batch(SCOPE, "c", ["four"], generation=staged, embedder_id="emb-c:8"))
            uow.commit()
        if store.capabilities.generations:
            assert store.list_embedders(SCOPE) == frozenset({("emb-b:8", DIMS)})

    def test_foreign_embedders_reports_only_visible_rows_that_differ(
        self, store: ChunkStore
    ) -> None:
        """foreign_embedders is empty for a consistent scope and names every visible stranger.

        If this fails, check the drift-guard read: other ids, other dimensions and rows
        without an embedder id must be reported; retired rows and other scopes must not.
        """
        publish_sources(store, SCOPE, {"a": ["one", "two"]}, embedder_id="emb-a:8")
        assert store.foreign_embedders(SCOPE, "emb-a:8", DIMS) == frozenset()
        publish_sources(store, SCOPE, {"b": ["three"]}, embedder_id="emb-b:8")
        publish_sources(store, SCOPE, {"c": ["four"]}, embedder_id=None)
        publish_sources(store, OTHER_CORPUS, {"d": ["five"]}, embedder_id="emb-d:8")
        assert store.foreign_embedders(SCOPE, "emb-a:8", DIMS) == frozenset(
            {("emb-b:8", DIMS), (None, DIMS)}
        )
        assert store.foreign_embedders(SCOPE, "emb-a:8", DIMS + 1) == frozenset(
            {("emb-a:8", DIMS), ("emb-b:8", DIMS), (None, DIMS)}
        )
        publish_sources(store, SCOPE, {"b": None, "c": None})
        assert store.foreign_embedders(SCOPE, "emb-a:8", DIMS) == frozenset()

    def test_get_by_source_orders_by_id_and_keeps_fields(self, store: ChunkStore) -> None:
        """get_by_source returns the source's records ordered by id with their stored fields.

        If this fails, check the ORDER BY of get_by_source and the round trip of text,
        metadata, kind, embedder and dimensions.
        """
        texts = [f"part {i} – ünïcode ✓" for i in range(12)]
        metadata = [
            {"i": i, "heading": ["Top", f"Sub {i}"], "nested": {"ok": True, "n": None}}
            for i in range(12)
        ]
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            batch = make_batch(SCOPE, "doc", texts, generation=staged, metadata=metadata)
            order = [7, 0, 11, 3, 9, 1, 5, 10, 2, 8, 4, 6]  # a fixed shuffle
            uow.records.add([batch.records[i] for i in order], batch.vectors[order])
            uow.generations.publish(staged)
            uow.commit()
        records = store.get_by_source(SCOPE, "doc")
        assert [r.id for r in records] == [f"doc#{i + 1:04d}" for i in range(12)]
        for got, wrote in zip(records, batch.records, strict=True):
            assert (got.text, got.metadata, got.source_id, got.kind) == (
                wrote.text,
                wrote.metadata,
                wrote.source_id,
                wrote.kind,
            )
            assert (got.embedder_id, got.dimensions, got.scope) == (
                CONTRACT_EMBEDDER_ID,
                DIMS,
                SCOPE,
            )
        top = store.query(SCOPE, batch.vectors[4], limit=1)[0]
        assert (top.record.id, top.record.text, top.record.metadata) == (
            "doc#0005",
            texts[4],
            metadata[4],
        )

    def test_query_returns_derived_records_with_their_lineage(self, store: ChunkStore) -> None:
        """A derived record comes back with kind, lineage and roots as written.

        If this fails, check that kind, lineage and roots are stored and read back.
        """
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            _add(uow, make_batch(SCOPE, "s1", ["root text"], generation=staged))
            _add(
                uow,
                derived_batch(
                    SCOPE,
                    "summary-1",
                    "summary text",
                    roots=("s1", "s2"),
                    lineage=("s1", "note-9"),
                    generation=staged,
                ),
            )
            uow.generations.publish(staged)
            uow.commit()
        top = store.query(SCOPE, hash_vector("summary text"), limit=1)[0].record
        assert (top.id, top.source_id, top.kind) == ("summary-1", "summary-1", "derived")
        assert tuple(top.lineage) == ("s1", "note-9")
        assert set(top.roots) == {"s1", "s2"}


# --------------------------------------------------------------------------- concurrency


class ChunkStoreConcurrencyContract(_ChunkStoreContractBase):
    """Concurrent writers on one scope are serialized; readers see whole versions."""

    def test_concurrent_writers_leave_one_complete_version(self, store: ChunkStore) -> None:
        """Two threads x 50 replacements on one scope end with one whole version per source.

        If this fails, check that units of work on the same scope are serialized (stage, retire,
        add and publish must not interleave) and that reads see one committed pointer.
        """
        _require_transactions(store)
        rounds = 50

        def texts(owner: str, source_id: str, k: int) -> list[str]:
            return [
                f"{source_id} by {owner} v{k} part {j}" for j in range(1 + (k + len(owner)) % 3)
            ]

        errors: list[BaseException] = []
        torn: list[list[str]] = []
        done = threading.Event()

        def writer(owner: str) -> None:
            try:
                for k in range(rounds):
                    publish_sources(
                        store,
                        SCOPE,
                        {
                            f"own-{owner}": texts(owner, f"own-{owner}", k),
                            "shared": texts(owner, "shared", k),
                        },
                    )
            except BaseException as exc:
                errors.append(exc)

        def reader() -> None:
            try:
                while not done.is_set():
                    seen = [r.text for r in store.get_by_source(SCOPE, "shared")]
                    if seen and not _one_version(seen):
                        torn.append(seen)
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=writer, args=(name,), daemon=True) for name in ("left", "right")
        ]
        watcher = threading.Thread(target=reader, daemon=True)
        watcher.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WRITER_TIMEOUT_S)
        done.set()
        watcher.join(READER_TIMEOUT_S)
        assert not any(t.is_alive() for t in [*threads, watcher]), "writers or reader deadlocked"
        assert not errors, f"a thread raised: {errors[0]!r}"
        assert not torn, f"a reader saw a mixed version of 'shared': {torn[0]}"

        for owner in ("left", "right"):
            expected = texts(owner, f"own-{owner}", rounds - 1)
            assert [r.text for r in store.get_by_source(SCOPE, f"own-{owner}")] == expected
        shared = [r.text for r in store.get_by_source(SCOPE, "shared")]
        assert shared in (texts("left", "shared", rounds - 1), texts("right", "shared", rounds - 1))
        results = store.query(SCOPE, hash_vector("shared"), limit=QUERY_ALL)
        ids = _ids(results)
        assert len(ids) == len(set(ids)), "duplicate ids are visible"
        assert len(ids) == sum(
            len(store.get_by_source(SCOPE, s)) for s in ("own-left", "own-right", "shared")
        )
        if store.capabilities.generations:
            assert store.current_generation(SCOPE) == 2 * rounds


def _one_version(texts: Sequence[str]) -> bool:
    """True when ``texts`` are parts 0..n-1 of a single (owner, version) of a source."""
    tags = {t.rsplit(" part ", 1)[0] for t in texts}
    if len(tags) != 1:
        return False
    owner = next(iter(tags)).split(" by ", 1)[1].split(" v", 1)
    expected = 1 + (int(owner[1]) + len(owner[0])) % 3
    return [t.rsplit(" part ", 1)[1] for t in texts] == [str(j) for j in range(expected)]


# --------------------------------------------------------------------------- aggregate


FILTER_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("f-0", {"lang": "en", "year": 2024, "draft": False}),
    ("f-1", {"lang": "de", "year": 2021, "tags": ["a", "b"]}),
    ("f-2", {"lang": "en", "year": 2019.5, "score": 1}),
    ("f-3", {"lang": "fr", "year": "2024", "draft": True}),
    ("f-4", {"year": None, "score": 1.0}),
    ("f-5", {"lang": "EN", "year": 2030}),
    ("f-6", {"lang": "en", "nested": {"a": 1}}),
    ("f-7", {}),
)
FILTER_CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("equality", {"lang": "en"}),
    ("two-keys", {"lang": "en", "draft": False}),
    ("ne-matches-missing", {"lang": {"$ne": "en"}}),
    ("in", {"lang": {"$in": ["de", "fr"]}}),
    ("nin-matches-missing", {"lang": {"$nin": ["en"]}}),
    ("range-numbers-only", {"year": {"$gte": 2020, "$lt": 2030}}),
    ("string-range", {"lang": {"$gt": "d"}}),
    ("exists-null", {"year": {"$exists": True}}),
    ("not-exists", {"lang": {"$exists": False}}),
    ("one-equals-one-point-zero", {"score": 1}),
    ("bool-is-not-number", {"draft": {"$eq": 0}}),
    ("object-equality", {"nested": {"$eq": {"a": 1}}}),
    ("or", {"$or": [{"lang": "de"}, {"year": {"$gt": 2025}}]}),
    ("not", {"$not": {"lang": "en"}}),
    (
        "and-of-or",
        {"$and": [{"$or": [{"lang": "en"}, {"lang": "fr"}]}, {"draft": {"$exists": True}}]},
    ),
)


class ChunkStoreFilterContract(_ChunkStoreContractBase):
    """The metadata filter language, applied by the store's own predicate before the limit."""

    @pytest.mark.parametrize(("case", "spec"), FILTER_CASES, ids=[c for c, _ in FILTER_CASES])
    def test_filter_language_conformance(
        self, store: ChunkStore, case: str, spec: dict[str, Any]
    ) -> None:
        """Each filter selects exactly the records ``parse_filter(spec).matches`` selects.

        If this fails, check the store's compilation of the filter operator named by ``case``
        against the semantics documented in ragport/domain/filters.py.
        """
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id, metadata in FILTER_ROWS:
                _add(
                    uow,
                    make_batch(SCOPE, source_id, [source_id], generation=staged, metadata=metadata),
                )
            uow.generations.publish(staged)
            uow.commit()
        parsed = parse_filter(spec)
        assert parsed is not None
        expected = {f"{sid}#0001" for sid, md in FILTER_ROWS if parsed.matches(md)}
        found = store.query(SCOPE, hash_vector("probe"), limit=QUERY_ALL, metadata_filter=spec)
        assert set(_ids(found)) == expected
        # A limit smaller than the table still returns only matching records.
        few = store.query(SCOPE, hash_vector("probe"), limit=1, metadata_filter=spec)
        assert set(_ids(few)) <= expected and len(few) == min(1, len(expected))


class ChunkStoreLexicalContract(_ChunkStoreContractBase):
    """The lexical leg of stores that advertise ``lexical_modes``."""

    def _modes(self, store: ChunkStore) -> tuple[str, ...]:
        modes = tuple(store.capabilities.lexical_modes)
        if not modes:
            pytest.skip("store advertises no lexical_modes: the lexical section does not apply")
        _require_implemented(store, "lexical")
        return modes

    def _seed(self, store: ChunkStore) -> None:
        publish_sources(
            store,
            SCOPE,
            {
                "lex-walrus": ["walrus colonies haul out on ice floes"],
                "lex-penguin": ["penguin colonies nest on the ice"],
                "lex-secret": ["walrus walrus walrus tusks and walrus ivory"],
                "lex-old": ["walrus herds in the old edition"],
                "lex-gone": ["walrus research that was forgotten"],
            },
        )
        publish_sources(store, SCOPE, {"lex-old": ["seals in the new edition"]})
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add([Tombstone("lex-gone", "forgotten")])
            uow.commit()

    def test_lexical_query_finds_term_matches_with_the_store_predicate(
        self, store: ChunkStore
    ) -> None:
        """Records containing the term come back; retired versions and forgotten sources do not.

        If this fails, check that lexical_query applies visibility and tombstones like query.
        """
        for mode in self._modes(store):
            self._seed(store)
            assert isinstance(store, SupportsLexicalSearch)
            found = store.lexical_query(SCOPE, "walrus", limit=QUERY_ALL, mode=mode)
            sources = {item.record.source_id for item in found}
            assert sources == {"lex-walrus", "lex-secret"}
            assert all(np.isfinite(item.score) for item in found)
            ordered = [(-item.score, item.record.id) for item in found]
            assert ordered == sorted(ordered)
            assert store.lexical_query(OTHER_CORPUS, "walrus", limit=QUERY_ALL, mode=mode) == ()
            return

    def test_lexical_query_applies_grants_before_the_limit(self, store: ChunkStore) -> None:
        """With limit 1, a denied better match never crowds out the allowed one.

        If this fails, check that the grant predicate is inside the lexical leg, not after it.
        """
        modes = self._modes(store)
        _require_acl(store)
        self._seed(store)
        store.set_source_access(SCOPE, [Grant("lex-walrus", principal_ids=("alice",))])
        assert isinstance(store, SupportsLexicalSearch)
        denied: list[AccessDecision] = []
        found = store.lexical_query(
            SCOPE, "walrus", limit=1, mode=modes[0], authorization=ALICE, on_denied=denied.extend
        )
        assert [item.record.source_id for item in found] == ["lex-walrus"]
        assert {d.source_id for d in denied} == {"lex-secret"}
        assert all(not d.allowed for d in denied)

    def test_unknown_lexical_mode_is_a_capability_error(self, store: ChunkStore) -> None:
        """Asking for a mode the store does not advertise fails closed.

        If this fails, check that lexical_query validates ``mode``.
        """
        self._modes(store)
        assert isinstance(store, SupportsLexicalSearch)
        with pytest.raises(CapabilityError):
            store.lexical_query(SCOPE, "walrus", limit=5, mode="no-such-mode")


class ChunkStoreDenialReportContract(_ChunkStoreContractBase):
    """Stores report what their own grant predicate withheld, only when asked."""

    def test_query_reports_sources_its_grant_predicate_withheld(self, store: ChunkStore) -> None:
        """on_denied receives the denied sources among the unfiltered top, with reasons.

        If this fails, check the extra read behind ``on_denied`` in the store's query.
        """
        _require_acl(store)
        publish_sources(
            store,
            SCOPE,
            {"allowed": ["allowed text"], "denied-00": ["denied text"], "s-v2": ["versioned"]},
        )
        store.set_source_access(
            SCOPE,
            [
                Grant("allowed", principal_ids=("alice",)),
                Grant("s-v2", principal_ids=("alice",), access_version=2),
            ],
        )
        reported: list[AccessDecision] = []
        caller = Authorization("alice", TENANT, access_version=1)
        found = store.query(
            SCOPE,
            hash_vector("probe"),
            limit=QUERY_ALL,
            authorization=caller,
            on_denied=reported.extend,
        )
        assert {item.record.source_id for item in found} == {"allowed"}
        reasons = {d.source_id: d.reason for d in reported}
        assert reasons == {"denied-00": "no_grant", "s-v2": "version_mismatch"}


# --------------------------------------------------------------------------- lineage


def _derived_ids(records: Sequence[Any]) -> list[str]:
    return [r.id for r in records]


class ChunkStoreLineageContract(_ChunkStoreContractBase):
    """Lineage reads and rewrites behind deletion propagation and re-pointing."""

    def _seed_lineage(self, store: ChunkStore) -> None:
        """lin-src and lin-other (chunks); d1 on src, d2 on d1, d3 on other, d4 on both,
        d6 on src then re-written on other (the old version retired), d5 on src staged only."""
        with store.unit_of_work(SCOPE) as uow:
            g1 = uow.generations.stage()
            _add(uow, make_batch(SCOPE, "lin-src", ["lineage source one"], generation=g1))
            _add(uow, make_batch(SCOPE, "lin-other", ["lineage other one"], generation=g1))
            for record_id, lineage, roots in (
                ("lin-d1", ("lin-src",), ("lin-src",)),
                ("lin-d2", ("lin-d1",), ("lin-src",)),
                ("lin-d3", ("lin-other",), ("lin-other",)),
                ("lin-d4", ("lin-src", "lin-other"), ("lin-src", "lin-other")),
                ("lin-d6", ("lin-src",), ("lin-src",)),
            ):
                _add(
                    uow,
                    derived_batch(
                        SCOPE,
                        record_id,
                        f"{record_id} text",
                        roots=roots,
                        lineage=lineage,
                        generation=g1,
                    ),
                )
            uow.generations.publish(g1)
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            g2 = uow.generations.stage()
            uow.records.retire_source("lin-d6", generation=g2)
            _add(
                uow,
                derived_batch(
                    SCOPE, "lin-d6", "lin-d6 text v2", roots=("lin-other",), generation=g2
                ),
            )
            uow.generations.publish(g2)
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            g3 = uow.generations.stage()
            _add(
                uow,
                derived_batch(SCOPE, "lin-d5", "lin-d5 text", roots=("lin-src",), generation=g3),
            )
            uow.commit()  # staged, never published
        # The same lineage in another corpus must never be found from SCOPE.
        with store.unit_of_work(OTHER_CORPUS) as uow:
            g = uow.generations.stage()
            _add(
                uow,
                derived_batch(
                    OTHER_CORPUS, "lin-d1", "elsewhere", roots=("lin-src",), generation=g
                ),
            )
            uow.generations.publish(g)
            uow.commit()

    def test_find_dependents_returns_derived_records_of_every_generation_whose_lineage_overlaps(
        self, store: ChunkStore
    ) -> None:
        """find_dependents returns every stored derived record naming any id: live, staged and
        retired versions (a rollback could bring a retired one back).

        If this fails, check find_dependents: kind 'derived', no pointer or retirement test,
        array overlap on lineage (not roots), exact scope, one row per stored version.
        """
        self._seed_lineage(store)
        with store.unit_of_work(SCOPE) as uow:
            cases = {
                ("lin-src",): {"lin-d1", "lin-d4", "lin-d5", "lin-d6"},
                ("lin-d1",): {"lin-d2"},
                ("lin-other",): {"lin-d3", "lin-d4", "lin-d6"},
                ("lin-src", "lin-d1"): {"lin-d1", "lin-d2", "lin-d4", "lin-d5", "lin-d6"},
                ("lin-src#0001",): set(),
                ("no-such-id",): set(),
            }
            for ids, expected in cases.items():
                found = list(uow.records.find_dependents(list(ids)))
                got = _derived_ids(found)
                assert len(got) == len(set(got)), f"duplicates for {ids}: {got}"
                assert set(got) == expected, ids
                assert all(r.kind == "derived" and r.scope == SCOPE for r in found), ids
            (d6,) = [r for r in uow.records.find_dependents(["lin-src"]) if r.id == "lin-d6"]
            assert d6.retired_generation is not None, "the retired first version of lin-d6"
            assert tuple(d6.lineage) == ("lin-src",)
            (d4,) = [r for r in uow.records.find_dependents(["lin-src"]) if r.id == "lin-d4"]
            assert tuple(d4.lineage) == ("lin-src", "lin-other")
            assert set(d4.roots) == {"lin-src", "lin-other"}
            assert list(uow.records.find_dependents([])) == []
        with store.unit_of_work(OTHER_CORPUS) as uow:
            assert _derived_ids(uow.records.find_dependents(["lin-src"])) == ["lin-d1"]
            assert _derived_ids(uow.records.find_dependents(["lin-other"])) == []

    def test_rewrite_lineage_rewrites_lineage_and_roots_and_counts_edges(
        self, store: ChunkStore
    ) -> None:
        """rewrite_lineage swaps one id in lineage and roots of derived records of every
        generation (retired versions included).

        If this fails, check rewrite_lineage: it replaces ``from_id`` in both arrays (order
        kept) on live, staged and retired rows, returns the number of lineage entries replaced,
        and touches nothing else.
        """
        self._seed_lineage(store)
        with store.unit_of_work(SCOPE) as uow:
            # lineage edges on lin-src: d1, d4, the staged d5 and the retired first version of
            # d6 (d2 has it in roots only)
            assert uow.records.rewrite_lineage("lin-src", "lin-moved") == 4
            assert uow.records.rewrite_lineage("no-such-id", "lin-moved") == 0
            uow.commit()

        def record(record_id: str, scope: Scope = SCOPE) -> Any:
            (found,) = store.get_by_source(scope, record_id)
            return found

        assert tuple(record("lin-d1").lineage) == ("lin-moved",)
        assert tuple(record("lin-d1").roots) == ("lin-moved",)
        assert tuple(record("lin-d2").lineage) == ("lin-d1",)
        assert tuple(record("lin-d2").roots) == ("lin-moved",)
        assert tuple(record("lin-d3").lineage) == ("lin-other",)
        assert tuple(record("lin-d4").lineage) == ("lin-moved", "lin-other")
        assert set(record("lin-d4").roots) == {"lin-moved", "lin-other"}
        assert tuple(record("lin-d6").lineage) == ("lin-other",)
        assert record("lin-d1").text == "lin-d1 text"
        assert visible_pairs(store, SCOPE, ["lin-src", "lin-other"]) == {
            ("lin-src#0001", "lineage source one"),
            ("lin-other#0001", "lineage other one"),
        }
        with store.unit_of_work(SCOPE) as uow:
            (d5,) = [r for r in uow.records.list_live("lin-d5")]
            assert tuple(d5.lineage) == ("lin-moved",)
            assert _derived_ids(uow.records.find_dependents(["lin-src"])) == []
            (d6,) = [r for r in uow.records.find_dependents(["lin-moved"]) if r.id == "lin-d6"]
            assert d6.retired_generation is not None
            assert (tuple(d6.lineage), tuple(d6.roots)) == (("lin-moved",), ("lin-moved",))
        assert tuple(record("lin-d1", OTHER_CORPUS).lineage) == ("lin-src",)

    def test_purge_source_removes_every_generation_of_one_source_only(
        self, store: ChunkStore
    ) -> None:
        """purge_source deletes a source's rows of every generation and nothing else.

        If this fails, check purge_source: a physical delete on exact scope and source id,
        regardless of generation or retired_generation, returning the row count.
        """
        publish_sources(store, SCOPE, {"lin-src": ["v1 one", "v1 two"], "lin-other": ["other"]})
        publish_sources(store, SCOPE, {"lin-src": ["v2 one", "v2 two", "v2 three"]})
        publish_sources(store, OTHER_CORPUS, {"lin-src": ["elsewhere"]})
        with store.unit_of_work(SCOPE) as uow:
            g = uow.generations.stage()
            _add(uow, derived_batch(SCOPE, "lin-d1", "derived", roots=("lin-src",), generation=g))
            uow.generations.publish(g)
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.records.purge_source("lin-src") == 5  # 2 retired + 3 live
            assert uow.records.purge_source("lin-src") == 0
            uow.commit()
        assert not store.get_by_source(SCOPE, "lin-src")
        assert visible_pairs(store, SCOPE, ["lin-other"]) == {("lin-other#0001", "other")}
        assert [r.id for r in store.get_by_source(SCOPE, "lin-d1")] == ["lin-d1"]
        assert visible_pairs(store, OTHER_CORPUS, ["lin-src"]) == {("lin-src#0001", "elsewhere")}
        with store.unit_of_work(SCOPE) as uow:
            uow.records.restore_above(0)  # would bring retired rows back, were any left
            assert list(uow.records.list_live("lin-src")) == []
            uow.rollback()


# --------------------------------------------------------------------------- re-pointing

_CODE_POINT_SUFFIXES = ("B", "Z", "_", "a", "~", "\ufffd", "\U0001f600")
"""Record id suffixes in code-point order; collations, case folding and UTF-16 disagree."""


class ChunkStoreRepointContract(_ChunkStoreContractBase):
    """Paging a source's live records and re-keying them without re-embedding."""

    def test_list_live_orders_by_code_point_with_after_and_limit(self, store: ChunkStore) -> None:
        """list_live pages a source's live records (staged included) in code-point id order.

        If this fails, check list_live: retired_generation IS NULL (no pointer test), exact
        source, ORDER BY id in code-point order (COLLATE "C" in PostgreSQL), ``id > after``
        and ``limit``.
        """
        _require_generations(store)
        ids = [f"rp-from#{suffix}" for suffix in _CODE_POINT_SUFFIXES]
        with store.unit_of_work(SCOPE) as uow:
            g1 = uow.generations.stage()
            batch = make_batch(SCOPE, "rp-from", [*ids, "rp-from#old"], generation=g1)
            records = tuple(
                attrs.evolve(r, id=new_id)
                for r, new_id in zip(batch.records, [*reversed(ids), "rp-from#old"], strict=True)
            )
            _add(uow, Batch(records, batch.vectors))
            _add(uow, make_batch(SCOPE, "rp-other", ["other"], generation=g1))
            uow.generations.publish(g1)
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            g2 = uow.generations.stage()
            uow.records.retire_ids(["rp-from#old"], generation=g2)
            staged = make_batch(SCOPE, "rp-from", ["staged"], generation=g2)
            _add(
                uow, Batch((attrs.evolve(staged.records[0], id="rp-from#staged"),), staged.vectors)
            )
            uow.commit()  # staged, not published
        expected = sorted([*ids, "rp-from#staged"])
        assert expected[:4] == ["rp-from#B", "rp-from#Z", "rp-from#_", "rp-from#a"]
        with store.unit_of_work(SCOPE) as uow:

            def live(after: str | None = None, limit: int | None = None) -> list[str]:
                found = list(uow.records.list_live("rp-from", after=after, limit=limit))
                assert all(r.source_id == "rp-from" for r in found)
                assert all(r.retired_generation is None for r in found)
                return [r.id for r in found]

            assert live() == expected
            assert live(limit=2) == expected[:2]
            assert live(after="rp-from#_") == expected[3:]
            assert live(after="rp-from#C") == expected[1:]  # an id that does not exist
            assert live(after="rp-from#a", limit=2) == expected[4:6]
            assert live(after=expected[-1]) == []
            pages: list[str] = []
            cursor: str | None = None
            while True:
                page = live(after=cursor, limit=3)
                if not page:
                    break
                pages.extend(page)
                cursor = page[-1]
            assert pages == expected
            assert [r.id for r in uow.records.list_live("rp-other")] == ["rp-other#0001"]
            assert list(uow.records.list_live("no-such-source")) == []

    def test_rekey_moves_ids_and_source_and_keeps_everything_else(self, store: ChunkStore) -> None:
        """rekey re-files live records under new ids and a new source, copying the rest verbatim.

        If this fails, check rekey: only id and source_id change; text, metadata, vector,
        offsets, chunk index, embedder and generation stay; retired versions do not move.
        """
        publish_sources(store, SCOPE, {"rp-from": ["old one", "old two"]})
        _, written = publish_sources(
            store,
            SCOPE,
            {"rp-from": ["move one", "move two", "stay three"]},
            metadata=[{"n": 1}, {"n": 2}, {"n": 3}],
        )
        before = {r.id: r for r in store.get_by_source(SCOPE, "rp-from")}
        moves = {"rp-from#0001": "rp-to#0001", "rp-from#0002": "rp-to#0002"}
        with store.unit_of_work(SCOPE) as uow:
            assert uow.records.rekey(moves, to_source_id="rp-to") == 2
            assert uow.records.rekey({}, to_source_id="rp-to") == 0
            uow.commit()
        assert [r.id for r in store.get_by_source(SCOPE, "rp-from")] == ["rp-from#0003"]
        after = {r.id: r for r in store.get_by_source(SCOPE, "rp-to")}
        assert sorted(after) == ["rp-to#0001", "rp-to#0002"]
        for old_id, new_id in moves.items():
            old, new = before[old_id], after[new_id]
            assert new.source_id == "rp-to"
            assert attrs.evolve(new, id=old.id, source_id=old.source_id) == old, new_id
        batch = written["rp-from"]
        for row, new_id in ((0, "rp-to#0001"), (1, "rp-to#0002")):
            (top,) = store.query(SCOPE, batch.vectors[row], limit=1)
            assert top.record.id == new_id
            assert top.score == pytest.approx(1.0, abs=1e-3)
        with store.unit_of_work(SCOPE) as uow:
            # The retired v1 rows stayed where they were: restoring them shows them under rp-from.
            uow.records.restore_above(0)
            restored = {(r.id, r.text) for r in uow.records.list_live("rp-from")}
            uow.rollback()
        assert restored >= {("rp-from#0001", "old one"), ("rp-from#0002", "old two")}

    def test_rekey_onto_a_live_id_of_another_source_is_rejected(self, store: ChunkStore) -> None:
        """A rekey whose new id is live for another source is a ValidationError; nothing moves.

        If this fails, check that rekey looks up every destination id among live rows of the
        scope before changing any row.
        """
        _, written = publish_sources(
            store, SCOPE, {"rp-from": ["from one", "from two"], "rp-other": ["other one"]}
        )
        moves = {"rp-from#0001": "rp-to#0001", "rp-from#0002": "rp-other#0001"}
        with store.unit_of_work(SCOPE) as uow:
            with pytest.raises(ValidationError):
                uow.records.rekey(moves, to_source_id="rp-to")
            assert [r.id for r in uow.records.list_live("rp-from")] == [
                "rp-from#0001",
                "rp-from#0002",
            ]
            assert list(uow.records.list_live("rp-to")) == []
        assert visible_pairs(store, SCOPE, ["rp-from", "rp-other"]) == (
            written["rp-from"].pairs | written["rp-other"].pairs
        )
        assert not store.get_by_source(SCOPE, "rp-to")
        assert _query_pairs(store, SCOPE, hash_vector("other one")) == (
            written["rp-from"].pairs | written["rp-other"].pairs
        )

    def test_rekey_never_overwrites_a_destination_record_of_the_same_generation(
        self, store: ChunkStore
    ) -> None:
        """A retired destination row written at a moved row's generation blocks the rekey.

        If this fails, check that rekey refuses instead of overwriting history that a
        rollback could still restore (the (id, generation) pair must stay unique).
        """
        _require_generations(store)
        _, written = publish_sources(store, SCOPE, {"rp-from": ["from one"], "rp-to": ["to one"]})
        publish_sources(store, SCOPE, {"rp-to": None})
        with store.unit_of_work(SCOPE) as uow, pytest.raises(ValidationError):
            uow.records.rekey({"rp-from#0001": "rp-to#0001"}, to_source_id="rp-to")
        assert visible_pairs(store, SCOPE, ["rp-from"]) == written["rp-from"].pairs


# Mixins in modules of their own build on this one's helpers, so they are imported here, once
# everything above exists (the package imports this module first).
from ragport.contract_tests.chunk_store_boundary import (  # noqa: E402
    ChunkStoreBoundaryContract,
)
from ragport.contract_tests.chunk_store_forgetting import (  # noqa: E402
    ChunkStoreForgettingContract,
    ChunkStoreRepointUniquenessContract,
)
from ragport.contract_tests.chunk_store_hybrid import (  # noqa: E402
    ChunkStoreHybridSnapshotContract,
)


class ChunkStoreContract(
    ChunkStoreCapabilityContract,
    ChunkStoreScopeContract,
    ChunkStoreUnitOfWorkContract,
    ChunkStoreReplaceContract,
    ChunkStoreGenerationContract,
    ChunkStoreGrantContract,
    ChunkStoreTombstoneContract,
    ChunkStoreGuardedQueryContract,
    ChunkStoreQueryContract,
    ChunkStoreConcurrencyContract,
    ChunkStoreFilterContract,
    ChunkStoreLexicalContract,
    ChunkStoreDenialReportContract,
    ChunkStoreLineageContract,
    ChunkStoreRepointContract,
    ChunkStoreForgettingContract,
    ChunkStoreRepointUniquenessContract,
    ChunkStoreHybridSnapshotContract,
    ChunkStoreBoundaryContract,
):
    """Every ChunkStore promise. Subclass it and override the ``store`` fixture."""

    def test_isolation_canary(self, store: ChunkStore) -> None:
        """Collected after every other contract test: the fixture still yields an empty store.

        If this fails, check that the `store` fixture does not share state between tests
        (a module-level store, a database not truncated, a class attribute).
        """
        for scope in ALL_SCOPES:
            _assert_scope_empty(store, scope)
