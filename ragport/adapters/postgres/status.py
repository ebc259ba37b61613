"""PostgresStatusStore: ingestion status in the same schema as the records."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text

from ragport.adapters.postgres._driver import make_engine, translate_errors
from ragport.adapters.postgres.schema import quote_schema, upgrade
from ragport.domain.limits import check_limit
from ragport.domain.model import Scope
from ragport.domain.status import (
    IngestionStatus,
    StatusPage,
    decode_status_cursor,
    encode_status_cursor,
)

__all__ = ["PostgresStatusStore"]

_SCOPE = "tenant_id = :t AND resource_id = :r AND corpus_id = :c"
_COLUMNS = "source_id, state, bytes, chunks_total, chunks_indexed, error, updated_at, freshness"


def _params(scope: Scope, **extra: Any) -> dict[str, Any]:
    return {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id, **extra}


class PostgresStatusStore:
    """Durable per (scope, source) ingestion status; pages by source id with bound cursors."""

    def __init__(
        self, url_or_engine: str | Engine, *, schema: str = "ragport", create: bool = False
    ):
        self._s = quote_schema(schema)
        self._schema = schema
        self._engine = make_engine(url_or_engine)
        if create:
            with translate_errors("upgrade"), self._engine.begin() as conn:
                upgrade(conn, schema)

    def put(self, status: IngestionStatus) -> None:
        with translate_errors("put status"), self._engine.begin() as conn:
            conn.execute(
                text(
                    f"INSERT INTO {self._s}.ingestion_status (tenant_id, resource_id, corpus_id, "
                    f"{_COLUMNS}) VALUES (:t, :r, :c, :src, :state, :bytes, :total, :indexed, "
                    ":error, :updated, :fresh) ON CONFLICT (tenant_id, resource_id, corpus_id, "
                    "source_id) DO UPDATE SET state = EXCLUDED.state, bytes = EXCLUDED.bytes, "
                    "chunks_total = EXCLUDED.chunks_total, chunks_indexed = EXCLUDED.chunks_indexed, "
                    "error = EXCLUDED.error, updated_at = EXCLUDED.updated_at, "
                    "freshness = EXCLUDED.freshness"
                ),
                _params(
                    status.scope,
                    src=status.source_id,
                    state=status.state,
                    bytes=status.bytes,
                    total=status.chunks_total,
                    indexed=status.chunks_indexed,
                    error=status.error,
                    updated=status.updated_at,
                    fresh=status.freshness,
                ),
            )

    def _status(self, scope: Scope, row: Any) -> IngestionStatus:
        return IngestionStatus(
            scope=scope,
            source_id=row.source_id,
            state=row.state,
            bytes=row.bytes,
            chunks_total=row.chunks_total,
            chunks_indexed=row.chunks_indexed,
            error=row.error,
            updated_at=row.updated_at,
            freshness=row.freshness,
        )

    def get(self, scope: Scope, source_id: str) -> IngestionStatus | None:
        with translate_errors("get status"), self._engine.connect() as conn:
            row = conn.execute(
                text(
                    f"SELECT {_COLUMNS} FROM {self._s}.ingestion_status WHERE {_SCOPE} AND source_id = :src"
                ),
                _params(scope, src=source_id),
            ).one_or_none()
        return None if row is None else self._status(scope, row)

    def list_page(self, scope: Scope, *, limit: int, cursor: str | None = None) -> StatusPage:
        check_limit("status_page", limit)
        after = decode_status_cursor(scope, cursor) if cursor is not None else None
        with translate_errors("list status"), self._engine.connect() as conn:
            rows = conn.execute(
                text(
                    f"SELECT {_COLUMNS} FROM {self._s}.ingestion_status WHERE {_SCOPE} "
                    'AND (CAST(:after AS text) IS NULL OR source_id COLLATE "C" > :after) '
                    'ORDER BY source_id COLLATE "C" LIMIT :n'
                ),
                _params(scope, after=after, n=limit + 1),
            ).all()
        items = tuple(self._status(scope, row) for row in rows[:limit])
        more = len(rows) > limit
        return StatusPage(
            items=items, cursor=encode_status_cursor(scope, items[-1].source_id) if more else None
        )

    def delete(self, scope: Scope, source_id: str) -> bool:
        with translate_errors("delete status"), self._engine.begin() as conn:
            result = conn.execute(
                text(f"DELETE FROM {self._s}.ingestion_status WHERE {_SCOPE} AND source_id = :src"),
                _params(scope, src=source_id),
            )
        return bool(result.rowcount)
