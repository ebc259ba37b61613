"""``ChunkStoreScopeContract``: exact scope isolation, nothing matches by prefix."""

from __future__ import annotations

import pytest

from ragport.contract_tests._support import granted, hash_vector, publish_sources, visible_pairs
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    DIMS,
    LOOKALIKE_SCOPES,
    OTHER_CORPUS,
    OTHER_TENANT,
    QUERY_ALL,
    SCOPE,
    _pairs,
    _query_pairs,
)
from ragport.domain.model import Grant, Scope, Tombstone
from ragport.ports.store import ChunkStore

__all__ = ["ChunkStoreScopeContract"]


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
        """Checks ``ChunkStore.query``, ``ChunkStore.get_by_source``, ``ChunkStore.list_embedders``,
        ``ChunkStore.current_generation``: for two scopes a sloppy key would confuse (a prefix, a
        joined key, a LIKE wildcard, case, padding), reads in one never return the other's records,
        embedders or pointer, even with the other's vectors as probes.

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
        """Checks ``RecordRepository.retire_source``: deleting a source in one corpus leaves the
        same source id in another corpus visible to ``get_by_source`` and ``query``.

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
        """Checks ``ChunkStore.current_generation``, ``GenerationRepository.counter``,
        ``GenerationRepository.stage``: publishing in one scope moves only that scope's pointer and
        counter; another corpus or tenant stays at 0 and stages generation 1.

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
        """Checks ``GrantRepository.get``, ``TombstoneRepository.list``,
        ``ChunkStore.list_invalidated_ids``: grants and tombstones written in one scope are absent
        from another corpus and another tenant.

        If this fails, check that the grant and tombstone tables are keyed by exact scope.
        """
        with store.unit_of_work(SCOPE) as uow:
            uow.grants.set(granted(uow.scope, [Grant("doc", principal_ids=("alice",))]))
            uow.tombstones.add([Tombstone("doc")])
            uow.commit()
        for scope in (OTHER_CORPUS, OTHER_TENANT):
            assert store.list_invalidated_ids(scope) == frozenset()
            with store.unit_of_work(scope) as uow:
                assert dict(uow.grants.get(["doc"])) == {}
                assert list(uow.tombstones.list()) == []
        assert store.list_invalidated_ids(SCOPE) == frozenset({"doc"})
