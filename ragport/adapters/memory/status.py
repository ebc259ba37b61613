"""In-memory IngestionStatusStore: exact-scope pages ordered by source id."""

from __future__ import annotations

import threading

from ragport.domain.limits import check_limit
from ragport.domain.model import Scope
from ragport.domain.status import (
    IngestionStatus,
    StatusPage,
    decode_status_cursor,
    encode_status_cursor,
)

__all__ = ["InMemoryStatusStore"]


class InMemoryStatusStore:
    """Process-local ingestion status; a host that needs restarts uses a durable one."""

    def __init__(self) -> None:
        self._items: dict[Scope, dict[str, IngestionStatus]] = {}
        self._lock = threading.Lock()

    def put(self, status: IngestionStatus) -> None:
        with self._lock:
            self._items.setdefault(status.scope, {})[status.source_id] = status

    def get(self, scope: Scope, source_id: str) -> IngestionStatus | None:
        with self._lock:
            return self._items.get(scope, {}).get(source_id)

    def list_page(self, scope: Scope, *, limit: int, cursor: str | None = None) -> StatusPage:
        check_limit("status_page", limit)
        after = decode_status_cursor(scope, cursor) if cursor is not None else None
        with self._lock:
            ids = sorted(self._items.get(scope, {}))
            items = self._items.get(scope, {})
            selected = [items[s] for s in ids if after is None or s > after]
        page = selected[:limit]
        more = len(selected) > limit
        next_cursor = encode_status_cursor(scope, page[-1].source_id) if more else None
        return StatusPage(items=tuple(page), cursor=next_cursor)

    def delete(self, scope: Scope, source_id: str) -> bool:
        with self._lock:
            return self._items.get(scope, {}).pop(source_id, None) is not None
