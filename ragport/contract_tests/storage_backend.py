"""``StorageBackendContract``: the whole ``ChunkStoreContract`` on ``BackendStore(backend)``.

A backend of the narrow storage port (``ragport.ports.backend``) keeps its promises when the
generation engine over it keeps every ``ChunkStore`` promise, so this suite is that one with a
``backend`` fixture in place of ``store``::

    from ragport.contract_tests import StorageBackendContract

    class TestMyBackend(StorageBackendContract):
        @pytest.fixture
        def backend(self, tmp_path):
            yield MyBackend(tmp_path / "db")  # a new, empty backend per test

To run the driver-failure section, override ``break_store`` too: a fixture returning a
callable that the suite calls with the ``BackendStore`` (its ``backend`` attribute is your
backend) and that makes the backend fail from then on::

    @pytest.fixture
    def break_store(self, tmp_path):
        def break_it(store):
            store.backend.close()  # or overwrite its files, drop its schema
        return break_it

The backend's own promises have tests of their own here, named after the member they check.
A reader that offers the optional ``companion()`` (``ReadsConcurrently``) is held to its
promise too; for a reader without one those tests skip.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import attrs
import numpy as np
import pytest

from ragport.contract_tests._base import required_fixture
from ragport.contract_tests.chunk_store import ChunkStoreContract
from ragport.contract_tests.chunk_store._helpers import SCOPE
from ragport.contract_tests.storage_backend_engine import StorageBackendEngineContract
from ragport.domain.model import Grant, Record, Tombstone
from ragport.engine import BackendStore
from ragport.ports.backend import (
    BackendReader,
    GenerationState,
    ReadsConcurrently,
    StorageBackend,
)
from ragport.ports.store import ScoredRecord

__all__ = ["StorageBackendContract"]

_T = TypeVar("_T")
_WAIT = 30.0  # seconds a thread of the companion tests waits for the other before failing
_ONES = np.ones(8, dtype=np.float32)


def record(record_id: str, source_id: str, *, generation: int = 1) -> Record:
    """A chunk row of the suite's scope, 8 dimensions."""
    return Record(
        id=record_id,
        scope=SCOPE,
        source_id=source_id,
        kind="chunk",
        text=f"text of {record_id}",
        embedder_id="contract",
        dimensions=8,
        generation=generation,
    )


View = tuple[Any, ...]


def _view(reader: BackendReader) -> View:
    """What a reader sees of source ``s``: the state, its rows, the nearest rows, its grant
    and every tombstone (the nearest stream read to its end before the next call)."""
    state = reader.state()
    rows = sorted((x.id, x.generation, x.retired_generation) for x in reader.rows(source_id="s"))
    nearest = [(s.record.id, s.record.generation) for s in reader.nearest(_ONES)]
    grants = dict(reader.grants(["s"]))
    tombstones = sorted((t.id, t.reason) for t in reader.tombstones())
    return state, rows, nearest, grants, tombstones


def _replace(backend: StorageBackend, generation: int) -> None:
    """Source ``s`` replaced at ``generation`` and committed: its live rows retired, a row of
    the new generation, the state, its grant and a tombstone of the old row."""
    with backend.write(SCOPE) as w:
        live = [x for x in w.rows(source_id="s") if x.retired_generation is None]
        w.update(
            {(x.id, x.generation): attrs.evolve(x, retired_generation=generation) for x in live}
        )
        w.insert([record(f"s#{generation}", "s", generation=generation)], _ONES.reshape(1, 8))
        w.set_state(GenerationState(generation, generation, 0))
        w.put_grants([Grant("s", (f"reader-{generation}",))])
        w.put_tombstones([Tombstone(f"s#{generation - 1}", "forgotten")])
        w.commit()


def _companion(reader: BackendReader) -> AbstractContextManager[BackendReader | None]:
    """``reader.companion()``, asked before the block's first read as the engine asks it;
    the test skips when the reader offers none (the engine then reads the legs in turn)."""
    if getattr(type(reader), "companion", None) is None:
        pytest.skip("the reader offers no companion() (ReadsConcurrently): nothing to check")
    assert isinstance(reader, ReadsConcurrently)
    offer = reader.companion()
    if offer is None:
        pytest.skip("companion() offered none before the first read: nothing to check")
    return offer


