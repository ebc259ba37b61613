"""Forgetting and moving against the in-memory store: index_derived, deletion propagation,
re-pointing and batched renames (ragport/application/forgetting.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from doubles import CallLog
from flat_options import flat, flat_write

import ragport
from ragport import (
    AccessDeniedError,
    Authorization,
    Chunk,
    Grant,
    Limits,
    Rename,
    Runtime,
    Scope,
    ValidationError,
)
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.application import (
    RagDeletionHandler,
    RenameEvent,
    apply_source_renames,
    create_deletion_propagator,
    index_derived,
    replace_source,
    repoint_source,
    retrieve_context,
)
from ragport.domain import Record, Tombstone
from ragport.domain.errors import PropagationError
from ragport.ports.store import GuardedQuery, HybridAnswer

SCOPE = Scope("tenant-1", "kb", "docs")
OTHER_CORPUS = Scope("tenant-1", "kb", "archive")
EMB = HashEmbedder(32)
ADMIN = Authorization("admin", "tenant-1")
ALICE = Authorization("alice", "tenant-1")
BOB = Authorization("bob", "tenant-1")
CAROL = Authorization("carol", "tenant-1")
DOC_TEXT = "the confidential merger memo names Project Heron"


# -- helpers -------------------------------------------------------------------------------------


def _source(
    store: Any, source_id: str, texts: Sequence[str], *, scope: Scope = SCOPE, **kwargs: Any
) -> None:
    replace_source(
        source_id=source_id,
        chunks=[Chunk.of(source_id, i, t) for i, t in enumerate(texts)],
        embedder=EMB,
        store=store,
        scope=scope,
        **flat_write(**kwargs),
    )


def _derived(
    store: Any, record_id: str, lineage: Sequence[str], text: str | None = None, **kwargs: Any
) -> ragport.ReplaceResult:
    return index_derived(
        record_id=record_id,
        text=text or f"{record_id} derived text",
        lineage=lineage,
        embedder=EMB,
        store=store,
        scope=kwargs.pop("scope", SCOPE),
        **kwargs,
    )


def _grant(store: Any, principals: Sequence[str], *sources: str, scope: Scope = SCOPE) -> None:
    store.set_source_access(scope, [Grant(s, principal_ids=tuple(principals)) for s in sources])


def _tombstones(store: Any, scope: Scope = SCOPE) -> list[tuple[str, str]]:
    with store.unit_of_work(scope) as uow:
        return [(t.id, t.reason) for t in uow.tombstones.list()]


def _one(store: Any, record_id: str) -> Record:
    (record,) = store.get_by_source(SCOPE, record_id)
    return record


def _retrieve(store: Any, query: str, **kwargs: Any) -> ragport.RetrievalResult:
    options = {
        "top_k": 32,
        "query_candidates": 128,
        "max_context_tokens": 8000,
        "max_result_bytes": 524288,
        **kwargs,
    }
    return retrieve_context(
        query, embedder=EMB, store=store, **flat(scope=options.pop("scope", SCOPE), **options)
    )


def _everything_seen(store: Any, queries: Sequence[str], **kwargs: Any) -> set[str]:
    """Ids of every hit of every query, through both legs."""
    seen: set[str] = set()
    for query in queries:
        for lexical in ("off", "bm25"):
            seen |= {h.id for h in _retrieve(store, query, lexical=lexical, **kwargs).hits}
    return seen


def _write_derived(store: Any, specs: Sequence[tuple[str, Sequence[str], Sequence[str]]]) -> None:
    """Write derived records (id, lineage, roots) directly, in one published transaction.

    Used where index_derived would (rightly) refuse the shape, or to write thousands quickly.
    """
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(len(specs), EMB.dimensions)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with store.unit_of_work(SCOPE) as uow:
        generation = uow.generations.stage()
        uow.records.add(
            [
                Record(
                    id=rid,
                    scope=SCOPE,
                    source_id=rid,
                    kind="derived",
                    text=f"{rid} derived text",
                    embedder_id=EMB.id,
                    dimensions=EMB.dimensions,
                    generation=generation,
                    lineage=tuple(lineage),
                    roots=tuple(roots),
                )
                for rid, lineage, roots in specs
            ],
            vectors,
        )
        uow.generations.publish(generation)
        uow.commit()


class StaleStore(CallLog):
    """query/lexical_query answer with rows captured before a propagation landed."""

    def __init__(self, inner: InMemoryStore) -> None:
        super().__init__(inner)
        self.stale: dict[tuple[str, str], Any] = {}
        self.frozen = False

    def query(self, scope: Scope, vector: Any, **kwargs: Any) -> Any:
        key = ("query", str(kwargs.get("authorization")))
        if not self.frozen:
            self.stale[key] = self._inner.query(scope, vector, **kwargs)
        return self.stale[key]

    def guarded_query(self, scope: Scope, vector: Any, **kwargs: Any) -> Any:
        guard = {k: kwargs.pop(k) for k in ("embedder_id", "dimensions")}
        foreign = self._inner.foreign_embedders(scope, guard["embedder_id"], guard["dimensions"])
        return GuardedQuery(foreign_embedders=foreign, records=self.query(scope, vector, **kwargs))

    def lexical_query(self, scope: Scope, text: str, **kwargs: Any) -> Any:
        key = ("lexical", str(kwargs.get("authorization")))
        if not self.frozen:
            self.stale[key] = self._inner.lexical_query(scope, text, **kwargs)
        return self.stale[key]

    def hybrid_query(self, scope: Scope, vector: Any, text: str, **kwargs: Any) -> Any:
        guard = {k: kwargs.pop(k) for k in ("embedder_id", "dimensions")}
        mode = kwargs.pop("mode")
        foreign = self._inner.foreign_embedders(scope, guard["embedder_id"], guard["dimensions"])
        return HybridAnswer(
            foreign_embedders=foreign,
            vector=self.query(scope, vector, **kwargs),
            lexical=self.lexical_query(scope, text, mode=mode, **kwargs),
        )


class LookupStaleStore(StaleStore):
    """A StaleStore whose class also defines the forgotten lookup (SupportsForgottenLookup)."""

    def forgotten_among(self, scope: Scope, ids: Sequence[str]) -> frozenset[str]:
        self.calls.append("forgotten_among")
        return self._inner.forgotten_among(scope, ids)


class RecordingHandler:
    """Logs every call; can fail; reports what was already tombstoned when it ran."""

    def __init__(
        self,
        kind: str,
        log: list[tuple[Any, ...]],
        *,
        store: Any = None,
        fail: BaseException | None = None,
        count: int = 7,
    ) -> None:
        self.kind = kind
        self._log = log
        self._store = store
        self.fail = fail
        self.count = count

    def on_propagate(self, source_id: str, ids: Sequence[str], scope: Scope) -> int:
        seen = self._store.list_invalidated_ids(scope) if self._store is not None else None
        self._log.append((self.kind, "propagate", source_id, tuple(ids), scope, seen))
        if self.fail is not None:
            raise self.fail
        return self.count

    def on_repoint(self, from_id: str, to_id: str, scope: Scope) -> int:
        self._log.append((self.kind, "repoint", from_id, to_id, scope))
        if self.fail is not None:
            raise self.fail
        return self.count


class UpperRedactor:
    """Replaces the word 'Heron' (a host's own redaction rule)."""

    def redact(self, text: str) -> str:
        return text.replace("Heron", "[HOST-REDACTED]")


def _propagator(
    store: Any, *handlers: Any, **kwargs: Any
) -> ragport.application.DeletionPropagator:
    kwargs.setdefault("authorization", ADMIN)
    return create_deletion_propagator(
        scope=SCOPE, store=store, handlers=handlers, **flat_write(**kwargs)
    )


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


# -- index_derived -------------------------------------------------------------------------------


def test_index_derived_stores_a_derived_record_with_lineage_and_roots(store):
    """A derived record is kind 'derived', its own source, with lineage and roots; hits name the lineage. If this fails, check index_derived and answer.build_hits."""
    _source(store, "a", ["alpha text about leave"])
    _source(store, "b", ["beta text about payroll"])
    result = _derived(store, "sum-1", ["a", "b"], "summary of leave and payroll")
    assert (result.source_id, result.indexed, result.skipped) == ("sum-1", 1, False)
    record = _one(store, "sum-1")
    assert (record.id, record.source_id, record.kind) == ("sum-1", "sum-1", "derived")
    assert record.lineage == ("a", "b")
    assert record.roots == ("a", "b")
    assert record.embedder_id == EMB.id
    hits = _retrieve(store, "summary of leave and payroll").hits
    (hit,) = [h for h in hits if h.id == "sum-1"]
    assert hit.source_id == "sum-1"
    assert hit.provenance.lineage == ("a", "b")
    assert hit.provenance.citation_id == "sum-1"


def test_index_derived_replaces_an_older_version(store):
    """Indexing the same id again replaces it (one live version). If this fails, check index_derived retire_source before add."""
    _source(store, "a", ["alpha"])
    _source(store, "b", ["beta"])
    _derived(store, "sum-1", ["a"], "first summary")
    result = _derived(store, "sum-1", ["b"], "second summary")
    assert result.deleted == 1
    record = _one(store, "sum-1")
    assert (record.text, record.lineage, record.roots) == ("second summary", ("b",), ("b",))


def test_derived_record_is_visible_only_when_every_root_is_granted(store):
    """With an authorization a derived record shows only to callers granted every root. If this fails, check the grant rule of ragport.engine and the in-memory search's access_mask (adapters/memory/snapshot.py)."""
    _source(store, "a", ["alpha text"])
    _source(store, "b", ["beta text"])
    _derived(store, "sum-1", ["a", "b"], "summary of alpha and beta")
    _grant(store, ["alice", "bob"], "a")
    _grant(store, ["alice"], "b")
    query = "summary of alpha and beta"
    assert "sum-1" in _everything_seen(store, [query])
    assert "sum-1" in _everything_seen(store, [query], authorization=ALICE)
    bob = _everything_seen(store, [query], authorization=BOB)
    assert "sum-1" not in bob and "a#0001" in bob
    assert _everything_seen(store, [query], authorization=CAROL) == set()


def test_derived_on_derived_roots_flatten(store):
    """A derived record resting on another contributes that one's roots. If this fails, check derived._roots."""
    for s in ("a", "b", "c"):
        _source(store, s, [f"{s} text"])
    _derived(store, "sum-1", ["a", "b"])
    _derived(store, "digest", ["sum-1", "c"], "digest of the summary and c")
    record = _one(store, "digest")
    assert record.lineage == ("sum-1", "c")
    assert set(record.roots) == {"a", "b", "c"}
    _grant(store, ["bob"], "a", "b")
    assert "digest" not in _everything_seen(store, ["digest of the summary"], authorization=BOB)
    _grant(store, ["bob"], "c")
    assert "digest" in _everything_seen(store, ["digest of the summary"], authorization=BOB)


def test_index_derived_rejects_self_lineage(store):
    """A record resting on itself is a ValidationError and nothing is written. If this fails, check derived._roots."""
    _source(store, "a", ["alpha"])
    with pytest.raises(ValidationError) as info:
        _derived(store, "x", ["a", "x"])
    assert info.value.field == "lineage"
    assert not store.get_by_source(SCOPE, "x")


def test_index_derived_rejects_a_two_record_cycle(store):
    """Re-indexing a record on its own dependent is refused. If this fails, check the cycle test in derived._roots."""
    _source(store, "src", ["source"])
    _derived(store, "a", ["src"])
    _derived(store, "b", ["a"])
    with pytest.raises(ValidationError):
        _derived(store, "a", ["b"])
    assert _one(store, "a").lineage == ("src",)


def test_index_derived_rejects_a_longer_cycle(store):
    """c <- b <- a, then c on a would close a three-record cycle: refused. If this fails, check derived._roots (it only looks one level down)."""
    _source(store, "src", ["source"])
    _derived(store, "c", ["src"])
    _derived(store, "b", ["c"])
    _derived(store, "a", ["b"])
    with pytest.raises(ValidationError):
        _derived(store, "c", ["a"], "c would now rest on a")
    assert _one(store, "c").lineage == ("src",)


@pytest.mark.parametrize("lineage", [[], (), "a"], ids=["empty-list", "empty-tuple", "a-string"])
def test_index_derived_rejects_empty_or_non_sequence_lineage(store, lineage):
    """Empty lineage (or a bare string) is a ValidationError. If this fails, check index_derived's lineage check."""
    _source(store, "a", ["alpha"])
    with pytest.raises(ValidationError) as info:
        _derived(store, "x", lineage)
    assert info.value.field == "lineage"
    assert not store.get_by_source(SCOPE, "x")


def test_index_derived_rejects_lineage_deeper_than_8(store):
    """Eight derived levels are fine; a ninth is a ValidationError (limit lineage_depth). If this fails, check derived._roots (limits.lineage_depth is unused)."""
    _source(store, "src", ["source"])
    previous = "src"
    for level in range(1, 9):
        _derived(store, f"d{level}", [previous])
        previous = f"d{level}"
    with pytest.raises(ValidationError) as info:
        _derived(store, "d9", ["d8"])
    assert info.value.limit == "lineage_depth"
    assert not store.get_by_source(SCOPE, "d9")


# -- propagation: privilege ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, Authorization("admin", "tenant-2"), Authorization("mallory", "tenant-1")],
    ids=["none", "other-tenant", "no-grant"],
)
def test_propagate_needs_a_privileged_authorization(store, authorization):
    """No authorization, another tenant or no grant: AccessDeniedError, nothing tombstoned. If this fails, check propagation.require_privilege."""
    _source(store, "doc", [DOC_TEXT])
    _derived(store, "sum", ["doc"])
    _grant(store, ["admin"], "doc")
    log: list[tuple[Any, ...]] = []
    propagator = _propagator(store, RecordingHandler("h", log), authorization=authorization)
    with pytest.raises(AccessDeniedError):
        propagator.propagate("doc")
    assert _tombstones(store) == []
    assert store.list_invalidated_ids(SCOPE) == frozenset()
    assert log == []
    assert {"doc#0001", "sum"} <= _everything_seen(store, [DOC_TEXT, "sum derived text"])


