"""Derived records pinned to a version of their lineage (``index_derived(pinned=, as_of=)``).

On both stores: a pinned summary of revision 1 and a pinned note on that summary (two levels)
are retired by the replace that writes revision 2, in its generation (a rollback brings all
three back together); an unpinned note stays, as before; a delete retires pinned records
too; re-indexing the summary retires the pinned note resting on its old version; ``as_of``
refuses a summary computed from a revision that was replaced meanwhile, also when a writer
replaces the source concurrently (the check is inside the unit of work); the reserved
metadata key is refused.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application.pinned import PINNED_KEY
from ragport.domain.errors import LineageChangedError
from ragport.ports.store import ChunkStore

EMB = HashEmbedder(dimensions=32)
SCOPE = ragport.Scope("acme", "kb", "pinned")


def _write(store: ChunkStore, revision: int) -> ragport.ReplaceResult:
    return ragport.application.replace_source(
        source_id="policy",
        chunks=[ragport.Chunk.of("policy", 0, f"policy revision {revision}")],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )


def _derive(store: ChunkStore, record_id: str, lineage: str, **options: object) -> None:
    ragport.application.index_derived(
        record_id=record_id,
        text=f"{record_id} of {lineage}",
        lineage=[lineage],
        embedder=EMB,
        store=store,
        scope=SCOPE,
        **options,  # type: ignore[arg-type]
    )


def _served(store: ChunkStore) -> set[str]:
    hits = ragport.application.retrieve_context(
        "policy", embedder=EMB, store=store, scope=SCOPE, request=ragport.RetrievalRequest(top_k=20)
    ).hits
    return {h.source_id for h in hits}


def _scenario(store: ChunkStore) -> None:
    _write(store, 1)
    _derive(store, "summary", "policy", pinned=True)
    _derive(store, "note", "summary", pinned=True)
    _derive(store, "loose-note", "policy")
    before = store.current_generation(SCOPE)
    assert _served(store) == {"policy", "summary", "note", "loose-note"}
    written = _write(store, 2)
    assert _served(store) == {"policy", "loose-note"}
    history = ragport.application.rollback_generation(store=store, scope=SCOPE, to=before)
    assert history.generation == before
    assert _served(store) == {"policy", "summary", "note", "loose-note"}
    assert written.generation > before
    _derive(store, "summary", "policy", pinned=True)  # a new version of the summary ...
    assert _served(store) == {"policy", "summary", "loose-note"}  # ... retires the note on it
    ragport.application.delete_source(source_id="policy", store=store, scope=SCOPE)
    assert _served(store) == {"loose-note"}


def test_pinned_lineage_in_memory():
    """In memory: pinned records follow their lineage's version, two levels deep.

    If this fails, check ``retire_pinned_dependents`` and its calls in the write paths.
    """
    _scenario(InMemoryStore())


def test_pinned_lineage_on_postgres(pg_engine, pg_schema):
    """On PostgreSQL: the same scenario, the same answers.

    If this fails and memory passes, check the store's ``find_dependents`` and ``retire_ids``.
    """
    from ragport.adapters.postgres import PostgresStore

    _scenario(PostgresStore(pg_engine, schema=pg_schema, create=True))


def _as_of_race(store: ChunkStore) -> None:
    _write(store, 1)
    read = store.current_generation(SCOPE)
    _write(store, 2)  # replaced after the summary's author read revision 1
    with pytest.raises(LineageChangedError) as caught:
        _derive(store, "summary", "policy", pinned=True, as_of=read)
    assert caught.value.source_ids == ("policy",)
    assert "summary" not in _served(store)
    _derive(store, "summary", "policy", pinned=True, as_of=store.current_generation(SCOPE))
    assert "summary" in _served(store)
    stop = threading.Event()
    revisions = iter(range(3, 10_000))

    def writer() -> None:
        while not stop.is_set():
            _write(store, next(revisions))

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        outcomes = []
        for _ in range(30):
            seen = store.current_generation(SCOPE)
            try:
                _derive(store, "summary", "policy", pinned=True, as_of=seen)
                outcomes.append("written")
            except LineageChangedError:
                outcomes.append("refused")
    finally:
        stop.set()
        thread.join()
    # Whatever interleaving happened, a served summary rests on the revision served now.
    served = _served(store)
    if "summary" in served:
        [summary] = store.get_by_source(SCOPE, "summary")
        [policy] = store.get_by_source(SCOPE, "policy")
        assert summary.generation >= policy.generation
    assert "refused" in outcomes or "written" in outcomes


@pytest.mark.parametrize("make", [InMemoryStore], ids=["memory"])
def test_as_of_refuses_a_summary_of_a_replaced_revision(make: Callable[[], ChunkStore]):
    """``as_of`` older than the lineage's last write is ``LineageChangedError``; nothing is
    written; under a concurrent writer a served summary never rests on an older revision.

    If this fails, check ``require_unchanged`` (inside index_derived's unit of work).
    """
    _as_of_race(make())


def test_as_of_on_postgres(pg_engine, pg_schema):
    """``as_of`` on PostgreSQL, with the concurrent writer.

    If this fails and memory passes, check ``list_by_source`` inside the unit of work.
    """
    from ragport.adapters.postgres import PostgresStore

    _as_of_race(PostgresStore(pg_engine, schema=pg_schema, create=True))


def test_the_pin_mark_is_reserved():
    """Metadata may not carry ``ragport.pinned`` itself; ``pinned`` must be a bool.

    If this fails, check ``pinned_metadata``.
    """
    store = InMemoryStore()
    _write(store, 1)
    with pytest.raises(ragport.ValidationError):
        _derive(store, "summary", "policy", metadata={PINNED_KEY: True})
    with pytest.raises(ragport.ValidationError):
        _derive(store, "summary", "policy", pinned="yes")
