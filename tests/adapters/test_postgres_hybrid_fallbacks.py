"""A hybrid query whose second connection cannot help reads on one, and answers.

The two-connection path (``BackendStore._legs``) must never turn into a failure of its own:
a server that refuses a second connection, a second connection that cannot import the
snapshot (another server behind a multi-host URL), a worker pool that takes no more work
(the interpreter shutting down) and a forked child (the parent's threads are not in it) all
give the answer of the one-connection path and leave no connection lent. A joined
``delete_source`` leaves the host's ``plan_cache_mode`` as it was.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

from ragport.adapters.postgres import PostgresStore, backend
from ragport.application import delete_source
from ragport.contract_tests._support import publish_sources
from ragport.ports.store import HybridAnswer
from tests.adapters.test_postgres_concurrent_hybrid import SOURCE, _hybrid, _scope, _texts


def _ids(answer: HybridAnswer) -> tuple[list[str], list[str]]:
    return [s.record.id for s in answer.vector], [s.record.id for s in answer.lexical]


@pytest.fixture
def pooled(pg_url: str) -> Iterator[Engine]:
    engine = create_engine(
        make_url(pg_url).set(drivername="postgresql+psycopg"), pool_size=4, max_overflow=0
    )
    yield engine
    engine.dispose()


def _seeded(engine: Engine, schema: str) -> tuple[PostgresStore, Any, tuple[list[str], list[str]]]:
    store = PostgresStore(engine, schema=schema, create=True)
    scope = _scope()
    publish_sources(store, scope, {SOURCE: _texts(0)})
    expected = _ids(_hybrid(store, scope))
    assert expected[0] and expected[1]
    return store, scope, expected


def test_a_server_refusing_a_second_connection_answers_on_one(
    pg_engine: Engine, pg_schema: str, pg_url: str
) -> None:
    """A role limited to one connection: the companion's checkout is refused by the server.

    If this fails, check ``BackendStore._submit_lexical`` (a failed set-up reads on one)."""
    store, scope, expected = _seeded(pg_engine, pg_schema)
    role = "hyf_" + uuid.uuid4().hex[:8]
    with pg_engine.begin() as c:
        c.execute(text(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1"))
        c.execute(text(f'GRANT USAGE ON SCHEMA "{pg_schema}", public TO {role}'))
        c.execute(text(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{pg_schema}" TO {role}'))
    url = make_url(pg_url).set(username=role).render_as_string(hide_password=False)
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        limited = PostgresStore(engine, schema=pg_schema)
        assert _ids(_hybrid(limited, scope)) == expected
        assert engine.pool.checkedout() == 0
    finally:
        engine.dispose()
        with pg_engine.begin() as c:
            c.execute(text(f'REVOKE ALL ON ALL TABLES IN SCHEMA "{pg_schema}" FROM {role}'))
            c.execute(text(f'REVOKE ALL ON SCHEMA "{pg_schema}", public FROM {role}'))
            c.execute(text(f"DROP ROLE {role}"))
    del store


def test_a_second_connection_that_cannot_import_the_snapshot_answers_on_one(
    pooled: Engine, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second pooled connection on another server knows no such snapshot: the lexical leg
    reads again on the first connection, with the one-connection answer.

    If this fails, check ``BackendStore._legs`` (a companion's failure reads on ``r``)."""
    store, scope, expected = _seeded(pooled, pg_schema)
    enter = backend._Companion.__enter__
    lent: list[bool] = []

    def elsewhere(self: Any) -> Any:
        second = enter(self)
        lent.append(second is not None)
        if second is not None:
            second._conn.snapshot = "00000003-0000FFFF-1"  # unknown on that server
        return second

    monkeypatch.setattr(backend._Companion, "__enter__", elsewhere)
    assert _ids(_hybrid(store, scope)) == expected
    assert lent == [True]
    assert pooled.pool.checkedout() == 0


def test_a_worker_pool_taking_no_work_answers_on_one(
    pooled: Engine, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``submit`` refused (the interpreter shutting down): the companion is given back.

    If this fails, check ``BackendStore._submit_lexical``."""
    import concurrent.futures.thread as futures_thread

    store, scope, expected = _seeded(pooled, pg_schema)
    monkeypatch.setattr(futures_thread, "_shutdown", True)
    assert _ids(_hybrid(store, scope)) == expected
    assert pooled.pool.checkedout() == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_answers_a_hybrid_query(pooled: Engine, pg_schema: str) -> None:
    """The parent ran a hybrid query (its leg threads started), then forked: the child's
    hybrid query answers (its own threads), within 30 s.

    If this fails, check ``ragport.engine.store._forget_workers``."""
    store, scope, expected = _seeded(pooled, pg_schema)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            pooled.dispose(close=False)  # as SQLAlchemy says to after a fork
            out: list[object] = []
            worker = threading.Thread(target=lambda: out.append(_ids(_hybrid(store, scope))))
            worker.daemon = True
            worker.start()
            worker.join(30)
            os.write(write, repr(out[0] if out else "no answer in 30 s").encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    told = os.read(read, 4096).decode()
    os.close(read)
    assert status == 0
    assert told == repr(expected)


def test_a_joined_delete_leaves_the_hosts_plan_cache_mode(
    pg_engine: Engine, pg_schema: str
) -> None:
    """If this fails, check ``backend._retire`` (no ``SET LOCAL`` on a joined view)."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    scope = _scope()
    publish_sources(store, scope, {SOURCE: _texts(0), "other": _texts(1)})
    with pg_engine.connect() as c, c.begin():
        c.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))
        delete_source(source_id=SOURCE, store=store.joined(c), scope=scope)
        assert c.execute(text("SHOW plan_cache_mode")).scalar_one() == "force_custom_plan"
