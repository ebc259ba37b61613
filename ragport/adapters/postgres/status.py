"""PostgresStatusStore: ingestion status in the same schema as the records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, text

from ragport.adapters.postgres._driver import make_engine, translate_errors
from ragport.adapters.postgres.schema import quote_schema, upgrade
from ragport.domain.errors import StoreError
from ragport.domain.limits import check_limit
from ragport.domain.model import Scope
from ragport.domain.status import (
    IngestionStatus,
    StatusPage,
    decode_status_cursor,
    encode_status_cursor,
)

__all__ = ["PostgresStatusStore"]

_T = TypeVar("_T")

_SCOPE = "tenant_id = :t AND resource_id = :r AND corpus_id = :c"
_COLUMNS = "source_id, state, bytes, chunks_total, chunks_indexed, error, updated_at, freshness"


def _params(scope: Scope, **extra: Any) -> dict[str, Any]:
    return {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id, **extra}


class PostgresStatusStore:
    """Durable per (scope, source) ingestion status; pages by source id with bound cursors.

    With ``read_url`` (a streaming replica) ``get`` and ``list_page`` read there, and on the
    primary when the replica cannot be reached (``replica_fallback="raise"``: ``StoreError``).
    Status is advisory (what was ingested, not what may be seen), so it may lag the primary.
    """

    def __init__(
        self,
        url_or_engine: str | Engine,
        *,
        schema: str = "ragport",
        create: bool = False,
        read_url: str | Engine | None = None,
        replica_fallback: str = "primary",
    ):
        self._s = quote_schema(schema)
        self._schema = schema
        self._engine = make_engine(url_or_engine)
        self._replica = None if read_url is None else make_engine(read_url)
        self._fallback = replica_fallback
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

    def _read(self, operation: str, run: Callable[[Connection], _T]) -> _T:
        if self._replica is not None:
            try:
                with translate_errors(operation), self._replica.connect() as conn:
                    return run(conn)
            except StoreError as exc:
                if not exc.lost_connection or self._fallback == "raise":
                    raise
        with translate_errors(operation), self._engine.connect() as conn:
            return run(conn)

    def get(self, scope: Scope, source_id: str) -> IngestionStatus | None:
        sql = text(
            f"SELECT {_COLUMNS} FROM {self._s}.ingestion_status WHERE {_SCOPE} AND source_id = :src"
        )
        row = self._read(
            "get status",
            lambda conn: conn.execute(sql, _params(scope, src=source_id)).one_or_none(),
        )
        return None if row is None else self._status(scope, row)

    def list_page(self, scope: Scope, *, limit: int, cursor: str | None = None) -> StatusPage:
        check_limit("status_page", limit)
        after = decode_status_cursor(scope, cursor) if cursor is not None else None
        sql = text(
            f"SELECT {_COLUMNS} FROM {self._s}.ingestion_status WHERE {_SCOPE} "
            'AND (CAST(:after AS text) IS NULL OR source_id COLLATE "C" > :after) '
            'ORDER BY source_id COLLATE "C" LIMIT :n'
        )
        rows = self._read(
            "list status",
            lambda conn: conn.execute(sql, _params(scope, after=after, n=limit + 1)).all(),
        )
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
