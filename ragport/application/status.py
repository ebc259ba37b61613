"""List ingestion status page by page, for exactly one scope, as retrieval sees it.

1. Validate the scope and the page size; read one page of the status store.
2. Refuse a page of another scope or longer than asked (the store broke its promise).
3. With the chunk store: reconcile each status with the chunks of its source served now
   (``served_status``): a status row records the last attempt, retrieval serves the last
   committed version, and the two differ after a failed or unfinished replacement. A source
   a deletion propagation forgot is served by no one, whatever rows it kept: never
   ``indexed`` (``FORGOTTEN_ERROR``).
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from ragport.application._support import check_abort, require_scope
from ragport.application.admission import forgotten_among
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.domain.errors import ScopeError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.domain.model import Scope
from ragport.domain.status import IngestionStatus, StatusPage, served_status
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

__all__ = ["FORGOTTEN_ERROR", "count_ingestion_states", "list_ingestion_status", "served_chunks"]

FORGOTTEN_ERROR = (
    "forgotten by a deletion propagation: nothing of it is served; re-admit it to write it "
    "again (readmit_source, `ragport readmit`)"
)


def list_ingestion_status(
    *,
    store: IngestionStatusStore,
    scope: Scope,
    limit: int = DEFAULT_LIMITS.status_page,
    cursor: str | None = None,
    chunk_store: ChunkStore | None = None,
    runtime: Runtime | None = None,
) -> StatusPage:
    """One page (at most ``limit``, hard ceiling 200) of ``scope``'s statuses by source id
    (``runtime.abort`` is checked first).

    With ``chunk_store`` (the store retrieval reads) each status agrees with what is served:
    a source with served chunks is ``indexed`` with their count (``stale``, with the last
    attempt's ``error``, when that attempt failed or has not finished), and one without is
    never ``indexed`` (``served_status``). Without it, the rows as the status store holds them.
    A status of another scope in the page is a ``ScopeError``: the store broke its promise.
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    check_abort(rt.abort)
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
    forgotten = forgotten_among(chunk_store, scope, [item.source_id for item in page.items])
    items = tuple(
        _forgotten_status(item)
        if item.source_id in forgotten
        else served_status(item, served_chunks(chunk_store, scope, item.source_id))
        for item in page.items
    )
    return StatusPage(items=items, cursor=page.cursor)


def _forgotten_status(status: IngestionStatus) -> IngestionStatus:
    """A forgotten source's status: nothing of it is served (whatever rows a host that
    propagated without the rag handler kept), so never ``indexed``; the error says why."""
    seen = served_status(status, 0)
    if seen.state == status.state:  # failed or pending: the row's own error stands
        return seen
    return attrs.evolve(seen, error=FORGOTTEN_ERROR)


def served_chunks(chunk_store: ChunkStore, scope: Scope, source_id: str) -> int:
    """How many chunks of ``source_id`` retrieval can return now (visible chunk records)."""
    return sum(1 for r in chunk_store.get_by_source(scope, source_id) if r.kind == "chunk")


def count_ingestion_states(
    *,
    store: IngestionStatusStore,
    scope: Scope,
    chunk_store: ChunkStore | None = None,
    forgotten_state: str | None = None,
) -> dict[str, int]:
    """How many of ``scope``'s statuses are in each state (every page read), reconciled with
    ``chunk_store`` as ``list_ingestion_status`` does: the state depends only on whether a
    source has a chunk served, so the served source ids are walked beside the statuses (both
    in code-point order) rather than each source's chunks read. A forgotten source is served
    by no one: counted as ``list_ingestion_status`` reports it, or under ``forgotten_state``
    when one is given (the command line's ``forgotten``)."""
    served = _served_ids(chunk_store, scope) if chunk_store is not None else iter(())
    forgotten = chunk_store.list_invalidated_ids(scope) if chunk_store is not None else frozenset()
    ahead = next(served, None)
    totals: dict[str, int] = {}
    for item in _every_status(store, scope):
        state: str = item.state
        if chunk_store is not None:
            while ahead is not None and ahead < item.source_id:
                ahead = next(served, None)
            if item.source_id in forgotten:
                state = forgotten_state or _forgotten_status(item).state
            else:
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
