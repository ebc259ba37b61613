"""The shipped store contracts fail against deliberately broken adapters.

Each broken store below reintroduces one defect the contracts exist to catch; running the
relevant contract test against it must fail. A contract that passed here would be a check
that cannot fail.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import pytest
from doubles import Delegating

import ragport.adapters.memory.backend as memory_backend
import ragport.adapters.memory.lexical as memory_lexical
import ragport.adapters.memory.snapshot as memory_snapshot
import ragport.adapters.memory.store as memory_store
import ragport.adapters.memory.unit_of_work as memory_uow
import ragport.adapters.postgres.history as pg_history
import ragport.application.retrieval as retrieval
import ragport.engine.generations as engine_generations
import ragport.engine.store as engine_store
import ragport.engine.unit_of_work as engine_uow
from ragport.adapters.lexical import Bm25Index
from ragport.adapters.memory import InMemoryStore
from ragport.adapters.postgres import PostgresStore
from ragport.contract_tests import StorageBackendContract
from ragport.contract_tests._support import publish_sources
from ragport.contract_tests.chunk_store import (
    ChunkStoreAliasingContract,
    ChunkStoreBorrowedQueryContract,
    ChunkStoreCapabilityContract,
    ChunkStoreForgettingContract,
    ChunkStoreGenerationContract,
    ChunkStoreGenerationHistoryContract,
    ChunkStoreGrantContract,
    ChunkStoreGuardedQueryContract,
    ChunkStoreHybridSnapshotContract,
    ChunkStoreLexicalContract,
    ChunkStoreQueryContract,
    ChunkStoreRepointUniquenessContract,
    ChunkStoreTombstoneContract,
    ChunkStoreUnitOfWorkContract,
)
from ragport.contract_tests.chunk_store._helpers import OTHER_CORPUS
from ragport.domain.lexical import tokenize_lexical
from ragport.domain.model import Record
from ragport.engine import BackendStore
from ragport.ports.history import GenerationChange
from ragport.ports.store import HybridAnswer, ScoredRecord


def _two_snapshots(store: Any, scope: Any, vector: Any, text: str, **kw: Any) -> HybridAnswer:
    """The defect of issue 10 item 2: each leg reads its own snapshot."""
    guard = (kw.pop("embedder_id"), kw.pop("dimensions"))
    mode = kw.pop("mode")
    vector_leg = store.query(scope, vector, **kw)
    lexical_leg = store.lexical_query(scope, text, mode=mode, **kw)
    return HybridAnswer(store.foreign_embedders(scope, *guard), vector_leg, lexical_leg)


class TwoSnapshotMemoryStore(InMemoryStore):
    def hybrid_query(self, scope: Any, vector: Any, text: str, **kw: Any) -> HybridAnswer:
        return _two_snapshots(self, scope, vector, text, **kw)


class TwoSnapshotPostgresStore(PostgresStore):
    def hybrid_query(self, scope: Any, vector: Any, text: str, **kw: Any) -> HybridAnswer:
        return _two_snapshots(self, scope, vector, text, **kw)


class ShortRace(ChunkStoreHybridSnapshotContract):
    hybrid_snapshot_seconds = 2.0


@pytest.fixture(params=["memory", "postgres"])
def two_snapshot_store(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        yield TwoSnapshotMemoryStore()
        return
    engine, schema = request.getfixturevalue("pg_engine"), request.getfixturevalue("pg_schema")
    yield TwoSnapshotPostgresStore(engine, schema=schema, create=True)


def test_hybrid_snapshot_contract_catches_legs_that_read_two_snapshots(two_snapshot_store):
    """Legs read in two snapshots mix versions while a writer replaces the source: the
    contract must see it. If this fails, the race in ChunkStoreHybridSnapshotContract no
    longer exercises the window between the two legs."""
    with pytest.raises(AssertionError, match="mixed two versions"):
        ShortRace().test_hybrid_answers_never_mix_two_versions_of_a_source(two_snapshot_store)


def _ignore_roots(record: Record, forgotten: Any) -> bool:
    return bool(forgotten) and (
        record.id in forgotten
        or record.source_id in forgotten
        or not forgotten.isdisjoint(record.lineage)
    )


def test_forgetting_contract_catches_a_predicate_that_ignores_roots(monkeypatch):
    """With the roots test removed from the predicate and the retrieval guard, the
    forgetting contract fails. If this fails, the contract no longer builds a record whose
    only forgotten id is a root two levels up."""
    monkeypatch.setattr(memory_snapshot, "is_forgotten", _ignore_roots)
    monkeypatch.setattr(retrieval, "is_forgotten", _ignore_roots)
    contract = ChunkStoreForgettingContract()
    with pytest.raises(AssertionError, match="served"):
        contract.test_the_predicate_withholds_a_derived_record_by_its_roots(InMemoryStore())


def test_forgetting_contract_catches_a_closure_that_skips_retired_versions(monkeypatch):
    """find_dependents that ignores retired versions lets a rollback bring back a dependent
    of a forgotten derived record. If this fails, the contract no longer deletes a dependent
    before forgetting and rolls back afterwards."""
    original = engine_uow._Records.find_dependents

    def live_only(self: Any, ids: Sequence[str]) -> list[Record]:
        return [r for r in original(self, ids) if r.retired_generation is None]

    monkeypatch.setattr(engine_uow._Records, "find_dependents", live_only)
    contract = ChunkStoreForgettingContract()
    with pytest.raises(AssertionError):
        contract.test_forgetting_a_derived_record_withholds_its_dependents_after_rollback(
            InMemoryStore()
        )


def test_uniqueness_contract_catches_a_rekey_that_checks_live_rows_only(monkeypatch):
    """A rekey that only looks at live destination rows lets a rollback show two rows with
    one id: the move must have been refused. If this fails, the contract no longer deletes
    the destination before the move."""

    def live_only(moved_generation: int, existing: Record, floor: int) -> bool:
        return existing.retired_generation is None or existing.generation == moved_generation

    monkeypatch.setattr(engine_uow, "rekey_collides", live_only)
    contract = ChunkStoreRepointUniquenessContract()
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        contract.test_repoint_onto_a_deleted_id_that_rollback_can_restore_is_refused(
            InMemoryStore()
        )


class LooksUpNothing(InMemoryStore):
    """Declares the forgotten lookup but finds nothing (a lookup that ignores its ids)."""

    def forgotten_among(self, scope: Any, ids: Any) -> frozenset[str]:
        return frozenset()


def test_tombstone_contract_catches_a_forgotten_lookup_that_finds_nothing():
    """A forgotten_among that misses tombstones fails the tombstone contract. If this fails,
    the contract no longer compares forgotten_among with list_invalidated_ids."""
    with pytest.raises(AssertionError):
        ChunkStoreTombstoneContract().test_forgotten_among_answers_what_the_list_answers(
            LooksUpNothing()
        )


class DeclaresPreparation(InMemoryStore):
    """Declares ``preparation`` without defining ``prepare``."""

    prepare = None  # the engine's BackendStore defines it: this class does not

    @property
    def capabilities(self) -> Any:
        import attrs

        return attrs.evolve(super().capabilities, preparation=True)


class DelegatingMemoryStore(Delegating):
    """Delegates every attribute to an in-memory store: declares what its class lacks."""

    def __init__(self) -> None:
        super().__init__(InMemoryStore())


@pytest.mark.parametrize(
    ("store", "missing"),
    [
        (DeclaresPreparation, "preparation needs prepare"),
        (DelegatingMemoryStore, "lexical needs lexical_query, hybrid_query"),
    ],
    ids=["preparation", "delegating-wrapper"],
)
def test_capability_contract_catches_a_declared_but_missing_capability(store, missing):
    """A store declaring an optional capability its class does not define fails the
    capability contract, with a message naming the missing methods. If this fails, check
    ports.store.missing_methods."""
    with pytest.raises(AssertionError, match=missing):
        ChunkStoreCapabilityContract().test_declared_capabilities_are_implemented(store())


def test_aliasing_contract_catches_a_store_that_keeps_and_hands_out_its_objects(monkeypatch):
    """An in-memory store that stores the caller's records and hands out its own fails both
    aliasing checks. If this fails, the contract no longer writes to what goes in or comes
    back out."""
    for module in (memory_store, engine_uow, engine_store, memory_snapshot, memory_lexical):
        monkeypatch.setattr(module, "hand_out", lambda record: record, raising=False)
        monkeypatch.setattr(module, "take_in", lambda record: record, raising=False)
    contract = ChunkStoreAliasingContract()
    with pytest.raises(AssertionError):
        contract.test_records_written_do_not_alias_the_callers_objects(InMemoryStore())
    with pytest.raises(AssertionError, match="changed the store"):
        contract.test_records_read_back_do_not_alias_the_store(InMemoryStore())


class SharesMetadataWithinAnAnswer(InMemoryStore):
    """Declares private_reads (as the in-memory store does) but hands every record of one
    query answer the first record's metadata: the store's state stays intact, yet two hits
    built on that answer would share one dict."""

    def query(self, scope: Any, vector: Any, **kw: Any) -> Sequence[ScoredRecord]:
        found = super().query(scope, vector, **kw)
        for item in found[1:]:
            object.__setattr__(item.record, "metadata", found[0].record.metadata)
        return found


def test_aliasing_contract_catches_private_reads_that_share_metadata(monkeypatch):
    """A store declaring private_reads fails the aliasing contract if one answer's records
    share a metadata container, or if its reads hand out the stored records themselves.
    If this fails, the private-reads test no longer compares the containers of an answer
    or no longer writes to what a read returned."""
    contract = ChunkStoreAliasingContract()
    store = SharesMetadataWithinAnAnswer()
    assert store.capabilities.private_reads
    contract.test_records_read_back_do_not_alias_the_store(SharesMetadataWithinAnAnswer())
    with pytest.raises(AssertionError, match="one metadata container for two records"):
        contract.test_declared_private_reads_hand_out_metadata_of_their_own(store)
    for module in (memory_store, engine_uow, engine_store, memory_snapshot, memory_lexical):
        monkeypatch.setattr(module, "hand_out", lambda record: record, raising=False)
        monkeypatch.setattr(module, "take_in", lambda record: record, raising=False)
    with pytest.raises(AssertionError, match="changed the store"):
        contract.test_declared_private_reads_hand_out_metadata_of_their_own(InMemoryStore())


class _HistoryWithout(InMemoryStore):
    """An in-memory store whose generation_history drops one part of the answer."""

    defect = ""

    def generation_history(self, scope: Any, **kw: Any) -> Sequence[GenerationChange]:
        found = super().generation_history(scope, **kw)
        if self.defect == "retired":  # only what was written, as `ragport generations` did
            return [
                attrs.evolve(c, retired=(), sources_retired=0, records_retired=0) for c in found
            ]
        if self.defect == "counts-after-cap":  # counts the capped list, so the cap is silent
            return [
                attrs.evolve(c, sources_written=len(c.written), sources_retired=len(c.retired))
                for c in found
            ]
        raise AssertionError(self.defect)


@pytest.mark.parametrize(
    ("defect", "test"),
    [
        ("retired", "test_history_lists_sources_written_and_retired_per_generation"),
        ("counts-after-cap", "test_history_limit_and_id_cap_are_exact_and_visible"),
    ],
)
def test_history_contract_catches_an_in_memory_history_missing_a_part(defect, test):
    """A history without retirements, or whose counts follow the capped lists, fails the
    contract. If this fails, the assertion of the test named no longer checks that part."""
    store = _HistoryWithout()
    store.defect = defect
    with pytest.raises(AssertionError):
        getattr(ChunkStoreGenerationHistoryContract(), test)(store)


@pytest.mark.parametrize(
    ("broken", "test"),
    [
        # below the floor: compaction purged what those generations retired
        (("greatest(floor, ", "greatest(0, "), "test_history_stops_at_the_compaction_floor"),
        # up to the counter, not the pointer: staged rows are not history yet
        (
            ("coalesce(max(pointer), 0) AS pointer", "coalesce(max(counter), 0) AS pointer"),
            "test_history_leaves_out_staged_generations",
        ),
        # forgotten ids listed
        (
            ("ANY(ARRAY[r.id, r.source_id] || r.lineage || r.roots)", "ANY(ARRAY[''])"),
            "test_history_never_lists_a_forgotten_id",
        ),
        # derived rows resting on forgotten content listed (the old id-and-source-only test)
        (
            (
                "ANY(ARRAY[r.id, r.source_id] || r.lineage || r.roots)",
                "ANY(ARRAY[r.id, r.source_id])",
            ),
            "test_history_leaves_out_what_rests_on_a_forgotten_id",
        ),
        # another corpus's rows counted
        (
            ("r.corpus_id = :c", "r.corpus_id IS NOT NULL"),
            "test_history_is_scoped_exactly_and_empty_for_an_unwritten_scope",
        ),
    ],
    ids=["ignores-floor", "reads-staged", "lists-forgotten", "ignores-roots", "ignores-corpus"],
)
def test_history_contract_catches_broken_postgres_history_sql(
    monkeypatch, pg_engine, pg_schema, broken, test
):
    """The PostgreSQL history statement with one defect fails the contract test named.

    If this fails, that contract test no longer exercises the part of the statement the
    defect breaks (or the statement's text changed: update the replacement here).
    """
    original = pg_history.generation_history_sql
    old, new = broken

    def defective(s: str) -> str:
        sql = original(s)
        assert old in sql, f"the history statement no longer contains {old!r}"
        return sql.replace(old, new)

    monkeypatch.setattr(pg_history, "generation_history_sql", defective)
    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    if broken[1] == "r.corpus_id IS NOT NULL":  # the other corpus must hold rows to leak
        publish_sources(store, OTHER_CORPUS, {"z": ["zed"]})
    with pytest.raises(AssertionError):
        getattr(ChunkStoreGenerationHistoryContract(), test)(store)


class _BorrowedIgnoresGrants(InMemoryStore):
    """Lends records, but its borrowed_query forgets the authorization (and so the grants)."""

    def borrowed_query(self, scope: Any, vector: Any, **kw: Any) -> Any:
        kw.pop("authorization", None)
        kw.pop("on_denied", None)
        return super().borrowed_query(scope, vector, **kw)


class _RewritingBackend(memory_backend.SnapshotBackend):
    """Changes the records it lent in place whenever it installs a commit."""

    def __init__(self) -> None:
        super().__init__()
        self.lent: list[Record] = []

    def _install(self, scope: Any, snap: Any) -> None:
        super()._install(scope, snap)
        for record in self.lent:
            heading = record.metadata.get("heading")
            if isinstance(heading, list) and "rewritten" not in heading:
                heading.append("rewritten")


class _RewritesLentRecords(InMemoryStore):
    """Lends records, then changes the lent objects' metadata in place at the next commit."""

    def __init__(self) -> None:
        self._rewriting = _RewritingBackend()
        BackendStore.__init__(self, self._rewriting)

    def borrowed_query(self, scope: Any, vector: Any, **kw: Any) -> Any:
        answer = super().borrowed_query(scope, vector, **kw)
        self._rewriting.lent.extend(s.record for s in answer.records)
        return answer


def test_borrowed_query_contract_catches_a_borrowed_read_without_the_grants():
    """A borrowed_query that drops the authorization fails the equality test and the
    guarded tests run on borrowed_query; the store's own guarded_query still passes them.
    If this fails, the borrowed contract no longer compares answers under an authorization."""
    borrowed = ChunkStoreBorrowedQueryContract()
    guarded = ChunkStoreGuardedQueryContract()
    with pytest.raises(AssertionError):
        borrowed.test_borrowed_query_answers_what_guarded_query_answers(_BorrowedIgnoresGrants())
    with pytest.raises(AssertionError):
        guarded.test_guarded_query_applies_grants_and_filters_like_query(
            _BorrowedIgnoresGrants(), "borrowed_query"
        )
    guarded.test_guarded_query_applies_grants_and_filters_like_query(
        _BorrowedIgnoresGrants(), "guarded_query"
    )
    borrowed.test_borrowed_query_answers_what_guarded_query_answers(InMemoryStore())


def test_borrowed_query_contract_catches_lent_records_changed_in_place():
    """A store that rewrites lent records at its next commit fails both the later-writes
    test and the concurrent-writers test (which compares what it held at the end).
    If this fails, the contract no longer keeps deep copies of what it was lent."""
    contract = ChunkStoreBorrowedQueryContract()
    with pytest.raises(AssertionError, match="changed after it was lent"):
        contract.test_lent_records_stay_as_they_were_after_later_writes(_RewritesLentRecords())
    with pytest.raises(AssertionError, match="a lent record changed"):
        contract.test_borrowed_query_reads_one_version_under_concurrent_writers(
            _RewritesLentRecords()
        )
    contract.test_lent_records_stay_as_they_were_after_later_writes(InMemoryStore())


def test_aliasing_contract_catches_retrieval_that_keeps_lent_metadata(monkeypatch):
    """Retrieval over a borrowed_query must copy each hit's metadata: hits that kept the lent
    records' own dicts let a caller change the store through a hit.
    If this fails, the aliasing contract no longer writes to a returned hit's metadata."""
    original = retrieval.build_hits

    def keeps_metadata(ordered: Any, **kw: Any) -> Any:
        return original(ordered, **{**kw, "private_reads": True})

    contract = ChunkStoreAliasingContract()
    contract.test_use_cases_neither_keep_nor_hand_out_the_stores_values(InMemoryStore())
    monkeypatch.setattr(retrieval, "build_hits", keeps_metadata)
    with pytest.raises(AssertionError):
        contract.test_use_cases_neither_keep_nor_hand_out_the_stores_values(InMemoryStore())


class _ScopedTable:
    """A scope's view of the shared index: statistics over every scope's records, a search
    restricted to this scope's own ids (the memory lexicon asks with ``candidates=None`` for
    "every row", which must still mean this scope's rows only)."""

    def __init__(self, table: Bm25Index, own: Callable[[], Any]) -> None:
        self._table, self._own = table, own

    def add(self, ids: Any, texts: Any) -> None:
        self._table.add(ids, texts)

    def remove(self, ids: Any) -> None:
        self._table.remove(ids)

    def search(self, text: str, *, limit: int, candidates: Any = None) -> Any:
        wanted = list(self._own()) if candidates is None else candidates
        return self._table.search(text, limit=limit, candidates=wanted)


class _TableWideBackend(memory_backend.SnapshotBackend):
    """One BM25 index shared by every scope's lexicon, each synced before any search."""

    def __init__(self) -> None:
        super().__init__()
        self._table = Bm25Index(analyzer=tokenize_lexical)

    def search_lexical(self, view: Any, text: str, **kw: Any) -> Any:
        for other in list(self._scopes):
            if other not in self._lexicons:
                lexicon = memory_lexical.ScopeLexicon(self._analyzer)
                lexicon.index = _ScopedTable(  # type: ignore[assignment]
                    self._table, lambda scope=other: self._snapshot(scope).searchable()
                )
                self._lexicons[other] = lexicon
            with self._lexicons[other].lock:
                self._lexicons[other].sync(self._snapshot(other))
        return super().search_lexical(view, text, **kw)


class TableWideStatistics(InMemoryStore):
    """SQLite FTS5's default: one BM25 index over every scope's records (statistics over the
    whole table), each scope's answer still restricted to its own records."""

    def __init__(self) -> None:
        BackendStore.__init__(self, _TableWideBackend())


def test_lexical_contract_catches_bm25_statistics_shared_by_every_scope():
    """Table-wide BM25 statistics: the contract must see another tenant's documents change the
    scope's order or scores. If this fails, the noise the test writes elsewhere no longer
    moves table-wide statistics."""
    contract = ChunkStoreLexicalContract()
    with pytest.raises(AssertionError):
        contract.test_lexical_order_and_scores_ignore_other_scopes_documents(TableWideStatistics())
    contract.test_lexical_order_and_scores_ignore_other_scopes_documents(InMemoryStore())


class FoldsAccents(InMemoryStore):
    """The tokens of SQLite FTS5's default ``unicode61``: lowercased, accents removed, ``ß``
    kept."""

    def __init__(self) -> None:
        super().__init__()

        def unicode61(text: str) -> list[str]:
            decomposed = unicodedata.normalize("NFKD", text.lower())
            plain = "".join(c for c in decomposed if not unicodedata.combining(c))
            return re.findall(r"\w+", plain)

        self.backend._analyzer = unicode61  # type: ignore[attr-defined]


def test_lexical_contract_catches_a_tokenizer_other_than_tokenize_lexical():
    """A bm25 leg whose tokenizer folds accents and not ``ß`` matches ``cafe`` to ``café`` and
    not ``strasse`` to ``Straße``: the contract must fail it."""
    with pytest.raises(AssertionError):
        ChunkStoreLexicalContract().test_lexical_bm25_matches_exactly_the_tokens_of_tokenize_lexical(
            FoldsAccents()
        )


def test_unit_of_work_contract_catches_a_commit_that_runs_twice(monkeypatch):
    """A unit of work that commits again after commit(): the contract must refuse it."""

    def commit_again(uow: Any) -> None:
        uow.writer.commit()  # commits, and never marks the unit finished

    monkeypatch.setattr(engine_uow.BackendUnitOfWork, "commit", commit_again)
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        ChunkStoreUnitOfWorkContract().test_a_finished_unit_of_work_refuses_a_second_commit(
            InMemoryStore()
        )


class LimitMustBePositive(InMemoryStore):
    """Refuses ``limit <= 0`` instead of answering nothing (what ``Bm25Index`` does)."""

    def query(self, scope: Any, vector: Any, *, limit: int, **kw: Any) -> Any:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        return super().query(scope, vector, limit=limit, **kw)

    def lexical_query(self, scope: Any, text: str, *, limit: int, **kw: Any) -> Any:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        return super().lexical_query(scope, text, limit=limit, **kw)


@pytest.mark.parametrize(
    ("suite", "test"),
    [
        (ChunkStoreQueryContract, "test_query_with_a_non_positive_limit_is_empty"),
        (
            ChunkStoreLexicalContract,
            "test_lexical_query_with_a_non_positive_limit_is_the_empty_tuple",
        ),
    ],
)
def test_query_contracts_catch_a_store_that_refuses_a_non_positive_limit(suite, test):
    """query and lexical_query must answer nothing for limit 0 or -1, not raise."""
    with pytest.raises(ValueError):
        getattr(suite(), test)(LimitMustBePositive())


def test_generation_contract_catches_the_1x_floor_rules(monkeypatch):
    """The 1.x in-memory rules (raise_floor past the pointer; reset below the floor allowed)
    fail the 2.0 floor test, each on its own. If this fails, check
    test_the_floor_bounds_reset_and_never_passes_the_pointer."""
    contract = ChunkStoreGenerationContract()
    with monkeypatch.context() as patch:
        patch.setattr(
            engine_generations,
            "floor_raised",
            lambda s, g: attrs.evolve(s, floor=max(s.floor, g)),
        )
        with pytest.raises(AssertionError):
            contract.test_the_floor_bounds_reset_and_never_passes_the_pointer(InMemoryStore())
    with monkeypatch.context() as patch:
        patch.setattr(
            engine_generations,
            "reset_to",
            lambda s, g: attrs.evolve(s, counter=g, pointer=g),
        )
        with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
            contract.test_the_floor_bounds_reset_and_never_passes_the_pointer(InMemoryStore())


def test_uniqueness_contract_catches_two_ids_moved_onto_one(monkeypatch):
    """A rekey without check_rekey_moves lets two rows take one id. If this fails, check
    test_rekey_of_two_ids_onto_one_is_refused."""
    monkeypatch.setattr(engine_uow, "check_rekey_moves", lambda moves: None)
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        ChunkStoreRepointUniquenessContract().test_rekey_of_two_ids_onto_one_is_refused(
            InMemoryStore()
        )


def test_backend_contract_catches_renames_applied_one_by_one(monkeypatch):
    """A backend whose update renames row by row in place (a to b overwrites b before b moves
    on) fails the chain test. If this fails, check test_backend_update_renames_in_a_chain."""

    def in_place(self: Any, changes: Any) -> None:
        for key, new in changes.items():
            row = self.snap.rows.pop(key)
            self.snap.rows[(new.id, new.generation)] = memory_snapshot.Row(new, row.vector)

    monkeypatch.setattr(memory_uow.SnapshotWriter, "update", in_place)
    with pytest.raises(AssertionError):
        StorageBackendContract().test_backend_update_renames_in_a_chain(
            memory_backend.MemoryBackend()
        )


class _LosesANeighbourUnderGrants(InMemoryStore):
    """An access-checked query that misses the nearest allowed row (a graph walk that the
    grants thinned out), and otherwise answers like the store."""

    def query(self, scope: Any, vector: Any, *, limit: int, **kw: Any) -> Any:
        if kw.get("authorization") is None:
            return super().query(scope, vector, limit=limit, **kw)
        return super().query(scope, vector, limit=limit + 1, **kw)[1:]


class _GrantsAfterTopK(InMemoryStore):
    """Ranks the top ``limit`` of every row, then drops the ones the caller may not read."""

    def query(self, scope: Any, vector: Any, *, limit: int, **kw: Any) -> Any:
        caller = kw.pop("authorization", None)
        hits = super().query(scope, vector, limit=limit, **kw)
        if caller is None:
            return hits
        allowed = super().query(scope, vector, limit=10_000, authorization=caller, **kw)
        keep = {h.record.id for h in allowed}
        return [h for h in hits if h.record.id in keep]


@pytest.mark.parametrize("broken", [_LosesANeighbourUnderGrants, _GrantsAfterTopK])
def test_grant_contract_catches_an_access_checked_top_k_that_is_not_exact(
    broken: type[InMemoryStore],
) -> None:
    """A store whose access-checked query misses an allowed neighbour, or applies the grants
    after ranking, fails the few-allowed-rows test; the in-memory store passes it.
    If this fails, the contract no longer compares with the exact top-k of the allowed rows."""
    contract = ChunkStoreGrantContract()
    with pytest.raises(AssertionError):
        contract.test_query_with_few_allowed_rows_is_their_exact_top_k(broken())
    contract.test_query_with_few_allowed_rows_is_their_exact_top_k(InMemoryStore())
