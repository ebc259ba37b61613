"""PostgresCheckpointStore: compare-and-set cursors in the records' schema (migration 2).

It joins a ``PostgresStore`` unit of work on the same server, database and schema
(``SupportsCheckpointsInUnitOfWork``): the compare-and-set then runs on the unit of work's
connection, inside its transaction, so a sync page and its checkpoint commit or roll back
together. Sameness is checked on the server, not on URLs (``localhost`` and ``127.0.0.1`` name
one server; two servers may share a URL across machines): postmaster start time, database,
port and the schema's oid.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Connection, Engine, text

from ragport.adapters._checkpoints import check_cas_args, check_checkpoint_args
from ragport.adapters.postgres._driver import make_engine, translate_errors
from ragport.adapters.postgres.backend import transaction_of
from ragport.adapters.postgres.schema import quote_schema, upgrade
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope
from ragport.ports.sync import Checkpoint

__all__ = ["PostgresCheckpointStore"]

_IDENTITY = (
    "SELECT pg_postmaster_start_time()::text AS started, current_database() AS db, "
    "coalesce(inet_server_port(), 0) AS port, "
    "(SELECT oid::bigint FROM pg_namespace WHERE nspname = :schema) AS schema_oid"
)
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
        self._schema = schema
        self._engine = make_engine(url_or_engine)
        self._identity: tuple[Any, ...] | None = None
        self._identity_lock = threading.Lock()
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
        with translate_errors("compare-and-set checkpoint"), self._engine.begin() as conn:
            return self._cas(conn, connector_id, scope, expected_version, cursor)

    def _server_identity(self, conn: Connection) -> tuple[Any, ...]:
        row = conn.execute(text(_IDENTITY), {"schema": self._schema}).one()
        return (row.started, row.db, int(row.port), row.schema_oid)

    def joins(self, uow: object) -> bool:
        """Whether ``uow`` is a ``PostgresStore`` unit of work on this server, database and
        schema (one query on its connection; this store's own identity is read once)."""
        tx = transaction_of(uow)
        if tx is None or tx.s != self._s or tx.done or getattr(uow, "done", False):
            return False
        with self._identity_lock:
            if self._identity is None:
                with translate_errors("read server identity"), self._engine.connect() as conn:
                    self._identity = self._server_identity(conn)
                    conn.rollback()
            mine = self._identity
        with translate_errors("read server identity"):
            theirs = self._server_identity(tx.conn)
        return mine[3] is not None and theirs == mine

    def compare_and_set_in(
        self, uow: object, connector_id: str, scope: Scope, expected_version: int, cursor: str
    ) -> bool:
        """``compare_and_set`` inside ``uow``'s transaction: a racing worker's UPDATE (or
        INSERT) waits on this row until ``uow`` ends, then finds the version moved."""
        check_checkpoint_args(connector_id, scope)
        check_cas_args(expected_version, cursor)
        tx = transaction_of(uow)
        if tx is None or tx.s != self._s or tx.scope != scope:
            raise ValidationError(
                "compare_and_set_in needs a PostgresStore unit of work of the same schema "
                "and scope",
                field="uow",
            )
        with translate_errors("compare-and-set checkpoint"):
            return self._cas(tx.conn, connector_id, scope, expected_version, cursor)

    def _cas(
        self, conn: Connection, connector_id: str, scope: Scope, expected_version: int, cursor: str
    ) -> bool:
        params = _params(connector_id, scope, cur=cursor, v=expected_version)
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
