"""Reading back what a corpus holds: ``get_source_access`` (``ChunkStoreGrantReadContract``,
needs ``authorization == "acl"``) and ``list_source_ids`` (``ChunkStoreSourceListContract``).

Both are part of ``ChunkStoreContract``.
"""

from __future__ import annotations

from ragport.application.generations import rollback_generation
from ragport.contract_tests._support import granted, publish_sources
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    OTHER_CORPUS,
    OTHER_TENANT,
    SCOPE,
    _require_acl,
)
from ragport.contract_tests.chunk_store.access import GRANTS
from ragport.domain.model import Grant
from ragport.ports.store import ChunkStore

__all__ = ["ChunkStoreGrantReadContract", "ChunkStoreSourceListContract"]


class ChunkStoreGrantReadContract(_ChunkStoreContractBase):
    """Grants read back by source id, exactly as set, in the one scope that holds them."""

    def test_get_source_access_returns_the_grants_as_set(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.get_source_access``: it returns the grant of each asked source that
        has one, once, with the fields ``set_source_access`` stored; sources without one are absent,
        an empty grant is present, and no ids give an empty mapping.

        If this fails, check that get_source_access reads the grants table (or map) of the
        exact scope, de-duplicates the ids, and keeps principal ids, group ids and
        access_version as set_source_access stored them.
        """
        _require_acl(store)
        store.set_source_access(SCOPE, granted(SCOPE, GRANTS))
        asked = ["s-v2", "s-empty", "s-none", "s-v2", "s-group"]
        found = dict(store.get_source_access(SCOPE, asked))
        assert set(found) == {"s-v2", "s-empty", "s-group"}
        by_source = {g.source_id: g for g in GRANTS}
        for source_id, grant in found.items():
            assert isinstance(grant, Grant)
            want = by_source[source_id]
            assert grant.source_id == source_id
            assert set(grant.principal_ids) == set(want.principal_ids), source_id
            assert set(grant.group_ids) == set(want.group_ids), source_id
            assert grant.access_version == want.access_version, source_id
        assert dict(store.get_source_access(SCOPE, [])) == {}

    def test_get_source_access_reads_the_latest_grant(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.get_source_access``, ``ChunkStore.set_source_access``: after a second
        ``set_source_access`` for a source, ``get_source_access`` returns only the second grant.

        If this fails, check that set_source_access replaces (not merges) a source's grant
        and that get_source_access does not cache.
        """
        _require_acl(store)
        store.set_source_access(SCOPE, granted(SCOPE, [Grant("s-x", principal_ids=("alice",))]))
        store.set_source_access(
            SCOPE, granted(SCOPE, [Grant("s-x", group_ids=("g9",), access_version=3)])
        )
        grant = store.get_source_access(SCOPE, ["s-x"])["s-x"]
        assert tuple(grant.principal_ids) == ()
        assert tuple(grant.group_ids) == ("g9",)
        assert grant.access_version == 3

    def test_get_source_access_is_scoped_exactly(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.get_source_access``: grants of one scope are absent from another
        corpus and another tenant.

        If this fails, check that get_source_access filters on tenant, resource and corpus.
        """
        _require_acl(store)
        store.set_source_access(SCOPE, granted(SCOPE, GRANTS))
        assert dict(store.get_source_access(OTHER_CORPUS, ["s-v2", "s-group"])) == {}
        assert dict(store.get_source_access(OTHER_TENANT, ["s-v2", "s-group"])) == {}


class ChunkStoreSourceListContract(_ChunkStoreContractBase):
    """``list_source_ids`` pages through the sources visible at the pointer."""

    def test_list_source_ids_pages_visible_sources_in_code_point_order(
        self, store: ChunkStore
    ) -> None:
        """Checks ``ChunkStore.list_source_ids``: visible sources come back once each, in code-point
        order, paged by ``after`` and ``limit``; a deleted source is gone, another corpus lists
        nothing, and (with ``generations``) a rollback to before the delete lists it again.

        If this fails, check list_source_ids: DISTINCT over visible chunk records (pointer
        visibility, not retired_generation alone), COLLATE "C" order, the ``after`` bound.
        """
        names = ["b", "B", "a/2", "a/10", "é"]
        publish_sources(store, SCOPE, {name: [f"text of {name}"] for name in names})
        expected = sorted(names)
        assert list(store.list_source_ids(SCOPE)) == expected
        first = list(store.list_source_ids(SCOPE, limit=2))
        rest = list(store.list_source_ids(SCOPE, after=first[-1], limit=10))
        assert first + rest == expected
        before = store.current_generation(SCOPE)
        publish_sources(store, SCOPE, {"b": None})
        assert "b" not in store.list_source_ids(SCOPE)
        assert list(store.list_source_ids(OTHER_CORPUS)) == []
        if store.capabilities.generations:
            rollback_generation(store=store, scope=SCOPE, to=before)
            assert list(store.list_source_ids(SCOPE)) == expected
