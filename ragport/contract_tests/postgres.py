"""Opt-in pytest fixtures to run the contract suites on your own PostgreSQL server.

Enable them in a ``conftest.py`` and point ``RAGPORT_TEST_DATABASE_URL`` at a server with
pgvector (a database your tests may create schemas in)::

    pytest_plugins = ["ragport.contract_tests.postgres"]

Fixtures:

- ``ragport_postgres_url`` (session): the URL of ``RAGPORT_TEST_DATABASE_URL``
  (``postgresql://user:password@host:5432/db``; ``postgresql+psycopg://`` is accepted too).
  Unset or empty: every test that asks for it is skipped, with a reason naming the variable.
  Set: the server is checked once, on first use; unreachable, or without the ``vector``
  extension available, fails those tests with a message naming the cause, never the URL.
- ``ragport_postgres_schema``: a fresh schema name for the requesting test
  (``ragport_test_`` and 16 hex digits) that does not exist yet; after the test it is dropped
  with everything in it (``DROP SCHEMA ... CASCADE``), whether the test passed or not.

Nothing here imports an adapter (the suites use ports, domain and application only): build
the store in your own ``store`` fixture from the two values, and dispose of it there, before
the schema goes::

    class TestPostgresStore(ChunkStoreContract):
        bm25_tokens = "engine"  # PostgreSQL tokenizes with its text-search configuration

        @pytest.fixture
        def store(self, ragport_postgres_url, ragport_postgres_schema):
            store = PostgresStore(ragport_postgres_url, schema=ragport_postgres_schema,
                                  create=True, writes=WriteSettings(maintenance_delay=None))
            yield store
            store.engine.dispose()

``WriteSettings(maintenance_delay=None)`` (``ragport.adapters.postgres``) runs the store's post-commit maintenance inline, so no background
thread reaches for the schema after it is dropped.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

__all__ = [
    "DATABASE_URL_ENV",
    "SCHEMA_PREFIX",
    "ragport_postgres_schema",
    "ragport_postgres_url",
]

DATABASE_URL_ENV = "RAGPORT_TEST_DATABASE_URL"
"""The environment variable naming the server the fixtures use."""
SCHEMA_PREFIX = "ragport_test_"
"""Every schema ``ragport_postgres_schema`` creates a name for starts with this."""
_CONNECT_TIMEOUT_SECONDS = 10


def _libpq(url: str) -> str:
    """The URL as libpq reads it (SQLAlchemy's ``+psycopg`` driver suffix dropped)."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(_libpq(url), autocommit=True, connect_timeout=_CONNECT_TIMEOUT_SECONDS)


def _check_server(url: str) -> None:
    """Fail (never skip) when the named server cannot serve the suites: the variable was set,
    so a silent skip would hide a broken setup. Messages never quote the URL (it may hold a
    password)."""
    failure: str | None = None
    row = None
    try:
        with _connect(url) as conn:
            row = conn.execute(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
    except psycopg.Error as exc:
        failure = type(exc).__name__  # only the type: libpq's message names hosts and users
    if failure is not None:
        pytest.fail(
            f"{DATABASE_URL_ENV} names a server ragport's fixtures cannot connect to "
            f"({failure}); check the host, port, database and credentials",
            pytrace=False,
        )
    if row is None:
        pytest.fail(
            f"the server of {DATABASE_URL_ENV} has no pgvector extension available; install "
            "pgvector there (the store creates the extension in its schema's database)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def ragport_postgres_url() -> str:
    """``RAGPORT_TEST_DATABASE_URL``, its server checked once; skips the test when unset."""
    url = os.environ.get(DATABASE_URL_ENV, "").strip()
    if not url:
        pytest.skip(f"set {DATABASE_URL_ENV} to a PostgreSQL server with pgvector to run this")
    _check_server(url)
    return url


@pytest.fixture
def ragport_postgres_schema(ragport_postgres_url: str) -> Iterator[str]:
    """A schema name of the requesting test's own, dropped with its contents afterwards."""
    name = f"{SCHEMA_PREFIX}{uuid.uuid4().hex[:16]}"
    try:
        yield name
    finally:
        with _connect(ragport_postgres_url) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
