"""List ingestion status page by page, for exactly one scope, as retrieval sees it.

1. Validate the scope and the page size; read one page of the status store.
2. Refuse a page of another scope or longer than asked (the store broke its promise).
3. With the chunk store: reconcile each status with the chunks of its source served now
   (``served_status``): a status row records the last attempt, retrieval serves the last
   committed version, and the two differ after a failed or unfinished replacement.
"""

from __future__ import annotations

from collections.abc import Iterator

from ragport.application._support import require_scope
from ragport.domain.errors import ScopeError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.domain.model import Scope
from ragport.domain.status import IngestionStatus, StatusPage, served_status
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

__all__ = ["count_ingestion_states", "list_ingestion_status", "served_chunks"]


def list_ingestion_status(
    *,
    store: IngestionStatusStore,
    scope: Scope,
    limit: int = DEFAULT_LIMITS.status_page,
    cursor: str | None = None,
    chunk_store: ChunkStore | None = None,
) -> StatusPage:
    """One page (at most ``limit``, hard ceiling 200) of ``scope``'s statuses by source id.

    With ``chunk_store`` (the store retrieval reads) each status agrees with what is served:
    a source with served chunks is ``indexed`` with their count (``stale``, with the last
    attempt's ``error``, when that attempt failed or has not finished), and one without is
    never ``indexed`` (``served_status``). Without it, the rows as the status store holds them.
    A status of another scope in the page is a ``ScopeError``: the store broke its promise.
    """
    scope = require_scope(scope)
    check_limit("status_page", limit)
    page = store.list_page(scope, limit=limit, cursor=cursor)
    if len(page.items) > limit:
        raise ScopeError("the status store returned more items than asked for", field="limit")
    for item in page.items:
        if item.scope != scope:
            raise ScopeError("the status store returned another scope's status", field="scope")
    if chunk_store is None:
        return page
    items = tuple(
        served_status(item, served_chunks(chunk_store, scope, item.source_id))
        for item in page.items
    )
    return StatusPage(items=items, cursor=page.cursor)


def served_chunks(chunk_store: ChunkStore, scope: Scope, source_id: str) -> int:
    """How many chunks of ``source_id`` retrieval can return now (visible chunk records)."""
    return sum(1 for r in chunk_store.get_by_source(scope, source_id) if r.kind == "chunk")


def count_ingestion_states(
    *, store: IngestionStatusStore, scope: Scope, chunk_store: ChunkStore | None = None
) -> dict[str, int]:
    """How many of ``scope``'s statuses are in each state (every page read), reconciled with
    ``chunk_store`` as ``list_ingestion_status`` does: the state depends only on whether a
    source has a chunk served, so the served source ids are walked beside the statuses (both
    in code-point order) rather than each source's chunks read."""
    served = _served_ids(chunk_store, scope) if chunk_store is not None else iter(())
    ahead = next(served, None)
    totals: dict[str, int] = {}
    for item in _every_status(store, scope):
        state = item.state
        if chunk_store is not None:
            while ahead is not None and ahead < item.source_id:
                ahead = next(served, None)
            state = served_status(item, int(ahead == item.source_id)).state
        totals[state] = totals.get(state, 0) + 1
    return totals


def _every_status(store: IngestionStatusStore, scope: Scope) -> Iterator[IngestionStatus]:
    cursor: str | None = None
    while True:
        page = list_ingestion_status(store=store, scope=scope, limit=200, cursor=cursor)
        yield from page.items
        if page.cursor is None:
            return
        cursor = page.cursor


def _served_ids(chunk_store: ChunkStore, scope: Scope) -> Iterator[str]:
    after: str | None = None
    while True:
        ids = list(chunk_store.list_source_ids(scope, after=after, limit=1_000))
        yield from ids
        if len(ids) < 1_000:
            return
        after = ids[-1]
