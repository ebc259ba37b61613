"""Reads straight on psycopg: ``:name`` binds as pyformat, one lent pooled connection, one snapshot.

Reads skip SQLAlchemy's statement compilation and result wrapping (measured: a third of a
vector query's client time); writes go through SQLAlchemy ``Connection`` objects. The store
calls ``reads.fetch`` through this module, so one patch here sees every read (the benchmarks
count statements that way).

Round trips: a read block's ``BEGIN`` waits on its ``RawRead`` (``opening``) and goes out in
one pipeline with the block's first statement (``fetch``, ``fetch_generic``); the
``plan_cache_mode`` settings of ``fetch_generic`` go in one pipeline with their statement.
So do the statements that share one snapshot between two connections (a hybrid query's two
legs, ``backend._Companion``): ``pg_export_snapshot()`` after the first connection's
``BEGIN`` (``RawRead.export``; its answer kept in ``RawRead.exported``), and ``SET TRANSACTION
SNAPSHOT`` after the second's (``RawRead.snapshot``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection

from ragport.adapters.postgres._driver import driver_connection
from ragport.domain.errors import StoreError

__all__ = ["EXPORT", "GENERIC_LOCAL", "RawRead", "fetch", "fetch_generic", "opened", "pyformat"]

EXPORT = "SELECT pg_export_snapshot()"
_SNAPSHOT_ID = re.compile(r"[0-9A-Fa-f]+-[0-9A-Fa-f]+-[0-9]+")  # as pg_export_snapshot writes it
_BIND = re.compile(r"(?<![:\w]):(\w+)")
_PYFORMAT: dict[str, str] = {}
GENERIC_LOCAL = (
    # The setting as it was is saved first (the inner set_config, an argument, runs before
    # the outer one), so the second statement puts back whatever the transaction had: a
    # host's own SET LOCAL survives a joined read or write, not only ``auto``.
    "SELECT set_config('plan_cache_mode', 'force_generic_plan' || left(set_config("
    "'ragport.plan_cache_mode', current_setting('plan_cache_mode'), true), 0), true)",
    "SELECT set_config('plan_cache_mode', current_setting('ragport.plan_cache_mode'), true)",
)
"""Around a statement run with its generic plan inside a transaction (``fetch``'s
``around``): ``plan_cache_mode`` forced for it, then restored to the transaction's value."""
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
    it first (``opened``). With the opening go ``export`` (``pg_export_snapshot()``, its id
    then in ``exported``; ``refused`` when the server refused it) or ``snapshot`` (``SET
    TRANSACTION SNAPSHOT`` of that id, which must be the transaction's first statement).
    ``closing``: the next ``fetch`` is the transaction's last statement: its ``COMMIT`` goes
    in one pipeline with it. ``engine``: the Engine whose pool lent it."""

    __slots__ = (
        "closing",
        "connection",
        "engine",
        "export",
        "exported",
        "opening",
        "refused",
        "snapshot",
    )

    def __init__(self, fairy: Any, engine: Any = None) -> None:
        self.connection = fairy
        self.engine = engine
        self.opening: str | None = None
        self.export = False
        self.exported: str | None = None
        self.refused = False
        self.snapshot: str | None = None
        self.closing = False


def opened(conn: RawRead) -> RawRead:
    """``conn`` with its pending ``opening`` sent (alone: one round trip), if it had one."""
    opening = conn.opening
    if opening is not None:
        conn.opening = None
        dbapi = driver_connection(conn)
        if not PIPELINE or not (conn.export or conn.snapshot):
            _collect(conn, _open(dbapi, conn, opening, piped=False))
            return conn
        exported = None
        try:
            with dbapi.pipeline():
                exported = _open(dbapi, conn, opening, piped=True)
        except psycopg.Error:
            _refused(conn, exported)
            raise
        _collect(conn, exported)
    return conn


def _open(dbapi: psycopg.Connection[Any], conn: RawRead, opening: str, *, piped: bool) -> Any:
    """Send ``opening`` and what goes with it (``RawRead``) (in a pipeline: ``piped``); the
    export's cursor, if any."""
    dbapi.execute(opening)
    snapshot, conn.snapshot = conn.snapshot, None
    if snapshot is not None:
        if not _SNAPSHOT_ID.fullmatch(snapshot):
            raise StoreError("the exported snapshot id is not one PostgreSQL writes")
        dbapi.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
    if conn.export:
        conn.export = False
        if piped:
            return dbapi.execute(EXPORT)  # answered (or refused) at the pipeline's end
        try:
            return dbapi.execute(EXPORT)
        except psycopg.Error:
            conn.refused = True
            raise
    return None


def _refused(conn: RawRead, exported: Any) -> None:
    """After a failed pipeline: ``conn.refused`` when it sent an export that did not answer
    (the export failed, or the pipeline failed before it), not when a later statement did."""
    if exported is not None:
        result = exported.pgresult
        conn.refused = result is None or result.status != psycopg.pq.ExecStatus.TUPLES_OK


def _collect(conn: RawRead, exported: Any) -> None:
    """Keep the exported snapshot's id (``_open``'s cursor, its results read)."""
    if exported is not None:
        row = exported.fetchone()
        conn.exported = None if row is None else row[0]


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
    closing = False
    if type(conn) is RawRead:
        if conn.opening is not None:
            opening, conn.opening = conn.opening, None
        closing, conn.closing = conn.closing, False
    with dbapi.cursor(row_factory=namedtuple_row) as cur:
        if opening is None and around is None and not closing:
            cur.execute(pyformat(sql), params, prepare=prepare)
            return cur.fetchall()
        if not PIPELINE:
            rows = _one_by_one(
                dbapi, cur, (conn, opening), around, (pyformat(sql), params, prepare)
            )
            if closing:
                dbapi.execute("COMMIT")
            return rows
        exported = None
        try:
            with dbapi.pipeline():  # the results are read at its end: one round trip
                if opening is not None:
                    exported = _open(dbapi, cast(RawRead, conn), opening, piped=True)
                if around is not None:
                    dbapi.execute(around[0])
                cur.execute(pyformat(sql), params, prepare=prepare)
                if around is not None:
                    dbapi.execute(around[1])
                if closing:
                    dbapi.execute("COMMIT")
        except psycopg.Error:
            _refused(cast(RawRead, conn), exported)
            raise
        if exported is not None:
            _collect(cast(RawRead, conn), exported)
        return cur.fetchall()


def _one_by_one(
    dbapi: psycopg.Connection[Any],
    cur: psycopg.Cursor[Any],
    opens: tuple[Connection | RawRead, str | None],
    around: tuple[str, str] | None,
    statement: tuple[str, Mapping[str, Any], bool | None],
) -> list[Any]:
    """``fetch``'s pipeline without pipeline mode: a round trip per statement. The statement
    after it runs even when it failed, unless that failure aborted a transaction (whose
    rollback undoes a ``SET LOCAL``): outside one, ``RESET`` must not be skipped."""
    sql, params, prepare = statement
    conn, opening = opens
    if opening is not None:
        raw = cast(RawRead, conn)
        _collect(raw, _open(dbapi, raw, opening, piped=False))
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
    return fetch(conn, sql, params, prepare=True, around=GENERIC_LOCAL if local else _GENERIC)
