"""The engine's pushdown seam under the whole StorageBackendContract: a backend that defines
every pushdown of ``ragport.ports.pushdowns`` (reads answered by the engine's own generic
functions, writes set-based over the writer), so each dispatch of ``BackendStore`` and
``BackendUnitOfWork`` runs through the suite; and ``pushdown=False`` on the same backend."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import attrs
import pytest

from ragport.adapters.memory.backend import MemoryBackend
from ragport.contract_tests import StorageBackendContract
from ragport.contract_tests._support import make_batch, publish_sources
from ragport.domain.filters import Filter
from ragport.domain.model import Authorization, Grant, Record, Scope, Tombstone
from ragport.engine import BackendStore
from ragport.engine.reads import (
    forgotten_ids,
    generic_embedders,
    generic_history,
    generic_source_id_page,
    search_bm25,
    walk_vectors,
)
from ragport.ports.backend import BackendReader, BackendWriter
from ragport.ports.embedder import Vector
from ragport.ports.history import GenerationChange
from ragport.ports.pushdowns import PUSHDOWNS, Admission, GuardedAnswer, LegAnswer
from ragport.ports.store import EmbedderKey

EVERY = tuple(PUSHDOWNS)


class Pushed(MemoryBackend):
    """MemoryBackend with every pushdown; ``calls`` counts them by name."""

    provider = "pushed"
    lexical_modes = ("bm25", "plain")

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}
        self.prepared: list[tuple[Scope, int]] = []

    @contextmanager
    def read(self, scope: Scope) -> Iterator[BackendReader]:
        with super().read(scope) as view:
            view.scope = scope  # type: ignore[attr-defined]
            yield view

    @contextmanager
    def write(self, scope: Scope) -> Iterator[BackendWriter]:
        with super().write(scope) as view:
            view.scope = scope  # type: ignore[attr-defined]
            yield view

    def _called(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    # -- reads ----------------------------------------------------------------------------
    def search_vectors(
        self, view: Any, vector: Vector, *, admission: Admission, limit: int
    ) -> LegAnswer:
        self._called("search_vectors")
        return walk_vectors(view, view.scope, vector, admission, limit)

    def guarded_search(
        self,
        view: Any,
        vector: Vector,
        *,
        embedder: EmbedderKey | None,
        authorization: Authorization | None,
        metadata_filter: Filter | None,
        report_denied: bool,
        limit: int,
    ) -> GuardedAnswer:
        self._called("guarded_search")
        pointer = view.state().pointer
        found = generic_embedders(view, view.scope, pointer) if embedder is not None else set()
        admission = Admission(pointer, authorization, metadata_filter, report_denied)
        answer = walk_vectors(view, view.scope, vector, admission, limit)
        return GuardedAnswer(frozenset(found - {embedder}), answer)

    def retrieval_read(self, scope: Scope) -> AbstractContextManager[BackendReader]:
        self._called("retrieval_read")
        return self.read(scope)

    def search_lexical(
        self, view: Any, text: str, *, mode: str, admission: Admission, limit: int
    ) -> LegAnswer:
        self._called("search_lexical")
        return search_bm25(view, view.scope, text, admission, limit)

    def embedders(self, view: Any) -> frozenset[EmbedderKey]:
        self._called("embedders")
        return generic_embedders(view, view.scope, view.state().pointer)

    def source_id_page(self, view: Any, *, after: str | None, limit: int) -> Sequence[str]:
        self._called("source_id_page")
        return generic_source_id_page(view, view.scope, view.state().pointer, after, limit)

    def history(self, view: Any, *, limit: int, max_ids: int) -> Sequence[GenerationChange]:
        self._called("history")
        return generic_history(view, view.scope, limit, max_ids)

    def forgotten_among(self, view: Any, ids: Sequence[str]) -> frozenset[str]:
        self._called("forgotten_among")
        return forgotten_ids(view).intersection(ids)

    def tombstones_among(self, view: Any, ids: Sequence[str]) -> Sequence[Tombstone]:
        self._called("tombstones_among")
        return [t for t in view.tombstones() if t.id in ids]

    def dependents(self, view: Any, ids: Sequence[str]) -> Sequence[Record]:
        self._called("dependents")
        return [r for r in view.rows() if r.kind == "derived" and set(r.lineage) & set(ids)]

    # -- writes ---------------------------------------------------------------------------
    def retire(
        self,
        view: Any,
        *,
        source_id: str | None = None,
        ids: Sequence[str] | None = None,
        generation: int,
    ) -> int:
        self._called("retire")
        rows = list(view.rows(source_id=source_id, ids=ids))
        view.delete([(r.id, r.generation) for r in rows if r.generation == generation])
        live = [r for r in rows if r.retired_generation is None and r.generation < generation]
        view.update({(r.id, r.generation): attrs.evolve(r, retired_generation=generation)
                     for r in live})  # fmt: skip
        pointer = view.state().pointer
        return len([r for r in live if r.generation <= pointer])

    def delete_where(
        self,
        view: Any,
        *,
        source_id: str | None = None,
        above: int | None = None,
        retired_through: int | None = None,
    ) -> int:
        self._called("delete_where")
        rows = view.rows(source_id=source_id)
        if above is not None:
            rows = [r for r in rows if r.generation > above]
        if retired_through is not None:
            rows = [
                r for r in rows if (r.retired_generation or retired_through + 1) <= retired_through
            ]
        keys = [(r.id, r.generation) for r in rows]
        view.delete(keys)
        return len(keys)

    def restore_above(self, view: Any, generation: int) -> int:
        self._called("restore_above")
        back = {(r.id, r.generation): attrs.evolve(r, retired_generation=None)
                for r in view.rows() if (r.retired_generation or 0) > generation}  # fmt: skip
        view.update(back)
        return len(back)

    def move(self, view: Any, moves: Mapping[str, str], *, to_source_id: str) -> int:
        self._called("move")
        live = [r for r in view.rows(ids=list(moves)) if r.retired_generation is None]
        view.update({(r.id, r.generation): attrs.evolve(r, id=moves[r.id], source_id=to_source_id)
                     for r in live})  # fmt: skip
        return len(live)

    def rename_lineage(self, view: Any, from_id: str, to_id: str) -> int:
        self._called("rename_lineage")

        def swap(ids: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(dict.fromkeys(to_id if i == from_id else i for i in ids))

        hit = [r for r in view.rows() if r.kind == "derived" and from_id in (*r.lineage, *r.roots)]
        view.update({(r.id, r.generation): attrs.evolve(r, lineage=swap(r.lineage), roots=swap(r.roots))
                     for r in hit})  # fmt: skip
        return sum(r.lineage.count(from_id) for r in hit)

    def merge_tombstones(self, view: Any, tombstones: Sequence[Tombstone]) -> int:
        self._called("merge_tombstones")
        stored = {t.id: t.reason for t in view.tombstones()}
        view.put_tombstones([t for t in tombstones if stored.get(t.id) != "forgotten"])
        return len([t for t in tombstones if t.id not in stored])

    def revoke_grants(self, view: Any, source_ids: Sequence[str]) -> int:
        self._called("revoke_grants")
        found = view.grants(source_ids)
        named = [s for s in source_ids if s in found and not found[s].is_empty]
        view.put_grants([Grant(s) for s in named])
        return len(named)

    def delete_source(self, scope: Scope, source_id: str) -> tuple[int, int] | None:
        self._called("delete_source")
        with self.write(scope) as view:
            if any(r.kind == "derived" and source_id in r.lineage for r in view.rows()):
                return None  # the block left without a commit: nothing written
            state = view.state()
            g = state.counter if state.counter > state.pointer else state.counter + 1
            retired = self.retire(view, source_id=source_id, generation=g)
            self.revoke_grants(view, [source_id])
            view.set_state(attrs.evolve(state, counter=g, pointer=g))
            view.commit()
        return g, retired

    def prepare(self, scope: Scope, *, dimensions: int) -> None:
        self._called("prepare")
        self.prepared.append((scope, dimensions))


class TestEveryPushdown(StorageBackendContract):
    """The whole suite through every pushdown."""

    @pytest.fixture
    def backend(self) -> Iterator[Pushed]:
        yield Pushed()


class TestEveryPushdownIgnored(StorageBackendContract):
    """The same backend with ``pushdown=False``: the generic path alone, none called."""

    @pytest.fixture
    def backend(self) -> Iterator[Pushed]:
        backend = Pushed()
        yield backend
        assert backend.calls == {}

    @pytest.fixture
    def store(self, backend: Pushed) -> Iterator[BackendStore]:
        yield BackendStore(backend, pushdown=False)


def test_every_pushdown_is_found_and_declared() -> None:
    """If this fails, check ``ragport.engine.dispatch``: what a backend defines is what the
    store calls and declares."""
    store = BackendStore(Pushed())
    assert store.pushdowns == EVERY
    caps = store.capabilities
    assert caps.lexical_modes == ("bm25", "plain")
    assert caps.forgotten_lookup and caps.preparation and caps.borrowed_query


def test_the_suite_reaches_every_pushdown() -> None:
    """Each pushdown is called by the store method or repository method that owns it, so no
    dispatch is dead (``search_vectors``: the hybrid query's vector leg; ``guarded_search``
    answers ``query``). If this fails, a dispatch in BackendStore or BackendUnitOfWork no longer
    reaches its pushdown."""
    backend = Pushed()
    store = BackendStore(backend)
    scope = Scope("t", "r", "c")
    publish_sources(store, scope, {"a": ["alpha one"], "b": ["beta two"]})
    probe = make_batch(scope, "a", ["alpha one"], generation=1).vectors[0]
    store.prepare(scope, dimensions=8)
    store.query(scope, probe, limit=2)
    store.lexical_query(scope, "alpha", limit=2, mode="plain")
    ((embedder_id, dimensions),) = store.list_embedders(scope)
    store.hybrid_query(scope, probe, "alpha", embedder_id=embedder_id, dimensions=dimensions,
                       limit=2, mode="plain")  # fmt: skip
    store.list_source_ids(scope)
    store.generation_history(scope)
    store.forgotten_among(scope, ["a"])
    with store.unit_of_work(scope) as uow:
        g = uow.generations.stage()
        uow.records.retire_source("a", generation=g)
        uow.records.retire_ids(["b#0001"], generation=g)
        uow.records.restore_above(g - 1)
        uow.records.rekey({"a#0001": "c#0001"}, to_source_id="c")
        uow.records.rewrite_lineage("a", "c")
        uow.tombstones.add([Tombstone("x", "forgotten")])
        uow.tombstones.get(["x"])
        uow.records.find_dependents(["a"])
        uow.records.purge_source("c")
        uow.records.discard_above(g)
        uow.records.purge_retired(0)
        uow.grants.revoke(["a"])
        uow.commit()
    assert store.delete_source_at_once(scope, "b") is not None
    assert sorted(backend.calls) == sorted(EVERY)