def test_as_owner_forgets_without_an_authorization_or_a_grant(store):
    """The host acting for the owner (the CLI without --principal): no grant is needed, and
    the source and what rests on it are tombstoned as with a privileged authorization."""
    _source(store, "doc", [DOC_TEXT])
    _derived(store, "sum", ["doc"])
    result = _propagator(store, authorization=None, as_owner=True).propagate("doc")
    assert set(result.ids) == {"doc", "sum"}
    assert sorted(_tombstones(store)) == [("doc", "forgotten"), ("sum", "forgotten")]


@pytest.mark.parametrize("as_owner", ["yes", 1])
def test_as_owner_is_a_bool_and_excludes_an_authorization(store, as_owner):
    with pytest.raises(ValidationError) as caught:
        _propagator(store, authorization=None, as_owner=as_owner)
    assert caught.value.field == "as_owner"
    with pytest.raises(ValidationError) as caught:
        _propagator(store, as_owner=True)  # ADMIN as well
    assert caught.value.field == "as_owner"


def test_propagate_rejects_a_bad_source_id(store):
    """An invalid source id is a ValidationError before anything. If this fails, check DeletionPropagator.propagate."""
    with pytest.raises(ValidationError):
        _propagator(store).propagate("")
    assert _tombstones(store) == []


