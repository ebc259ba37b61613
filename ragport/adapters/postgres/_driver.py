"""Engine construction and the one place driver exceptions become ragport errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import psycopg
import sqlalchemy
from psycopg import errors as pg_errors
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy import exc as sa_exc

from ragport.domain.errors import (
    CapabilityError,
    RagportError,
    StoreError,
    ValidationError,
    raise_unchained,
)

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "IDLE_PING_SECONDS",
    "PooledConnection",
    "connect_failure_reason",
    "driver_connection",
    "lost_connection",
    "make_engine",
    "translate_errors",
    "vector_schema",
]

# A pooled connection idle for longer than this is pinged before use (one round trip); one in
# steady use is not. A connection that dies while in steady use fails one statement, which the
# pool then discards (reads are retried once on a fresh connection; see PostgresStore).
IDLE_PING_SECONDS = 5.0
# How long opening a connection may take unless the URL says ``connect_timeout=``.
CONNECT_TIMEOUT_SECONDS = 10


def make_engine(url_or_engine: str | Engine) -> Engine:
    """An Engine for a ``postgresql://`` URL (psycopg 3), or the caller's own Engine."""
    if isinstance(url_or_engine, Engine):
        return url_or_engine
    if not isinstance(url_or_engine, str) or not url_or_engine.startswith(
        ("postgresql://", "postgres://", "postgresql+psycopg://")
    ):
        raise ValidationError("store URL must start with postgresql://", field="url")
    url = url_or_engine
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            url = "postgresql+psycopg://" + url[len(prefix) :]
    # libpq waits forever for a server that accepts and never answers; a URL may set its own.
    connect_args = {} if "connect_timeout=" in url else {"connect_timeout": CONNECT_TIMEOUT_SECONDS}
    # LIFO: a read takes the connection used last, whose server process is still warm in the
    # CPU's caches. FIFO (SQLAlchemy's default) rotates through every idle connection: with 4
    # in the pool (a writer's second connection, the maintenance thread) a vector-only
    # retrieve_context at 100k rows took 2.08 ms p50 against 1.57 ms under LIFO
    # (bench_postgres's retrieve section, one loaded schema). Idle ones are pinged (below).
    engine = create_engine(
        url, pool_size=5, max_overflow=10, pool_use_lifo=True, connect_args=connect_args
    )
    _ping_when_idle(engine, IDLE_PING_SECONDS)
    return engine


