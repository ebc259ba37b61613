"""``ChunkStoreGuardedQueryContract``: ``guarded_query`` equals the separate reads it replaces.

Every test runs twice: once on ``guarded_query`` and once on ``borrowed_query``
(``SupportsBorrowedQuery``, which must answer the same; it skips on a store that does not
declare it).
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import pytest

from ragport.application.retrieval import retrieve_context
from ragport.application.retrieval_request import RetrievalRequest
from ragport.contract_tests._support import (
    CONTRACT_EMBEDDER_ID,
    ContractEmbedder,
    derived_batch,
    granted,
    hash_vector,
    make_batch,
    publish_sources,
)
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    DIMS,
    OTHER_CORPUS,
    QUERY_ALL,
    SCOPE,
    WRITER_TIMEOUT_S,
    _add,
    _ids,
    _require_acl,
    _require_borrowed_query,
    _require_generations,
    _require_guarded_query,
    _require_implemented,
    _require_transactions,
)
from ragport.domain.model import Authorization, Grant, Scope, Tombstone
from ragport.ports.borrowed import SupportsBorrowedQuery
from ragport.ports.embedder import Vector
from ragport.ports.store import ChunkStore, SupportsGuardedQuery, SupportsLexicalSearch

__all__ = ["ChunkStoreGuardedQueryContract"]


class ChunkStoreGuardedQueryContract(_ChunkStoreContractBase):
    """``guarded_query`` answers ``foreign_embedders`` and ``query`` together, faithfully.

    Only for stores that implement ``SupportsGuardedQuery``; retrieval then trusts it instead
    of its own drift-guard and tombstone reads, so every answer must equal the separate reads.
    With ``lexical_modes`` it also trusts both legs of ``hybrid_query`` to apply the tombstones
    of their one snapshot (the last two tests).
    """

    forget_race_seconds: ClassVar[float] = 3.0
    """How long ``test_hybrid_reads_racing_forgets_serve_nothing_forgotten_before_them``'s
    writer and readers race."""

    @pytest.fixture(params=["guarded_query", "borrowed_query"])
    def guarded_read(self, request: pytest.FixtureRequest, store: ChunkStore) -> str:
        """The read under test: ``guarded_query``, or ``borrowed_query`` where declared."""
        _require_guarded_query(store)
        if request.param == "borrowed_query":
            _require_borrowed_query(store)
        return str(request.param)

    def _guarded(
        self, store: ChunkStore, read: str, scope: Scope, vector: Vector, **kwargs: Any
    ) -> Any:
        if read == "borrowed_query":
            assert isinstance(store, SupportsBorrowedQuery)
            return store.borrowed_query(
                scope, vector, embedder_id=CONTRACT_EMBEDDER_ID, dimensions=DIMS, **kwargs
            )
        assert isinstance(store, SupportsGuardedQuery)
        return store.guarded_query(
            scope, vector, embedder_id=CONTRACT_EMBEDDER_ID, dimensions=DIMS, **kwargs
        )

    def test_guarded_query_equals_the_two_separate_reads(
        self, store: ChunkStore, guarded_read: str
    ) -> None:
        """Checks ``SupportsGuardedQuery.guarded_query``, ``SupportsBorrowedQuery.borrowed_query``:
        the answer has the foreign embedders ``foreign_embedders`` reports and the records, order
        and scores (within 1e-5) ``query`` returns, at ``limit=1`` too.

        If this fails, compare the guarded statement with query's and foreign_embedders'.
        """
        publish_sources(store, SCOPE, {"a": ["alpha one", "alpha two"], "b": ["beta"]})
        vector = hash_vector("alpha one")
        answer = self._guarded(store, guarded_read, SCOPE, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == frozenset()
        plain = store.query(SCOPE, vector, limit=QUERY_ALL)
        assert _ids(answer.records) == _ids(plain)
        assert sorted(_ids(plain)) == ["a#0001", "a#0002", "b#0001"]
        assert [round(r.score, 5) for r in answer.records] == [round(r.score, 5) for r in plain]
        top = self._guarded(store, guarded_read, SCOPE, vector, limit=1)
        assert _ids(top.records) == _ids(store.query(SCOPE, vector, limit=1)) == ["a#0001"]

    def test_guarded_query_names_every_foreign_embedder(
        self, store: ChunkStore, guarded_read: str
    ) -> None:
        """Checks ``SupportsGuardedQuery.guarded_query``, ``SupportsBorrowedQuery.borrowed_query``,
        ``ChunkStore.foreign_embedders``: other embedder ids, other dimensions and rows without an
        id are all reported, the same as ``foreign_embedders`` reports them, and none once those
        rows are deleted.

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
        answer = self._guarded(store, guarded_read, SCOPE, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == expected
        publish_sources(store, SCOPE, {"b": None, "c": None, "d": None})
        answer = self._guarded(store, guarded_read, SCOPE, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == frozenset()
        assert _ids(answer.records) == ["a#0001"]

    def test_guarded_query_names_a_lone_legacy_row_or_other_dimension(
        self, store: ChunkStore, guarded_read: str
    ) -> None:
        """Checks ``SupportsGuardedQuery.guarded_query``, ``SupportsBorrowedQuery.borrowed_query``:
        one row without an embedder id, or of another dimension, among consistent rows is reported
        as foreign, and the records are the consistent rows.

        If this fails, check any shortcut the guard takes (PostgreSQL probes the first and last
        (embedder_id, dimensions) in index order, where rows without an id sort last).
        """
        publish_sources(store, SCOPE, {"a": ["alpha", "alpha two"]})
        publish_sources(store, SCOPE, {"z": ["zeta"]}, embedder_id=None)
        vector = hash_vector("alpha")
        answer = self._guarded(store, guarded_read, SCOPE, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == frozenset({(None, DIMS)})
        publish_sources(store, SCOPE, {"z": None})
        publish_sources(store, SCOPE, {"y": ["eta"]}, dimensions=DIMS + 1)
        answer = self._guarded(store, guarded_read, SCOPE, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == frozenset({(CONTRACT_EMBEDDER_ID, DIMS + 1)})
        assert sorted(_ids(answer.records)) == ["a#0001", "a#0002"]

    def test_guarded_query_on_an_empty_or_foreign_only_scope(
        self, store: ChunkStore, guarded_read: str
    ) -> None:
        """Checks ``SupportsGuardedQuery.guarded_query``, ``SupportsBorrowedQuery.borrowed_query``:
        a scope without rows reports nothing foreign and finds nothing; a scope with only rows of
        another dimension names them and finds nothing.

        If this fails, check that the guard still answers when the vector leg finds nothing.
        """
        vector = hash_vector("alpha")
        empty = self._guarded(store, guarded_read, SCOPE, vector, limit=QUERY_ALL)
        assert empty.foreign_embedders == frozenset() and list(empty.records) == []
        publish_sources(store, OTHER_CORPUS, {"d": ["delta"]}, dimensions=4)
        answer = self._guarded(store, guarded_read, OTHER_CORPUS, vector, limit=QUERY_ALL)
        assert answer.foreign_embedders == frozenset({(CONTRACT_EMBEDDER_ID, 4)})
        assert list(answer.records) == []
        assert self._guarded(
            store, guarded_read, SCOPE, vector, limit=QUERY_ALL
        ).foreign_embedders == (frozenset())

    def test_guarded_query_withholds_forgotten_ids_sources_and_lineage(
        self, store: ChunkStore, guarded_read: str
    ) -> None:
        """Checks ``SupportsGuardedQuery.guarded_query``, ``SupportsBorrowedQuery.borrowed_query``:
        records whose id, source id or lineage entry a ``forgotten`` tombstone names are withheld
        before ``limit``, the promise retrieval relies on to skip its own tombstone re-read.

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
            answer = self._guarded(store, guarded_read, SCOPE, hash_vector(text), limit=QUERY_ALL)
            assert set(_ids(answer.records)) == visible, text
            top = self._guarded(store, guarded_read, SCOPE, hash_vector(text), limit=1)
            assert len(top.records) == 1 and top.records[0].record.id in visible, text

    def test_guarded_query_applies_grants_and_filters_like_query(
        self, store: ChunkStore, guarded_read: str
    ) -> None:
        """Checks ``SupportsGuardedQuery.guarded_query``, ``SupportsBorrowedQuery.borrowed_query``:
        ``authorization`` and ``metadata_filter`` select the same records as for ``query``, and
        ``on_denied`` receives the withheld sources.

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
            granted(
                SCOPE,
                [
                    Grant("open", principal_ids=("ann",)),
                    Grant("tagged", principal_ids=("ann",)),
                    Grant("closed", principal_ids=("bob",)),
                ],
            ),
        )
        auth = Authorization(tenant_id=SCOPE.tenant_id, principal_id="ann")
        vector = hash_vector("alpha closed")
        for kwargs in (
            {"authorization": auth},
            {"metadata_filter": {"kind": "note"}},
            {"authorization": auth, "metadata_filter": {"kind": {"$ne": "note"}}},
        ):
            guarded = self._guarded(store, guarded_read, SCOPE, vector, limit=QUERY_ALL, **kwargs)
            plain = store.query(SCOPE, vector, limit=QUERY_ALL, **kwargs)
            assert _ids(guarded.records) == _ids(plain), kwargs
        denied: list[str] = []
        answer = self._guarded(
            store,
            guarded_read,
            SCOPE,
            vector,
            limit=QUERY_ALL,
            authorization=auth,
            on_denied=lambda ds: denied.extend(d.source_id for d in ds),
        )
        assert set(_ids(answer.records)) == {"open#0001", "tagged#0001"}
        assert denied == ["closed"]

    def test_hybrid_query_withholds_forgotten_ids_sources_lineage_and_roots(
        self, store: ChunkStore
    ) -> None:
        """Checks ``SupportsLexicalSearch.hybrid_query``, ``SupportsGuardedQuery.guarded_query``,
        ``retrieve_context``: on a store with guarded_query and lexical_modes neither
        leg of ``hybrid_query`` returns a record whose id, source id, lineage entry or root a
        ``forgotten`` tombstone names, before ``limit``; a hybrid ``retrieve_context`` (which
        then skips its tombstone re-read) serves none of them either.

        If this fails, check that both legs' statements (the lexical one too) apply the
        tombstone predicate of the snapshot they read, as guarded_query does.
        """
        mode = _guarded_hybrid_mode(store)
        _require_transactions(store)
        _require_generations(store)
        publish_sources(store, SCOPE, {"hf-root": [f"{WORD} root"]})
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id in ("keep", "gone-src", "partly"):
                texts = [f"{WORD} {source_id} one", f"{WORD} {source_id} two"]
                _add(uow, make_batch(SCOPE, source_id, texts, generation=staged))
            for record_id, lineage in (("d-lineage", ("keep", "gone-root")), ("d-root", None)):
                _add(
                    uow,
                    derived_batch(
                        SCOPE,
                        record_id,
                        f"{WORD} derived {record_id}",
                        roots=("keep",) if lineage else ("hf-root",),
                        lineage=lineage,
                        generation=staged,
                    ),
                )
            uow.generations.publish(staged)
            uow.tombstones.add(
                [Tombstone(i) for i in ("gone-src", "partly#0001", "gone-root", "hf-root")]
            )
            uow.commit()
        visible = {"keep#0001", "keep#0002", "partly#0002"}
        assert isinstance(store, SupportsLexicalSearch)
        for text in (f"{WORD} keep one", f"{WORD} gone-src one", f"{WORD} derived d-root"):
            for limit in (QUERY_ALL, 1):
                answer = store.hybrid_query(
                    SCOPE,
                    hash_vector(text),
                    text,
                    embedder_id=CONTRACT_EMBEDDER_ID,
                    dimensions=DIMS,
                    limit=limit,
                    mode=mode,
                )
                for leg, found in (("vector", answer.vector), ("lexical", answer.lexical)):
                    ids = set(_ids(found))
                    assert ids <= visible, f"{leg} leg served {sorted(ids - visible)} ({text})"
                    assert len(ids) == min(limit, len(visible)), (leg, text, limit)
            served = _hybrid_served(store, text, mode)
            assert served <= visible, f"retrieve_context served {sorted(served - visible)}"

    def test_hybrid_reads_racing_forgets_serve_nothing_forgotten_before_them(
        self, store: ChunkStore
    ) -> None:
        """Checks ``SupportsLexicalSearch.hybrid_query``, ``SupportsGuardedQuery.guarded_query``,
        ``retrieve_context``: on a store with guarded_query and lexical_modes, while a writer publishes
        sources and forgets each right after, no hybrid read serves a source whose forget
        committed before the read began, and every source the vector leg returns the lexical
        leg returns too (both legs see one set of tombstones, whether the store reads them on
        one connection or two; every text holds the query word, so the lexical leg finds every
        row its snapshot admits).

        If this fails with "lexical leg", the legs read tombstones in two snapshots (a forget
        committed between them); with "served", a leg missed a tombstone committed before the
        read.
        """
        mode = _guarded_hybrid_mode(store)
        _require_transactions(store)
        _require_generations(store)
        publish_sources(store, SCOPE, {"race-keep": [f"{WORD} kept"]})
        race = _ForgetRace(store, mode)
        race.run(self.forget_race_seconds)
        assert not race.errors, f"a thread raised: {race.errors[0]!r}"
        assert not race.problems, (
            f"{len(race.problems)} of {race.reads} hybrid reads went wrong, e.g. {race.problems[0]}"
        )
        assert race.forgets >= 5 and race.reads >= 10, (race.forgets, race.reads)


WORD = "hfword"
_RACE_SOURCES = 120  # the writer's cap: few rows, so every read stays small


def _guarded_hybrid_mode(store: ChunkStore) -> str:
    """The first lexical mode of a guarded store, else the test skips."""
    _require_guarded_query(store)
    modes = store.capabilities.lexical_modes
    if not modes:
        pytest.skip(
            f"{type(store).__name__} declares no lexical_modes: its guarded_query makes no "
            "hybrid promise"
        )
    _require_implemented(store, "lexical")
    return modes[0]


def _hybrid_served(store: ChunkStore, text: str, mode: str) -> set[str]:
    """The record ids a hybrid ``retrieve_context`` for ``text`` serves."""
    result = retrieve_context(
        text,
        embedder=ContractEmbedder(),
        store=store,
        scope=SCOPE,
        request=RetrievalRequest(
            top_k=QUERY_ALL, query_candidates=QUERY_ALL, lexical=mode, max_context_tokens=8_000
        ),
    )
    return {h.id for h in result.hits}


class _ForgetRace:
    """A writer that publishes a source and forgets it, over and over, and readers that check
    every hybrid answer against the forgets committed before they asked."""

    def __init__(self, store: ChunkStore, mode: str) -> None:
        self.store, self.mode = store, mode
        self.forgotten: list[str] = []  # appended only after the forget committed
        self.errors: list[BaseException] = []
        self.problems: list[str] = []
        self.forgets = self.reads = 0
        self.stop, self.read_done = threading.Event(), threading.Event()
        self.lock = threading.Lock()

    def run(self, seconds: float) -> None:
        threads = [threading.Thread(target=self.writer, daemon=True)]
        threads += [threading.Thread(target=self.reader, args=(u,), daemon=True) for u in (0, 1)]
        for thread in threads:
            thread.start()
        self.stop.wait(seconds)
        self.stop.set()
        for thread in threads:
            thread.join(WRITER_TIMEOUT_S)
        assert not any(t.is_alive() for t in threads), "the writer or a reader hung"

    def writer(self) -> None:
        try:
            publish_sources(self.store, SCOPE, {"race-0": [f"{WORD} race 0"]})
            for i in range(1, _RACE_SOURCES):
                # One forget per read or so (a fast store's writer would otherwise spend its
                # sources before the readers start), and one unforgotten race source at
                # every moment, whose forget lands anywhere in a read.
                self.read_done.wait(0.05)
                self.read_done.clear()
                if self.stop.is_set():
                    return
                publish_sources(self.store, SCOPE, {f"race-{i}": [f"{WORD} race {i}"]})
                with self.store.unit_of_work(SCOPE) as uow:
                    uow.tombstones.add([Tombstone(f"race-{i - 1}")])
                    uow.commit()
                with self.lock:
                    self.forgotten.append(f"race-{i - 1}")
                    self.forgets += 1
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            self.stop.set()

    def reader(self, use_case: int) -> None:
        try:
            while not self.stop.is_set():
                with self.lock:
                    before = set(self.forgotten)
                problem = self.use_case(before) if use_case else self.hybrid(before)
                with self.lock:
                    self.reads += 1
                    self.read_done.set()
                    if problem:
                        self.problems.append(problem)
        except BaseException as exc:
            self.errors.append(exc)

    def hybrid(self, before: set[str]) -> str | None:
        assert isinstance(self.store, SupportsLexicalSearch)
        answer = self.store.hybrid_query(
            SCOPE,
            hash_vector(WORD),
            WORD,
            embedder_id=CONTRACT_EMBEDDER_ID,
            dimensions=DIMS,
            limit=QUERY_ALL,
            mode=self.mode,
        )
        vector = {s.record.source_id for s in answer.vector}
        lexical = {s.record.source_id for s in answer.lexical}
        if (vector | lexical) & before:
            return f"hybrid_query served {sorted((vector | lexical) & before)}, forgotten before"
        if not vector <= lexical:
            return f"the lexical leg missed {sorted(vector - lexical)}, which the vector leg found"
        return None

    def use_case(self, before: set[str]) -> str | None:
        result = retrieve_context(
            WORD,
            embedder=ContractEmbedder(),
            store=self.store,
            scope=SCOPE,
            request=RetrievalRequest(
                top_k=QUERY_ALL, query_candidates=QUERY_ALL, lexical=self.mode
            ),
        )
        served = {h.source_id for h in result.hits} & before
        return f"retrieve_context served {sorted(served)}, forgotten before" if served else None
