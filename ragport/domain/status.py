"""Ingestion status: what happened to each source of a scope, for operators and dashboards."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import attrs

from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope, validate_id

__all__ = ["Freshness", "IngestionState", "IngestionStatus", "StatusPage"]

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


@attrs.frozen
class StatusPage:
    """One page of statuses ordered by source id; ``cursor`` is None on the last page."""

    items: tuple[IngestionStatus, ...]
    cursor: str | None = None
