"""The generation engine's own rules, beyond what the contract suite drives: what it lets
through from the caller, what it refuses after commit, how far it reads ``nearest``, and what
a backend's failure looks like once translated."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager

import attrs
import pytest

from ragport.adapters.memory.backend import MemoryBackend
from ragport.contract_tests._support import make_batch, publish_sources
from ragport.domain.errors import StoreError, ValidationError
from ragport.domain.model import Scope
from ragport.engine import BackendStore
from ragport.ports.backend import BackendReader, BackendWriter
from ragport.ports.embedder import Vector
from ragport.ports.store import ScoredRecord

SCOPE = Scope("t", "r", "c")


class _CountingReader:
    """Delegates to a reader; counts how many rows of ``nearest`` the engine consumed."""

    def __init__(self, inner: BackendReader, seen: list[int], fail: bool) -> None:
        self._inner, self._seen, self._fail = inner, seen, fail
        self.state, self.rows = inner.state, inner.rows
        self.grants, self.tombstones = inner.grants, inner.tombstones

    def nearest(self, vector: Vector) -> Iterable[ScoredRecord]:
        for scored in self._inner.nearest(vector):
            if self._fail:
                raise RuntimeError("cursor died reading 'the secret document text'")
            self._seen[0] += 1
            yield scored


class Watched:
    """A MemoryBackend whose reads count (or break) the rows ``nearest`` hands out."""

    provider = "watched"

    def __init__(self) -> None:
        self.inner = MemoryBackend()
        self.seen = [0]
        self.fail = False

    @contextmanager
    def read(self, scope: Scope) -> Iterator[BackendReader]:
        with self.inner.read(scope) as reader:
            yield _CountingReader(reader, self.seen, self.fail)

    def write(self, scope: Scope) -> AbstractContextManager[BackendWriter]:
        return self.inner.write(scope)


def _hundred(store: BackendStore) -> None:
    publish_sources(store, SCOPE, {f"s{i:03d}": [f"text number {i}"] for i in range(100)})


def test_the_walk_reads_nearest_only_as_far_as_the_limit_needs() -> None:
    """If this fails, BackendStore.query materializes the whole stream before filtering."""
    backend = Watched()
    store = BackendStore(backend)
    _hundred(store)
    probe = make_batch(SCOPE, "s000", ["text number 0"], generation=1).vectors[0]
    hits = store.query(SCOPE, probe, limit=3)
    assert len(hits) == 3
    assert backend.seen[0] == 3


def test_a_failing_cursor_is_an_unchained_store_error_without_text() -> None:
    backend = Watched()
    store = BackendStore(backend)
    _hundred(store)
    backend.fail = True
    probe = make_batch(SCOPE, "s000", ["x"], generation=1).vectors[0]
    with pytest.raises(StoreError) as caught:
        store.query(SCOPE, probe, limit=3)
    assert str(caught.value) == "watched: RuntimeError"
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_the_callers_own_exception_passes_unchanged_and_writes_nothing() -> None:
    """An exception raised in the caller's ``with`` body is the caller's, not a StoreError."""
    store = BackendStore(MemoryBackend())
    batch = make_batch(SCOPE, "a", ["alpha"], generation=1)

    class Mine(Exception):
        pass

    with pytest.raises(Mine), store.unit_of_work(SCOPE) as uow:
        uow.records.add(batch.records, batch.vectors)
        uow.generations.publish(uow.generations.stage())
        raise Mine
    assert store.current_generation(SCOPE) == 0
    assert store.get_by_source(SCOPE, "a") == []


def test_writes_after_commit_or_rollback_are_refused_reads_still_answer() -> None:
    store = BackendStore(MemoryBackend())
    batch = make_batch(SCOPE, "a", ["alpha"], generation=1)
    with store.unit_of_work(SCOPE) as uow:
        uow.records.add(batch.records, batch.vectors)
        uow.generations.publish(uow.generations.stage())
        uow.commit()
        with pytest.raises(ValidationError) as caught:
            uow.records.purge_source("a")
        assert caught.value.field == "unit_of_work"
        assert uow.generations.current() == 1
    with store.unit_of_work(SCOPE) as uow:
        uow.rollback()
        with pytest.raises(ValidationError):
            uow.generations.stage()
    assert [r.id for r in store.get_by_source(SCOPE, "a")] == ["a#0001"]


def test_a_backend_with_no_provider_is_refused() -> None:
    class Nameless(MemoryBackend):
        provider = ""

    with pytest.raises(ValidationError) as caught:
        BackendStore(Nameless())
    assert caught.value.field == "provider"


def test_lineage_and_roots_are_never_a_shared_list() -> None:
    """A caller's lists become the record's tuples: clearing them after add, or trying to
    change what a read returned, changes nothing the store keeps (a forgotten root stays
    forgotten). If this fails, check Record's lineage/roots converter in domain/model.py."""
    from ragport.domain.model import Record, Tombstone

    store = BackendStore(MemoryBackend())
    publish_sources(store, SCOPE, {"src": ["the source"]})
    edges = ["src#0001"]
    roots = ["src"]
    derived = Record(
        id="sum", scope=SCOPE, source_id="sum", kind="derived", text="a summary",
        embedder_id=make_batch(SCOPE, "x", ["x"], generation=1).records[0].embedder_id,
        dimensions=8, lineage=edges, roots=roots,
    )  # fmt: skip
    vectors = make_batch(SCOPE, "sum", ["a summary"], generation=1).vectors
    with store.unit_of_work(SCOPE) as uow:
        g = uow.generations.stage()
        uow.records.add([attrs.evolve(derived, generation=g)], vectors)
        uow.generations.publish(g)
        uow.commit()
    edges.clear()
    roots.clear()
    got = store.get_by_source(SCOPE, "sum")[0]
    assert (got.lineage, got.roots) == (("src#0001",), ("src",))
    with store.unit_of_work(SCOPE) as uow:
        uow.tombstones.add([Tombstone("src", "forgotten")])
        uow.commit()
    assert store.query(SCOPE, vectors[0], limit=5) == []


