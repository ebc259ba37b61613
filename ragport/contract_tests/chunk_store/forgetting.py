"""Forgetting at depth and ids that stay unique: promises that span several use cases.

``ChunkStoreForgettingContract`` drives a store through the use cases (``index_derived``,
deletion propagation, ``repoint_source``, ``delete_source``, ``rollback_generation``) and
checks what ``retrieve_context`` serves afterwards, on the vector leg and (when the store
offers one) the hybrid path, to a trusted caller and to an authorized one:

- nothing resting on a forgotten source, at any depth, through re-points, deletes and
  rollbacks, is served again; deriving from forgotten content is refused;
- a write to a forgotten id is refused (``ForgottenError``), also when the forget commits
  while the write embeds; ``readmit_source`` lets it in again and nothing forgotten returns;
- a chunk source and a derived record never share an id;
- re-pointing keeps ids unique at every pointer the scope can reach (a staged publish, a
  rollback down to the floor), or refuses the move.

Part of ``ChunkStoreContract``; needs ``transactions`` and ``generations``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ragport.application.admission import readmit_source
from ragport.application.forgetting import (
    RagDeletionHandler,
    create_deletion_propagator,
    index_derived,
    repoint_source,
)
from ragport.application.generations import compact, rollback_generation
from ragport.application.indexing import delete_source, index_chunks, replace_source
from ragport.application.retrieval import retrieve_context
from ragport.application.retrieval_request import RetrievalRequest
from ragport.application.write_options import WriteOptions
from ragport.contract_tests._support import ContractEmbedder, granted, record_written
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    QUERY_ALL,
    SCOPE,
    TENANT,
    _require_generations,
    _require_transactions,
)
from ragport.domain.errors import ForgottenError, ValidationError
from ragport.domain.model import Authorization, Chunk, Grant, Scope, Tombstone
from ragport.ports.embedder import Embedder, VectorMatrix
from ragport.ports.store import ChunkStore

__all__ = ["ChunkStoreForgettingContract", "ChunkStoreRepointUniquenessContract"]

EMBEDDER = ContractEmbedder()
ADMIN = Authorization("fg-admin", TENANT)
WORD = "fgword"
"""Every text of this module holds it, so the lexical leg matches every record."""


def _source(store: ChunkStore, source_id: str, *texts: str) -> None:
    record_written(SCOPE, source_id)
    replace_source(
        source_id=source_id,
        chunks=[Chunk.of(source_id, i, f"{t} {WORD}") for i, t in enumerate(texts)],
        embedder=EMBEDDER,
        store=store,
        scope=SCOPE,
    )


def _derived(store: ChunkStore, record_id: str, lineage: Sequence[str]) -> None:
    record_written(SCOPE, record_id, *lineage)
    index_derived(
        record_id=record_id,
        text=f"{record_id} rests on {' '.join(lineage)} {WORD}",
        lineage=lineage,
        embedder=EMBEDDER,
        store=store,
        scope=SCOPE,
    )


def _grant_all(store: ChunkStore, *sources: str) -> None:
    if store.capabilities.authorization == "acl":
        store.set_source_access(
            SCOPE, granted(SCOPE, [Grant(s, principal_ids=(ADMIN.principal_id,)) for s in sources])
        )


def _forget(store: ChunkStore, source_id: str) -> tuple[str, ...]:
    propagator = create_deletion_propagator(
        scope=SCOPE,
        store=store,
        authorization=ADMIN,
        handlers=[RagDeletionHandler(store=store, scope=SCOPE)],
    )
    return propagator.propagate(source_id).ids


def _served(store: ChunkStore) -> dict[str, set[str]]:
    """Record ids retrieval serves, per (path, caller), with every candidate asked for."""
    lexical = store.capabilities.lexical_modes
    callers: list[tuple[str, Authorization | None]] = [("trusted", None)]
    if store.capabilities.authorization == "acl":
        callers.append(("authorized", ADMIN))
    served: dict[str, set[str]] = {}
    for mode in ("off", *lexical[:1]):
        for name, who in callers:
            result = retrieve_context(
                f"{WORD} rests on",
                embedder=EMBEDDER,
                store=store,
                scope=SCOPE,
                authorization=who,
                request=RetrievalRequest(
                    top_k=QUERY_ALL,
                    query_candidates=QUERY_ALL * 4,
                    lexical=mode,
                    max_context_tokens=8_000,
                    max_result_bytes=32_000,
                ),
            )
            served[f"{mode}/{name}"] = {h.id for h in result.hits}
    return served


def _assert_never_served(store: ChunkStore, ids: Sequence[str], what: str) -> None:
    for path, seen in _served(store).items():
        leaked = sorted(seen.intersection(ids))
        assert not leaked, f"{what}: retrieval ({path}) served {leaked}"


def _ids_unique_everywhere(store: ChunkStore, scope: Scope, sources: Sequence[str]) -> None:
    ids = [r.id for s in sources for r in store.get_by_source(scope, s)]
    assert len(ids) == len(set(ids)), f"duplicate visible ids: {sorted(ids)}"
    found = [s.record.id for s in store.query(scope, EMBEDDER.embed([WORD])[0], limit=QUERY_ALL)]
    assert len(found) == len(set(found)), f"query returned duplicate ids: {sorted(found)}"


class ChunkStoreForgettingContract(_ChunkStoreContractBase):
    """Nothing resting on a forgotten source is served again, at any depth."""

    def test_the_predicate_withholds_a_derived_record_by_its_roots(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``, ``SupportsGuardedQuery.guarded_query``,
        ``SupportsBorrowedQuery.borrowed_query``, ``SupportsLexicalSearch.hybrid_query``,
        ``retrieve_context``: a derived record whose only forgotten id is a root two levels up (not
        its id, source or lineage) is never served, on the vector leg or the hybrid path, to a
        trusted or an authorized caller.

        If this fails, check the store's tombstone predicate (``query``, ``lexical_query``,
        ``guarded_query``): besides id, source and lineage it must test ``roots`` against
        the forgotten ids (``ragport.domain.model.is_forgotten``).
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "fg-s", "the forgotten source")
        _derived(store, "fg-d1", ["fg-s"])
        _derived(store, "fg-d2", ["fg-d1"])
        (d2,) = store.get_by_source(SCOPE, "fg-d2")
        assert tuple(d2.roots) == ("fg-s",), "index_derived flattens roots through fg-d1"
        _grant_all(store, "fg-s")
        # Only the root is tombstoned, behind the use cases' back: neither fg-d2's id, its
        # source nor its lineage (fg-d1) is forgotten.
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add([Tombstone("fg-s")])
            uow.commit()
        _assert_never_served(store, ["fg-s#0001", "fg-d1", "fg-d2"], "after forgetting fg-s")

    def test_deriving_from_forgotten_content_is_refused(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.list_live``, ``TombstoneRepository.list``, ``index_derived``:
        after a forget, ``index_derived`` on the source, or on what rested on it, is
        ``ValidationError(field="lineage")`` and writes nothing; unrelated content still derives.

        If this fails, check ``application.derived._roots``: every ancestor and root of the new
        record is tested against the scope's forgotten tombstones before anything is written.
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "fg-s", "the forgotten source")
        _derived(store, "fg-d1", ["fg-s"])
        _source(store, "fg-x", "an unrelated source")
        _grant_all(store, "fg-s", "fg-x")
        _forget(store, "fg-s")
        generation = store.current_generation(SCOPE)
        for lineage in (["fg-s"], ["fg-d1"], ["fg-x", "fg-d1"]):
            with pytest.raises(ValidationError) as caught:
                _derived(store, "fg-d2", lineage)
            assert caught.value.field == "lineage", lineage
        assert store.current_generation(SCOPE) == generation, "a refused derivation wrote"
        assert not store.get_by_source(SCOPE, "fg-d2")
        _derived(store, "fg-d3", ["fg-x"])  # unrelated content still derives
        _assert_never_served(store, ["fg-s#0001", "fg-d1", "fg-d2"], "after forgetting fg-s")

    def test_forget_follows_a_repointed_derived_record(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.rekey``, ``RecordRepository.rewrite_lineage``,
        ``RecordRepository.find_dependents``, ``repoint_source``: with D1 -> S and D2 -> D1,
        re-pointing D1 to D1b files it under exactly the new id and rewrites D2's lineage;
        forgetting S then takes D1b and D2 along, and neither is served.

        If this fails, check that repoint_source files a derived record under exactly the new
        id and rewrites lineage, and that the propagation closure follows dependents by record
        id and source id (``application.propagation._closure``).
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "fg-s", "the forgotten source")
        _derived(store, "fg-d1", ["fg-s"])
        _derived(store, "fg-d2", ["fg-d1"])
        _grant_all(store, "fg-s", "fg-d1", "fg-d1b")
        record_written(SCOPE, "fg-d1b")
        repoint_source(scope=SCOPE, store=store, from_id="fg-d1", to_id="fg-d1b")
        (moved,) = store.get_by_source(SCOPE, "fg-d1b")
        assert moved.id == "fg-d1b", "a re-pointed derived record keeps id == source id"
        (d2,) = store.get_by_source(SCOPE, "fg-d2")
        assert tuple(d2.lineage) == ("fg-d1b",)
        closure = _forget(store, "fg-s")
        assert {"fg-s", "fg-d1b", "fg-d2"} <= set(closure)
        _assert_never_served(store, ["fg-s#0001", "fg-d1b", "fg-d2"], "after forgetting fg-s")

    def test_rollback_never_brings_back_a_dependent_of_a_forgotten_source(
        self, store: ChunkStore
    ) -> None:
        """Checks ``RecordRepository.find_dependents``, ``ChunkStore.query``,
        ``SupportsGuardedQuery.guarded_query``, ``SupportsBorrowedQuery.borrowed_query``,
        ``SupportsLexicalSearch.hybrid_query``, ``rollback_generation``: with D1 -> S, D2 -> D1, D3
        -> D2, deleting D3 and D2 and then forgetting S puts all of them in the closure; after a
        rollback to before the deletes D2 and D3 are rows again but never served.

        If this fails, check that ``find_dependents`` returns retired versions too (the
        closure must tombstone what a rollback can restore) and the roots test of the store
        predicate.
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "fg-s", "the forgotten source")
        _derived(store, "fg-d1", ["fg-s"])
        _derived(store, "fg-d2", ["fg-d1"])
        _derived(store, "fg-d3", ["fg-d2"])
        _grant_all(store, "fg-s")
        before_deletes = store.current_generation(SCOPE)
        delete_source(source_id="fg-d3", store=store, scope=SCOPE)
        delete_source(source_id="fg-d2", store=store, scope=SCOPE)
        closure = _forget(store, "fg-s")
        assert {"fg-s", "fg-d1", "fg-d2", "fg-d3"} <= set(closure)
        rollback_generation(store=store, scope=SCOPE, to=before_deletes)
        assert [r.id for r in store.get_by_source(SCOPE, "fg-d3")] == ["fg-d3"]
        _assert_never_served(store, ["fg-s#0001", "fg-d1", "fg-d2", "fg-d3"], "after the rollback")

    def test_forgetting_a_derived_record_withholds_its_dependents_after_rollback(
        self, store: ChunkStore
    ) -> None:
        """Checks ``RecordRepository.find_dependents``, ``rollback_generation``: forgetting D1 of D1
        -> S, D2 -> D1, D3 -> D2 while D3 is deleted takes D2 and D3 along; after a rollback that
        restores D3 (whose roots do not name D1) none of them is served, and S still is.

        If this fails, check that the closure walks retired versions (``find_dependents``).
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "fg-s", "the source that stays")
        _derived(store, "fg-d1", ["fg-s"])
        _derived(store, "fg-d2", ["fg-d1"])
        _derived(store, "fg-d3", ["fg-d2"])
        _grant_all(store, "fg-s", "fg-d1")
        before_delete = store.current_generation(SCOPE)
        delete_source(source_id="fg-d3", store=store, scope=SCOPE)
        assert set(_forget(store, "fg-d1")) >= {"fg-d1", "fg-d2", "fg-d3"}
        rollback_generation(store=store, scope=SCOPE, to=before_delete)
        _assert_never_served(store, ["fg-d1", "fg-d2", "fg-d3"], "after the rollback")
        assert all("fg-s#0001" in seen for seen in _served(store).values())

    def test_a_forgotten_id_is_never_re_pointed(self, store: ChunkStore) -> None:
        """Checks ``TombstoneRepository.list``, ``repoint_source``: re-pointing from a forgotten
        source (its rows would be served under the new id) or onto a forgotten id is a
        ``ValidationError`` and moves nothing.

        If this fails, check repoint_source's tombstone check before ``rekey``.
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "fg-s", "the forgotten source")
        _source(store, "fg-x", "another source")
        _grant_all(store, "fg-s", "fg-x", "fg-d1")
        propagator = create_deletion_propagator(scope=SCOPE, store=store, authorization=ADMIN)
        propagator.propagate("fg-s")  # no rag handler: the rows stay, withheld
        for from_id, to_id in (("fg-s", "fg-d1"), ("fg-x", "fg-s")):
            with pytest.raises(ValidationError):
                repoint_source(scope=SCOPE, store=store, from_id=from_id, to_id=to_id)
        assert [r.id for r in store.get_by_source(SCOPE, "fg-x")] == ["fg-x#0001"]
        assert not store.get_by_source(SCOPE, "fg-d1")
        _assert_never_served(store, ["fg-s#0001", "fg-d1#0001"], "after the refused moves")

    def test_a_chunk_source_and_a_derived_record_never_share_an_id(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.list_live``, ``index_derived``, ``replace_source``:
        ``index_derived`` on a chunk source's id, and ``replace_source`` on a derived record's id,
        are refused; neither retires the other.

        If this fails, check ``require_kind`` in the use cases before they retire anything.
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "fg-s", "a source of chunks")
        _derived(store, "fg-d1", ["fg-s"])
        generation = store.current_generation(SCOPE)
        with pytest.raises(ValidationError) as caught:
            _derived(store, "fg-s", ["fg-d1"])
        assert caught.value.field == "record_id"
        with pytest.raises(ValidationError) as caught:
            _source(store, "fg-d1", "chunks under a derived record's id")
        assert caught.value.field == "source_id"
        assert store.current_generation(SCOPE) == generation
        assert [r.kind for r in store.get_by_source(SCOPE, "fg-s")] == ["chunk"]
        assert [r.kind for r in store.get_by_source(SCOPE, "fg-d1")] == ["derived"]

    def test_a_write_to_a_forgotten_id_is_refused(self, store: ChunkStore) -> None:
        """Checks ``TombstoneRepository.get``, ``replace_source``, ``index_chunks``,
        ``index_derived``: after a forget, writing under the forgotten source id (with or
        without a grant, alone or beside another source) or the forgotten derived record id is
        ``ForgottenError`` naming the id, and nothing is written anywhere.

        If this fails, check that the store's ``tombstones.get`` answers the forgotten ids by
        id, and the use cases' ``refuse_forgotten`` (``ragport.application.admission``).
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "fg-s", "the forgotten source")
        _derived(store, "fg-d1", ["fg-s"])
        _source(store, "fg-x", "another source")
        _grant_all(store, "fg-s", "fg-x")
        _forget(store, "fg-s")
        generation = store.current_generation(SCOPE)
        x_before = list(store.get_by_source(SCOPE, "fg-x"))
        grants_before = dict(store.get_source_access(SCOPE, ["fg-s"]))
        new = [Chunk.of("fg-s", 0, f"written after the forget {WORD}")]
        writes = {
            "fg-s": (
                lambda: replace_source(source_id="fg-s", chunks=new, **_bound(store)),
                lambda: replace_source(source_id="fg-s", chunks=new, grant=Grant("fg-s",
                                       principal_ids=("fg-someone",)), **_bound(store)),
                lambda: index_chunks(chunks=[Chunk.of("fg-x", 1, f"x {WORD}"), *new],
                                     **_bound(store)),
            ),
            "fg-d1": (
                lambda: index_derived(record_id="fg-d1", text=f"again {WORD}",
                                      lineage=["fg-x"], **_bound(store)),
            ),
        }  # fmt: skip
        for forgotten, calls in writes.items():
            for write in calls:
                with pytest.raises(ForgottenError) as caught:
                    write()
                assert caught.value.source_id == forgotten
        assert store.current_generation(SCOPE) == generation, "a refused write published"
        assert not store.get_by_source(SCOPE, "fg-s")
        assert list(store.get_by_source(SCOPE, "fg-x")) == x_before
        assert dict(store.get_source_access(SCOPE, ["fg-s"])) == grants_before
        _assert_never_served(store, ["fg-s#0001", "fg-d1"], "after the refused writes")

    def test_a_forget_committed_during_a_write_still_refuses_it(self, store: ChunkStore) -> None:
        """Checks ``TombstoneRepository.get``, ``replace_source``, ``index_chunks``: a forget that
        commits after a write's early check (here: while it embeds) is caught inside the write's
        own unit of work: ``ForgottenError``, and nothing of the write is stored.

        If this fails, check that ``tombstones.get`` inside a unit of work reads what committed
        before it began (writers of a scope are serialized).
        """
        _require_transactions(store)
        _require_generations(store)

        def replace(source_id: str, embedder: Embedder) -> object:
            chunks = [Chunk.of(source_id, 0, f"v2 {WORD}")]
            return replace_source(
                source_id=source_id, chunks=chunks, embedder=embedder, store=store, scope=SCOPE
            )

        def index(source_id: str, embedder: Embedder) -> object:
            chunks = [Chunk.of(source_id, 0, f"v2 {WORD}")]
            return index_chunks(chunks=chunks, embedder=embedder, store=store, scope=SCOPE)

        for name, write in (("fg-r1", replace), ("fg-r2", index)):
            _source(store, name, "version one")
            _grant_all(store, name)
            racer = _ForgetsWhileEmbedding(store, name)
            with pytest.raises(ForgottenError):
                write(name, racer)
            assert racer.forgot, "the forget never ran"
            assert not store.get_by_source(SCOPE, name), "the write stored rows after the forget"
            _assert_never_served(store, [f"{name}#0001"], "after the raced write")

    def test_readmit_lets_the_id_be_written_again_and_nothing_forgotten_returns(
        self, store: ChunkStore
    ) -> None:
        """Checks ``TombstoneRepository.readmit``, ``RecordRepository.purge_source``,
        ``readmit_source``, ``rollback_generation``: re-admitting a source forgotten without
        the rag handler purges its stored rows and revokes its grant; the id can then be
        written and served again, the derived record that rested on it stays forgotten, and a
        rollback to before the re-admission brings nothing of the forgotten text back.

        If this fails, check ``readmit_source``: purge, revoke and ``tombstones.readmit`` in
        one unit of work.
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "fg-s", "the forgotten words")
        _derived(store, "fg-d1", ["fg-s"])
        _grant_all(store, "fg-s")
        before = store.current_generation(SCOPE)
        create_deletion_propagator(scope=SCOPE, store=store, authorization=ADMIN).propagate(
            "fg-s"
        )  # no rag handler: the rows stay, withheld
        result = readmit_source(source_id="fg-s", store=store, scope=SCOPE)
        assert (result.readmitted, result.purged) == (True, 1)
        assert readmit_source(source_id="fg-s", store=store, scope=SCOPE).readmitted is False
        assert store.list_invalidated_ids(SCOPE) == frozenset({"fg-d1"})
        assert not store.get_by_source(SCOPE, "fg-s"), "the forgotten rows were not purged"
        grant = store.get_source_access(SCOPE, ["fg-s"]).get("fg-s")
        assert grant is None or grant.is_empty, "the grant of the forgotten content stayed"
        _source(store, "fg-s", "the new words")
        _grant_all(store, "fg-s")
        for path, seen in _served(store).items():
            assert "fg-s#0001" in seen and "fg-d1" not in seen, path
        (row,) = store.get_by_source(SCOPE, "fg-s")
        assert row.text == f"the new words {WORD}"
        rollback_generation(store=store, scope=SCOPE, to=before)
        assert not store.get_by_source(SCOPE, "fg-s"), "a rollback brought forgotten rows back"
        _assert_never_served(store, ["fg-s#0001", "fg-d1"], "after the rollback")


