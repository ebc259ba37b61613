"""The MCP ``list_sources`` cursor (issue 24 item 4): it pages over the sources the caller may
see, carries nothing else, and is refused when it was not signed by this server."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import anyio
import pytest
from mcp import Client

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.domain.status import IngestionStatus, encode_status_cursor
from ragport.integrations.mcp import build_server

SCOPE = ragport.Scope("acme", "kb", "handbook")
ALICE = ragport.Authorization("alice", "acme", group_ids=("staff",))
VISIBLE = ["a-handbook.md", "c-holidays.md", "e-travel.md", "g-laptops.md"]
WITHHELD = [
    "b-hr/layoffs-2027-names.md",
    "d-hr/salaries.md",
    "f-board/merger.md",
    "h-hr/reviews.md",
    "i-hr/exits.md",
]
FORGOTTEN = "bb-forgotten.md"
_B64_RUN = re.compile(r"[A-Za-z0-9_\-+/]{8,}={0,2}")


@pytest.fixture
def parts() -> dict[str, Any]:
    """Status rows for every source, staff grants on VISIBLE only, and one forgotten source."""
    store, status = InMemoryStore(), InMemoryStatusStore()
    for source_id in [*VISIBLE, *WITHHELD, FORGOTTEN]:
        status.put(IngestionStatus(scope=SCOPE, source_id=source_id, state="indexed"))
    store.set_source_access(
        SCOPE,
        [ragport.Grant(s, group_ids=("staff",)) for s in [*VISIBLE, FORGOTTEN]]
        + [ragport.Grant(s, principal_ids=("ceo",)) for s in WITHHELD],
    )
    with store.unit_of_work(SCOPE) as uow:
        uow.tombstones.add([ragport.domain.Tombstone(FORGOTTEN)])
        uow.commit()
    return {"store": store, "status_store": status, "embedder": HashEmbedder(), "scope": SCOPE}


def _call(server: Any, **args: Any) -> Any:
    async def run() -> Any:
        async with Client(server) as client:
            return await client.call_tool("list_sources", args)

    return anyio.run(run)


def _walk(server: Any, limit: int) -> list[tuple[list[str], str | None]]:
    """Every page from the first until the cursor is None: (source ids, cursor)."""
    pages: list[tuple[list[str], str | None]] = []
    cursor: str | None = None
    for _ in range(len(VISIBLE) + len(WITHHELD) + 3):
        page = _call(server, limit=limit, cursor=cursor)
        assert not page.is_error
        cursor = page.structured_content["cursor"]
        pages.append(([s["source_id"] for s in page.structured_content["sources"]], cursor))
        if cursor is None:
            return pages
    raise AssertionError("the cursor never ended")


def _decodings(text: str, depth: int = 4) -> list[bytes]:
    """``text`` and everything reachable by base64-decoding runs of it, recursively."""
    out = [text.encode()]
    if depth == 0:
        return out
    for run in _B64_RUN.findall(text):
        for decode in (base64.urlsafe_b64decode, base64.b64decode):
            try:
                raw = decode(run + "=" * (-len(run) % 4))
            except (binascii.Error, ValueError):
                continue
            out.append(raw)
            out += _decodings(raw.decode("latin-1"), depth - 1)
    return out


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_pages_hold_only_visible_sources_each_once(parts: dict[str, Any], limit: int) -> None:
    """Walking every page reaches each readable source exactly once and nothing else.

    If this fails, check that list_sources filters each status page before cutting it.
    """
    pages = _walk(build_server(**parts, authorization=ALICE), limit)
    seen = [s for ids, _ in pages for s in ids]
    assert seen == VISIBLE


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_only_the_last_page_is_short(parts: dict[str, Any], limit: int) -> None:
    """Filtering never yields a short page that has a next cursor, nor one ending the walk early.

    If this fails, check that list_sources keeps reading status pages until it has ``limit``
    visible rows or the status store's end.
    """
    pages = _walk(build_server(**parts, authorization=ALICE), limit)
    for ids, cursor in pages[:-1]:
        assert cursor is not None and len(ids) == limit
    assert sum(len(ids) for ids, _ in pages) == len(VISIBLE)


@pytest.mark.parametrize("limit", [1, 2])
def test_no_cursor_carries_a_withheld_id(parts: dict[str, Any], limit: int) -> None:
    """No cursor, however decoded, names a withheld or forgotten source.

    If this fails, check that the cursor continues after the last *visible* row of the page.
    """
    pages = _walk(build_server(**parts, authorization=ALICE), limit)
    cursors = [c for _, c in pages if c is not None]
    assert cursors
    for cursor in cursors:
        for raw in _decodings(cursor):
            for hidden in [*WITHHELD, FORGOTTEN]:
                assert hidden.encode() not in raw


def test_an_old_format_cursor_is_refused(parts: dict[str, Any]) -> None:
    """A cursor forged the old way (the status store's base64 JSON) is a tool error.

    If this fails, check that list_sources verifies the cursor's signature before using it.
    """
    server = build_server(**parts, authorization=ALICE)
    for after in (WITHHELD[0], VISIBLE[0]):
        page = _call(server, limit=1, cursor=encode_status_cursor(SCOPE, after))
        assert page.is_error and page.structured_content is None


def test_a_tampered_or_foreign_cursor_is_refused(parts: dict[str, Any]) -> None:
    """A cursor altered by one character, or signed by another server, is a tool error.

    If this fails, check the per-server key and the signature check in list_sources.
    """
    server = build_server(**parts, authorization=ALICE)
    first = _call(server, limit=1)
    cursor = first.structured_content["cursor"]
    assert cursor is not None
    assert not _call(server, limit=1, cursor=cursor).is_error
    flipped = cursor[:-2] + ("A" if cursor[-2] != "A" else "B") + cursor[-1]
    assert _call(server, limit=1, cursor=flipped).is_error
    other = build_server(**parts, authorization=ALICE)
    assert _call(other, limit=1, cursor=cursor).is_error


def test_trusted_server_walks_every_listed_source(parts: dict[str, Any]) -> None:
    """Without an authorization every source but the forgotten one is reached once.

    If this fails, check the unfiltered path of list_sources.
    """
    pages = _walk(build_server(**parts), 2)
    seen = [s for ids, _ in pages for s in ids]
    assert seen == sorted([*VISIBLE, *WITHHELD])


class _ShiftingStatuses:
    """A status store that slips a withheld status in before every re-read of a page (a
    shorter ``limit`` than the first read), ``times`` times at most."""

    def __init__(self, inner: InMemoryStatusStore, times: int) -> None:
        self._inner, self._left, self._n = inner, times, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def list_page(self, scope: ragport.Scope, *, limit: int, cursor: str | None = None) -> Any:
        if limit < 200 and self._left > 0:
            self._left -= 1
            self._n += 1
            self._inner.put(
                IngestionStatus(
                    scope=scope, source_id=f"a-{self._n:03d}-hr/new.md", state="pending"
                )
            )
        return self._inner.list_page(scope, limit=limit, cursor=cursor)


def test_statuses_changing_between_reads_never_leak(parts: dict[str, Any]) -> None:
    """A status written between the two reads of one page restarts it; the cursor stays clean.

    If this fails, check that list_sources compares the re-read page's last row with the one
    it cut at before handing out its cursor.
    """
    shifting = _ShiftingStatuses(parts["status_store"], times=1)
    server = build_server(**{**parts, "status_store": shifting}, authorization=ALICE)
    page = _call(server, limit=1)
    assert [s["source_id"] for s in page.structured_content["sources"]] == VISIBLE[:1]
    assert shifting._n == 1
    cursor = page.structured_content["cursor"]
    for raw in _decodings(cursor):
        assert b"hr/" not in raw


def test_statuses_that_never_settle_are_a_tool_error(parts: dict[str, Any]) -> None:
    """If every re-read differs, list_sources answers an error, never a page with a bad cursor.

    If this fails, check the bounded retries of _Sources._visible_page (list_sources).
    """
    shifting = _ShiftingStatuses(parts["status_store"], times=100)
    server = build_server(**{**parts, "status_store": shifting}, authorization=ALICE)
    page = _call(server, limit=1)
    assert page.is_error and page.structured_content is None
