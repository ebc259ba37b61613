"""``ChunkStoreGuardedQueryContract``: ``guarded_query`` equals the separate reads it replaces.

Every test runs twice: once on ``guarded_query`` and once on ``borrowed_query``
(``SupportsBorrowedQuery``, which must answer the same; it skips on a store that does not
declare it).
"""

from __future__ import annotations

from typing import Any

import pytest

from ragport.contract_tests._support import (
    CONTRACT_EMBEDDER_ID,
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
    _add,
    _ids,
    _require_acl,
    _require_borrowed_query,
    _require_guarded_query,
)
from ragport.domain.model import Authorization, Grant, Scope, Tombstone
from ragport.ports.borrowed import SupportsBorrowedQuery
from ragport.ports.embedder import Vector
from ragport.ports.store import ChunkStore, SupportsGuardedQuery

__all__ = ["ChunkStoreGuardedQueryContract"]


class ChunkStoreGuardedQueryContract(_ChunkStoreContractBase):
    """``guarded_query`` answers ``foreign_embedders`` and ``query`` together, faithfully.

    Only for stores that implement ``SupportsGuardedQuery``; retrieval then trusts it instead
    of its own drift-guard and tombstone reads, so every answer must equal the separate reads.
    """

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
