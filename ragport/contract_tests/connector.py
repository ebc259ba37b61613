"""``ConnectorContract``: the promises of ``ragport.ports.sync.Connector`` as pytest tests.

A connector reads an upstream system the test must be able to change, so the suite needs two
fixtures: ``connector`` (the adapter under test, over an *empty* upstream) and
``connector_harness`` (a ``ConnectorHarness`` that adds, edits and removes items upstream)::

    class TestMyConnector(ConnectorContract):
        @pytest.fixture
        def connector_harness(self, tmp_path):
            yield MyHarness(tmp_path)        # add(name, data) -> source id, edit, remove

        @pytest.fixture
        def connector(self, connector_harness):
            yield MyConnector(connector_harness.root)

Override a test only by wrapping it in ``pytest.mark.xfail(reason=...)``.
"""

from __future__ import annotations

from typing import Protocol

import pytest

from ragport.contract_tests._base import ContractSuite, required_fixture
from ragport.domain.errors import SyncCursorError
from ragport.ports.documents import LoadedDocument
from ragport.ports.sync import Connector, Page

__all__ = ["ConnectorContract", "ConnectorHarness"]

MAX_PAGES = 1_000


class ConnectorHarness(Protocol):
    """Changes the upstream system the ``connector`` fixture reads."""

    def add(self, name: str, data: bytes) -> str:
        """Create an item called ``name`` (a plain file name) with ``data``; its source id."""
        ...

    def edit(self, source_id: str, data: bytes) -> None:
        """Replace the content of an existing item."""
        ...

    def remove(self, source_id: str) -> None:
        """Delete an item upstream (a trash counts)."""
        ...


def _bootstrap(connector: Connector) -> tuple[list[Page], str | None]:
    pages = [connector.bootstrap(None)]
    while not pages[-1].exhausted:
        assert len(pages) < MAX_PAGES, "bootstrap never returned an exhausted page"
        pages.append(connector.bootstrap(pages[-1].cursor))
    return pages, pages[-1].cursor


def _changes(connector: Connector, cursor: str) -> tuple[list[Page], str]:
    pages = [connector.changes(cursor)]
    while not pages[-1].exhausted:
        assert len(pages) < MAX_PAGES, "changes never returned an exhausted page"
        nxt = pages[-1].cursor
        assert nxt is not None, "a non-exhausted page must carry a cursor"
        pages.append(connector.changes(nxt))
    last = pages[-1].cursor
    assert isinstance(last, str), "the last page of changes must carry the next cursor"
    return pages, last


def _summary(pages: list[Page]) -> tuple[list[str], list[str]]:
    upserts = [u.source_id for p in pages for u in p.upserts]
    deletions = [d for p in pages for d in p.deletions]
    return upserts, deletions


def _load(page_items: list[Page], source_id: str) -> bytes:
    for page in page_items:
        for upsert in page.upserts:
            if upsert.source_id == source_id:
                loaded = upsert.load()
                assert isinstance(loaded, LoadedDocument)
                return loaded.data
    raise AssertionError(f"{source_id!r} was not listed")