def _on_thread(run: Callable[..., _T], *args: Any) -> _T:
    """``run(*args)`` on a thread of its own, its answer (or its error) returned here."""
    with ThreadPoolExecutor(1, thread_name_prefix="companion") as pool:
        return pool.submit(run, *args).result(_WAIT)


def _read_and_release(
    offer: AbstractContextManager[BackendReader | None], second: BackendReader | None
) -> View | None:
    """The companion's view (``None`` when it lent no reader), then the companion left, on
    the calling thread, as the engine's worker leaves it (with the error, if one)."""
    try:
        seen = None if second is None else _view(second)
    except BaseException as error:
        offer.__exit__(type(error), error, error.__traceback__)
        raise
    offer.__exit__(None, None, None)
    return seen


def _read_while_streaming(
    backend: StorageBackend,
    reader: BackendReader,
    offer: AbstractContextManager[BackendReader | None],
    second: BackendReader | None,
) -> tuple[list[ScoredRecord], View | None]:
    """The block's ``nearest`` stream opened and its first row read, a write committed,
    then the companion's view read (and the companion left) on another thread, then the
    rest of the stream: the stream's rows and the companion's view."""
    turn = threading.Barrier(2, timeout=_WAIT)

    def lend() -> View | None:
        try:
            turn.wait()  # the block's stream is open
        except threading.BrokenBarrierError:
            offer.__exit__(None, None, None)  # the block failed first: nothing read
            raise
        try:
            return _read_and_release(offer, second)
        finally:
            turn.wait()

    with ThreadPoolExecutor(1, thread_name_prefix="companion") as pool:
        lent = pool.submit(lend)
        try:
            stream = iter(reader.nearest(_ONES))
            first = next(stream)
            _replace(backend, 3)  # committed while the stream is open
            turn.wait()
            turn.wait()  # the companion has read its view meanwhile
            nearest = [first, *stream]
        except BaseException:
            turn.abort()
            raise
        return nearest, lent.result(_WAIT)


