"""``PostgresStore.joined(connection)``: ragport's writes inside a transaction the host owns.

The host begins a transaction on its own SQLAlchemy connection, writes its own table and
calls ragport's use cases on ``store.joined(conn)``. These tests hold the promise of
docs/hosts.md: the host's commit publishes both, its rollback (or its process dying before
the commit) discards both, readers outside never see ragport's part alone, reads inside see
the uncommitted writes, a failed ragport write leaves the host's transaction usable, and no
call takes a second connection (a pool of one, held by the host, is enough).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, Engine, create_engine, text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore
from ragport.domain.errors import CapabilityError

EMB = HashEmbedder(dimensions=64)


def _scope() -> ragport.Scope:
    return ragport.Scope("host", "kb", "c" + uuid.uuid4().hex[:12])


def _chunks(source: str, n: int, word: str = "policy") -> list[ragport.Chunk]:
    return [ragport.Chunk.of(source, i, f"{word} clause {i} of {source}") for i in range(n)]


@pytest.fixture
def host_engine(pg_url: str) -> Iterator[Engine]:
    """The host's own engine: a pool of ONE connection and a 3 s pool timeout, so any second
    connection a joined call took would fail the test (quickly) instead of passing."""
    url = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_engine(url, pool_size=1, max_overflow=0, pool_timeout=3)
    yield engine
    engine.dispose()


@pytest.fixture
def store(host_engine: Engine, pg_schema: str) -> PostgresStore:
    store = PostgresStore(host_engine, schema=pg_schema, create=True, text_search_config="simple")
    with host_engine.begin() as conn:
        conn.execute(text(f'CREATE TABLE "{pg_schema}".host_documents (id text PRIMARY KEY)'))
    return store


def _host_row(conn: Connection, schema: str, doc: str) -> None:
    conn.execute(text(f'INSERT INTO "{schema}".host_documents VALUES (:d)'), {"d": doc})


def _host_rows(engine: Engine, schema: str) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text(f'SELECT id FROM "{schema}".host_documents')).scalars())


def _served(store: PostgresStore, scope: ragport.Scope, query: str = "policy clause") -> set[str]:
    result = ragport.application.retrieve_context(query, embedder=EMB, store=store, scope=scope)
    return {hit.source_id for hit in result.hits}


def _replace(store: PostgresStore, scope: ragport.Scope, source: str, n: int = 3) -> None:
    ragport.application.replace_source(
        source_id=source, chunks=_chunks(source, n), embedder=EMB, store=store, scope=scope
    )


def test_the_hosts_commit_publishes_ragports_writes_with_its_own(
    store, host_engine, pg_schema, pg_url
):
    """A replace on the joined view is invisible outside until the host commits, then served.

    If this fails, check that the joined unit of work runs on the host's connection (a
    savepoint, released, never committed) and that nothing wrote on another connection.
    """
    scope = _scope()
    with host_engine.connect() as conn, conn.begin():
        _host_row(conn, pg_schema, "doc-1")
        joined = store.joined(conn)
        _replace(joined, scope, "doc-1", n=40)  # > parallel_vector_rows: serial on this conn
        assert _served(joined, scope) == {"doc-1"}  # the host's reads see its own writes
        outside = PostgresStore(pg_url, schema=pg_schema)  # another pool
        assert _served(outside, scope) == set()  # nobody else does, yet
    assert _host_rows(host_engine, pg_schema) == ["doc-1"]
    assert _served(store, scope) == {"doc-1"}


def test_the_hosts_rollback_discards_ragports_writes(store, host_engine, pg_schema):
    """A replace and a grant on the joined view vanish with the host's rollback.

    If this fails, check that ``uow.commit`` on a joined view releases a savepoint and does
    not call ``Connection.commit``.
    """
    scope = _scope()
    _replace(store, scope, "kept")
    with host_engine.connect() as conn, conn.begin() as tx:
        _host_row(conn, pg_schema, "doc-2")
        joined = store.joined(conn)
        _replace(joined, scope, "doc-2")
        joined.set_source_access(scope, [ragport.Grant("doc-2", principal_ids=("alice",))])
        ragport.application.delete_source(source_id="kept", store=joined, scope=scope)
        assert _served(joined, scope) == {"doc-2"}
        tx.rollback()
    assert _host_rows(host_engine, pg_schema) == []
    assert _served(store, scope) == {"kept"}
    assert store.get_source_access(scope, ["doc-2"]) == {}


def test_a_failed_ragport_write_leaves_the_hosts_transaction_usable(store, host_engine, pg_schema):
    """A unit of work that fails mid-write rolls back its savepoint only; the host commits.

    If this fails, check ``PostgresBackend.write``'s joined path (begin_nested) and
    ``ScopeTransaction.rollback`` with a savepoint.
    """
    scope = _scope()
    with host_engine.connect() as conn, conn.begin():
        _host_row(conn, pg_schema, "doc-3")
        joined = store.joined(conn)
        with pytest.raises(RuntimeError), joined.unit_of_work(scope) as uow:
            uow.grants.set([ragport.Grant("doc-3", principal_ids=("bob",))])
            raise RuntimeError("the host's code failed inside the unit of work")
        with pytest.raises(ragport.ValidationError):  # refused inside the store's savepoint
            joined.set_source_access(scope, [ragport.Grant("", principal_ids=("bob",))])
        _replace(joined, scope, "doc-3")
    assert _host_rows(host_engine, pg_schema) == ["doc-3"]
    assert _served(store, scope) == {"doc-3"}
    assert store.get_source_access(scope, ["doc-3"]) == {}


def test_a_failed_read_leaves_the_hosts_transaction_usable(store, host_engine, pg_schema):
    """A read that fails on the server (a statement timeout) is undone by its savepoint.

    If this fails, check ``Connections.joined_read`` (SAVEPOINT ... ROLLBACK TO).
    """
    scope = _scope()
    _replace(store, scope, "doc-4")
    with host_engine.connect() as conn, conn.begin():
        _host_row(conn, pg_schema, "doc-4")
        conn.execute(text("SET LOCAL statement_timeout = 1"))
        conn.execute(text("SELECT 1"))
        joined = store.joined(conn)
        with pytest.raises(ragport.RagportError):
            for _ in range(50):  # 1 ms: one of these reads is cancelled
                ragport.application.retrieve_context(
                    "policy clause",
                    embedder=EMB,
                    store=joined,
                    scope=scope,
                    request=ragport.RetrievalRequest(lexical="bm25"),
                )
                conn.execute(text("SELECT pg_sleep(0.01)"))
        conn.execute(text("SET LOCAL statement_timeout = 0"))
        assert _served(joined, scope) == {"doc-4"}
    assert _host_rows(host_engine, pg_schema) == ["doc-4"]


def test_a_joined_call_without_the_hosts_transaction_is_refused(store, host_engine):
    """Outside a transaction the host began, a joined call raises ``CapabilityError``.

    If this fails, check ``Connections.host``: without the check, psycopg would begin a
    transaction SQLAlchemy does not know of, which nobody commits.
    """
    with host_engine.connect() as conn:
        joined = store.joined(conn)
        with pytest.raises(CapabilityError):
            _served(joined, _scope())
        with pytest.raises(CapabilityError):
            _replace(joined, _scope(), "doc-5")


def test_maintenance_that_commits_refuses_a_joined_view(store, host_engine):
    """``upgrade``, ``build_vector_indexes`` and ``merge_pending_lists`` commit on their own:
    a joined view refuses them (they would commit the host's transaction).

    If this fails, check ``Connections.refuse_joined``.
    """
    with host_engine.connect() as conn, conn.begin():
        joined = store.joined(conn)
        for call in (
            joined.upgrade,
            joined.build_vector_indexes,
            lambda: joined.merge_pending_lists("host"),
        ):
            with pytest.raises(CapabilityError):
                call()
    with pytest.raises(ragport.ValidationError):
        store.joined(object())  # type: ignore[arg-type]


def test_a_host_killed_before_its_commit_leaves_neither_write(store, host_engine, pg_schema):
    """A host process SIGKILLed between ragport's write and its commit leaves nothing behind.

    If this fails, check that no part of a joined call commits on its own (a second
    connection, an inline ANALYZE or merge that commits).
    """
    scope = _scope()
    child = textwrap.dedent(
        f"""
        import sys, time
        from sqlalchemy import create_engine, text
        import ragport
        from ragport.adapters.embedders import HashEmbedder
        from ragport.adapters.postgres import PostgresStore
        engine = create_engine({str(host_engine.url.render_as_string(hide_password=False))!r})
        store = PostgresStore(engine, schema={pg_schema!r})
        scope = ragport.Scope({scope.tenant_id!r}, {scope.resource_id!r}, {scope.corpus_id!r})
        with engine.connect() as conn, conn.begin():
            conn.execute(text('INSERT INTO "{pg_schema}".host_documents VALUES (:d)'), {{"d": "x"}})
            chunks = [ragport.Chunk.of("x", i, f"policy clause {{i}}") for i in range(40)]
            ragport.replace_source(source_id="x", chunks=chunks, embedder=HashEmbedder(dimensions=64),
                                   store=store.joined(conn), scope=scope)
            print("written", flush=True)
            time.sleep(60)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", child],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"written"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert _host_rows(host_engine, pg_schema) == []
    assert _served(store, scope) == set()
    assert store.current_generation(scope) == 0


def test_a_joined_read_whose_first_statement_fails_raises_the_translated_error(
    store, host_engine, pg_url, pg_schema
):
    """A read block's first statement on the host's connection fails (its tables are locked
    by another session, the host's ``lock_timeout`` runs out): the caller gets the typed error
    ``translate_errors`` makes (SQLSTATE kept, no driver text), not a bare one, and the read's
    savepoint is rolled back, so the host's transaction goes on.

    If this fails, check ``Connections._joined_first``.
    """
    scope = _scope()
    _replace(store, scope, "doc-7")
    locker = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    tables = ", ".join(
        f'"{pg_schema}".{t}'
        for t in ("scopes", "records", "record_vectors", "grants", "tombstones")
    )
    try:
        with host_engine.connect() as conn, conn.begin():
            _host_row(conn, pg_schema, "doc-7")
            joined = store.joined(conn)
            with locker.connect() as other, other.begin():
                other.execute(text(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE"))
                conn.execute(text("SET LOCAL lock_timeout = '100ms'"))
                with pytest.raises(ragport.StoreError) as caught:
                    _served(joined, scope)
            assert caught.value.sqlstate == "55P03"
            assert caught.value.__cause__ is None and caught.value.__context__ is None
            conn.execute(text("SET LOCAL lock_timeout = 0"))
            assert _served(joined, scope) == {"doc-7"}
    finally:
        locker.dispose()
    assert _host_rows(host_engine, pg_schema) == ["doc-7"]
