"""Engine construction and the one place driver exceptions become ragport errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import sqlalchemy
from psycopg import errors as pg_errors
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy import exc as sa_exc

from ragport.domain.errors import CapabilityError, RagportError, StoreError, ValidationError

__all__ = ["driver_connection", "make_engine", "translate_errors"]


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
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)


def driver_connection(conn: Connection) -> psycopg.Connection[Any]:
    """The psycopg connection under a SQLAlchemy connection, with pgvector types registered."""
    dbapi = conn.connection.driver_connection
    assert isinstance(dbapi, psycopg.Connection)
    info = conn.connection.info
    if not info.get("ragport_vector"):
        from pgvector.psycopg import register_vector

        try:
            register_vector(dbapi)
        except psycopg.ProgrammingError as exc:
            raise CapabilityError(
                "the pgvector extension is not installed in this database; run `ragport db "
                "upgrade` (or PostgresStore(..., create=True)) as a role allowed to create it",
                capability="vector",
            ) from exc
        info["ragport_vector"] = True
    return dbapi


_MISSING_SCHEMA = (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName, pg_errors.UndefinedColumn)
_NO_EXTENSION = (pg_errors.UndefinedFile, pg_errors.FeatureNotSupported, pg_errors.UndefinedObject)


@contextmanager
def translate_errors(operation: str) -> Iterator[None]:
    """Map driver exceptions to ragport errors (never quoting SQL parameters)."""
    try:
        yield
    except RagportError:
        raise
    except sa_exc.DBAPIError as exc:
        raise _translate(operation, exc.orig) from exc
    except psycopg.Error as exc:
        raise _translate(operation, exc) from exc
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise StoreError(f"{operation} failed: {type(exc).__name__}") from exc


def _translate(operation: str, orig: BaseException | None) -> RagportError:
    state = getattr(orig, "sqlstate", None) or "unknown"
    name = type(orig).__name__
    if isinstance(orig, pg_errors.UniqueViolation):
        return ValidationError(
            f"{operation}: a record id is already live in this scope", field="id"
        )
    if isinstance(orig, _MISSING_SCHEMA):
        return StoreError(
            f"{operation}: the ragport schema is missing or out of date; run `ragport db upgrade` "
            f"(SQLSTATE {state})"
        )
    if isinstance(orig, pg_errors.InsufficientPrivilege):
        return CapabilityError(
            f"{operation}: permission denied (SQLSTATE {state})", capability="privilege"
        )
    if isinstance(orig, _NO_EXTENSION):
        return CapabilityError(
            f"{operation}: the pgvector extension is not available on this server (SQLSTATE {state})",
            capability="vector",
        )
    if isinstance(orig, psycopg.OperationalError) and getattr(orig, "sqlstate", None) is None:
        return StoreError(f"{operation}: could not reach the PostgreSQL server ({name})")
    if isinstance(orig, psycopg.DataError):  # SQLSTATE class 22: the value itself was refused
        return ValidationError(
            f"{operation}: rejected by PostgreSQL ({name}, SQLSTATE {state})", field="data"
        )
    return StoreError(f"{operation} failed ({name}, SQLSTATE {state})")