# -- propagation: closure and limits -------------------------------------------------------------


def _closure_fixture(store: Any) -> None:
    """a, b sources; d1 on a, d2 on d1, d3 on d2 + b (diamond via b), d4 on b only."""
    _source(store, "a", ["alpha text"])
    _source(store, "b", ["beta text"])
    _derived(store, "d1", ["a"])
    _derived(store, "d2", ["d1"])
    _derived(store, "d3", ["d2", "b"])
    _derived(store, "d4", ["b"])
    _derived(store, "d5", ["a", "d1"])  # diamond: reaches d1 twice
    _grant(store, ["admin", "alice"], "a", "b")


def test_propagate_tombstones_the_transitive_closure(store):
    """The closure is the source and every derived record resting on it, transitively. If this fails, check propagation._closure."""
    _closure_fixture(store)
    result = _propagator(store).propagate("a")
    assert result.source_id == "a"
    assert result.ids[0] == "a"
    assert set(result.ids) == {"a", "d1", "d2", "d3", "d5"}
    assert len(result.ids) == len(set(result.ids)) == result.tombstoned == 5
    assert result.batched == 1
    assert result.layers == {}
    assert _tombstones(store) == [(i, "forgotten") for i in sorted(result.ids)]
    assert store.list_invalidated_ids(SCOPE) == frozenset(result.ids)
    # Derived records stay (withheld), outside records are untouched.
    assert [r.id for r in store.get_by_source(SCOPE, "d3")] == ["d3"]
    assert _one(store, "d4").lineage == ("b",)
    assert [r.id for r in store.get_by_source(SCOPE, "b")] == ["b#0001"]


def test_propagate_rejects_more_edges_than_the_limit(store):
    """11 edges with Limits(propagation_edges=10): ValidationError naming the limit, nothing tombstoned. If this fails, check propagation._closure."""
    _source(store, "a", ["alpha"])
    _grant(store, ["admin"], "a")
    _write_derived(store, [(f"d{n:02d}", ["a"], ["a"]) for n in range(11)])
    log: list[tuple[Any, ...]] = []
    propagator = _propagator(store, RecordingHandler("h", log), limits=Limits(propagation_edges=10))
    with pytest.raises(ValidationError) as info:
        propagator.propagate("a")
    assert type(info.value) is ValidationError
    assert (info.value.field, info.value.limit) == ("source_id", "propagation_edges")
    assert _tombstones(store) == []
    assert log == []


def test_propagate_accepts_exactly_the_edge_limit(store):
    """10 edges with Limits(propagation_edges=10) pass. If this fails, check the > comparison in propagation._closure."""
    _source(store, "a", ["alpha"])
    _grant(store, ["admin"], "a")
    _write_derived(store, [(f"d{n:02d}", ["a"], ["a"]) for n in range(10)])
    result = _propagator(store, limits=Limits(propagation_edges=10)).propagate("a")
    assert result.tombstoned == 11


