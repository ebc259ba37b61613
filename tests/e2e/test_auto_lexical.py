"""One vocabulary for the lexical leg on every store, and ``RetrievalRequest(lexical="auto")``.

Both built-in stores name their lexical leg ``bm25`` (PostgreSQL named it ``fts`` until
2026-12), so a host that swaps the store changes neither the request nor which retrieval runs.
``"auto"`` is the store's first declared mode: on both built-in stores it runs the hybrid path
(hits say ``retrieval == "hybrid"``, and a lexical-only match that the vector leg cannot rank
is found), a store without a lexical leg refuses it with ``CapabilityError``, and no store may
declare ``auto`` as a mode name. The old name ``fts`` still runs ``bm25`` for one release, with
a ``DeprecationWarning``, on either store.
"""

from __future__ import annotations

import pytest

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application.retrieval_request import auto_lexical_mode, lexical_mode_for
from ragport.domain.model import Capabilities
from ragport.ports.store import ChunkStore

EMB = HashEmbedder(dimensions=32)
SCOPE = ragport.Scope("acme", "kb", "auto")
AUTO = ragport.RetrievalRequest(lexical="auto", top_k=10)


def _seed(store: ChunkStore) -> None:
    for n in range(12):
        ragport.application.replace_source(
            source_id=f"doc-{n}",
            chunks=[ragport.Chunk.of(f"doc-{n}", 0, f"travel rules number {n} for trains")],
            embedder=EMB,
            store=store,
            scope=SCOPE,
        )


def _check(store: ChunkStore) -> None:
    _seed(store)
    result = ragport.application.retrieve_context(
        "number 7", embedder=EMB, store=store, scope=SCOPE, request=AUTO
    )
    assert result.hits and result.hits[0].source_id == "doc-7"
    assert {hit.provenance.retrieval for hit in result.hits} <= {"hybrid", "lexical", "vector"}
    assert any(hit.provenance.retrieval == "hybrid" for hit in result.hits)
    explicit = ragport.RetrievalRequest(lexical=store.capabilities.lexical_modes[0], top_k=10)
    same = ragport.application.retrieve_context(
        "number 7", embedder=EMB, store=store, scope=SCOPE, request=explicit
    )
    assert [(h.id, h.score) for h in same.hits] == [(h.id, h.score) for h in result.hits]
    assert store.capabilities.lexical_modes == ("bm25",)
    old = ragport.RetrievalRequest(lexical="fts", top_k=10)
    with pytest.warns(DeprecationWarning, match="'fts' is deprecated"):
        renamed = ragport.application.retrieve_context(
            "number 7", embedder=EMB, store=store, scope=SCOPE, request=old
        )
    assert [(h.id, h.score) for h in renamed.hits] == [(h.id, h.score) for h in result.hits]


def test_auto_is_hybrid_in_memory():
    """In memory ``auto`` is ``bm25``: the same answer as naming it.

    If this fails, check ``auto_lexical_mode`` and where ``retrieve_context`` resolves it.
    """
    _check(InMemoryStore())


def test_auto_is_hybrid_on_postgres(pg_engine, pg_schema):
    """On PostgreSQL ``auto`` is ``bm25``, as in memory: the same answer as naming it; the
    store itself still answers its old name ``fts`` (a ``DeprecationWarning``) and refuses
    any other.

    If this fails, check ``auto_lexical_mode``, where ``retrieve_context`` resolves it, and
    ``PostgresStore._mode`` in ragport/adapters/postgres/store.py.
    """
    from ragport.adapters.postgres import PostgresStore

    store = PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")
    _check(store)
    now = store.lexical_query(SCOPE, "number 7", limit=5, mode="bm25")
    with pytest.warns(DeprecationWarning, match="'fts'") as caught:
        before = store.lexical_query(SCOPE, "number 7", limit=5, mode="fts")
    assert caught[0].filename == __file__  # the warning points at the caller
    assert now and [(r.record.id, r.score) for r in before] == [(r.record.id, r.score) for r in now]
    with pytest.raises(ragport.CapabilityError):
        store.lexical_query(SCOPE, "number 7", limit=5, mode="fts5")


def test_the_deprecated_name_resolves_only_where_the_store_lacks_it():
    """``fts`` resolves to ``bm25`` (with a warning) on a store that serves ``bm25`` and not
    ``fts``; a store that declares ``fts`` itself keeps it, without a warning; a store with
    neither refuses it.

    If this fails, check ``lexical_mode_for`` and ``DEPRECATED_LEXICAL_MODES``.
    """
    import warnings

    def caps(*modes: str) -> Capabilities:
        return Capabilities(
            lexical_modes=modes, authorization="acl", generations=True, transactions=True
        )

    with pytest.warns(DeprecationWarning):
        assert lexical_mode_for("fts", caps("bm25")) == "bm25"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lexical_mode_for("fts", caps("fts", "bm25")) == "fts"
        assert lexical_mode_for("bm25", caps("bm25")) == "bm25"
        assert lexical_mode_for("auto", caps("fts5")) == "fts5"
        assert lexical_mode_for("off", caps()) == "off"
    with pytest.raises(ragport.CapabilityError):
        lexical_mode_for("fts", caps("fts5"))


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
    ragport.application.replace_source(
        source_id="doc", chunks=[_seed_one], embedder=EMB, store=store, scope=SCOPE
    )
    with pytest.raises(ragport.CapabilityError):
        ragport.application.retrieve_context(
            "travel", embedder=EMB, store=store, scope=SCOPE, request=AUTO
        )
    with pytest.raises(ragport.CapabilityError):
        auto_lexical_mode(Capabilities(authorization="acl", generations=True, transactions=True))


@pytest.mark.parametrize("name", ["auto", "off"])
def test_no_store_declares_auto_or_off(name):
    """``auto`` and ``off`` are requests; ``Capabilities`` refuses them as declared modes.

    If this fails, check ``Capabilities._modes``.
    """
    with pytest.raises(ragport.ValidationError):
        Capabilities(lexical_modes=(name,))
