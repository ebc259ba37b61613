"""Reads straight on psycopg: ``:name`` binds as pyformat, one lent pooled connection, one snapshot.

Reads skip SQLAlchemy's statement compilation and result wrapping (measured: a third of a
vector query's client time); writes go through SQLAlchemy ``Connection`` objects. The store
calls ``reads.fetch`` through this module, so one patch here sees every read (the benchmarks
count statements that way).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection

from ragport.adapters.postgres._driver import driver_connection

__all__ = ["RawRead", "fetch", "fetch_generic", "one_snapshot", "pyformat"]

_BIND = re.compile(r"(?<![:\w]):(\w+)")
_PYFORMAT: dict[str, str] = {}


def pyformat(sql: str) -> str:
    """``:name`` binds as psycopg's ``%(name)s`` (``::`` casts untouched), memoised."""
    converted = _PYFORMAT.get(sql)
    if converted is None:
        if len(_PYFORMAT) >= 1024:
            _PYFORMAT.clear()
        converted = _PYFORMAT[sql] = _BIND.sub(r"%(\1)s", sql.replace("%", "%%"))
    return converted


class RawRead:
    """A pooled DBAPI connection lent to one read: ``.connection`` mirrors SQLAlchemy's."""

    __slots__ = ("connection",)

    def __init__(self, fairy: Any) -> None:
        self.connection = fairy


def fetch(
    conn: Connection | RawRead,
    sql: str,
    params: Mapping[str, Any],
    *,
    prepare: bool | None = None,
) -> list[Any]:
    """Run one read straight on the psycopg connection: rows as named tuples.

    ``prepare=False`` plans the statement for its own parameters every time; ``None`` lets
    psycopg prepare it after a few runs, and PostgreSQL then reuse a generic plan.
    """
    with driver_connection(conn).cursor(row_factory=namedtuple_row) as cur:
        cur.execute(pyformat(sql), params, prepare=prepare)
        return cur.fetchall()


def fetch_generic(conn: RawRead, sql: str, params: Mapping[str, Any]) -> list[Any]:
    """``fetch`` as a prepared statement run with its generic plan.

    For statements whose plan cannot depend on the values (they read them in CTEs): left to
    itself PostgreSQL keeps re-planning a prepared statement whose generic plan it estimates
    dearer than its custom ones, and a large statement's planning is then paid on every
    run. ``plan_cache_mode`` is set for this statement only: with ``SET LOCAL`` (undone at
    the end of the transaction, or right after the statement) inside one, around it outside.
    """
    dbapi = driver_connection(conn)
    if dbapi.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        dbapi.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        rows = fetch(conn, sql, params, prepare=True)
        dbapi.execute("SET LOCAL plan_cache_mode = auto")
        return rows
    dbapi.execute("SET plan_cache_mode = force_generic_plan")
    try:
        return fetch(conn, sql, params, prepare=True)
    finally:
        if not (dbapi.closed or dbapi.broken):
            with suppress(psycopg.Error):
                dbapi.execute("RESET plan_cache_mode")


@contextmanager
def one_snapshot(conn: RawRead) -> Iterator[None]:
    """Run the block's reads in one REPEATABLE READ, READ ONLY transaction (one snapshot).

    The lent connection is in autocommit, so the transaction is opened and closed by hand
    (on a host's connection already in a transaction, the block runs in that one). If
    the block fails, the session-level HNSW settings it may have changed are rolled back too,
    so their cache on the connection is dropped.
    """
    dbapi = driver_connection(conn)
    if dbapi.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        # Inside a host's transaction (``PostgresStore.joined``): its isolation level decides
        # (REPEATABLE READ gives one snapshot; READ COMMITTED one per statement).
        yield
        return
    dbapi.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        yield
    except BaseException:
        conn.connection.info.pop("ragport_hnsw", None)
        if not (dbapi.closed or dbapi.broken):
            with suppress(psycopg.Error):
                dbapi.execute("ROLLBACK")
        raise
    dbapi.execute("COMMIT")
