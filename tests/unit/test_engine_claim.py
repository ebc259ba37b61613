"""The drift guard on the narrow port reads the scope's embedder claim, not its rows: a
retrieve over ``BackendStore`` reads ``rows()`` zero times while the scope has one embedder,
and exactly (and correctly) once a second embedder, or an unknown claim, makes it check.
(Timings at 1k / 4k / 16k rows: ``bench/bench_engine.py``.)"""

from __future__ import annotations

import pytest

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory.backend import MemoryBackend
from ragport.application import replace_source, retrieve_context
from ragport.application.generations import compact
from ragport.contract_tests.storage_backend_engine import Wrapped
from ragport.domain.errors import EmbedderMismatchError
from ragport.engine import BackendStore
from ragport.ports.backend import GenerationState

SCOPE = ragport.Scope("t", "r", "claim")
OLD, NEW = HashEmbedder(16), HashEmbedder(32)


def _write(store: BackendStore, embedder: HashEmbedder, sources: int = 30) -> None:
    for s in range(sources):
        chunks = [
            ragport.Chunk.of(f"s{s}", i, f"text {s} part {i} of the policy") for i in range(10)
        ]
        replace_source(
            source_id=f"s{s}", chunks=chunks, embedder=embedder, store=store, scope=SCOPE
        )


def _retrieve(store: BackendStore, embedder: HashEmbedder) -> ragport.RetrievalResult:
    return retrieve_context("policy", embedder=embedder, store=store, scope=SCOPE)


def test_a_retrieve_reads_no_rows_with_one_embedder() -> None:
    """If this fails, check BackendStore._foreign and the claim kept by the unit of work."""
    wrapped = Wrapped(MemoryBackend())
    store = BackendStore(wrapped)
    _write(store, OLD)
    with MemoryBackend.read(wrapped.inner, SCOPE) as r:  # type: ignore[arg-type]
        assert r.state().embedders == {(OLD.id, OLD.dimensions)}
    wrapped.rows_read = 0
    for _ in range(5):
        assert len(_retrieve(store, OLD).hits) == 5
    assert wrapped.rows_read == 0


def test_a_hybrid_read_reads_the_rows_once_for_its_lexical_leg_only() -> None:
    """The engine's generic BM25 reads the scope's rows (once); the guard still reads none."""
    wrapped = Wrapped(MemoryBackend())
    store = BackendStore(wrapped)
    _write(store, OLD, sources=5)
    wrapped.rows_read = 0
    request = ragport.RetrievalRequest(lexical="bm25")
    result = retrieve_context("policy", embedder=OLD, store=store, scope=SCOPE, request=request)
    assert result.hits and all(h.provenance.retrieval == "hybrid" for h in result.hits)
    assert wrapped.rows_read == 1


def test_a_second_embedder_is_checked_exactly_and_compaction_clears_it() -> None:
    """Re-indexing with another embedder: while old rows may be visible the guard reads the
    rows (and finds no drift once every source is replaced); compaction purges the old rows
    and the claim holds one key again, so the rows are no longer read."""
    wrapped = Wrapped(MemoryBackend())
    store = BackendStore(wrapped)
    _write(store, OLD)
    _write(store, NEW, sources=1)
    with pytest.raises(EmbedderMismatchError):
        _retrieve(store, NEW)
    _write(store, NEW)
    wrapped.rows_read = 0
    assert len(_retrieve(store, NEW).hits) == 5
    assert wrapped.rows_read == 1  # two keys claimed: the guard checks the visible rows
    _write(store, NEW, sources=1)  # compaction keeps what the current generation retired
    compact(store=store, scope=SCOPE, keep=0)
    wrapped.rows_read = 0
    assert len(_retrieve(store, NEW).hits) == 5
    assert wrapped.rows_read == 0


def test_an_unknown_claim_is_checked_then_rebuilt_by_the_next_write() -> None:
    """A state stored before the claim existed (``embedders=None``): the guard reads the rows
    and answers right; the next insert reads every row once and stores the claim."""
    backend = MemoryBackend()
    store = BackendStore(backend)
    _write(store, OLD, sources=3)
    with backend.write(SCOPE) as w:
        s = w.state()
        w.set_state(GenerationState(s.counter, s.pointer, s.floor))
        w.commit()
    with pytest.raises(EmbedderMismatchError):
        _retrieve(store, NEW)
    assert len(_retrieve(store, OLD).hits) == 5
    _write(store, OLD, sources=1)
    with backend.read(SCOPE) as r:
        assert r.state().embedders == {(OLD.id, OLD.dimensions)}
