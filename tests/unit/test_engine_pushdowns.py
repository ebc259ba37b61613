"""The engine finds a backend's pushdowns on its class and calls them instead of its generic
path; ``pushdown=False`` ignores them; the capabilities follow from what the class defines."""

from __future__ import annotations

from typing import Any

import pytest

from ragport.adapters.memory.backend import MemoryBackend
from ragport.contract_tests._support import make_batch, publish_sources
from ragport.domain.errors import StoreError
from ragport.domain.model import Scope
from ragport.engine import BackendStore
from ragport.engine.reads import walk_vectors
from ragport.ports.embedder import Vector
from ragport.ports.pushdowns import PUSHDOWNS, Admission, LegAnswer

SCOPE = Scope("t", "r", "c")


class Pushing(MemoryBackend):
    """A MemoryBackend with a vector-search pushdown that counts its calls."""

    provider = "pushing"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def search_vectors(
        self, view: Any, vector: Vector, *, admission: Admission, limit: int
    ) -> LegAnswer:
        self.calls += 1
        return walk_vectors(view, SCOPE, vector, admission, limit)

    def forgotten_among(self, view: Any, ids: list[str]) -> frozenset[str]:
        return frozenset(t.id for t in view.tombstones() if t.reason == "forgotten") & set(ids)


def _probe() -> Vector:
    return make_batch(SCOPE, "a", ["alpha"], generation=1).vectors[0]


def test_a_pushdown_on_the_class_is_found_and_called() -> None:
    """If this fails, check ``ragport.engine.dispatch.found`` and ``BackendStore._vector_leg``."""
    backend = Pushing()
    store = BackendStore(backend)
    assert store.pushdowns == ("search_vectors", "forgotten_among")
    publish_sources(store, SCOPE, {"a": ["alpha"], "b": ["beta"]})
    hits = store.query(SCOPE, _probe(), limit=1)
    assert [h.record.id for h in hits] == ["a#0001"] and backend.calls == 1
    caps = store.capabilities
    assert caps.forgotten_lookup and caps.borrowed_query and not caps.preparation
    assert caps.lexical_modes == ("bm25",)


def test_pushdown_false_takes_the_generic_path_only() -> None:
    backend = Pushing()
    store = BackendStore(backend, pushdown=False)
    publish_sources(store, SCOPE, {"a": ["alpha"]})
    assert store.pushdowns == ()
    assert [h.record.id for h in store.query(SCOPE, _probe(), limit=1)] == ["a#0001"]
    assert backend.calls == 0
    caps = store.capabilities
    assert not caps.forgotten_lookup and not caps.borrowed_query


def test_an_instance_attribute_is_not_a_pushdown() -> None:
    """Only the class counts (as with ``supports``): a delegating instance attribute would be
    found on one object and not another."""
    backend = MemoryBackend()
    backend.search_vectors = lambda *a, **k: LegAnswer(())  # type: ignore[attr-defined]
    assert BackendStore(backend).pushdowns == ()


def test_a_pushdown_answer_outside_the_scope_is_refused() -> None:
    """If this fails, check ``_checked_answer`` in ragport/engine/store.py."""

    class Leaky(Pushing):
        def search_vectors(
            self, view: Any, vector: Vector, *, admission: Admission, limit: int
        ) -> LegAnswer:
            with MemoryBackend.read(self, Scope("other", "r", "c")) as other:
                return walk_vectors(other, Scope("other", "r", "c"), vector, admission, limit)

    backend = Leaky()
    store = BackendStore(backend)
    publish_sources(store, SCOPE, {"a": ["alpha"]})
    publish_sources(store, Scope("other", "r", "c"), {"a": ["alpha"]})
    with pytest.raises(StoreError):
        store.query(SCOPE, _probe(), limit=1)


def test_every_pushdown_is_named_once() -> None:
    assert len(PUSHDOWNS) == 19
    assert set(PUSHDOWNS) == {
        *("search_vectors", "search_lexical", "guarded_search", "retrieval_read"),
        *("embedders", "source_id_page", "history"),
        *("forgotten_among", "tombstones_among", "dependents"),
        *("retire", "delete_where", "restore_above", "move"),
        *("rename_lineage", "merge_tombstones", "revoke_grants", "delete_source", "prepare"),
    }