def _ping_when_idle(engine: Engine, seconds: float) -> None:
    """Ping a pooled connection on checkout only when it sat idle for ``seconds``.

    SQLAlchemy's ``pool_pre_ping`` costs a round trip on every checkout: a third of a fast
    read. A failed ping raises ``InvalidatePoolError``, as ``pool_pre_ping`` does: the pool
    discards the connection, and each it opened before at its next checkout (the server
    restarted, most likely: they are dead too), and opens another.
    """

    @event.listens_for(engine, "checkin")
    def _idle_since(dbapi_connection: Any, record: Any) -> None:
        record.info["ragport_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.get("ragport_idle_since")
        if since is None or time.monotonic() - since < seconds:
            return
        try:
            dbapi_connection.execute("SELECT 1")
            if not dbapi_connection.autocommit:
                dbapi_connection.rollback()
        except psycopg.Error as exc:
            raise sa_exc.InvalidatePoolError("idle connection no longer answers") from exc


_VECTOR_SCHEMA = "ragport_vector"  # in a connection's ``info``: pgvector's schema, once registered


class PooledConnection(Protocol):
    """A SQLAlchemy ``Connection``, or anything else whose ``.connection`` is a pooled one."""

    @property
    def connection(self) -> Any: ...


def driver_connection(conn: PooledConnection | Connection) -> psycopg.Connection[Any]:
    """The psycopg connection under a SQLAlchemy connection, with pgvector types registered."""
    dbapi = conn.connection.driver_connection
    assert isinstance(dbapi, psycopg.Connection)
    info = conn.connection.info
    if not info.get(_VECTOR_SCHEMA):
        from ragport.adapters.postgres.extension import register_vector_type

        # CapabilityError when the extension is missing
        info[_VECTOR_SCHEMA] = register_vector_type(dbapi)
    return dbapi


def vector_schema(conn: PooledConnection | Connection) -> str:
    """The schema of the ``vector`` extension, as ``driver_connection`` found it on ``conn``
    (no statement on a connection it already prepared)."""
    driver_connection(conn)
    return str(conn.connection.info[_VECTOR_SCHEMA])


_MISSING_SCHEMA = (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName, pg_errors.UndefinedColumn)
_NO_EXTENSION = (pg_errors.UndefinedFile, pg_errors.FeatureNotSupported, pg_errors.UndefinedObject)


@contextmanager
def translate_errors(operation: str) -> Iterator[None]:
    """Map driver exceptions to ragport errors that quote no SQL parameters and chain nothing.

    A driver error carries the statement's parameters (SQLAlchemy) and the server's
    diagnostics, whose CONTEXT may quote the refused value (a metadata JSON, a text); so the
    translated error is raised unchained, with the SQLSTATE and whether the connection was
    lost kept as fields. A value Python cannot encode (a lone surrogate that slipped past the
    domain) is a ``ValidationError`` too; ``UnicodeEncodeError.object`` holds the whole text.
    """
    try:
        yield
    except RagportError:
        raise
    except sa_exc.DBAPIError as exc:
        error = _translate(operation, exc.orig, lost=lost_connection(exc))
    except psycopg.Error as exc:
        error = _translate(operation, exc, lost=lost_connection(exc))
    except sqlalchemy.exc.SQLAlchemyError as exc:
        error = StoreError(f"{operation} failed: {type(exc).__name__}")
    except UnicodeError as exc:
        error = ValidationError(
            f"{operation}: a value is not encodable as UTF-8 ({type(exc).__name__})", field="data"
        )
    else:
        return
    raise_unchained(error)


def lost_connection(exc: BaseException | None) -> bool:
    """Whether ``exc`` says the connection itself is gone (not that the statement failed)."""
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        exc = exc.orig
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith(("08", "57P"))


_CONNECT_FAILURES = {
    "database_missing": "the database named in the store URL does not exist on the server "
    "(create it, or fix the URL's database name)",
    "authentication_failed": "the PostgreSQL server refused the user name or password",
    "refused": "connection refused: nothing listens at the store URL's host and port",
    "timeout": "the PostgreSQL server did not answer in time (connect_timeout)",
    "unreachable": "could not reach the PostgreSQL server",
}


def connect_failure_reason(exc: BaseException) -> str:
    """Why libpq could not open a connection, from its SQLSTATE or its message.

    libpq reports most connection failures without a SQLSTATE, so its (English) message is
    read here; only the reason comes out, never the message (it names hosts and users).
    """
    state = getattr(exc, "sqlstate", None)
    text = str(exc).lower()
    if state == "3D000" or ("database" in text and "does not exist" in text):
        return "database_missing"
    if state in ("28P01", "28000") or "authentication failed" in text or "no password" in text:
        return "authentication_failed"
    if "connection refused" in text:
        return "refused"
    if "timeout expired" in text or "timed out" in text:
        return "timeout"
    return "unreachable"


def _translate(operation: str, orig: BaseException | None, *, lost: bool) -> RagportError:
    sqlstate = getattr(orig, "sqlstate", None)
    state = sqlstate or "unknown"
    name = type(orig).__name__
    if isinstance(orig, pg_errors.UniqueViolation):
        return ValidationError(
            f"{operation}: a record id is already live in this scope", field="id", sqlstate=sqlstate
        )
    if isinstance(orig, _MISSING_SCHEMA):
        return StoreError(
            f"{operation}: the ragport schema is missing or out of date; run `ragport db upgrade` "
            f"(SQLSTATE {state})",
            sqlstate=sqlstate,
        )
    if isinstance(orig, pg_errors.InsufficientPrivilege):
        return CapabilityError(
            f"{operation}: permission denied (SQLSTATE {state})",
            capability="privilege",
            sqlstate=sqlstate,
        )
    if isinstance(orig, _NO_EXTENSION):
        return CapabilityError(
            f"{operation}: the pgvector extension is not available on this server (SQLSTATE {state})",
            capability="vector",
            sqlstate=sqlstate,
        )
    if isinstance(orig, psycopg.OperationalError) and sqlstate in (None, "3D000", "28P01", "28000"):
        reason = connect_failure_reason(orig)
        return StoreError(
            f"{operation}: {_CONNECT_FAILURES[reason]} ({name})",
            sqlstate=sqlstate,
            lost_connection=lost,
            reason=reason,
        )
    if isinstance(orig, psycopg.DataError):  # SQLSTATE class 22: the value itself was refused
        return ValidationError(
            f"{operation}: rejected by PostgreSQL ({name}, SQLSTATE {state})",
            field="data",
            sqlstate=sqlstate,
        )
    return StoreError(
        f"{operation} failed ({name}, SQLSTATE {state})", sqlstate=sqlstate, lost_connection=lost
    )
