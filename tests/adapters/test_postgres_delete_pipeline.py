"""delete_source's one pipeline on PostgreSQL ([BEGIN, scope lock, delete_source, COMMIT],
80aa07f / a963dce) when it fails: a statement error, a lost connection mid-pipeline and a failing
COMMIT each raise a typed error, leave the generation and the source's rows as they were and the
pooled connection idle, and the next delete succeeds with exact BM25 statistics; two deleters and a
replacer of one source get distinct generations. (Written by the rev47 review, committed as tests.)"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from sqlalchemy import create_engine, event, text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres._driver import make_engine
from ragport.domain.errors import StoreError
from tests.adapters.test_postgres_lexical_stats import _check_statistics

EMB = HashEmbedder(dimensions=16)
SCOPE = ragport.Scope("tenant-1", "kb", "docs")
IDLE = TransactionStatus.IDLE


def _write(store, source, *texts, scope=SCOPE):
    chunks = [ragport.Chunk.of(source, i, t) for i, t in enumerate(texts)]
    return ragport.application.replace_source(
        source_id=source, chunks=chunks, embedder=EMB, store=store, scope=scope
    )


def _delete(store, source, scope=SCOPE):
    return ragport.application.delete_source(source_id=source, store=store, scope=scope)


def _locker(pg_url, pg_schema, source):
    """Another session holding a row lock on one of the source's records rows."""
    c = psycopg.connect(pg_url)
    c.execute(
        f'SELECT 1 FROM "{pg_schema}".records WHERE source_id = %s LIMIT 1 FOR UPDATE', (source,)
    )
    return c


def _generation(store):
    return store.current_generation(SCOPE)


def _lock_timeout(engine):
    """Every new connection of ``engine`` waits at most 300 ms for a lock."""

    @event.listens_for(engine, "connect")
    def _lt(dbapi, rec):
        with dbapi.cursor() as cur:
            cur.execute("SET lock_timeout = 300")
        dbapi.commit()


def test_delete_statement_error_mid_pipeline_leaves_nothing(pg_url, pg_schema):
    engine = make_engine(pg_url)

    _lock_timeout(engine)

    try:
        store = PostgresStore(engine, schema=pg_schema, create=True)
        _write(store, "a", "alpha beta", "gamma")
        _write(store, "b", "delta")
        g = _generation(store)
        locker = _locker(pg_url, pg_schema, "a")
        try:
            with pytest.raises(StoreError):
                _delete(store, "a")
        finally:
            locker.rollback()
            locker.close()
        assert _generation(store) == g
        assert len(store.get_by_source(SCOPE, "a")) == 2
        # every pooled connection idle, not in a transaction
        with engine.connect() as c:
            assert c.connection.driver_connection.info.transaction_status == IDLE
        done = _delete(store, "a")
        assert done.deleted == 2 and _generation(store) == g + 1
        _check_statistics(store, SCOPE, f'"{pg_schema}"')
    finally:
        engine.dispose()


def test_delete_lost_connection_mid_pipeline(pg_url, pg_schema):
    engine = make_engine(pg_url)
    admin = psycopg.connect(pg_url, autocommit=True)
    try:
        store = PostgresStore(engine, schema=pg_schema, create=True)
        _write(store, "a", "alpha beta", "gamma")
        g = _generation(store)
        locker = _locker(pg_url, pg_schema, "a")
        errors = []

        def run():
            try:
                _delete(store, "a")
            except StoreError as e:
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        pid = None
        for _ in range(300):
            row = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> %s",
                (locker.info.backend_pid,),
            ).fetchone()
            if row:
                pid = row[0]
                break
            time.sleep(0.01)
        assert pid is not None
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        t.join(10)
        locker.rollback()
        locker.close()
        assert errors and isinstance(errors[0], StoreError)
        assert _generation(store) == g
        assert len(store.get_by_source(SCOPE, "a")) == 2
        done = _delete(store, "a")
        assert done.deleted == 2
    finally:
        admin.close()
        engine.dispose()


def test_concurrent_delete_and_replace_same_source(pg_url, pg_schema):
    engine = make_engine(pg_url)
    try:
        store = PostgresStore(engine, schema=pg_schema, create=True, text_search_config="simple")
        _write(store, "x", "apple brook", "cedar")
        _write(store, "y", "apple cedar")
        errors = []
        results = []

        def deleter():
            for _ in range(25):
                try:
                    results.append(("d", _delete(store, "x").generation))
                except StoreError as e:
                    errors.append(e)

        def writer():
            for i in range(25):
                try:
                    results.append(
                        ("w", _write(store, "x", f"apple w{i}", "brook cedar").generation)
                    )
                except StoreError as e:
                    errors.append(e)

        ts = [
            threading.Thread(target=deleter),
            threading.Thread(target=writer),
            threading.Thread(target=deleter),
        ]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors
        gens = [g for _, g in results]
        assert len(gens) == 75
        assert len(set(gens)) == len(gens), "two writes got one generation"
        _check_statistics(store, SCOPE, f'"{pg_schema}"')
    finally:
        engine.dispose()


