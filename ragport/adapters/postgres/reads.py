"""Reads straight on psycopg: ``:name`` binds as pyformat, one lent pooled connection, one snapshot.

Reads skip SQLAlchemy's statement compilation and result wrapping (measured: a third of a
vector query's client time); writes go through SQLAlchemy ``Connection`` objects. The store
calls ``reads.fetch`` through this module, so one patch here sees every read (the benchmarks
count statements that way).

Round trips: a read block's ``BEGIN`` waits on its ``RawRead`` (``opening``) and goes out in
one pipeline with the block's first statement (``fetch``, ``fetch_generic``); the
``plan_cache_mode`` settings of ``fetch_generic`` go in one pipeline with their statement.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection

from ragport.adapters.postgres._driver import driver_connection

__all__ = ["RawRead", "fetch", "fetch_generic", "opened", "pyformat"]

_BIND = re.compile(r"(?<![:\w]):(\w+)")
_PYFORMAT: dict[str, str] = {}
_GENERIC_LOCAL = (
    "SET LOCAL plan_cache_mode = force_generic_plan",
    "SET LOCAL plan_cache_mode = auto",
)
_GENERIC = ("SET plan_cache_mode = force_generic_plan", "RESET plan_cache_mode")
# Pipeline mode needs libpq 14 or later (psycopg[binary] bundles one; a psycopg built on an
# older system libpq has none): without it ``fetch`` sends the same statements one by one.
PIPELINE = psycopg.Pipeline.is_supported()


def pyformat(sql: str) -> str:
    """``:name`` binds as psycopg's ``%(name)s`` (``::`` casts untouched), memoised."""
    converted = _PYFORMAT.get(sql)
    if converted is None:
        if len(_PYFORMAT) >= 1024:
            _PYFORMAT.clear()
        converted = _PYFORMAT[sql] = _BIND.sub(r"%(\1)s", sql.replace("%", "%%"))
    return converted


class RawRead:
    """A pooled DBAPI connection lent to one read: ``.connection`` mirrors SQLAlchemy's.

    ``opening`` is a statement that opens the read's transaction (``BEGIN ...``), not sent
    yet: the next ``fetch`` / ``fetch_generic`` sends it in one pipeline (one round trip)
    with its own statement; whoever runs a statement on the connection otherwise must send
    it first (``opened``)."""

    __slots__ = ("connection", "opening")

    def __init__(self, fairy: Any) -> None:
        self.connection = fairy
        self.opening: str | None = None


def opened(conn: RawRead) -> RawRead:
    """``conn`` with its pending ``opening`` sent (alone: one round trip), if it had one."""
    opening = conn.opening
    if opening is not None:
        conn.opening = None
        driver_connection(conn).execute(opening)
    return conn


def fetch(
    conn: Connection | RawRead,
    sql: str,
    params: Mapping[str, Any],
    *,
    prepare: bool | None = None,
    around: tuple[str, str] | None = None,
) -> list[Any]:
    """Run one read straight on the psycopg connection: rows as named tuples.

    ``prepare=False`` plans the statement for its own parameters every time; ``None`` lets
    psycopg prepare it after a few runs, and PostgreSQL then reuse a generic plan.
    ``around``: two statements sent just before and just after it, in one pipeline with it
    (with a pending ``RawRead.opening`` first), so in one round trip.
    """
    dbapi = driver_connection(conn)
    opening = None
    if type(conn) is RawRead and conn.opening is not None:
        opening, conn.opening = conn.opening, None
    with dbapi.cursor(row_factory=namedtuple_row) as cur:
        if opening is None and around is None:
            cur.execute(pyformat(sql), params, prepare=prepare)
            return cur.fetchall()
        if not PIPELINE:
            return _one_by_one(dbapi, cur, opening, around, (pyformat(sql), params, prepare))
        with dbapi.pipeline():  # the results are read at its end: one round trip
            if opening is not None:
                dbapi.execute(opening)
            if around is not None:
                dbapi.execute(around[0])
            cur.execute(pyformat(sql), params, prepare=prepare)
            if around is not None:
                dbapi.execute(around[1])
        return cur.fetchall()


def _one_by_one(
    dbapi: psycopg.Connection[Any],
    cur: psycopg.Cursor[Any],
    opening: str | None,
    around: tuple[str, str] | None,
    statement: tuple[str, Mapping[str, Any], bool | None],
) -> list[Any]:
    """``fetch``'s pipeline without pipeline mode: a round trip per statement. The statement
    after it runs even when it failed, unless that failure aborted a transaction (whose
    rollback undoes a ``SET LOCAL``): outside one, ``RESET`` must not be skipped."""
    sql, params, prepare = statement
    if opening is not None:
        dbapi.execute(opening)
    if around is not None:
        dbapi.execute(around[0])
    try:
        cur.execute(sql, params, prepare=prepare)
        return cur.fetchall()
    finally:
        failed = dbapi.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        if around is not None and not (dbapi.closed or dbapi.broken or failed):
            dbapi.execute(around[1])


def fetch_generic(conn: RawRead, sql: str, params: Mapping[str, Any]) -> list[Any]:
    """``fetch`` as a prepared statement run with its generic plan.

    For statements whose plan cannot depend on the values (they read them in CTEs): left to
    itself PostgreSQL keeps re-planning a prepared statement whose generic plan it estimates
    dearer than its custom ones, and a large statement's planning is then paid on every
    run. ``plan_cache_mode`` is set for this statement only, in one pipeline with it (one
    round trip): with ``SET LOCAL`` inside a transaction (a pending ``RawRead.opening``
    included), undone at its end; outside one with ``SET`` and ``RESET``, the three in one
    implicit transaction, so a failed statement rolls the ``SET`` back too.
    """
    opening = conn.opening if type(conn) is RawRead else None
    status = driver_connection(conn).info.transaction_status
    local = opening is not None or status != psycopg.pq.TransactionStatus.IDLE
    return fetch(conn, sql, params, prepare=True, around=_GENERIC_LOCAL if local else _GENERIC)
