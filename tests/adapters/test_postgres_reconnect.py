"""Pooled connections that lost their server: reads recover, nothing is reported as found.

The store's own engine pings a connection only after it sat idle (``IDLE_PING_SECONDS``), not
on every checkout; a connection killed while in steady use fails one statement, which the
store retries once on a fresh connection (reads only).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, VectorIndexSettings, _driver, backend, reads
from ragport.domain.errors import StoreError, ValidationError

SCOPE = ragport.Scope("tenant-1", "kb", "docs")
EMB = HashEmbedder(dimensions=16)


@pytest.fixture
def admin(pg_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def _store(pg_url: str, schema: str, **options: Any) -> PostgresStore:
    store = PostgresStore(pg_url, schema=schema, create=True, **options)
    ragport.application.replace_source(
        source_id="doc",
        chunks=[ragport.Chunk.of("doc", 0, "alpha beta gamma")],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    return store


def _backend_pid(store: PostgresStore) -> int:
    rows = store._db.read("pid", lambda conn: reads.fetch(conn, "SELECT pg_backend_pid()", {}))
    return int(rows[0][0])


def _kill(admin: psycopg.Connection, pid: int, *, wait: bool = False) -> None:
    """``pg_terminate_backend(pid)``; with ``wait``, until that process has exited (it
    closes its socket then: pg_terminate_backend returns once it is signalled)."""
    assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    for _ in range(500 if wait else 0):
        if not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            return
        time.sleep(0.01)
    assert not wait, "the terminated backend did not exit within 5 s"


def test_a_read_on_a_killed_pooled_connection_is_retried_once(pg_url, pg_schema, admin) -> None:
    store = _store(pg_url, pg_schema)
    try:
        pid = _backend_pid(store)
        assert _backend_pid(store) == pid, "the pool must hand back the same connection"
        _kill(admin, pid)
        raw_read, attempts = store._db.raw_read, []

        def counting(operation, engine=None):  # type: ignore[no-untyped-def]
            attempts.append(operation)
            return raw_read(operation, engine)

        store._db.raw_read = counting  # type: ignore[method-assign]
        # No idle ping (the connection was just used): the first statement fails, the store
        # discards the connection and reads again on a fresh one.
        records = store.get_by_source(SCOPE, "doc")
        assert [r.text for r in records] == ["alpha beta gamma"]
        assert attempts == ["read generations", "read generations"]  # its first statement
        assert _backend_pid(store) != pid
    finally:
        store.engine.dispose()


def test_an_idle_connection_is_pinged_and_replaced(pg_url, pg_schema, admin, monkeypatch) -> None:
    monkeypatch.setattr(_driver, "IDLE_PING_SECONDS", 0.0)
    store = _store(pg_url, pg_schema)
    reads: list[str] = []
    original = store._db.lend  # how a read block takes its connection

    def counting(operation, run, keep, *, replica):  # type: ignore[no-untyped-def]
        reads.append(operation)
        return original(operation, run, keep, replica=replica)

    try:
        pid = _backend_pid(store)
        _kill(admin, pid)
        monkeypatch.setattr(store._db, "connect", _no_retry(store._db.connect))
        monkeypatch.setattr(store._db, "lend", counting)
        # The checkout ping finds the dead connection first: the read itself never fails.
        assert [r.text for r in store.get_by_source(SCOPE, "doc")] == ["alpha beta gamma"]
        assert reads == ["read generations"]
    finally:
        store.engine.dispose()


def _no_retry(connect):  # type: ignore[no-untyped-def]
    """Fails the test if a statement hits a dead connection (the ping should have caught it)."""
    from contextlib import contextmanager

    @contextmanager
    def wrapped(operation, *, read=False):  # type: ignore[no-untyped-def]
        with connect(operation, read=read) as conn:
            try:
                yield conn
            except StoreError as exc:  # pragma: no cover - only on a regression
                pytest.fail(f"a statement ran on a dead connection: {exc}")

    return wrapped


def test_a_write_on_a_killed_connection_fails_loudly_and_the_next_one_works(
    pg_url, pg_schema, admin, monkeypatch
) -> None:
    """The connection killed inside the unit of work, after its first statement (the
    scope's lock): the write raises, nothing of it stays, and it is not run again."""
    store = _store(pg_url, pg_schema)
    transaction = backend.PostgresBackend._transaction
    killed: list[int] = []

    def killing(self, scope, conn, state, savepoint):  # type: ignore[no-untyped-def]
        if not killed:
            killed.append(conn.connection.driver_connection.info.backend_pid)
            _kill(admin, killed[0])
        return transaction(self, scope, conn, state, savepoint)

    monkeypatch.setattr(backend.PostgresBackend, "_transaction", killing)
    try:
        chunks = [ragport.Chunk.of("doc", 0, "delta epsilon")]
        # Writes are not retried behind the caller's back: the error is typed, nothing half done.
        with pytest.raises(StoreError) as info:
            ragport.application.replace_source(
                source_id="doc", chunks=chunks, embedder=EMB, store=store, scope=SCOPE
            )
        assert info.value.lost_connection and len(killed) == 1
        assert [r.text for r in store.get_by_source(SCOPE, "doc")] == ["alpha beta gamma"]
        ragport.application.replace_source(
            source_id="doc", chunks=chunks, embedder=EMB, store=store, scope=SCOPE
        )
        assert [r.text for r in store.get_by_source(SCOPE, "doc")] == ["delta epsilon"]
    finally:
        store.engine.dispose()


def test_a_write_takes_no_connection_killed_while_idle(pg_url, pg_schema, admin) -> None:
    """A pooled connection killed while it sat idle (after the write's early reads, before
    its unit of work takes it): the checkout sees its server hung up (no round trip,
    ``pool.closed_by_server``) and takes a live one; nothing ran on the dead one."""
    store = _store(pg_url, pg_schema)

    class KillingEmbedder(HashEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            _kill(admin, _backend_pid(store), wait=True)
            return super().embed(texts)

    try:
        chunks = [ragport.Chunk.of("doc", 0, "delta epsilon")]
        ragport.application.replace_source(
            source_id="doc",
            chunks=chunks,
            embedder=KillingEmbedder(dimensions=16),
            store=store,
            scope=SCOPE,
        )
        assert [r.text for r in store.get_by_source(SCOPE, "doc")] == ["delta epsilon"]
    finally:
        store.engine.dispose()


def test_hnsw_settings_follow_the_predicates(pg_url, pg_schema) -> None:
    """Plain vector legs scan in strict order at ef_search 200; with a filter, relaxed at 400.

    The settings live on the pooled connection and are re-sent only when they change.
    """
    store = _store(pg_url, pg_schema)

    def settings() -> tuple[str, str]:
        rows = store._db.read(
            "settings",
            lambda conn: reads.fetch(
                conn,
                "SELECT current_setting('hnsw.ef_search') AS ef, "
                "current_setting('hnsw.iterative_scan') AS scan",
                {},
            ),
        )
        return rows[0].ef, rows[0].scan

    try:
        vector = EMB.embed(["alpha"])[0]
        assert [r.record.source_id for r in store.query(SCOPE, vector, limit=5)] == ["doc"]
        assert settings() == ("200", "strict_order")
        found = store.query(SCOPE, vector, limit=5, metadata_filter={"missing": 1})
        assert list(found) == []
        assert settings() == ("400", "relaxed_order")
        store.query(SCOPE, vector, limit=5)
        assert settings() == ("200", "strict_order")
    finally:
        store.engine.dispose()


def test_ef_search_sets_the_plain_width_and_scales_with_the_predicates(pg_url, pg_schema) -> None:
    """``ef_search=300``: 300 plain, 600 with a filter, 1,000 (the ceiling) with a filter and
    grants."""
    store = _store(pg_url, pg_schema, vector_index=VectorIndexSettings(ef_search=300))

    def ef() -> str:
        rows = store._db.read(
            "settings",
            lambda conn: reads.fetch(conn, "SELECT current_setting('hnsw.ef_search') AS ef", {}),
        )
        return str(rows[0].ef)

    try:
        vector = EMB.embed(["alpha"])[0]
        assert [r.record.source_id for r in store.query(SCOPE, vector, limit=5)] == ["doc"]
        assert ef() == "300"
        store.query(SCOPE, vector, limit=5, metadata_filter={"missing": 1})
        assert ef() == "600"
        alice = ragport.Authorization("alice", tenant_id=SCOPE.tenant_id)
        store.query(SCOPE, vector, limit=5, metadata_filter={"missing": 1}, authorization=alice)
        assert ef() == "1000"
    finally:
        store.engine.dispose()


@pytest.mark.parametrize("bad", [0, 1001, -5, True, "200", 200.0, None])
def test_an_ef_search_outside_1_to_1000_is_refused(bad: object) -> None:
    with pytest.raises(ValidationError) as info:
        VectorIndexSettings(ef_search=bad)  # type: ignore[arg-type]
    assert info.value.field == "ef_search"


def test_a_read_hands_the_pooled_connection_back_in_its_own_mode(pg_url, pg_schema) -> None:
    """Reads borrow the pooled connection in autocommit and give it back as they found it.

    A connection left in autocommit would make the next unit of work non-transactional.
    """
    store = _store(pg_url, pg_schema)
    try:
        pid = _backend_pid(store)
        assert store.get_by_source(SCOPE, "doc")
        with store.engine.connect() as conn:
            dbapi = conn.connection.driver_connection
            assert isinstance(dbapi, psycopg.Connection)
            assert dbapi.autocommit is False
            assert dbapi.info.backend_pid == pid, "the same pooled connection"
    finally:
        store.engine.dispose()


def test_reads_take_the_connection_returned_last(pg_url, pg_schema) -> None:
    """The pool is last-in-first-out: with three idle connections, a run of reads keeps to
    the one returned last instead of rotating through all three (FIFO, SQLAlchemy's default,
    sent each read to the coldest server process)."""
    store = _store(pg_url, pg_schema)
    try:
        held = [store.engine.raw_connection() for _ in range(3)]
        pids = [c.driver_connection.info.backend_pid for c in held]
        assert len(set(pids)) == 3
        for c in held:  # returned in order: the last one, pids[2], is on top
            c.close()
        seen = set()
        for _ in range(6):
            assert store.get_by_source(SCOPE, "doc")
            with store.engine.connect() as conn:
                seen.add(conn.connection.driver_connection.info.backend_pid)
        assert seen == {pids[2]}
    finally:
        store.engine.dispose()