@pytest.mark.parametrize(("derived", "ok"), [(4096, True), (4097, False)], ids=["4096", "4097"])
def test_propagate_at_the_real_edge_ceiling(store, derived, ok):
    """4,096 edges pass and 4,097 are refused with the default limits, quickly. If this fails, check propagation._closure and DEFAULT_LIMITS."""
    _source(store, "a", ["alpha"])
    _grant(store, ["admin"], "a")
    _write_derived(store, [(f"d{n:05d}", ["a"], ["a"]) for n in range(derived)])
    started = time.perf_counter()
    if ok:
        result = _propagator(store).propagate("a")
        assert result.tombstoned == derived + 1
        assert result.batched == 5  # 4,097 ids in batches of 1,024
        assert len(_tombstones(store)) == derived + 1
    else:
        with pytest.raises(ValidationError) as info:
            _propagator(store).propagate("a")
        assert info.value.limit == "propagation_edges"
        assert _tombstones(store) == []
    assert time.perf_counter() - started < 10


def test_propagate_rejects_lineage_deeper_than_8(store):
    """A chain nine derived records deep is refused whole (limit lineage_depth). If this fails, check the depth count in propagation._closure."""
    _source(store, "a", ["alpha"])
    _grant(store, ["admin"], "a")
    chain = [(f"d{n}", ["a" if n == 1 else f"d{n - 1}"], ["a"]) for n in range(1, 10)]
    _write_derived(store, chain)
    with pytest.raises(ValidationError) as info:
        _propagator(store).propagate("a")
    assert info.value.limit == "lineage_depth"
    assert _tombstones(store) == []


def test_propagate_accepts_lineage_exactly_8_deep(store):
    """A chain of eight derived records is tombstoned whole. If this fails, check the depth count in propagation._closure."""
    _source(store, "a", ["alpha"])
    _grant(store, ["admin"], "a")
    chain = [(f"d{n}", ["a" if n == 1 else f"d{n - 1}"], ["a"]) for n in range(1, 9)]
    _write_derived(store, chain)
    result = _propagator(store).propagate("a")
    assert set(result.ids) == {"a", *(f"d{n}" for n in range(1, 9))}


def test_propagate_follows_a_cycle_written_behind_its_back(store):
    """Even a cycle written directly into the store ends with a finite closure. If this fails, check the visited set in propagation._closure."""
    _source(store, "a", ["alpha"])
    _grant(store, ["admin"], "a")
    _write_derived(store, [("x", ["a", "z"], ["a"]), ("y", ["x"], ["a"]), ("z", ["y"], ["a"])])
    result = _propagator(store).propagate("a")
    assert set(result.ids) == {"a", "x", "y", "z"}


# -- propagation: handlers -----------------------------------------------------------------------


def test_handlers_run_in_registration_order_after_commit(store):
    """Handlers run in order, after the tombstones are committed, and are counted under their kind. If this fails, check DeletionPropagator.propagate."""
    _closure_fixture(store)
    log: list[tuple[Any, ...]] = []
    first = RecordingHandler("first", log, store=store, count=2)
    second = RecordingHandler("second", log, store=store, count=0)
    third = RecordingHandler("third", log, store=store, count=5)
    propagator = _propagator(store, first, second)
    propagator.register(third)
    result = propagator.propagate("a")
    assert [entry[0] for entry in log] == ["first", "second", "third"]
    for kind, what, source_id, ids, scope, seen in log:
        assert (what, source_id, ids, scope) == ("propagate", "a", result.ids, SCOPE), kind
        assert seen == frozenset(result.ids), f"{kind} ran before the tombstones committed"
    assert result.layers == {"first": 2, "second": 0, "third": 5}


def test_a_handler_kind_is_registered_once(store):
    """Two handlers of one kind, or a handler without a kind, are a ValidationError. If this fails, check DeletionPropagator.register."""
    log: list[tuple[Any, ...]] = []
    propagator = _propagator(store, RecordingHandler("h", log))
    with pytest.raises(ValidationError):
        propagator.register(RecordingHandler("h", log))
    with pytest.raises(ValidationError):
        propagator.register(RecordingHandler("", log))

    class NoKind:
        def handle(self, *args: Any) -> None: ...

    for bad in (NoKind(), object()):
        with pytest.raises(ValidationError) as info:
            propagator.register(bad)
        assert info.value.field == "handlers"


def test_a_failing_handler_does_not_stop_the_others_and_a_rerun_is_idempotent(store):
    """One handler fails: others run, PropagationError names it (no text), tombstones stay; a rerun heals. If this fails, check DeletionPropagator.propagate."""
    _closure_fixture(store)
    log: list[tuple[Any, ...]] = []
    broken = RecordingHandler("broken", log, fail=RuntimeError(f"choked on {DOC_TEXT}"))
    also_broken = RecordingHandler("also-broken", log, fail=ValueError(DOC_TEXT))
    healthy = RecordingHandler("healthy", log, count=3)
    propagator = _propagator(store, broken, healthy, also_broken)
    with pytest.raises(PropagationError) as info:
        propagator.propagate("a")
    error = info.value
    assert error.failed_kinds == ("broken", "also-broken")
    assert "Heron" not in str(error) and "Heron" not in repr(error)
    assert [entry[0] for entry in log] == ["broken", "healthy", "also-broken"]
    closure = {"a", "d1", "d2", "d3", "d5"}
    assert store.list_invalidated_ids(SCOPE) == frozenset(closure)
    assert not _everything_seen(store, ["alpha text", "d1 derived text"]) & (closure | {"a#0001"})
    written = _tombstones(store)

    broken.fail = also_broken.fail = None
    result = propagator.propagate("a")
    assert set(result.ids) == closure and result.tombstoned == len(closure)
    assert _tombstones(store) == written, "a rerun writes no duplicate tombstones"
    assert [entry[0] for entry in log[3:]] == ["broken", "healthy", "also-broken"]
    assert result.layers == {"broken": 7, "healthy": 3, "also-broken": 7}


def test_propagate_twice_reports_the_same_set(store):
    """A second propagate reports the same ids and writes nothing new. If this fails, check tombstones.add and _closure."""
    _closure_fixture(store)
    propagator = _propagator(store)
    first = propagator.propagate("a")
    before = _tombstones(store)
    second = propagator.propagate("a")
    assert (second.ids, second.tombstoned) == (first.ids, first.tombstoned)
    assert _tombstones(store) == before


