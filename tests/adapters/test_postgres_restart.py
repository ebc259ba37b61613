"""A server restart under a pool of idle connections: the first read after it succeeds.

Every connection the pool held before the restart is dead (its server process was told to
stop: SQLSTATE 57P01, admin_shutdown). The store reads once more after a lost connection and
then on a connection opened after the loss, never on another of the dead ones (the pool
discards every connection older than the loss, as SQLAlchemy does on a disconnect). While
the server is still down a read fails as before: ``StoreError`` with ``lost_connection``.
A server of its own (``pg_cluster``), stopped and started by the test; the idle ping
(``IDLE_PING_SECONDS``) is off, as for a restart quicker than it (a second or two).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import errors as pg_errors
from sqlalchemy import create_engine

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, _driver, reads
from ragport.domain.errors import StoreError

SCOPE = ragport.Scope("tenant-1", "kb", "docs")
EMB = HashEmbedder(dimensions=16)
IDLE = 4  # connections the pool holds, idle, when the server restarts


@pytest.fixture(scope="module")
def server(pg_cluster: Any) -> Any:
    return pg_cluster.primary()


@pytest.fixture(params=["own engine", "host engine"])
def store(
    server: Any, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[PostgresStore]:
    """On ragport's engine (a LIFO pool: a discarded connection's slot, reopened, is taken
    next) and on a host's (SQLAlchemy's default FIFO pool: the next idle one is taken)."""
    monkeypatch.setattr(_driver, "IDLE_PING_SECONDS", 3600.0)
    url = server.url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine: Any = server.url if request.param == "own engine" else create_engine(url)
    store = PostgresStore(engine, schema="restart", create=True)
    ragport.application.replace_source(
        source_id="doc",
        chunks=[ragport.Chunk.of("doc", 0, "alpha beta gamma")],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    try:
        yield store
    finally:
        store.engine.dispose()


def _fill_pool(store: PostgresStore) -> set[int]:
    """``IDLE`` distinct connections opened, used and handed back to the pool."""
    held = [store.engine.raw_connection() for _ in range(IDLE)]
    pids = {c.dbapi_connection.info.backend_pid for c in held}  # type: ignore[union-attr]
    for c in held:
        c.close()
    assert store.engine.pool.checkedin() == IDLE  # type: ignore[attr-defined]
    return pids


def _restart(server: Any) -> None:
    server.stop("fast")  # every backend gets SIGTERM: 57P01 on its client's next statement
    server.start()


def _pid(store: PostgresStore) -> int:
    rows = store._db.read("pid", lambda conn: reads.fetch(conn, "SELECT pg_backend_pid()", {}))
    return int(rows[0][0])


def test_the_first_read_after_a_restart_succeeds(store: PostgresStore, server: Any) -> None:
    old = _fill_pool(store)
    _restart(server)
    # A read block (the write-side lookup) and a vector query, each on a pool of dead ones.
    assert [r.text for r in store.get_by_source(SCOPE, "doc")] == ["alpha beta gamma"]
    hits = store.query(SCOPE, EMB.embed(["alpha"])[0], limit=3)
    assert [h.record.source_id for h in hits] == ["doc"]
    assert _pid(store) not in old


def test_a_vector_query_first_after_a_restart_succeeds(store: PostgresStore, server: Any) -> None:
    _fill_pool(store)
    _restart(server)
    hits = store.query(SCOPE, EMB.embed(["alpha"])[0], limit=3)
    assert [h.record.source_id for h in hits] == ["doc"]


def test_a_read_while_the_server_is_down_fails_typed(store: PostgresStore, server: Any) -> None:
    _fill_pool(store)
    server.stop("fast")
    try:
        with pytest.raises(StoreError) as info:
            store.get_by_source(SCOPE, "doc")
        assert info.value.lost_connection
        assert info.value.reason == "refused"  # nothing listens: as before the fix
    finally:
        server.start()
    assert [r.text for r in store.get_by_source(SCOPE, "doc")] == ["alpha beta gamma"]


def test_a_write_first_after_a_restart(store: PostgresStore, server: Any) -> None:
    """A write reads first (the generations, retried like any read): its unit of work then
    takes a connection opened after the restart."""
    _fill_pool(store)
    _restart(server)
    ragport.application.replace_source(
        source_id="doc",
        chunks=[ragport.Chunk.of("doc", 0, "delta epsilon")],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    assert [r.text for r in store.get_by_source(SCOPE, "doc")] == ["delta epsilon"]


def test_a_write_that_reads_nothing_first_after_a_restart(
    store: PostgresStore, server: Any
) -> None:
    """``delete_source`` begins with its unit of work: its checkout sees the connection's
    server hung up (no round trip) and takes a live one. Writes are never retried."""
    _fill_pool(store)
    _restart(server)
    ragport.application.delete_source(source_id="doc", store=store, scope=SCOPE)
    assert list(store.get_by_source(SCOPE, "doc")) == []


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (pg_errors.AdminShutdown, True),  # 57P01: a restart's fast or smart shutdown
        (pg_errors.CrashShutdown, True),  # 57P02: another server process crashed
        (pg_errors.CannotConnectNow, True),  # 57P03: the server is starting up
        (pg_errors.ConnectionFailure, True),  # 08006
        (pg_errors.QueryCanceled, False),  # 57014: a statement_timeout, the connection lives
        (pg_errors.SerializationFailure, False),
    ],
)
def test_which_server_errors_are_a_lost_connection(error: type, lost: bool) -> None:
    """The SQLSTATEs a read is retried on (``StoreError.lost_connection``)."""
    assert _driver.lost_connection(error("server message")) is lost
    with pytest.raises(StoreError) as info, _driver.translate_errors("read"):
        raise error("server message")
    assert info.value.lost_connection is lost
