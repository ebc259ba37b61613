"""``StorageBackendEngineContract``: what the engine promises a backend, and one promise back.

Part of ``StorageBackendContract`` (fixture ``backend``). Each test wraps your backend in a
small test double (a lazy cursor that refuses interleaved reads, a reader that leaks a row,
a writer that fails) and drives ``BackendStore`` over it, so it checks the engine's side of
the narrow port with your storage underneath:

- the engine never calls a reader method while a ``nearest()`` iterator is open (a backend
  may stream ``nearest`` from a cursor on the read's one connection);
- a row handed back outside what was asked (another source for ``rows(source_id=)``, another
  scope from ``nearest``) is refused with ``StoreError``, never handed out;
- any error a backend raises during a write (a ``RagportError`` too) leaves the unit of work
  rollback-only;
- the drift guard reads the scope's embedder claim, not its rows: the one promise back is
  that ``state()`` returns ``GenerationState.embedders`` as ``set_state`` stored it.

The wrappers define no pushdown, so these run the engine's generic path whatever your backend
pushes down.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import attrs
import pytest

from ragport.contract_tests._base import ContractSuite, required_fixture
from ragport.contract_tests._support import (
    CONTRACT_DIMENSIONS,
    CONTRACT_EMBEDDER_ID,
    granted,
    make_batch,
    publish_sources,
)
from ragport.contract_tests.chunk_store._helpers import ALICE, SCOPE
from ragport.domain.errors import StoreError, ValidationError
from ragport.domain.model import AccessDecision, Grant, Record, Scope
from ragport.engine import BackendStore
from ragport.ports.backend import BackendReader, BackendWriter, GenerationState, StorageBackend
from ragport.ports.embedder import Vector
from ragport.ports.store import ScoredRecord

__all__ = ["StorageBackendEngineContract", "Wrapped"]

KEY = (CONTRACT_EMBEDDER_ID, CONTRACT_DIMENSIONS)


class _Reader:
    """A reader (or writer) delegating to the backend's, with the wrapper's hooks."""

    def __init__(self, inner: Any, owner: Wrapped) -> None:
        self._inner = inner
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._inner, name)
        owner = self._owner
        if not callable(member):
            return member

        def call(*args: Any, **kwargs: Any) -> Any:
            owner.before(name)
            if name in owner.fail_on:
                raise owner.fail_on[name]
            found = member(*args, **kwargs)
            if name == "nearest":
                return owner.stream(found)
            if name == "rows":
                owner.rows_read += 1
                return [*found, *owner.extra_rows]
            return found

        return call


class Wrapped:
    """Your backend behind a test double: ``strict_cursor`` makes ``nearest`` a generator
    during which any other reader call fails the test; ``extra_rows`` are appended to every
    ``rows`` answer; ``foreign_nearest`` is yielded first by ``nearest``; ``fail_on`` maps a
    member name to the exception it raises; ``rows_read`` counts ``rows`` calls."""

    def __init__(self, inner: StorageBackend) -> None:
        self.inner = inner
        self.provider = inner.provider
        self.strict_cursor = False
        self.cursor_open = False
        self.interleaved: list[str] = []
        self.extra_rows: list[Record] = []
        self.foreign_nearest: list[ScoredRecord] = []
        self.fail_on: dict[str, BaseException] = {}
        self.rows_read = 0

    def before(self, name: str) -> None:
        if self.cursor_open:
            self.interleaved.append(name)

    def stream(self, found: Iterable[ScoredRecord]) -> Iterator[ScoredRecord]:
        self.cursor_open = self.strict_cursor
        try:
            yield from self.foreign_nearest
            yield from found
        finally:
            self.cursor_open = False

    @contextmanager
    def read(self, scope: Scope) -> Iterator[BackendReader]:
        with self.inner.read(scope) as reader:
            yield cast(BackendReader, _Reader(reader, self))

    @contextmanager
    def write(self, scope: Scope) -> Iterator[BackendWriter]:
        with self.inner.write(scope) as writer:
            yield cast(BackendWriter, _Reader(writer, self))


def _seed(store: BackendStore) -> Vector:
    """Two granted sources and one without a grant; a probe vector near all three."""
    publish_sources(store, SCOPE, {"a": ["alpha one"], "b": ["alpha two"], "c": ["alpha 3"]})
    store.set_source_access(SCOPE, granted(SCOPE, [Grant("a", ("alice",)), Grant("b", ("alice",))]))
    probe: Vector = make_batch(SCOPE, "a", ["alpha one"], generation=1).vectors[0]
    return probe


class StorageBackendEngineContract(ContractSuite):
    """The engine's promises to a backend, checked over the ``backend`` fixture."""

    backend = required_fixture(
        "StorageBackendContract",
        "backend",
        "yield an empty StorageBackend and remove whatever the test wrote afterwards",
    )

    def test_backend_state_keeps_the_embedder_claim(self, backend: StorageBackend) -> None:
        """Checks ``BackendWriter.set_state`` and ``BackendReader.state``: the embedder claim
        (``GenerationState.embedders``, legacy ``None`` keys included) comes back as stored.

        If this fails, check that your backend stores ``embedders`` with the three numbers
        (e.g. a JSON column of ``[embedder_id, dimensions]`` pairs) and returns it; without it
        every retrieval reads the scope's rows for its drift guard."""
        claim = frozenset({KEY, ("other", 3), (None, None)})
        with backend.write(SCOPE) as w:
            w.set_state(GenerationState(2, 1, 0, embedders=claim))
            w.commit()
        with backend.read(SCOPE) as r:
            assert r.state() == GenerationState(2, 1, 0, embedders=claim)

    def test_the_drift_guard_reads_the_claim_not_the_rows(self, backend: StorageBackend) -> None:
        """Checks ``ChunkStore.foreign_embedders`` and ``SupportsGuardedQuery.guarded_query``:
        over the engine, with one embedder in the scope, neither reads ``rows()``.

        If this fails, check that ``state()`` returns the embedder claim ``set_state`` stored
        (test_backend_state_keeps_the_embedder_claim), or the engine's ``_foreign``."""
        wrapped = Wrapped(backend)
        store = BackendStore(wrapped)
        probe = _seed(store)
        wrapped.rows_read = 0
        assert store.foreign_embedders(SCOPE, *KEY) == frozenset()
        guarded = store.guarded_query(SCOPE, probe, embedder_id=KEY[0], dimensions=KEY[1], limit=2)
        assert len(guarded.records) == 2 and guarded.foreign_embedders == frozenset()
        assert wrapped.rows_read == 0
        assert store.foreign_embedders(SCOPE, "another", 8) == frozenset({KEY})

    def test_no_reader_call_while_nearest_is_open(self, backend: StorageBackend) -> None:
        """Checks ``BackendReader.nearest``: the engine reads grants, tombstones and state
        before the stream, the denial report after it is closed, so a lazy
        cursor on the read's one connection is never cut off.

        If this fails, the engine called the listed reader members while a ``nearest``
        iterator was open: check ``ragport.engine.reads.walk_vectors``."""
        wrapped = Wrapped(backend)
        store = BackendStore(wrapped)
        probe = _seed(store)
        wrapped.strict_cursor = True
        denied: list[AccessDecision] = []
        hits = store.query(SCOPE, probe, limit=3, authorization=ALICE, on_denied=denied.extend)
        assert {h.record.source_id for h in hits} == {"a", "b"}
        assert [d.source_id for d in denied] == ["c"]
        store.guarded_query(SCOPE, probe, embedder_id=KEY[0], dimensions=KEY[1], limit=1)
        store.hybrid_query(
            SCOPE, probe, "alpha", embedder_id=KEY[0], dimensions=KEY[1], limit=3, mode="bm25",
            authorization=ALICE, on_denied=denied.extend,
        )  # fmt: skip
        assert wrapped.interleaved == []

    def test_rows_outside_the_asked_source_or_scope_are_refused(
        self, backend: StorageBackend
    ) -> None:
        """Checks ``BackendReader.rows`` and ``BackendReader.nearest``: a row of another
        source (for ``rows(source_id=)``) or of another scope (from ``nearest``) is a
        ``StoreError`` in the engine, never handed out.

        If this fails, check ``ragport.engine.reads.checked`` and where the engine reads
        ``rows`` and ``nearest``."""
        wrapped = Wrapped(backend)
        store = BackendStore(wrapped)
        probe = _seed(store)
        stray = store.get_by_source(SCOPE, "b")[0]
        wrapped.extra_rows = [stray]
        with pytest.raises(StoreError):
            store.get_by_source(SCOPE, "a")
        wrapped.extra_rows = []
        elsewhere = attrs.evolve(stray, scope=Scope("other-tenant", "kb", "docs"))
        wrapped.foreign_nearest = [ScoredRecord(elsewhere, 1.0)]
        with pytest.raises(StoreError):
            store.query(SCOPE, probe, limit=3)

    @pytest.mark.parametrize("error", [ValidationError("refused", field="x"), OSError("disk")])
    def test_a_backend_error_in_a_write_leaves_the_unit_rollback_only(
        self, backend: StorageBackend, error: Exception
    ) -> None:
        """Checks ``BackendWriter.update``: when it fails inside a unit of work, with a
        ragport error or a driver's, the unit refuses ``commit`` (``ValidationError(field=
        "unit_of_work")``), so the half-done retire never lands.

        If this fails, check ``_Part._run`` in ragport/engine/unit_of_work.py: every error a
        backend call raises must mark the unit failed, not only ``StoreError``."""
        wrapped = Wrapped(backend)
        store = BackendStore(wrapped)
        publish_sources(store, SCOPE, {"a": ["first version"]})
        wrapped.fail_on["update"] = error
        with store.unit_of_work(SCOPE) as uow:
            g = uow.generations.stage()
            with pytest.raises((ValidationError, StoreError)):
                uow.records.retire_source("a", generation=g)
            with pytest.raises(ValidationError) as caught:
                uow.commit()
            assert caught.value.field == "unit_of_work"
        assert [r.id for r in store.get_by_source(SCOPE, "a")] == ["a#0001"]
        assert store.current_generation(SCOPE) == 1