def test_rag_handler_removes_chunk_rows_and_status(store):
    """The rag layer purges every generation of the source's rows and its status; derived records stay. If this fails, check RagDeletionHandler.on_propagate."""
    status = InMemoryStatusStore()
    _source(store, "doc", ["v1 one", "v1 two"], status_store=status)
    _source(store, "doc", [DOC_TEXT, "v2 two", "v2 three"], status_store=status)
    _source(store, "keep", ["kept text"], status_store=status)
    _derived(store, "sum", ["doc"])
    _grant(store, ["admin"], "doc")
    assert status.get(SCOPE, "doc") is not None
    rag = RagDeletionHandler(store=store, scope=SCOPE, status_store=status)
    result = _propagator(store, rag).propagate("doc")
    assert result.layers == {"rag": 5}  # 2 retired + 3 live rows
    assert set(result.ids) == {"doc", "sum"}
    assert status.get(SCOPE, "doc") is None
    assert status.get(SCOPE, "keep") is not None
    assert not store.get_by_source(SCOPE, "doc")
    with store.unit_of_work(SCOPE) as uow:
        assert list(uow.records.list_live("doc")) == []
        uow.records.restore_above(0)  # retired versions would come back here: none are left
        assert list(uow.records.list_live("doc")) == []
    assert _one(store, "sum").lineage == ("doc",), "derived records stay, withheld"
    assert [r.id for r in store.get_by_source(SCOPE, "keep")] == ["keep#0001"]
    assert _tombstones(store) == [("doc", "forgotten"), ("sum", "forgotten")]
    # The rerun finds nothing left to remove.
    assert _propagator(store, rag).propagate("doc").layers == {"rag": 0}


# -- propagation: retrieval ----------------------------------------------------------------------


def test_retrieval_returns_nothing_of_the_closure_for_anyone(store):
    """After propagate, trusted and authorized retrieval return no record of the closure. If this fails, check the store predicate and the tombstone guard."""
    _closure_fixture(store)
    queries = ["alpha text", "beta text", *(f"d{n} derived text" for n in range(1, 6))]
    assert {"a#0001", "d1", "d2", "d3", "d5"} <= _everything_seen(store, queries)
    result = _propagator(store).propagate("a")
    withheld = set(result.ids) | {"a#0001"}
    for who in ({}, {"authorization": ADMIN}, {"authorization": ALICE}):
        seen = _everything_seen(store, queries, **who)
        assert not seen & withheld, who
        assert {"b#0001", "d4"} <= seen, who
        for query in queries:
            hits = _retrieve(store, query, **who).hits
            assert not {h.source_id for h in hits} & withheld
            assert not any(set(h.provenance.lineage) & withheld for h in hits)


@pytest.mark.parametrize("lookup", [False, True], ids=["listed", "looked-up"])
@pytest.mark.parametrize("authorization", [None, ADMIN], ids=["trusted", "authorized"])
def test_propagation_landing_after_the_legs_read_rows_still_yields_zero_hits(
    store, authorization, lookup
):
    """Legs that return rows read before the tombstones landed still yield no hit of the closure, whether the guard lists every forgotten id or looks up the candidates' own. If this fails, check the tombstone guard in retrieval.py step 7 (_forgotten)."""
    _closure_fixture(store)
    stale = LookupStaleStore(store) if lookup else StaleStore(store)
    before = _retrieve(stale, "alpha text", lexical="bm25", authorization=authorization)
    assert {"a#0001", "d1"} <= {h.id for h in before.hits}
    _propagator(store).propagate("a")
    stale.frozen = True
    stale_ids = {item.record.id for rows in stale.stale.values() for item in rows}
    assert {"a#0001", "d1"} <= stale_ids, "the legs must really answer with pre-propagation rows"
    after = _retrieve(stale, "alpha text", lexical="bm25", authorization=authorization)
    ids = {h.id for h in after.hits}
    assert not ids & {"a#0001", "a", "d1", "d2", "d3", "d5"}
    assert "b#0001" in ids and "d4" in ids
    if lookup:
        assert "forgotten_among" in stale.calls and "list_invalidated_ids" not in stale.calls
    else:
        assert "list_invalidated_ids" in stale.calls


def test_corrected_tombstones_do_not_withhold(store):
    """A 'corrected' tombstone is listed but withholds nothing. If this fails, check list_invalidated_ids and the store predicate."""
    _source(store, "doc", [DOC_TEXT])
    _derived(store, "sum", ["doc"])
    with store.unit_of_work(SCOPE) as uow:
        uow.tombstones.add([Tombstone("doc", "corrected"), Tombstone("sum", "corrected")])
        uow.commit()
    assert store.list_invalidated_ids(SCOPE) == frozenset()
    assert {"doc#0001", "sum"} <= _everything_seen(store, [DOC_TEXT, "sum derived text"])


def test_propagation_stays_in_its_scope(store):
    """Propagating in one corpus leaves the same ids in another corpus visible. If this fails, check that every step is keyed by the propagator's scope."""
    for scope in (SCOPE, OTHER_CORPUS):
        _source(store, "doc", [DOC_TEXT], scope=scope)
        _derived(store, "sum", ["doc"], scope=scope)
    _grant(store, ["admin"], "doc")
    _propagator(store).propagate("doc")
    assert store.list_invalidated_ids(OTHER_CORPUS) == frozenset()
    assert {"doc#0001", "sum"} <= _everything_seen(
        store, [DOC_TEXT, "sum derived text"], scope=OTHER_CORPUS
    )


# -- re-pointing ---------------------------------------------------------------------------------


def _repoint(store: Any, **kwargs: Any) -> ragport.application.RepointResult:
    kwargs.setdefault("from_id", "doc")
    kwargs.setdefault("to_id", "new")
    return repoint_source(scope=kwargs.pop("scope", SCOPE), store=store, **kwargs)


def _five(store: Any, source_id: str = "doc", scope: Scope = SCOPE) -> list[str]:
    texts = [f"{source_id} chunk {i} about topic {i}" for i in range(5)]
    _source(store, source_id, texts, scope=scope)
    return texts


def _cursor(store: InMemoryStore, scope: Scope, from_id: str, to_id: str) -> str:
    """A genuine first-page cursor for (scope, from_id, to_id), from a throwaway store."""
    scratch = InMemoryStore()
    _five(scratch, from_id, scope)
    page = repoint_source(scope=scope, store=scratch, from_id=from_id, to_id=to_id, page_size=1)
    assert page.cursor is not None
    return page.cursor


