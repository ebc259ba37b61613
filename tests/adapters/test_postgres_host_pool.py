"""A host that shares its Engine with ragport and holds pooled connections while it calls it.

``PostgresStore(engine)`` takes its connections from the host's pool. When the host holds
every connection the pool may lend, a call that needs one must fail at once with
``StoreError(reason="pool_exhausted")`` naming the pool, not wait ``pool_timeout`` (30 s by
default) for a connection only the waiting thread can give back (issue 44). The engines here
have ``pool_timeout=3`` so that, without the check, the tests fail in 3 s rather than 30.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy
from sqlalchemy import Engine

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, WriteSettings
from ragport.adapters.postgres import pool as pg_pool
from ragport.domain.errors import StoreError, reason_code

SCOPE = ragport.Scope("tenant-1", "host", "docs")
EMB = HashEmbedder(dimensions=16)


def _engine(pg_url: str, size: int) -> Engine:
    url = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    return sqlalchemy.create_engine(url, pool_size=size, max_overflow=0, pool_timeout=3)


@pytest.fixture
def tight(pg_url: str, pg_schema: str) -> Iterator[tuple[Engine, PostgresStore]]:
    """A host Engine of one connection (``pool_size=1, max_overflow=0``) and a store on it
    holding one source."""
    engine = _engine(pg_url, 1)
    store = PostgresStore(
        engine, schema=pg_schema, create=True, writes=WriteSettings(maintenance_delay=None)
    )
    _write(store, "first")
    yield engine, store
    engine.dispose()


def _write(store: PostgresStore, source_id: str) -> None:
    ragport.application.replace_source(
        source_id=source_id,
        chunks=[ragport.Chunk.of(source_id, 0, f"alpha beta {source_id}")],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )


def _retrieve(store: PostgresStore) -> ragport.RetrievalResult:
    return ragport.application.retrieve_context("alpha", embedder=EMB, store=store, scope=SCOPE)


def test_a_write_while_the_host_holds_the_only_connection_fails_fast(tight) -> None:
    """The host holds its pool's only connection and writes through ragport: a typed
    ``StoreError(reason="pool_exhausted")`` at once. If this fails, check that
    ``Connections.checkout`` calls ``pool.wait_for_connection`` and that ``watch``
    records the host's checkout."""
    engine, store = tight
    with engine.connect() as held:
        held.execute(sqlalchemy.text("SELECT 1"))
        with pytest.raises(StoreError) as info:
            _write(store, "second")
    assert info.value.reason == "pool_exhausted"
    assert reason_code(info.value) == "pool_exhausted"
    _write(store, "second")  # the host gave it back: the same call works
    assert {h.source_id for h in _retrieve(store).hits} == {"first", "second"}


def test_a_read_while_the_host_holds_the_only_connection_fails_fast(tight) -> None:
    """A retrieve while the host holds every connection of the pool fails the same way.
    If this fails, check ``Connections.raw_read``."""
    engine, store = tight
    with engine.connect() as held:
        held.execute(sqlalchemy.text("SELECT 1"))
        with pytest.raises(StoreError) as info:
            _retrieve(store)
    assert info.value.reason == "pool_exhausted"
    assert [h.source_id for h in _retrieve(store).hits] == ["first"]


def test_a_connection_held_by_another_thread_is_waited_for_briefly(tight, monkeypatch) -> None:
    """Another thread holds the only connection and never gives it back: the call fails with
    ``reason="pool_exhausted"`` after ``POOL_WAIT_SECONDS`` (shortened here), not after
    ``pool_timeout``. If this fails, check the wait in ``pool.wait_for_connection``."""
    engine, store = tight
    monkeypatch.setattr(pg_pool, "POOL_WAIT_SECONDS", 0.05)
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with engine.connect():
            taken.set()
            done.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(30)
        with pytest.raises(StoreError) as info:
            _retrieve(store)
        assert info.value.reason == "pool_exhausted"
    finally:
        done.set()
        holder.join(30)
    assert [h.source_id for h in _retrieve(store).hits] == ["first"]


def test_a_connection_another_thread_gives_back_is_used(tight) -> None:
    """Another thread holds the only connection and gives it back while ragport waits: the
    call goes through. If this fails, check that the wait re-reads the pool."""
    engine, store = tight
    taken = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with engine.connect():
            taken.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(30)
    timer = threading.Timer(0.1, release.set)
    timer.start()
    try:
        assert [h.source_id for h in _retrieve(store).hits] == ["first"]
    finally:
        release.set()
        timer.cancel()
        holder.join(30)


def test_a_host_holding_some_connections_still_writes_large_adds(pg_url, pg_schema) -> None:
    """An add that would write its vectors on a second connection writes them serially when
    the host holds every connection but the unit of work's, instead of waiting for one.
    If this fails, check ``VectorWriter.start`` (``has_free_connection``)."""
    engine = _engine(pg_url, 4)
    try:
        store = PostgresStore(
            engine,
            schema=pg_schema,
            create=True,
            writes=WriteSettings(maintenance_delay=None, parallel_vector_rows=2),
        )
        with engine.connect() as a, engine.connect() as b, engine.connect() as c:
            for held in (a, b, c):  # three of four: the unit of work takes the last one
                held.execute(sqlalchemy.text("SELECT 1"))
            chunks = [ragport.Chunk.of("big", i, f"alpha chunk {i}") for i in range(8)]
            ragport.application.replace_source(
                source_id="big", chunks=chunks, embedder=EMB, store=store, scope=SCOPE
            )
            assert len(_retrieve(store).hits) == 5
    finally:
        engine.dispose()
