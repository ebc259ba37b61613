"""list_ingestion_status: exact-scope paging over the ingestion-status store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from doubles import Delegating

import ragport
from ragport.adapters.memory import InMemoryStatusStore

SCOPE = ragport.Scope("tenant-1", "kb", "docs")
OTHER = ragport.Scope("tenant-1", "kb", "archive")
WHEN = datetime(2024, 5, 17, 9, 30, tzinfo=UTC)


def status(
    scope: ragport.Scope, source_id: str, state: str = "indexed"
) -> ragport.domain.IngestionStatus:
    return ragport.domain.IngestionStatus(
        scope=scope,
        source_id=source_id,
        state=state,  # type: ignore[arg-type]
        chunks_total=1,
        chunks_indexed=1 if state == "indexed" else 0,
        updated_at=WHEN,
    )


class LeakyStatusStore(Delegating):
    """A broken status store whose pages include another scope's item."""

    def __init__(self, inner: InMemoryStatusStore, leak: ragport.domain.IngestionStatus) -> None:
        super().__init__(inner)
        self._leak = leak

    def list_page(self, scope: ragport.Scope, *, limit: int, cursor: str | None = None) -> Any:
        page = self._inner.list_page(scope, limit=limit, cursor=cursor)
        return ragport.domain.StatusPage(items=(*page.items[:-1], self._leak), cursor=page.cursor)


@pytest.fixture
def statuses() -> InMemoryStatusStore:
    store = InMemoryStatusStore()
    # Inserted out of order; the same ids also exist in another scope.
    for i in reversed(range(120)):
        store.put(status(SCOPE, f"doc-{i:03d}"))
    for i in range(30):
        store.put(status(OTHER, f"doc-{i:03d}", state="failed"))
    return store


def test_paging_120_sources_by_50(statuses: InMemoryStatusStore) -> None:
    """120 sources page as 50/50/20 in id order. If this fails, check list_ingestion_status."""
    sizes: list[int] = []
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        page = ragport.application.list_ingestion_status(
            store=statuses, scope=SCOPE, limit=50, cursor=cursor
        )
        sizes.append(len(page.items))
        seen.extend(item.source_id for item in page.items)
        assert all(item.scope == SCOPE for item in page.items)
        assert all(item.state == "indexed" for item in page.items)
        cursor = page.cursor
        if cursor is None:
            break
    assert sizes == [50, 50, 20]
    assert seen == [f"doc-{i:03d}" for i in range(120)]


def test_default_limit_is_50(statuses: InMemoryStatusStore) -> None:
    """Without a limit a page holds 50 items. If this fails, check DEFAULT_LIMITS.status_page."""
    page = ragport.application.list_ingestion_status(store=statuses, scope=SCOPE)
    assert len(page.items) == 50
    assert page.cursor is not None


def test_limit_200_is_allowed(statuses: InMemoryStatusStore) -> None:
    """A limit of 200 returns everything in one page. If this fails, check the status_page cap."""
    page = ragport.application.list_ingestion_status(store=statuses, scope=SCOPE, limit=200)
    assert len(page.items) == 120
    assert page.cursor is None


@pytest.mark.parametrize("bad", [201, 0, -1])
def test_limit_outside_range_is_refused(statuses: InMemoryStatusStore, bad: int) -> None:
    """limit outside 1..200 names status_page. If this fails, check check_limit('status_page')."""
    with pytest.raises(ragport.ValidationError) as info:
        ragport.application.list_ingestion_status(store=statuses, scope=SCOPE, limit=bad)
    assert info.value.limit == "status_page"


def test_other_scope_is_separate(statuses: InMemoryStatusStore) -> None:
    """Another scope only sees its own items. If this fails, check exact-scope paging."""
    page = ragport.application.list_ingestion_status(store=statuses, scope=OTHER, limit=200)
    assert len(page.items) == 30
    assert all(item.scope == OTHER and item.state == "failed" for item in page.items)


def test_cursor_from_another_scope_is_refused(statuses: InMemoryStatusStore) -> None:
    """A cursor is bound to its scope. If this fails, check decode_status_cursor."""
    cursor = ragport.application.list_ingestion_status(store=statuses, scope=SCOPE, limit=10).cursor
    assert cursor is not None
    with pytest.raises(ragport.ValidationError):
        ragport.application.list_ingestion_status(
            store=statuses, scope=OTHER, limit=10, cursor=cursor
        )


def test_foreign_item_in_page_is_a_scope_error(statuses: InMemoryStatusStore) -> None:
    """A store leaking another scope's status fails closed. If this fails, check the recheck."""
    leaky = LeakyStatusStore(statuses, leak=status(OTHER, "doc-007", state="failed"))
    with pytest.raises(ragport.domain.errors.ScopeError):
        ragport.application.list_ingestion_status(store=leaky, scope=SCOPE, limit=50)


def test_scope_must_be_a_scope(statuses: InMemoryStatusStore) -> None:
    """A non-Scope scope is a ScopeError. If this fails, check require_scope."""
    with pytest.raises(ragport.domain.errors.ScopeError):
        ragport.application.list_ingestion_status(
            store=statuses, scope=("tenant-1", "kb", "docs"), limit=10
        )  # type: ignore[arg-type]
