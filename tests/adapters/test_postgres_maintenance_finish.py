"""``finish_maintenance()`` runs what is due on the calling thread when the maintenance thread
runs nothing (no hand-over to the thread and back), and waits for the thread when it does."""

from __future__ import annotations

import threading

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, WriteSettings
from ragport.adapters.postgres.background import MaintenanceWorker

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