class ConnectorContract(ContractSuite):
    """Bootstrap listings, incremental changes, idempotent replays and cursor errors."""

    connector_harness = required_fixture(
        "ConnectorContract",
        "connector_harness",
        "yield a ConnectorHarness (add, edit, remove) over an empty upstream system",
    )
    connector = required_fixture(
        "ConnectorContract",
        "connector",
        "yield a Connector reading the `connector_harness` upstream",
    )

    def test_fixture_yields_an_empty_upstream(self, connector: Connector) -> None:
        """Checks ``Connector.id``, ``Connector.bootstrap``, ``Connector.changes``: the adapter
        defines every member, ``id`` is a non-empty string, and over an empty upstream ``bootstrap``
        lists nothing and ends on an exhausted page with a string cursor.

        If this fails, check that the fixtures start from an empty upstream and that
        bootstrap pages end with exhausted=True and the cursor changes will start from.
        """
        assert isinstance(connector, Connector)
        assert isinstance(connector.id, str) and connector.id
        pages, cursor = _bootstrap(connector)
        assert _summary(pages) == ([], [])
        assert isinstance(cursor, str)

    def test_bootstrap_lists_every_item_once_with_its_bytes(
        self, connector: Connector, connector_harness: ConnectorHarness
    ) -> None:
        """Checks ``Connector.bootstrap``, ``Upsert.load``: thirty items come back, each source id
        once over all pages and no deletion, and ``load()`` gives a ``LoadedDocument`` with the
        item's exact bytes.

        If this fails, check the paging of bootstrap (resume strictly after the cursor) and
        that load() returns a LoadedDocument with the item's exact bytes.
        """
        data = {
            connector_harness.add(f"doc-{i:02d}.txt", f"item {i}\n".encode()): f"item {i}\n"
            for i in range(30)
        }
        pages, _ = _bootstrap(connector)
        upserts, deletions = _summary(pages)
        assert sorted(upserts) == sorted(data) and len(upserts) == 30
        assert deletions == []
        for source_id in sorted(data)[::7]:
            assert _load(pages, source_id) == data[source_id].encode()

    def test_no_change_gives_an_empty_exhausted_page_every_time(
        self, connector: Connector, connector_harness: ConnectorHarness
    ) -> None:
        """Checks ``Connector.changes``: after a bootstrap with nothing changed upstream,
        ``changes(cursor)`` lists no upsert and no deletion, on every call.

        If this fails, check that changes compares against the state the cursor records (not
        against the last call) and reports nothing when nothing changed.
        """
        connector_harness.add("a.txt", b"alpha\n")
        _, cursor = _bootstrap(connector)
        assert cursor is not None
        for _ in range(2):
            pages, _next = _changes(connector, cursor)
            assert _summary(pages) == ([], [])

    def test_changes_report_adds_edits_and_removals(
        self, connector: Connector, connector_harness: ConnectorHarness
    ) -> None:
        """Checks ``Connector.changes``: an added and an edited item are upserts (the edit with its
        new bytes), a removed one a deletion, and an unchanged one is not listed.

        If this fails, check how changes detects new, modified and vanished items.
        """
        keep = connector_harness.add("keep.txt", b"keep\n")
        edit = connector_harness.add("edit.txt", b"before\n")
        gone = connector_harness.add("gone.txt", b"gone\n")
        _, cursor = _bootstrap(connector)
        assert cursor is not None
        added = connector_harness.add("new.txt", b"new\n")
        connector_harness.edit(edit, b"after, and longer\n")
        connector_harness.remove(gone)
        pages, _ = _changes(connector, cursor)
        upserts, deletions = _summary(pages)
        assert sorted(set(upserts)) == sorted({added, edit})
        assert deletions == [gone]
        assert keep not in upserts
        assert _load(pages, edit) == b"after, and longer\n"

    def test_replaying_a_cursor_gives_the_same_changes(
        self, connector: Connector, connector_harness: ConnectorHarness
    ) -> None:
        """Checks ``Connector.changes``: called twice with the same cursor (a crash before the
        checkpoint moved), it answers the same upserts and deletions.

        If this fails, check that changes has no side effect on the cursor it was given.
        """
        connector_harness.add("a.txt", b"a\n")
        gone = connector_harness.add("b.txt", b"b\n")
        _, cursor = _bootstrap(connector)
        assert cursor is not None
        connector_harness.add("c.txt", b"c\n")
        connector_harness.remove(gone)
        first = _summary(_changes(connector, cursor)[0])
        second = _summary(_changes(connector, cursor)[0])
        assert first == second and first[0] and first[1] == [gone]

    def test_following_the_cursor_sees_each_change_once(
        self, connector: Connector, connector_harness: ConnectorHarness
    ) -> None:
        """Checks ``Connector.changes``: an upstream change is listed once; the cursor of the page
        that listed it reports nothing more until the next change.

        If this fails, check that the last page's cursor records the state after the changes.
        """
        _, cursor = _bootstrap(connector)
        assert cursor is not None
        added = connector_harness.add("a.txt", b"a\n")
        pages, cursor = _changes(connector, cursor)
        assert _summary(pages) == ([added], [])
        pages, cursor = _changes(connector, cursor)
        assert _summary(pages) == ([], [])

    @pytest.mark.parametrize("cursor", ["", "not-a-cursor", "%%%", "eyJ2IjogOTl9"])
    def test_a_foreign_cursor_is_a_sync_cursor_error(
        self, connector: Connector, cursor: str
    ) -> None:
        """Checks ``Connector.changes``: a cursor the connector did not issue (empty, words,
        symbols, foreign base64) is ``SyncCursorError``, never an empty page.

        If this fails, check the cursor decoding of changes: refuse what you did not issue.
        """
        with pytest.raises(SyncCursorError):
            connector.changes(cursor)

    def test_isolation_canary(self, connector: Connector) -> None:
        """Checks ``Connector.bootstrap``: collected after every other contract test, the upstream
        is empty again (``bootstrap`` lists nothing).

        If this fails, check that the `connector_harness` fixture gives every test its own
        upstream (a fresh folder, a new fake server state), not one shared between tests.
        """
        pages, _ = _bootstrap(connector)
        assert _summary(pages) == ([], [])
