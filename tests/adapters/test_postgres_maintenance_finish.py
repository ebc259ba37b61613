"""``finish_maintenance(timeout)`` runs what is due on the maintenance thread and is bounded
by ``timeout`` even when the work waits on a lock (rev48: 8507513 had run the work on the
calling thread, where a held lock kept the call 6 s past its 1 s timeout; reverted)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, WriteSettings
from ragport.adapters.postgres.background import MaintenanceWorker, fold_retired
from ragport.domain.errors import StoreError

EMB = HashEmbedder(dimensions=16)
SCOPE = ragport.Scope("tenant-f", "kb", "docs")


def _write(store: PostgresStore, source: str, *texts: str) -> None:
    chunks = [ragport.Chunk.of(source, i, t) for i, t in enumerate(texts)]
    ragport.application.replace_source(
        source_id=source, chunks=chunks, embedder=EMB, store=store, scope=SCOPE
    )


def _store(pg_engine, pg_schema) -> PostgresStore:  # type: ignore[no-untyped-def]
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True, writes=WriteSettings(maintenance_delay=60)
    )
    _write(store, "a", "alpha beta", "gamma")
    _write(store, "a", "alpha delta")  # retires a batch whole: a fold and a merge are due
    assert store._maintenance is not None and store._maintenance.pending  # 60 s not passed
    return store


def test_finish_runs_due_work_on_the_maintenance_thread(pg_engine, pg_schema, monkeypatch):  # type: ignore[no-untyped-def]
    ran: list[threading.Thread] = []
    real = MaintenanceWorker._work

    def work(self, taken):  # type: ignore[no-untyped-def]
        ran.append(threading.current_thread())
        return real(self, taken)

    monkeypatch.setattr(MaintenanceWorker, "_work", work)
    store = _store(pg_engine, pg_schema)
    store.finish_maintenance()
    assert ran and threading.current_thread() not in ran
    assert store._maintenance is not None and not store._maintenance.pending
    hits = ragport.application.retrieve_context(
        "alpha",
        embedder=EMB,
        store=store,
        scope=SCOPE,
        request=ragport.RetrievalRequest(lexical="bm25"),
    ).hits
    assert [h.provenance.source_id for h in hits] == ["a"]


def test_finish_timeout_bounds_a_merge_waiting_on_a_lock(pg_url, pg_engine, pg_schema):  # type: ignore[no-untyped-def]
    store = _store(pg_engine, pg_schema)
    holder = psycopg.connect(pg_url)
    holder.execute(f'LOCK TABLE "{pg_schema}".lexical_batches IN ACCESS EXCLUSIVE MODE')
    release = threading.Timer(6.0, holder.rollback)
    release.start()
    started = time.monotonic()
    try:
        with pytest.raises(StoreError, match="did not finish within 1 s"):
            store.finish_maintenance(timeout=1.0)
        assert time.monotonic() - started < 3.0
    finally:
        release.join()
        holder.close()
    store.finish_maintenance()  # the lock released, the work finishes
    assert store._maintenance is not None and not store._maintenance.pending


def test_a_fold_skips_a_scope_a_writer_holds(pg_url, pg_engine, pg_schema):
    """``fold_retired`` sends the scope's lock and the fold in one pipeline: while a writer
    holds the lock the fold folds nothing (``fold_retired(guarded=True)``: the lock skipped
    sets nothing), and folds once it is released, the statistics exact either way."""
    from tests.adapters.test_postgres_lexical_stats import _check_statistics

    s = f'"{pg_schema}"'
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True, writes=WriteSettings(maintenance_delay=60)
    )
    _write(store, "a", "alpha beta", "gamma")
    _write(store, "a", "alpha delta")  # retires a batch whole: a fold is due
    writer = psycopg.connect(pg_url)
    try:
        writer.execute(
            f"SELECT 1 FROM {s}.scopes WHERE tenant_id = %s AND resource_id = %s "
            "AND corpus_id = %s FOR UPDATE",
            (SCOPE.tenant_id, SCOPE.resource_id, SCOPE.corpus_id),
        )
        with pg_engine.connect() as conn:
            assert fold_retired(conn, s, SCOPE.tenant_id) == 0
    finally:
        writer.rollback()
        writer.close()
    _check_statistics(store, SCOPE, s)
    with pg_engine.connect() as conn:
        assert fold_retired(conn, s, SCOPE.tenant_id) == 1
    _check_statistics(store, SCOPE, s)
