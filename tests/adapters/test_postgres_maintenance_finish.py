"""``finish_maintenance()`` runs what is due on the calling thread when the maintenance thread
runs nothing (no hand-over to the thread and back), and waits for the thread when it does; the
fold it runs skips a scope a writer holds."""

from __future__ import annotations

import threading

import psycopg

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, WriteSettings
from ragport.adapters.postgres.background import MaintenanceWorker, fold_retired

EMB = HashEmbedder(dimensions=16)
SCOPE = ragport.Scope("tenant-f", "kb", "docs")


def _write(store, source, *texts):
    chunks = [ragport.Chunk.of(source, i, t) for i, t in enumerate(texts)]
    ragport.application.replace_source(
        source_id=source, chunks=chunks, embedder=EMB, store=store, scope=SCOPE
    )


def test_finish_runs_due_work_on_the_calling_thread(pg_engine, pg_schema, monkeypatch):
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True, writes=WriteSettings(maintenance_delay=60)
    )
    ran: list[threading.Thread] = []
    real = MaintenanceWorker._work

    def work(self, taken):
        ran.append(threading.current_thread())
        return real(self, taken)

    monkeypatch.setattr(MaintenanceWorker, "_work", work)
    _write(store, "a", "alpha beta", "gamma")
    _write(store, "a", "alpha delta")  # retires a batch whole: a fold and a merge are due
    worker = store._maintenance
    assert worker is not None and worker.pending and ran == []  # 60 s have not passed
    store.finish_maintenance()
    assert ran == [threading.current_thread()]
    assert not worker.pending
    store.finish_maintenance()  # nothing due: nothing runs
    assert len(ran) == 1
    hits = ragport.application.retrieve_context(
        "alpha", embedder=EMB, store=store, scope=SCOPE,
        request=ragport.RetrievalRequest(top_k=3, lexical="bm25"),
    )  # fmt: skip
    assert [h.id for h in hits.hits] == ["a#0001"]


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
