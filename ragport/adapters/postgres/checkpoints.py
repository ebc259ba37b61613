"""PostgresCheckpointStore: compare-and-set cursors in the records' schema (migration 2)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text

from ragport.adapters._checkpoints import check_cas_args, check_checkpoint_args
from ragport.adapters.postgres._driver import make_engine, translate_errors
from ragport.adapters.postgres.schema import quote_schema, upgrade
from ragport.domain.model import Scope
from ragport.ports.sync import Checkpoint

__all__ = ["PostgresCheckpointStore"]

_KEY = "connector_id = :k AND tenant_id = :t AND resource_id = :r AND corpus_id = :c"


def _params(connector_id: str, scope: Scope, **extra: Any) -> dict[str, Any]:
    return {
        "k": connector_id,
        "t": scope.tenant_id,
        "r": scope.resource_id,
        "c": scope.corpus_id,
        **extra,
    }


class PostgresCheckpointStore:
    """Durable checkpoints; the version moves only by a conditional UPDATE (or the first INSERT),
    so of two workers with the same expected version the row lock lets exactly one win."""

    def __init__(
        self, url_or_engine: str | Engine, *, schema: str = "ragport", create: bool = False
    ):
        self._s = quote_schema(schema)
        self._engine = make_engine(url_or_engine)
        if create:
            with translate_errors("upgrade"), self._engine.begin() as conn:
                upgrade(conn, schema)

    def get(self, connector_id: str, scope: Scope) -> Checkpoint:
        check_checkpoint_args(connector_id, scope)
        with translate_errors("get checkpoint"), self._engine.connect() as conn:
            row = conn.execute(
                text(f"SELECT cursor, version FROM {self._s}.sync_checkpoints WHERE {_KEY}"),
                _params(connector_id, scope),
            ).one_or_none()
        return Checkpoint(None, 0) if row is None else Checkpoint(row.cursor, int(row.version))

    def compare_and_set(
        self, connector_id: str, scope: Scope, expected_version: int, cursor: str
    ) -> bool:
        check_checkpoint_args(connector_id, scope)
        check_cas_args(expected_version, cursor)
        params = _params(connector_id, scope, cur=cursor, v=expected_version)
        with translate_errors("compare-and-set checkpoint"), self._engine.begin() as conn:
            if expected_version == 0:
                result = conn.execute(
                    text(
                        f"INSERT INTO {self._s}.sync_checkpoints (connector_id, tenant_id, "
                        "resource_id, corpus_id, cursor, version) VALUES (:k, :t, :r, :c, :cur, 1) "
                        "ON CONFLICT DO NOTHING"
                    ),
                    params,
                )
            else:
                result = conn.execute(
                    text(
                        f"UPDATE {self._s}.sync_checkpoints SET cursor = :cur, "
                        f"version = version + 1, updated_at = now() WHERE {_KEY} AND version = :v"
                    ),
                    params,
                )
        return result.rowcount == 1

    def delete(self, connector_id: str, scope: Scope) -> bool:
        check_checkpoint_args(connector_id, scope)
        with translate_errors("delete checkpoint"), self._engine.begin() as conn:
            result = conn.execute(
                text(f"DELETE FROM {self._s}.sync_checkpoints WHERE {_KEY}"),
                _params(connector_id, scope),
            )
        return bool(result.rowcount)