def test_delete_commit_failure(pg_url, pg_schema):
    engine = make_engine(pg_url)
    try:
        store = PostgresStore(engine, schema=pg_schema, create=True)
        _write(store, "a", "alpha beta", "gamma")
        g = _generation(store)
        s = f'"{pg_schema}"'
        with engine.begin() as c:
            c.execute(
                text(
                    f"CREATE FUNCTION {s}.boom() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$BEGIN RAISE EXCEPTION 'boom at commit'; END$$"
                )
            )
            c.execute(
                text(
                    f"CREATE CONSTRAINT TRIGGER boom AFTER UPDATE ON {s}.scopes "
                    f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {s}.boom()"
                )
            )
        with pytest.raises(StoreError):
            _delete(store, "a")
        assert _generation(store) == g
        assert len(store.get_by_source(SCOPE, "a")) == 2
        for _ in range(3):
            with engine.connect() as c:
                assert c.connection.driver_connection.info.transaction_status == IDLE
        with engine.begin() as c:
            c.execute(text(f"DROP TRIGGER boom ON {s}.scopes"))
        assert _delete(store, "a").deleted == 2
        _check_statistics(store, SCOPE, s)
    finally:
        engine.dispose()


def _one_connection(pg_url, **connect_args):
    url = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    return create_engine(url, pool_size=1, max_overflow=0, connect_args=connect_args)


def _prepared(engine):
    """The delete statement ragport prepared on the pool's one connection: (generic plans,
    custom plans) per name."""
    with engine.connect() as c:
        rows = c.exec_driver_sql(
            "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE starts_with(name, 'ragport_')"
        ).all()
        c.commit()
    return {r.name: (r.generic_plans, r.custom_plans) for r in rows}


def test_delete_after_its_prepared_statement_was_dropped(pg_url, pg_schema):
    """The pipeline runs its statement prepared under ragport's own name, with its generic
    plan; psycopg drops every prepared statement of a connection after a rollback (``DEALLOCATE
    ALL``), and the next delete prepares it again and deletes (``pipelined.transaction``)."""
    engine = _one_connection(pg_url)
    try:
        store = PostgresStore(engine, schema=pg_schema, create=True)
        for source in "abc":
            _write(store, source, f"{source} alpha", "beta")
        g = _generation(store)
        assert _delete(store, "a").deleted == 2
        assert _delete(store, "b").deleted == 2
        (plans,) = _prepared(engine).values()
        assert plans[0] >= 2 and plans[1] == 0, plans  # its generic plan, every time
        with engine.connect() as c:
            c.exec_driver_sql("DEALLOCATE ALL")
            c.commit()
        assert _prepared(engine) == {}
        done = _delete(store, "c")
        assert done.deleted == 2 and done.generation == g + 3 == _generation(store)
        assert len(_prepared(engine)) == 1
        with engine.connect() as c:
            assert c.connection.driver_connection.info.transaction_status == IDLE
        _check_statistics(store, SCOPE, f'"{pg_schema}"')
    finally:
        engine.dispose()


def test_delete_after_a_failure_in_the_pipeline_that_prepared_it(pg_url, pg_schema):
    """The first delete on a connection prepares its statement in its pipeline; when a later
    statement of that pipeline fails, the statement stays prepared, and the next delete uses it
    (prepared again: ``DuplicatePreparedStatement``). psycopg prepares nothing of its own here
    (``prepare_threshold=None``), so its rollback drops nothing."""
    engine = _one_connection(pg_url, prepare_threshold=None)

    _lock_timeout(engine)

    try:
        store = PostgresStore(engine, schema=pg_schema, create=True)
        _write(store, "a", "alpha beta", "gamma")
        g = _generation(store)
        locker = _locker(pg_url, pg_schema, "a")
        try:
            with pytest.raises(StoreError):
                _delete(store, "a")
        finally:
            locker.rollback()
            locker.close()
        assert len(_prepared(engine)) == 1 and _generation(store) == g
        assert _delete(store, "a").deleted == 2 and _generation(store) == g + 1
        _check_statistics(store, SCOPE, f'"{pg_schema}"')
    finally:
        engine.dispose()


def test_delete_without_pipeline_mode(pg_url, pg_schema, monkeypatch):
    """On a libpq without pipeline mode (before 14) the same statements go one by one: the
    same generation, rows and statistics."""
    from ragport.adapters.postgres import reads

    monkeypatch.setattr(reads, "PIPELINE", False)
    engine = make_engine(pg_url)
    try:
        store = PostgresStore(engine, schema=pg_schema, create=True)
        _write(store, "a", "alpha beta", "gamma")
        _write(store, "b", "delta")
        g = _generation(store)
        done = _delete(store, "a")
        assert (done.deleted, done.generation) == (2, g + 1) and _generation(store) == g + 1
        assert store.get_by_source(SCOPE, "a") == [] and len(store.get_by_source(SCOPE, "b")) == 1
        with engine.connect() as c:
            assert c.connection.driver_connection.info.transaction_status == IDLE
        _check_statistics(store, SCOPE, f'"{pg_schema}"')
    finally:
        engine.dispose()