class StorageBackendContract(StorageBackendEngineContract, ChunkStoreContract):
    """Every ``ChunkStore`` promise, through the engine, over the ``backend`` fixture, and
    the engine's promises to the backend (``StorageBackendEngineContract``)."""

    backend = required_fixture(
        "StorageBackendContract",
        "backend",
        "yield an empty StorageBackend and remove whatever the test wrote afterwards",
    )

    @pytest.fixture
    def store(self, backend: StorageBackend) -> Iterator[BackendStore]:
        yield BackendStore(backend)

    def test_backend_write_is_discarded_without_commit(self, backend: StorageBackend) -> None:
        """Checks ``StorageBackend.write``: leaving the block without ``commit`` (here by an
        exception) discards the rows, the state, the grants and the tombstones it wrote.

        If this fails, check that your ``write`` rolls its transaction back on exit unless
        ``commit`` ran (a ``finally`` that rolls back an open transaction)."""
        with pytest.raises(RuntimeError), backend.write(SCOPE) as w:
            w.insert([record("a", "a")], np.ones((1, 8), dtype=np.float32))
            w.set_state(GenerationState(1, 1, 0))
            w.put_grants([Grant("a", ("alice",))])
            w.put_tombstones([Tombstone("a", "forgotten")])
            raise RuntimeError("leave without commit")
        with backend.read(SCOPE) as r:
            assert list(r.rows()) == []
            assert r.state() == GenerationState()
            assert dict(r.grants()) == {}
            assert list(r.tombstones()) == []

    def test_backend_update_renames_in_a_chain(self, backend: StorageBackend) -> None:
        """Checks ``BackendWriter.update``: renames apply at once, so ``a`` to ``b`` and ``b``
        to ``c`` in one call leave ``b`` and ``c``, each with the vector it had.

        If this fails, check that your ``update`` removes every old key before writing the
        new ones (or goes through a temporary copy)."""
        vectors = np.eye(8, dtype=np.float32)[:2]
        with backend.write(SCOPE) as w:
            w.insert([record("a", "s"), record("b", "s")], vectors)
            w.update({("a", 1): record("b", "t"), ("b", 1): record("c", "t")})
            w.commit()
        with backend.read(SCOPE) as r:
            rows = {x.id: x.source_id for x in r.rows()}
            nearest = [(s.record.id, round(s.score, 5)) for s in r.nearest(vectors[0])]
        assert rows == {"b": "t", "c": "t"}
        assert nearest == [("b", 1.0), ("c", 0.0)]

    def test_backend_rows_filters_by_source_and_ids(self, backend: StorageBackend) -> None:
        """Checks ``BackendReader.rows``: ``source_id`` and ``ids`` narrow the rows, both
        together narrow by both, and every generation of an id is a row of its own.

        If this fails, check the WHERE clause of your ``rows``."""
        rows = [record("a", "s", generation=1), record("a", "s", generation=2)]
        rows.append(record("b", "t"))
        with backend.write(SCOPE) as w:
            w.insert(rows, np.ones((3, 8), dtype=np.float32))
            w.commit()

        def keys(**narrow: Any) -> list[tuple[str, int]]:
            with backend.read(SCOPE) as r:
                return sorted((x.id, x.generation) for x in r.rows(**narrow))

        assert keys() == [("a", 1), ("a", 2), ("b", 1)]
        assert keys(source_id="s") == [("a", 1), ("a", 2)]
        assert keys(ids=["b", "zzz"]) == [("b", 1)]
        assert keys(source_id="s", ids=["b"]) == []
        assert keys(ids=[]) == []

    def test_backend_companion_reads_the_blocks_snapshot(self, backend: StorageBackend) -> None:
        """Checks ``ReadsConcurrently.companion``: a write committed after the block's first
        read (before the companion is entered, and again before its first read) is invisible
        to the companion exactly as to the block's own reader: the same state, rows, nearest
        rows, grant and tombstones of the replaced source, read on another thread.

        If this fails, check that the second reader begins in the block's snapshot
        (PostgreSQL: ``SET TRANSACTION SNAPSHOT`` of the id the block's ``BEGIN`` exported,
        sent before the second reader's first statement), not in a fresh one of its own."""
        _replace(backend, 1)
        with backend.read(SCOPE) as r:
            offer = _companion(r)
            before = _view(r)
            _replace(backend, 2)  # after the block's first read
            second = offer.__enter__()
            try:
                _replace(backend, 3)  # after entering, before the companion's first read
            except BaseException as error:
                offer.__exit__(type(error), error, error.__traceback__)
                raise
            seen = _on_thread(_read_and_release, offer, second)
            assert _view(r) == before
        assert seen is None or seen == before
        with backend.read(SCOPE) as r:
            assert _view(r)[0].pointer == 3  # the writes did commit

    def test_backend_companion_reads_while_the_block_reads(self, backend: StorageBackend) -> None:
        """Checks ``ReadsConcurrently.companion``: the companion, entered on the block's
        thread, reads its whole view on another thread while the block's ``nearest`` stream
        is open (between its first row and the rest), and both see the block's snapshot,
        not the write committed meanwhile.

        If this fails, check that the companion reads on a connection (cursor, handle) of
        its own, not the block's, and that nothing of it is tied to the entering thread."""
        _replace(backend, 1)
        _replace(backend, 2)
        with backend.read(SCOPE) as r:
            offer = _companion(r)
            before = _view(r)
            second = offer.__enter__()
            nearest, seen = _read_while_streaming(backend, r, offer, second)
            assert [(s.record.id, s.record.generation) for s in nearest] == before[2]
            assert _view(r) == before
        assert seen is None or seen == before

    def test_backend_companion_may_lend_none_and_is_released(self, backend: StorageBackend) -> None:
        """Checks ``ReadsConcurrently.companion``: entering may yield ``None`` (nothing to
        read then); either way its exit releases it: the block reads on in its snapshot
        after, ends normally, and the next write and block go through, round after round.

        If this fails, check the companion's exit: it must end the second reader's
        transaction and give back what it took (a pooled connection, a lock) even when it
        lent nothing, without touching the block's own reader."""
        for generation in range(1, 5):
            _replace(backend, generation)
            with backend.read(SCOPE) as r:
                offer = _companion(r)
                before = _view(r)
                with offer as second:
                    seen = None if second is None else _view(second)
                assert seen is None or seen == before
                assert _view(r) == before
            assert before[0].pointer == generation
