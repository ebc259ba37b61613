"""In-memory IngestionStatusStore: exact-scope pages ordered by source id."""

from __future__ import annotations

import base64
import binascii
import json
import threading

from ragport.domain.errors import ValidationError
from ragport.domain.limits import check_limit
from ragport.domain.model import Scope
from ragport.domain.status import IngestionStatus, StatusPage

__all__ = ["InMemoryStatusStore", "decode_status_cursor", "encode_status_cursor"]


def encode_status_cursor(scope: Scope, last_source_id: str) -> str:
    """An opaque cursor bound to ``scope`` that resumes after ``last_source_id``."""
    payload = json.dumps([scope.tenant_id, scope.resource_id, scope.corpus_id, last_source_id])
    return base64.urlsafe_b64encode(payload.encode()).decode()


def decode_status_cursor(scope: Scope, cursor: str) -> str:
    """The source id a cursor resumes after; ``ValidationError`` if malformed or foreign."""
    try:
        parts = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (binascii.Error, ValueError, UnicodeError, AttributeError) as exc:
        raise ValidationError("cursor is malformed", field="cursor") from exc
    if not (isinstance(parts, list) and len(parts) == 4 and all(isinstance(p, str) for p in parts)):
        raise ValidationError("cursor is malformed", field="cursor")
    if parts[:3] != [scope.tenant_id, scope.resource_id, scope.corpus_id]:
        raise ValidationError("cursor belongs to another scope", field="cursor")
    return str(parts[3])


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
