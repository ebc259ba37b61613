"""List ingestion status page by page, for exactly one scope."""

from __future__ import annotations

from ragport.application._support import require_scope
from ragport.domain.errors import ScopeError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.domain.model import Scope
from ragport.domain.status import StatusPage
from ragport.ports.status import IngestionStatusStore

__all__ = ["list_ingestion_status"]


def list_ingestion_status(
    *,
    store: IngestionStatusStore,
    scope: Scope,
    limit: int = DEFAULT_LIMITS.status_page,
    cursor: str | None = None,
) -> StatusPage:
    """One page (at most ``limit``, hard ceiling 200) of ``scope``'s statuses by source id.

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
    return page
