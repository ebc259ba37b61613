"""``IngestionStatusStoreContract``: the promises of ``ragport.ports.status`` as pytest tests.

Subclass it and supply a ``status_store`` fixture that yields an *empty* store and cleans up::

    class TestMyStatusStore(IngestionStatusStoreContract):
        @pytest.fixture
        def status_store(self):
            store = MyStatusStore(...)
            yield store
            store.drop_everything()

Override a test only by wrapping it in ``pytest.mark.xfail(reason=...)``.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from ragport.contract_tests._base import ContractSuite, required_fixture
from ragport.contract_tests._support import FixedClock
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope
from ragport.domain.status import IngestionState, IngestionStatus, StatusPage
from ragport.ports.status import IngestionStatusStore

__all__ = ["IngestionStatusStoreContract"]

SCOPE = Scope("contract-tenant", "contract-resource", "contract-corpus")
OTHER_CORPUS = Scope("contract-tenant", "contract-resource", "contract-corpus-2")
PREFIX_CORPUS = Scope("contract-tenant", "contract-resource", "contract-corpus-")
OTHER_TENANT = Scope("contract-tenant-2", "contract-resource", "contract-corpus")
ALL_SCOPES = (SCOPE, OTHER_CORPUS, PREFIX_CORPUS, OTHER_TENANT)


def _status(
    scope: Scope, source_id: str, state: IngestionState = "indexed", **changes: Any
) -> IngestionStatus:
    """A fully populated status (every field set) stamped by the fixed contract clock."""
    status = IngestionStatus(
        scope,
        source_id,
        state,
        bytes=1_234,
        chunks_total=3,
        chunks_indexed=3 if state == "indexed" else 1,
        updated_at=FixedClock().now(),
        freshness="current",
    )
    return attrs.evolve(status, **changes)


def _source_ids(n: int) -> list[str]:
    # Zero-padded digits after a shared prefix sort the same under every collation.
    return [f"src-{i:04d}" for i in range(n)]


def _shuffled(items: list[str]) -> list[str]:
    """A fixed permutation (stride 7 over the list) so puts do not arrive in order."""
    n = len(items)
    stride = 7 if n % 7 else 11
    return [items[(i * stride) % n] for i in range(n)]


def _assert_empty(store: IngestionStatusStore) -> None:
    """Every scope the suite writes to lists nothing (``list_page`` sees every source)."""
    for scope in ALL_SCOPES:
        page = store.list_page(scope, limit=200)
        assert (tuple(page.items), page.cursor) == ((), None), f"{scope} lists statuses"


def _pages(store: IngestionStatusStore, scope: Scope, limit: int) -> list[StatusPage]:
    pages = [store.list_page(scope, limit=limit)]
    while pages[-1].cursor is not None:
        assert len(pages) < 1_000, "list_page never returned a None cursor"
        pages.append(store.list_page(scope, limit=limit, cursor=pages[-1].cursor))
    return pages


class IngestionStatusStoreContract(ContractSuite):
    """Put/get/delete per exact scope and stable, scope-bound paging by source id."""

    status_store = required_fixture(
        "IngestionStatusStoreContract",
        "status_store",
        "yield an empty IngestionStatusStore and remove whatever the test wrote afterwards",
    )

    def test_fixture_yields_an_empty_store(self, status_store: IngestionStatusStore) -> None:
        """Checks ``IngestionStatusStore.put``, ``IngestionStatusStore.get``,
        ``IngestionStatusStore.list_page``, ``IngestionStatusStore.delete``: the adapter defines
        every member, and a fresh store lists nothing (no items, cursor ``None``) in any scope the
        suite uses.

        If this fails, check that the `status_store` fixture yields a new or emptied store.
        """
        assert isinstance(status_store, IngestionStatusStore)
        _assert_empty(status_store)

    def test_put_then_get_round_trips(self, status_store: IngestionStatusStore) -> None:
        """Checks ``IngestionStatusStore.put``, ``IngestionStatusStore.get``: ``get`` returns
        exactly the status ``put`` stored, field for field, and ``None`` for an unknown source.

        If this fails, check that every IngestionStatus field is stored and read back.
        """
        status = _status(SCOPE, "doc", "partial", error="timeout after 3 of 5", bytes=99)
        status_store.put(status)
        assert status_store.get(SCOPE, "doc") == status
        assert status_store.get(SCOPE, "missing") is None

    def test_put_replaces_the_status_of_a_source(self, status_store: IngestionStatusStore) -> None:
        """Checks ``IngestionStatusStore.put``: a second put for the same (scope, source) replaces
        the first, so ``get`` and ``list_page`` show only the second.

        If this fails, check that put upserts on (scope, source_id) rather than appending.
        """
        status_store.put(_status(SCOPE, "doc", "pending"))
        final = _status(SCOPE, "doc", "indexed", updated_at=FixedClock().advance(60))
        status_store.put(final)
        assert status_store.get(SCOPE, "doc") == final
        assert list(status_store.list_page(SCOPE, limit=10).items) == [final]

    def test_same_source_id_in_other_scopes_is_separate(
        self, status_store: IngestionStatusStore
    ) -> None:
        """Checks ``IngestionStatusStore.put``, ``IngestionStatusStore.get``,
        ``IngestionStatusStore.list_page``, ``IngestionStatusStore.delete``: the same source id in
        other corpora, tenants and a prefix corpus keeps its own status, and deleting it in one
        scope leaves the others.

        If this fails, check that put, get, list_page and delete key on the exact scope
        (no prefix match).
        """
        cycle: tuple[IngestionState, ...] = ("indexed", "failed", "pending", "partial")
        states = dict(zip(ALL_SCOPES, cycle, strict=True))
        for scope, state in states.items():
            status_store.put(_status(scope, "doc", state))
        for scope, state in states.items():
            got = status_store.get(scope, "doc")
            assert got is not None and (got.scope, got.state) == (scope, state)
            page = status_store.list_page(scope, limit=10)
            assert [(s.scope, s.state) for s in page.items] == [(scope, state)]
        assert status_store.delete(SCOPE, "doc") is True
        for scope in ALL_SCOPES[1:]:
            assert status_store.get(scope, "doc") is not None

    def test_list_page_orders_by_source_id(self, status_store: IngestionStatusStore) -> None:
        """Checks ``IngestionStatusStore.list_page``: it returns the scope's statuses ordered by
        source id, whatever the put order, with a ``None`` cursor when they fit one page.

        If this fails, check the ORDER BY source_id of list_page.
        """
        ids = _source_ids(30)
        for source_id in _shuffled(ids):
            status_store.put(_status(SCOPE, source_id))
        page = status_store.list_page(SCOPE, limit=200)
        assert [s.source_id for s in page.items] == ids
        assert page.cursor is None

    def test_paging_returns_every_item_once(self, status_store: IngestionStatusStore) -> None:
        """Checks ``IngestionStatusStore.list_page``: 120 statuses at limit 50 come as pages of 50,
        50 and 20, each once, in source-id order, of the asked scope only, and only the last page
        has a ``None`` cursor.

        If this fails, check the cursor: it must resume strictly after the last id returned.
        """
        ids = _source_ids(120)
        for source_id in _shuffled(ids):
            status_store.put(_status(SCOPE, source_id))
        status_store.put(_status(OTHER_CORPUS, "src-0000"))
        pages = _pages(status_store, SCOPE, 50)
        assert [len(p.items) for p in pages] == [50, 50, 20]
        assert [p.cursor is None for p in pages] == [False, False, True]
        assert [s.source_id for p in pages for s in p.items] == ids
        assert all(s.scope == SCOPE for p in pages for s in p.items)

    @pytest.mark.parametrize("limit", [0, -1, 201, 10_000])
    def test_limit_outside_1_to_200_is_rejected(
        self, status_store: IngestionStatusStore, limit: int
    ) -> None:
        """Checks ``IngestionStatusStore.list_page``: a limit outside 1..200 raises
        ``ValidationError``; above 200 it names the ``status_page`` limit.

        If this fails, check the limit check of list_page (Limits.status_page, hard ceiling 200).
        """
        status_store.put(_status(SCOPE, "doc"))
        with pytest.raises(ValidationError) as caught:
            status_store.list_page(SCOPE, limit=limit)
        if limit > 200:
            assert caught.value.limit == "status_page"

    @pytest.mark.parametrize("limit", [1, 200])
    def test_limit_bounds_are_accepted(
        self, status_store: IngestionStatusStore, limit: int
    ) -> None:
        """Checks ``IngestionStatusStore.list_page``: limit 1 and limit 200 are both valid.

        If this fails, check for an off-by-one in the limit check of list_page.
        """
        for source_id in _source_ids(3):
            status_store.put(_status(SCOPE, source_id))
        page = status_store.list_page(SCOPE, limit=limit)
        assert len(page.items) == min(limit, 3)

    def test_cursor_from_another_scope_is_rejected(
        self, status_store: IngestionStatusStore
    ) -> None:
        """Checks ``IngestionStatusStore.list_page``: a cursor issued for one scope raises
        ``ValidationError(field="cursor")`` in another corpus, tenant or prefix corpus, and still
        works in its own scope.

        If this fails, check that the cursor binds the exact scope it was issued for.
        """
        for scope in (SCOPE, OTHER_CORPUS, OTHER_TENANT):
            for source_id in _source_ids(4):
                status_store.put(_status(scope, source_id))
        cursor = status_store.list_page(SCOPE, limit=2).cursor
        assert cursor is not None
        for scope in (OTHER_CORPUS, OTHER_TENANT, PREFIX_CORPUS):
            with pytest.raises(ValidationError) as caught:
                status_store.list_page(scope, limit=2, cursor=cursor)
            assert caught.value.field == "cursor", scope
        assert len(status_store.list_page(SCOPE, limit=2, cursor=cursor).items) == 2

    @pytest.mark.parametrize(
        "cursor",
        [
            "",
            "not-a-cursor",
            "%%%",
            "eyJub3QiOiAiYSBjdXJzb3IifQ==",
            "src-0001",
            "\x00",
            "a" * 5_000,
        ],
        ids=["empty", "words", "symbols", "foreign-base64", "bare-source-id", "nul", "huge"],
    )
    def test_malformed_cursor_is_rejected(
        self, status_store: IngestionStatusStore, cursor: str
    ) -> None:
        """Checks ``IngestionStatusStore.list_page``: a cursor the store did not issue (the empty
        string included) raises ``ValidationError(field="cursor")``.

        If this fails, check the cursor decoding: reject anything that is not a well-formed
        cursor of this store (an empty string is not "no cursor").
        """
        for source_id in _source_ids(3):
            status_store.put(_status(SCOPE, source_id))
        with pytest.raises(ValidationError) as caught:
            status_store.list_page(SCOPE, limit=2, cursor=cursor)
        assert caught.value.field == "cursor"

    def test_delete_reports_whether_it_existed(self, status_store: IngestionStatusStore) -> None:
        """Checks ``IngestionStatusStore.delete``: it returns True for an existing status and False
        after that or in another scope, removes that one status only, and ``get`` then gives
        ``None``.

        If this fails, check the return value of delete and that it removes one row only.
        """
        status_store.put(_status(SCOPE, "doc"))
        status_store.put(_status(SCOPE, "other"))
        assert status_store.delete(SCOPE, "doc") is True
        assert status_store.delete(SCOPE, "doc") is False
        assert status_store.get(SCOPE, "doc") is None
        assert status_store.get(SCOPE, "other") is not None
        assert status_store.delete(OTHER_CORPUS, "other") is False

    def test_isolation_canary(self, status_store: IngestionStatusStore) -> None:
        """Checks ``IngestionStatusStore.list_page``: collected after every other contract test, the
        fixture still yields a store that lists nothing in any scope the suite uses.

        Every test above writes only to the suite's scopes, which ``list_page`` lists whole. If
        this fails, check that the `status_store` fixture does not share state between tests
        (a module-level store, a table not truncated, a class attribute).
        """
        _assert_empty(status_store)