@pytest.mark.parametrize(
    "bad",
    [
        {"from_id": ""},
        {"to_id": "bad\x00id"},
        {"from_id": "doc", "to_id": "doc"},
        {"page_size": 0},
        {"page_size": True},
        {"page_size": "10"},
        {"max_records": -1},
        {"max_records": False},
        {"cursor": "!!!not a cursor"},
        {"cursor": "WyJyZXBvaW50Il0="},  # base64 of ["repoint"]
        {"cursor": "other-scope"},
        {"cursor": "other-pair"},
        {"cursor": "reversed-pair"},
    ],
    ids=lambda bad: next(iter(bad.values())) if "cursor" in bad else str(bad),
)
def test_repoint_rejects_bad_arguments_before_any_store_read(store, bad):
    """Bad ids, sizes and foreign or malformed cursors: ValidationError and zero store calls. If this fails, check the order of checks in repoint_source."""
    _five(store)
    cursors = {
        "other-scope": _cursor(store, OTHER_CORPUS, "doc", "new"),
        "other-pair": _cursor(store, SCOPE, "doc", "elsewhere"),
        "reversed-pair": _cursor(store, SCOPE, "new", "doc"),
    }
    if bad.get("cursor") in cursors:
        bad = {"cursor": cursors[bad["cursor"]]}
    counting = CallLog(store)
    with pytest.raises(ValidationError):
        _repoint(counting, authorization=Authorization("mallory", "tenant-2"), **bad)
    assert counting.calls == []
    assert len(store.get_by_source(SCOPE, "doc")) == 5


@pytest.mark.parametrize(
    ("grants", "authorization"),
    [
        (("doc",), ALICE),
        (("new",), ALICE),
        ((), ALICE),
        (("doc", "new"), Authorization("alice", "tenant-2")),
    ],
    ids=["from-only", "to-only", "neither", "other-tenant"],
)
def test_repoint_needs_grants_on_both_ids_before_the_first_read(store, grants, authorization):
    """On an ACL store the authorization must hold grants for both ids; refused before any read. If this fails, check repoint_source's privilege step."""
    _five(store)
    for source in grants:
        _grant(store, ["alice"], source)
    counting = CallLog(store)
    with pytest.raises(AccessDeniedError):
        _repoint(counting, authorization=authorization)
    assert "unit_of_work" not in counting.calls
    assert len(store.get_by_source(SCOPE, "doc")) == 5


def test_repoint_never_creates_copies_or_removes_grants(store):
    """A move leaves both sources' grants exactly as they were. If this fails, check that repoint_source never writes grants."""
    _five(store)
    _grant(store, ["alice"], "doc")
    store.set_source_access(SCOPE, [Grant("new", principal_ids=("alice",), group_ids=("ops",))])
    with store.unit_of_work(SCOPE) as uow:
        before = dict(uow.grants.get(["doc", "new"]))
    result = _repoint(store, authorization=ALICE)
    assert result.moved_chunks == 5
    with store.unit_of_work(SCOPE) as uow:
        assert dict(uow.grants.get(["doc", "new"])) == before
    # A trusted move where the destination has no grant at all: still none afterwards.
    _five(store, "loose")
    _repoint(store, from_id="loose", to_id="loose-2")
    with store.unit_of_work(SCOPE) as uow:
        assert dict(uow.grants.get(["loose", "loose-2"])) == {}


def test_repoint_pages_with_cursors_until_none(store):
    """page_size 2 over 5 rows: pages of 2, 2, 1; the last cursor is None. If this fails, check repoint_source paging."""
    _five(store)
    moved, cursors = [], []
    cursor = None
    while True:
        page = _repoint(store, page_size=2, cursor=cursor)
        moved.append(page.moved_chunks)
        cursors.append(page.cursor)
        assert page.batched == 1
        cursor = page.cursor
        if cursor is None:
            break
    assert moved == [2, 2, 1]
    assert all(isinstance(c, str) for c in cursors[:-1])
    assert not store.get_by_source(SCOPE, "doc")
    assert [r.id for r in store.get_by_source(SCOPE, "new")] == [
        f"new#{n:04d}" for n in range(1, 6)
    ]


def test_repoint_exact_page_multiple_ends_with_none(store):
    """4 rows with page_size 2 end after the second page (no empty third page needed). If this fails, check the look-ahead row in repoint_source."""
    _source(store, "doc", [f"row {i}" for i in range(4)])
    first = _repoint(store, page_size=2)
    second = _repoint(store, page_size=2, cursor=first.cursor)
    assert (first.moved_chunks, second.moved_chunks, second.cursor) == (2, 2, None)


def test_stale_cursor_is_a_noop(store):
    """Reusing a cursor whose pages already moved moves nothing and calls no handler. If this fails, check repoint_source's empty-page return."""
    _five(store)
    first = _repoint(store, page_size=2)
    rest = _repoint(store, page_size=10, cursor=first.cursor)
    assert rest.moved_chunks == 3
    log: list[tuple[Any, ...]] = []
    generation = store.current_generation(SCOPE)
    again = _repoint(store, page_size=2, cursor=first.cursor, handlers=[RecordingHandler("h", log)])
    assert (again.moved_chunks, again.rewritten_edges, again.cursor) == (0, 0, None)
    assert again.layers == {} and again.batched == 0
    assert log == []
    assert store.current_generation(SCOPE) == generation


def test_destination_collision_is_refused_before_that_page_writes(store):
    """A destination id live for another source stops that page whole; earlier pages stay moved. If this fails, check rekey's collision check."""
    _source(store, "doc", [f"doc row {i}" for i in range(4)])
    _source(store, "new", ["squatter"])  # new#0001 stays where it is
    log: list[tuple[Any, ...]] = []
    with pytest.raises(ValidationError):
        _repoint(store, page_size=2, handlers=[RecordingHandler("h", log)])
    assert [r.id for r in store.get_by_source(SCOPE, "doc")] == [
        f"doc#{n:04d}" for n in range(1, 5)
    ]
    assert [(r.id, r.text) for r in store.get_by_source(SCOPE, "new")] == [("new#0001", "squatter")]
    assert log == []


