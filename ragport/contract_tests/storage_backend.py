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
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from ragport.contract_tests._base import required_fixture
from ragport.contract_tests.chunk_store import ChunkStoreContract
from ragport.contract_tests.chunk_store._helpers import SCOPE
from ragport.contract_tests.storage_backend_engine import StorageBackendEngineContract
from ragport.domain.model import Grant, Record, Tombstone
from ragport.engine import BackendStore
from ragport.ports.backend import GenerationState, StorageBackend

__all__ = ["StorageBackendContract"]


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
