"""One short write transaction in one round trip, sent through libpq's own pipeline
(``conn.pgconn``) rather than psycopg's ``Connection.pipeline()``.

``transaction`` sends ``BEGIN``, its statements and ``COMMIT`` followed by one sync, then reads
the results: what psycopg's pipeline does, without its per-statement Python machinery (its
command queue, result routing to cursors and row makers; measured on the delete of one
source: 0.50 ms of client CPU through psycopg's pipeline, 0.09 ms here, ``/tmp/wr48/
pipe_low.py``). A statement marked ``prepared`` runs as a named prepared statement of
ragport's own (``ragport_`` and a hash of its text), parsed on the connection the first time
and kept there, so its plan is cached as psycopg's ``prepare=True`` caches it. psycopg drops
every prepared statement of a connection after a rollback (``DEALLOCATE ALL``): a statement
found missing is parsed again and the transaction sent again, once; nothing was written,
since the first error of a pipeline skips everything after it, its ``COMMIT`` included.

An error answers the first failed statement's ``psycopg.Error`` (as psycopg raises it), after
the pipeline was read to its end; the transaction is then aborted (the caller rolls back),
or gone with the connection. A connection left in pipeline mode (an interruption while
waiting) is closed, never handed back to the pool as it is.
"""

from __future__ import annotations

import hashlib
from collections import namedtuple
from collections.abc import Sequence
from functools import cache
from typing import Any, NamedTuple
from weakref import WeakKeyDictionary

import psycopg
from psycopg import errors as pg_errors
from psycopg import generators, pq
from psycopg.adapt import Transformer
from psycopg.pq.abc import PGresult

__all__ = ["Step", "transaction"]

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
# The prepared statements ragport parsed on each connection (their names).
_PREPARED: WeakKeyDictionary[psycopg.Connection[Any], set[bytes]] = WeakKeyDictionary()


class Step(NamedTuple):
    """One statement: its SQL with ``$n`` parameters, their values (``str`` or ``None``),
    and whether it runs as a named prepared statement (its generic plan cached)."""

    sql: str
    params: Sequence[str | None]
    prepared: bool = False


@cache
def _name(sql: str) -> bytes:
    return b"ragport_" + hashlib.sha1(sql.encode(), usedforsecurity=False).hexdigest()[:16].encode()


@cache
def _row_type(names: tuple[str, ...]) -> Any:
    return namedtuple("Row", names, rename=True)


def transaction(dbapi: psycopg.Connection[Any], steps: Sequence[Step]) -> list[Any]:
    """Run ``steps`` between ``BEGIN`` and ``COMMIT`` in one pipeline on ``dbapi`` (idle, not
    in a transaction); answers each step's first row (a named tuple; ``None`` when it
    answered none). Raises the first failed statement's ``psycopg.Error``."""
    try:
        return _send_and_read(dbapi, steps)
    except pg_errors.InvalidSqlStatementName:
        _PREPARED.pop(dbapi, None)  # deallocated behind ragport's back: parse again
        dbapi.rollback()
        return _send_and_read(dbapi, steps)


def _send_and_read(dbapi: psycopg.Connection[Any], steps: Sequence[Step]) -> list[Any]:
    pgconn = dbapi.pgconn
    encoding = dbapi.info.encoding
    known = _PREPARED.setdefault(dbapi, set())
    parsed: list[bytes] = []
    pgconn.enter_pipeline_mode()
    try:
        for step in steps:  # parsed first: a parse is no statement of the transaction
            name = _name(step.sql)
            if step.prepared and name not in known and name not in parsed:
                pgconn.send_prepare(name, step.sql.encode(encoding))
                parsed.append(name)
        pgconn.send_query_params(b"BEGIN", None)
        for step in steps:
            values = [None if v is None else v.encode(encoding) for v in step.params]
            if step.prepared:
                pgconn.send_query_prepared(_name(step.sql), values)
            else:
                pgconn.send_query_params(step.sql.encode(encoding), values)
        pgconn.send_query_params(b"COMMIT", None)
        pgconn.pipeline_sync()
        results = _read(dbapi)
        pgconn.exit_pipeline_mode()
    except BaseException:
        _abandon(dbapi)
        raise
    return _answers(dbapi, results, known, parsed)


def _read(dbapi: psycopg.Connection[Any]) -> list[PGresult]:
    """Flush the pipeline, then every statement's last result up to the sync's."""
    pgconn = dbapi.pgconn
    dbapi.wait(generators.send(pgconn))
    results: list[PGresult] = []
    while True:
        got = dbapi.wait(generators.fetch_many(pgconn))
        if got and got[-1].status == pq.ExecStatus.PIPELINE_SYNC:
            return results
        if got:
            results.append(got[-1])


def _answers(
    dbapi: psycopg.Connection[Any],
    results: list[PGresult],
    known: set[bytes],
    parsed: list[bytes],
) -> list[Any]:
    """The first row of each step's result (``BEGIN``, parses and ``COMMIT`` left out), or
    the first error."""
    # A parse holds once its result came back, whatever failed after it.
    known.update(n for n, r in zip(parsed, results, strict=False) if r.status in _OK)
    failed = next((r for r in results if r.status not in _OK), None)
    if failed is not None and failed.status == pq.ExecStatus.FATAL_ERROR:
        raise pg_errors.error_from_result(failed, encoding=dbapi.info.encoding)
    if failed is not None:
        raise psycopg.OperationalError(
            f"unexpected pipeline result: {pq.ExecStatus(failed.status).name}"
        )
    rows: list[Any] = []
    loader = Transformer(dbapi)
    for result in results[len(parsed) + 1 : -1]:  # the parses and BEGIN first, COMMIT last
        if result.status != pq.ExecStatus.TUPLES_OK or result.ntuples == 0:
            rows.append(None)
            continue
        names = tuple((result.fname(i) or b"").decode() for i in range(result.nfields))
        loader.set_pgresult(result)
        rows.append(_row_type(names)(*loader.load_row(0, tuple)))
    return rows


def _abandon(dbapi: psycopg.Connection[Any]) -> None:
    """After a failure while sending or reading: leave pipeline mode, or close the connection
    when libpq cannot (results still unread), so the pool discards it."""
    pgconn = dbapi.pgconn
    try:
        pgconn.exit_pipeline_mode()
    except psycopg.Error:
        dbapi.close()