def test_collision_on_a_later_page_keeps_the_earlier_pages(store):
    """Page 1 moves, page 2 collides and writes nothing. If this fails, check that each page is its own transaction."""
    _source(store, "doc", [f"doc row {i}" for i in range(4)])
    replace_source(
        source_id="new",
        chunks=[Chunk.of("new", 3, "squatter four")],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    log: list[tuple[Any, ...]] = []
    first = _repoint(store, page_size=2, handlers=[RecordingHandler("h", log, count=1)])
    assert first.moved_chunks == 2
    with pytest.raises(ValidationError):
        _repoint(store, page_size=2, cursor=first.cursor, handlers=[RecordingHandler("h", log)])
    assert [r.id for r in store.get_by_source(SCOPE, "doc")] == ["doc#0003", "doc#0004"]
    assert {(r.id, r.text) for r in store.get_by_source(SCOPE, "new")} == {
        ("new#0001", "doc row 0"),
        ("new#0002", "doc row 1"),
        ("new#0004", "squatter four"),
    }
    assert len(log) == 1


def test_max_records_is_all_or_nothing(store):
    """max_records below the source size refuses before any write; at the size it moves all in one page. If this fails, check repoint_source's max_records check."""
    _five(store)
    log: list[tuple[Any, ...]] = []
    with pytest.raises(ValidationError) as info:
        _repoint(store, max_records=4, handlers=[RecordingHandler("h", log)])
    assert info.value.field == "max_records"
    assert len(store.get_by_source(SCOPE, "doc")) == 5
    assert not store.get_by_source(SCOPE, "new")
    assert log == []
    result = _repoint(store, max_records=5, handlers=[RecordingHandler("h", log)])
    assert (result.moved_chunks, result.cursor, len(log)) == (5, None, 1)


def test_handlers_are_called_once_per_page(store):
    """Each moved page calls every handler once with (from_id, to_id, scope). If this fails, check repoint_source's handler loop."""
    _five(store)
    log: list[tuple[Any, ...]] = []
    handlers = [RecordingHandler("one", log, count=1), RecordingHandler("two", log, count=4)]
    pages = []
    cursor = None
    while True:
        page = _repoint(store, page_size=2, cursor=cursor, handlers=handlers)
        pages.append(page)
        cursor = page.cursor
        if cursor is None:
            break
    assert len(pages) == 3
    assert log == [(k, "repoint", "doc", "new", SCOPE) for _ in range(3) for k in ("one", "two")]
    assert all(p.layers == {"one": 1, "two": 4} for p in pages)


def test_repoint_copies_rows_verbatim_and_never_re_embeds(store):
    """Row ids doc#0001 -> new#0001; text, vector, offsets, index, metadata, hash and generation copied. If this fails, check rekey in the in-memory store."""
    chunks = [
        Chunk.of("doc", i, f"chunk {i} of the handbook", start=100 * i, metadata={"n": i})
        for i in range(3)
    ]
    replace_source(
        source_id="doc",
        chunks=chunks,
        embedder=EMB,
        store=store,
        scope=SCOPE,
        content_hash="a" * 64,
    )
    before = {r.id: r for r in store.get_by_source(SCOPE, "doc")}
    generation = store.current_generation(SCOPE)
    result = _repoint(store)
    assert (result.moved_chunks, result.cursor) == (3, None)
    assert store.current_generation(SCOPE) == generation, "a move is not a new generation"
    after = {r.id: r for r in store.get_by_source(SCOPE, "new")}
    assert sorted(after) == ["new#0001", "new#0002", "new#0003"]
    for old_id, old in before.items():
        new = after["new" + old_id[len("doc") :]]
        assert new.source_id == "new"
        assert (new.text, new.start, new.end, new.chunk_index) == (
            old.text,
            old.start,
            old.end,
            old.chunk_index,
        )
        assert (new.metadata, new.content_hash, new.generation) == (
            old.metadata,
            old.content_hash,
            old.generation,
        )
        assert (new.embedder_id, new.dimensions) == (old.embedder_id, old.dimensions)
        (top,) = store.query(SCOPE, EMB.embed([old.text])[0], limit=1)
        assert top.record.id == new.id
        assert top.score == pytest.approx(1.0, abs=1e-5)


def test_repoint_rewrites_lineage_and_citations_follow(store):
    """Derived lineage and roots name the new id; hits and citations carry the new ids. If this fails, check rewrite_lineage and answer.build_hits."""
    _source(store, "doc", [DOC_TEXT, "second doc chunk"])
    _source(store, "other", ["other text"])
    _derived(store, "sum", ["doc", "other"], "summary of doc and other")
    _derived(store, "digest", ["sum"], "digest of the summary")
    result = _repoint(store)
    assert result.rewritten_edges == 1
    assert (_one(store, "sum").lineage, _one(store, "sum").roots) == (
        ("new", "other"),
        ("new", "other"),
    )
    assert _one(store, "digest").lineage == ("sum",)
    assert set(_one(store, "digest").roots) == {"new", "other"}
    hits = _retrieve(store, DOC_TEXT).hits
    moved = [h for h in hits if h.text == DOC_TEXT]
    assert [(h.id, h.source_id, h.provenance.citation_id) for h in moved] == [
        ("new#0001", "new", "new#0001")
    ]
    citations = _retrieve(store, DOC_TEXT).citations
    assert not [c for c in citations if c.source_id == "doc" or c.id.startswith("doc#")]
    _grant(store, ["bob"], "new", "other")
    assert "sum" in _everything_seen(store, ["summary of doc and other"], authorization=BOB)


def test_propagate_after_a_repoint_follows_the_new_id(store):
    """Forgetting the new id withholds the moved rows and the derived records that followed. If this fails, check rewrite_lineage and _closure."""
    _source(store, "doc", [DOC_TEXT])
    _derived(store, "sum", ["doc"])
    _repoint(store)
    _grant(store, ["admin"], "new")
    result = _propagator(store).propagate("new")
    assert set(result.ids) == {"new", "sum"}
    assert not _everything_seen(store, [DOC_TEXT, "sum derived text"]) & {"new#0001", "sum"}


# -- batched renames -----------------------------------------------------------------------------


def _three(store: Any) -> None:
    for source in ("a", "b", "c"):
        _source(store, source, [f"{source} first row", f"{source} second row"])


@pytest.mark.parametrize(
    "renames",
    [
        [("a", "x"), ("a", "y")],
        [("a", "x"), ("b", "x")],
        [("a", "b"), ("b", "c")],
        [("b", "c"), ("a", "b")],
        [("a", "b"), ("b", "a")],
        [("a", "x"), ("c", "c")],
        [("a", "x"), ("", "y")],
        [("a", "x"), ("b", "")],
        [("a", "x"), "b->y"],
        "a->x",
    ],
    ids=[
        "duplicate-from",
        "two-to-one",
        "chain",
        "chain-reversed",
        "swap",
        "from-equals-to",
        "empty-from",
        "empty-to",
        "not-a-rename",
        "a-string",
    ],
)
def test_rename_batch_is_validated_as_a_set_before_any_read(store, renames):
    """Duplicates, chains, overlaps, from == to, empty ids: ValidationError, zero store calls. If this fails, check repoint._validate_batch."""
    _three(store)
    counting = CallLog(store)
    with pytest.raises(ValidationError):
        batch = (
            renames
            if isinstance(renames, str)
            else [Rename(*r) if isinstance(r, tuple) else r for r in renames]
        )
        apply_source_renames(scope=SCOPE, store=counting, renames=batch)
    assert counting.calls == []
    assert not store.get_by_source(SCOPE, "x")


def test_empty_rename_batch_is_a_noop(store):
    """An empty list returns empty results and touches nothing. If this fails, check apply_source_renames."""
    counting = CallLog(store)
    events: list[RenameEvent] = []
    result = apply_source_renames(scope=SCOPE, store=counting, renames=[], on_renamed=events.append)
    assert (result.results, result.failures) == ((), ())
    assert counting.calls == [] and events == []


def test_each_rename_runs_every_page_to_the_end(store):
    """A rename with page_size 2 over 5 rows moves all of them (3 pages). If this fails, check the page loop in apply_source_renames."""
    _five(store)
    log: list[tuple[Any, ...]] = []
    result = apply_source_renames(
        scope=SCOPE,
        store=store,
        renames=[Rename("doc", "new")],
        page_size=2,
        handlers=[RecordingHandler("h", log, count=1)],
    )
    (moved,) = result.results
    assert (moved.moved_chunks, moved.batched, moved.cursor) == (5, 3, None)
    assert moved.layers == {"h": 3}
    assert len(store.get_by_source(SCOPE, "new")) == 5 and not store.get_by_source(SCOPE, "doc")


def _collide_b(store: Any) -> None:
    _source(store, "b2", ["squatter of b2"])  # b2#0001 is live: b -> b2 collides


def test_fail_fast_raises_and_later_renames_never_start(store):
    """The second rename fails: it raises, the first stays moved, the third never starts. If this fails, check apply_source_renames's fail-fast path."""
    _three(store)
    _collide_b(store)
    events: list[RenameEvent] = []
    counting = CallLog(store)
    with pytest.raises(ValidationError):
        apply_source_renames(
            scope=SCOPE,
            store=counting,
            renames=[Rename("a", "a2"), Rename("b", "b2"), Rename("c", "c2")],
            on_renamed=events.append,
        )
    assert [(e.from_id, e.outcome) for e in events] == [("a", "moved"), ("b", "failed")]
    assert len(store.get_by_source(SCOPE, "a2")) == 2
    assert len(store.get_by_source(SCOPE, "b")) == 2
    assert len(store.get_by_source(SCOPE, "c")) == 2 and not store.get_by_source(SCOPE, "c2")


def test_continue_on_error_collects_failures(store):
    """With continue_on_error the failing rename is collected and the others complete. If this fails, check apply_source_renames."""
    _three(store)
    _collide_b(store)
    events: list[RenameEvent] = []
    result = apply_source_renames(
        scope=SCOPE,
        store=store,
        renames=[Rename("a", "a2"), Rename("b", "b2"), Rename("c", "c2")],
        continue_on_error=True,
        on_renamed=events.append,
    )
    assert [(r.from_id, r.to_id, r.moved_chunks) for r in result.results] == [
        ("a", "a2", 2),
        ("c", "c2", 2),
    ]
    (failure,) = result.failures
    assert (failure.from_id, failure.to_id) == ("b", "b2")
    assert failure.error.startswith("ValidationError")
    assert [(e.from_id, e.outcome) for e in events] == [
        ("a", "moved"),
        ("b", "failed"),
        ("c", "moved"),
    ]
    assert len(store.get_by_source(SCOPE, "b")) == 2


def test_on_renamed_gets_ids_counts_and_a_redacted_capped_error(store):
    """Once per settled rename: ids and counts; errors redacted, foreign ones by type only, at most 256 chars. If this fails, check apply_source_renames and Redaction.error."""
    _three(store)
    _derived(store, "sum", ["a"])
    long_message = f"layer refused Project Heron: {'x' * 600}"
    noisy = RecordingHandler("noisy", [], fail=ValidationError(long_message))
    events: list[RenameEvent] = []
    result = apply_source_renames(
        scope=SCOPE,
        store=store,
        renames=[Rename("a", "a2")],
        on_renamed=events.append,
    )
    assert len(result.results) == 1
    (moved,) = events
    assert (moved.from_id, moved.to_id, moved.outcome) == ("a", "a2", "moved")
    assert (moved.moved_chunks, moved.rewritten_edges, moved.error) == (2, 1, None)

    events.clear()
    foreign = RecordingHandler("foreign", [], fail=RuntimeError(f"text: {DOC_TEXT}"))
    result = apply_source_renames(
        scope=SCOPE,
        store=store,
        renames=[Rename("b", "b2"), Rename("c", "c2")],
        handlers=[noisy, foreign],
        continue_on_error=True,
        on_renamed=events.append,
        runtime=Runtime(redactor=UpperRedactor()),
    )
    assert [(e.from_id, e.outcome) for e in events] == [("b", "failed"), ("c", "failed")]
    for event in events:
        assert event.error is not None
        assert len(event.error) <= 256
        assert "Heron" not in event.error
        assert DOC_TEXT not in event.error
    assert events[0].error.startswith("ValidationError: layer refused Project [HOST-REDACTED]")
    assert [f.error for f in result.failures] == [e.error for e in events]


def test_on_renamed_reports_a_foreign_error_by_type_only(store):
    """A foreign exception reaches on_renamed as its type name only. If this fails, check Redaction.error."""
    _three(store)
    events: list[RenameEvent] = []
    foreign = RecordingHandler("foreign", [], fail=RuntimeError(f"text: {DOC_TEXT}"))
    apply_source_renames(
        scope=SCOPE,
        store=store,
        renames=[Rename("a", "a2")],
        handlers=[foreign],
        continue_on_error=True,
        on_renamed=events.append,
    )
    assert [e.error for e in events] == ["RuntimeError"]