class _FailsOnUpdate(MemoryBackend):
    """A backend whose writer fails in ``update`` after ``delete`` already ran."""

    provider = "fails-on-update"

    @contextmanager
    def write(self, scope: Scope) -> Iterator[BackendWriter]:
        with super().write(scope) as writer:

            def update(changes: object) -> None:
                raise RuntimeError("disk full while writing 'secret text'")

            writer.update = update  # type: ignore[method-assign]
            yield writer


def test_a_failed_backend_write_leaves_a_unit_that_can_only_roll_back() -> None:
    """retire_source deletes, then updates; when the update fails the unit refuses commit,
    so the half-done retire never lands. If this fails, check _Part._write."""
    store = BackendStore(_FailsOnUpdate())
    publish_sources(store, SCOPE, {"a": ["first version"]})  # insert only: no update
    with store.unit_of_work(SCOPE) as uow:
        g = uow.generations.stage()
        with pytest.raises(StoreError):
            uow.records.retire_source("a", generation=g)
        with pytest.raises(ValidationError) as caught:
            uow.commit()
        assert caught.value.field == "unit_of_work"
    assert [r.id for r in store.get_by_source(SCOPE, "a")] == ["a#0001"]


def test_a_backends_own_typed_error_loses_its_chain() -> None:
    class Chained(MemoryBackend):
        provider = "chained"

        def read(self, scope: Scope) -> AbstractContextManager[BackendReader]:
            try:
                raise ValueError("the secret document text")
            except ValueError as exc:
                raise StoreError("chained: read failed") from exc

    with pytest.raises(StoreError) as caught:
        BackendStore(Chained()).current_generation(SCOPE)
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_after_rollback_reads_and_even_empty_writes_are_refused() -> None:
    store = BackendStore(MemoryBackend())
    with store.unit_of_work(SCOPE) as uow:
        uow.generations.stage()
        uow.rollback()
        for call in (
            uow.generations.current,
            lambda: uow.grants.set([]),
            lambda: uow.tombstones.add([]),
            lambda: uow.records.rekey({}, to_source_id="x"),
        ):
            with pytest.raises(ValidationError) as caught:
                call()
            assert caught.value.field == "unit_of_work"


def test_a_wrong_authorization_is_a_validation_error() -> None:
    store = BackendStore(MemoryBackend())
    probe = make_batch(SCOPE, "a", ["x"], generation=1).vectors[0]
    with pytest.raises(ValidationError) as caught:
        store.query(SCOPE, probe, limit=3, authorization="alice")  # type: ignore[arg-type]
    assert caught.value.field == "authorization"