class _ForgetsWhileEmbedding:
    """The contract embedder, which forgets ``source_id`` (once) during its first ``embed``."""

    def __init__(self, store: ChunkStore, source_id: str) -> None:
        self.id, self.dimensions = EMBEDDER.id, EMBEDDER.dimensions
        self._store, self._source_id = store, source_id
        self.forgot = False

    def embed(self, texts: Sequence[str]) -> VectorMatrix:
        if not self.forgot:
            self.forgot = True
            _forget(self._store, self._source_id)
        return EMBEDDER.embed(texts)


def _bound(store: ChunkStore) -> dict[str, Any]:
    return {"embedder": EMBEDDER, "store": store, "scope": SCOPE}


class ChunkStoreRepointUniquenessContract(_ChunkStoreContractBase):
    """Re-pointing keeps record ids unique at every pointer a scope can reach."""

    def _refused(self, store: ChunkStore, from_id: str, to_id: str) -> None:
        before = {s: list(store.get_by_source(SCOPE, s)) for s in (from_id, to_id)}
        with pytest.raises(ValidationError) as caught:
            repoint_source(scope=SCOPE, store=store, from_id=from_id, to_id=to_id)
        assert caught.value.field == "to_id"
        assert {s: list(store.get_by_source(SCOPE, s)) for s in (from_id, to_id)} == before

    def test_repoint_onto_a_deleted_id_that_rollback_can_restore_is_refused(
        self, store: ChunkStore
    ) -> None:
        """Checks ``RecordRepository.rekey``, ``repoint_source``: with a (gen 1), b (gen 2) and b
        deleted, re-pointing a -> b is ``ValidationError(field="to_id")``, since rolling back to 2
        would show two ``b#0001``; the rollback itself still works and ids stay unique.

        If this fails, check ``rekey``: a retired row of the destination id retired above
        max(moved row's generation, floor) collides (``ragport.ports.store.rekey_collides``).
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "uq-a", "text of a")
        _source(store, "uq-b", "text of b")
        two = store.current_generation(SCOPE)
        delete_source(source_id="uq-b", store=store, scope=SCOPE)
        self._refused(store, "uq-a", "uq-b")
        rollback_generation(store=store, scope=SCOPE, to=two)
        _ids_unique_everywhere(store, SCOPE, ["uq-a", "uq-b"])
        assert [r.text for r in store.get_by_source(SCOPE, "uq-b")] == [f"text of b {WORD}"]

    def test_repoint_onto_a_staged_delete_is_refused(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.rekey``, ``repoint_source``: after a staged (unpublished)
        delete of c, re-pointing a -> c is ``ValidationError(field="to_id")``, since c's rows are
        still visible at the current pointer.

        If this fails, check ``rekey``: a row retired at a generation above the pointer is
        still visible there.
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "uq-a", "text of a")
        _source(store, "uq-c", "text of c")
        replace_source(
            source_id="uq-c",
            chunks=[],
            embedder=EMBEDDER,
            store=store,
            scope=SCOPE,
            write_options=WriteOptions(advance_generation=False),
        )
        self._refused(store, "uq-a", "uq-c")
        _ids_unique_everywhere(store, SCOPE, ["uq-a", "uq-c"])

    def test_repoint_onto_an_id_no_reachable_pointer_shows_is_allowed(
        self, store: ChunkStore
    ) -> None:
        """Checks ``RecordRepository.rekey``, ``repoint_source``, ``compact``: with b deleted and a
        written after the delete, a -> b moves, and every pointer from the floor up shows unique
        ids; once compaction raises the floor past a deletion, the move that was refused is allowed.

        If this fails, check ``rekey_collides``: the moved row is only visible from its own
        generation on, and nothing below the floor can come back.
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "uq-b", "old b")
        delete_source(source_id="uq-b", store=store, scope=SCOPE)
        _source(store, "uq-a", "text of a")  # written after b's deletion
        result = repoint_source(scope=SCOPE, store=store, from_id="uq-a", to_id="uq-b")
        assert result.moved_chunks == 1
        top = store.current_generation(SCOPE)
        for pointer in range(top, 0, -1):
            rollback_generation(store=store, scope=SCOPE, to=pointer)
            _ids_unique_everywhere(store, SCOPE, ["uq-a", "uq-b"])

        _source(store, "uq-c", "text of c")
        _source(store, "uq-a", "a again")
        delete_source(source_id="uq-c", store=store, scope=SCOPE)
        self._refused(store, "uq-a", "uq-c")  # c's rows are restorable
        _source(store, "uq-b", "b later")  # one generation past the deletion of c ...
        compact(store=store, scope=SCOPE, keep=0)  # ... so compaction can raise the floor past it
        moved = repoint_source(scope=SCOPE, store=store, from_id="uq-a", to_id="uq-c")
        assert moved.moved_chunks == 1
        _ids_unique_everywhere(store, SCOPE, ["uq-a", "uq-c"])

    def test_rekey_of_two_ids_onto_one_is_refused(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.rekey``: ``{"a#0001": "x#0001", "b#0001": "x#0001"}`` is
        ``ValidationError(field="to_id")`` and nothing moves, even though no stored row of
        ``x#0001`` exists (two rows at one generation would share one id).

        If this fails, check that ``rekey`` runs ``ragport.ports.store.check_rekey_moves``
        before it reads or writes anything.
        """
        _require_transactions(store)
        _require_generations(store)
        _source(store, "uq2-a", "text of a")
        _source(store, "uq2-b", "text of b")
        before = {s: list(store.get_by_source(SCOPE, s)) for s in ("uq2-a", "uq2-b", "uq2-x")}
        with store.unit_of_work(SCOPE) as uow, pytest.raises(ValidationError) as caught:
            uow.records.rekey(
                {"uq2-a#0001": "uq2-x#0001", "uq2-b#0001": "uq2-x#0001"}, to_source_id="uq2-x"
            )
        assert caught.value.field == "to_id"
        after = {s: list(store.get_by_source(SCOPE, s)) for s in ("uq2-a", "uq2-b", "uq2-x")}
        assert after == before
