"""Ingestion status: what happened to each source of a scope, for operators and dashboards."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Literal

import attrs

from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope, validate_id

__all__ = [
    "NOT_SERVED",
    "Freshness",
    "IngestionState",
    "IngestionStatus",
    "StatusPage",
    "decode_status_cursor",
    "encode_status_cursor",
    "served_status",
]

IngestionState = Literal["pending", "indexed", "failed", "partial"]
Freshness = Literal["current", "stale", "unavailable"]
ERROR_MAX = 256


@attrs.frozen
class IngestionStatus:
    """Per (scope, source) progress. ``error`` is redacted and at most 256 characters."""

    scope: Scope
    source_id: str = attrs.field()
    state: IngestionState = attrs.field()
    bytes: int = 0
    chunks_total: int = 0
    chunks_indexed: int = 0
    error: str | None = attrs.field(default=None)
    updated_at: datetime | None = None
    freshness: Freshness | None = attrs.field(default=None)

    @source_id.validator
    def _source(self, attribute: attrs.Attribute[str], value: str) -> None:
        validate_id(value, field="source_id")

    @state.validator
    def _state(self, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in ("pending", "indexed", "failed", "partial"):
            raise ValidationError(
                "state must be pending, indexed, failed or partial", field="state"
            )

    @error.validator
    def _error(self, attribute: attrs.Attribute[str | None], value: str | None) -> None:
        if value is not None and len(value) > ERROR_MAX:
            raise ValidationError(f"error is longer than {ERROR_MAX} characters", field="error")

    @freshness.validator
    def _freshness(self, attribute: attrs.Attribute[str | None], value: str | None) -> None:
        if value is not None and value not in ("current", "stale", "unavailable"):
            raise ValidationError(
                "freshness must be current, stale or unavailable", field="freshness"
            )


NOT_SERVED = "no chunk of this source is served (deleted, rolled back or not yet published)"


def served_status(status: IngestionStatus, served: int) -> IngestionStatus:
    """``status`` as retrieval sees it, given the ``served`` chunks of its source visible now.

    A status row records the last attempt; retrieval serves the last committed version, and a
    failed (or unfinished) replacement leaves the previous version served. So:

    - ``served > 0`` and the row says ``failed`` or ``pending``: ``indexed`` with ``served``
      chunks, freshness ``stale`` (the source changed or was tried again, and what is served
      is older), the last attempt's ``error`` kept;
    - ``served > 0`` otherwise: the chunk counts are ``served`` (``partial`` stays partial);
    - ``served == 0`` and the row says ``indexed`` or ``partial``: ``failed`` with 0 chunks,
      freshness ``unavailable``, its error or ``NOT_SERVED``;
    - ``served == 0`` otherwise (``failed``, ``pending``): the row, with 0 chunks indexed.
    """
    if served < 0:
        raise ValidationError("served must be non-negative", field="served")
    if served and status.state in ("failed", "pending"):
        return attrs.evolve(
            status, state="indexed", chunks_total=served, chunks_indexed=served, freshness="stale"
        )
    if served and status.state == "partial":
        total = max(status.chunks_total, served)
        return attrs.evolve(status, chunks_total=total, chunks_indexed=served)
    if served:
        return attrs.evolve(status, chunks_total=served, chunks_indexed=served)
    if status.state in ("indexed", "partial"):
        return attrs.evolve(
            status,
            state="failed",
            chunks_indexed=0,
            freshness="unavailable",
            error=status.error or NOT_SERVED,
        )
    return attrs.evolve(status, chunks_indexed=0)


@attrs.frozen
class StatusPage:
    """One page of statuses ordered by source id; ``cursor`` is None on the last page."""

    items: tuple[IngestionStatus, ...]
    cursor: str | None = None


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
