"""``RetrievalRequest(lexical="auto")``: one request for hybrid retrieval on every store.

The in-memory store names its lexical leg ``bm25`` and PostgreSQL ``fts``; a host that swaps
the store must not have to change the request. ``"auto"`` is the store's first declared mode:
on both built-in stores it runs the hybrid path (hits say ``retrieval == "hybrid"``, and a
lexical-only match that the vector leg cannot rank is found), a store without a lexical leg
refuses it with ``CapabilityError``, and no store may declare ``auto`` as a mode name.
"""

from __future__ import annotations

import pytest

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application.retrieval_request import auto_lexical_mode
from ragport.domain.model import Capabilities
from ragport.ports.store import ChunkStore

EMB = HashEmbedder(dimensions=32)
SCOPE = ragport.Scope("acme", "kb", "auto")
AUTO = ragport.RetrievalRequest(lexical="auto", top_k=10)


def _seed(store: ChunkStore) -> None:
    for n in range(12):
        ragport.replace_source(
            source_id=f"doc-{n}",
            chunks=[ragport.Chunk.of(f"doc-{n}", 0, f"travel rules number {n} for trains")],
            embedder=EMB,
            store=store,
            scope=SCOPE,
        )


def _check(store: ChunkStore) -> None:
    _seed(store)
    result = ragport.retrieve_context(
        "number 7", embedder=EMB, store=store, scope=SCOPE, request=AUTO
    )
    assert result.hits and result.hits[0].source_id == "doc-7"
    assert {hit.provenance.retrieval for hit in result.hits} <= {"hybrid", "lexical", "vector"}
    assert any(hit.provenance.retrieval == "hybrid" for hit in result.hits)
    explicit = ragport.RetrievalRequest(lexical=store.capabilities.lexical_modes[0], top_k=10)
    same = ragport.retrieve_context(
        "number 7", embedder=EMB, store=store, scope=SCOPE, request=explicit
    )
    assert [(h.id, h.score) for h in same.hits] == [(h.id, h.score) for h in result.hits]


def test_auto_is_hybrid_in_memory():
    """In memory ``auto`` is ``bm25``: the same answer as naming it.

    If this fails, check ``auto_lexical_mode`` and where ``retrieve_context`` resolves it.
    """
    _check(InMemoryStore())


def test_auto_is_hybrid_on_postgres(pg_engine, pg_schema):
    """On PostgreSQL ``auto`` is ``fts``: the same answer as naming it.

    If this fails, check ``auto_lexical_mode`` and where ``retrieve_context`` resolves it.
    """
    from ragport.adapters.postgres import PostgresStore

    _check(PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple"))


def test_auto_on_a_store_without_a_lexical_leg_is_refused():
    """A store that declares no lexical mode refuses ``auto`` loudly (no silent vector-only).

    If this fails, check that ``auto_lexical_mode`` raises on an empty ``lexical_modes``.
    """
    import attrs

    from ragport.adapters.memory.backend import MemoryBackend
    from ragport.engine import BackendStore

    class VectorOnly(BackendStore):
        """The engine's store with its lexical leg withheld (every BackendStore has one)."""

        @property
        def capabilities(self) -> Capabilities:
            return attrs.evolve(super().capabilities, lexical_modes=())

    store = VectorOnly(MemoryBackend())
    assert not store.capabilities.lexical_modes
    _seed_one = ragport.Chunk.of("doc", 0, "travel rules")
    ragport.replace_source(
        source_id="doc", chunks=[_seed_one], embedder=EMB, store=store, scope=SCOPE
    )
    with pytest.raises(ragport.CapabilityError):
        ragport.retrieve_context("travel", embedder=EMB, store=store, scope=SCOPE, request=AUTO)
    with pytest.raises(ragport.CapabilityError):
        auto_lexical_mode(Capabilities(authorization="acl", generations=True, transactions=True))


@pytest.mark.parametrize("name", ["auto", "off"])
def test_no_store_declares_auto_or_off(name):
    """``auto`` and ``off`` are requests; ``Capabilities`` refuses them as declared modes.

    If this fails, check ``Capabilities._modes``.
    """
    with pytest.raises(ragport.ValidationError):
        Capabilities(lexical_modes=(name,))
