"""``ChunkStoreUnitOfWorkContract``: all or nothing; ``records.add`` validates before writing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import pytest

from ragport.contract_tests._support import (
    Batch,
    granted,
    hash_vector,
    make_batch,
    publish_sources,
    visible_pairs,
)
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    DIMS,
    OTHER_CORPUS,
    OTHER_TENANT,
    QUERY_ALL,
    READER_TIMEOUT_S,
    SCOPE,
    _add,
    _Boom,
    _query_pairs,
    _reader_result,
    _require_transactions,
    _run_in_thread,
    _snapshot,
)
from ragport.domain.errors import ScopeError, ValidationError
from ragport.domain.model import Grant, Scope, Tombstone
from ragport.ports.store import ChunkStore, UnitOfWork

__all__ = ["ChunkStoreUnitOfWorkContract"]


_BAD_VECTORS: tuple[tuple[str, Callable[[np.ndarray], Any]], ...] = (
    ("extra-row", lambda v: np.vstack([v, v[:1]])),
    ("missing-row", lambda v: v[:-1]),
    ("extra-column", lambda v: np.hstack([v, v[:, :1]])),
    ("missing-column", lambda v: v[:, :-1]),
    ("one-dimensional", lambda v: v.reshape(-1)),
    ("nan", lambda v: np.where(np.arange(v.size).reshape(v.shape) == v.size - 1, np.nan, v)),
    ("inf", lambda v: np.where(np.arange(v.size).reshape(v.shape) == v.size - 1, np.inf, v)),
    ("minus-inf", lambda v: np.where(np.arange(v.size).reshape(v.shape) == 0, -np.inf, v)),
)


class ChunkStoreUnitOfWorkContract(_ChunkStoreContractBase):
    """A unit of work is all or nothing, and ``records.add`` validates before it writes."""

    def _write_everything(self, uow: UnitOfWork) -> None:
        generation = uow.generations.stage()
        uow.records.retire_source("doc", generation=generation)
        _add(uow, make_batch(uow.scope, "doc", ["alpha", "beta"], generation=generation))
        uow.generations.publish(generation)
        uow.grants.set(granted(uow.scope, [Grant("doc", principal_ids=("alice",))]))
        uow.tombstones.add([Tombstone("gone"), Tombstone("fixed", "corrected")])

    def _assert_nothing_written(self, store: ChunkStore) -> None:
        assert not store.get_by_source(SCOPE, "doc")
        assert not store.query(SCOPE, hash_vector("alpha"), limit=QUERY_ALL)
        assert store.list_embedders(SCOPE) == frozenset()
        assert store.current_generation(SCOPE) == 0
        assert store.list_invalidated_ids(SCOPE) == frozenset()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.counter() == 0
            assert uow.generations.current() == 0
            assert dict(uow.grants.get(["doc"])) == {}
            assert list(uow.tombstones.list()) == []

    def test_exception_inside_unit_of_work_leaves_nothing(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.unit_of_work``: an exception leaving the ``with`` block discards the
        records, pointer, counter, grants and tombstones written in it.

        If this fails, check that the unit of work's __exit__ rolls back on an exception.
        """
        _require_transactions(store)
        with pytest.raises(_Boom), store.unit_of_work(SCOPE) as uow:
            self._write_everything(uow)
            raise _Boom
        self._assert_nothing_written(store)

    def test_leaving_without_commit_rolls_back(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.unit_of_work``, ``UnitOfWork.commit``: leaving the ``with`` block
        without ``commit()`` writes nothing.

        If this fails, check that __exit__ rolls back unless commit() was called.
        """
        _require_transactions(store)
        with store.unit_of_work(SCOPE) as uow:
            self._write_everything(uow)
        self._assert_nothing_written(store)

    def test_explicit_rollback_discards_the_work(self, store: ChunkStore) -> None:
        """Checks ``UnitOfWork.rollback``: ``rollback()`` before leaving the block discards
        everything written so far.

        If this fails, check the unit of work's rollback().
        """
        _require_transactions(store)
        with store.unit_of_work(SCOPE) as uow:
            self._write_everything(uow)
            uow.rollback()
        self._assert_nothing_written(store)

    def test_commit_makes_everything_visible(self, store: ChunkStore) -> None:
        """Checks ``UnitOfWork.commit``: after ``commit()`` the records, pointer, grants and
        tombstones are all visible, to the store's reads and to a later unit of work's repositories
        (``list_by_source`` lists what ``get_by_source`` returns).

        If this fails, check that commit() persists every repository of the unit of work.
        """
        _require_transactions(store)
        with store.unit_of_work(SCOPE) as uow:
            self._write_everything(uow)
            uow.commit()
        assert visible_pairs(store, SCOPE, ["doc"]) == {("doc#0001", "alpha"), ("doc#0002", "beta")}
        assert store.current_generation(SCOPE) == 1
        assert store.list_invalidated_ids(SCOPE) == frozenset({"gone"})
        with store.unit_of_work(SCOPE) as uow:
            grants = dict(uow.grants.get(["doc", "other"]))
            assert set(grants) == {"doc"}
            assert set(grants["doc"].principal_ids) == {"alice"}
            assert [(t.id, t.reason) for t in uow.tombstones.list()] == [
                ("fixed", "corrected"),
                ("gone", "forgotten"),
            ]
            listed = {(r.id, r.text) for r in uow.records.list_by_source("doc")}
        assert listed == visible_pairs(store, SCOPE, ["doc"])

    def test_a_finished_unit_of_work_refuses_a_second_commit(self, store: ChunkStore) -> None:
        """Checks ``UnitOfWork.commit``, ``UnitOfWork.rollback``: a second ``commit()`` is
        ``ValidationError(field="unit_of_work")``, ``rollback()`` after ``commit()`` does nothing,
        and what the first commit made visible stays.

        If this fails, check that commit() marks the unit finished and refuses a second call.
        """
        _require_transactions(store)
        with store.unit_of_work(SCOPE) as uow:
            self._write_everything(uow)
            uow.commit()
            with pytest.raises(ValidationError) as info:
                uow.commit()
            assert info.value.field == "unit_of_work"
            uow.rollback()
        assert visible_pairs(store, SCOPE, ["doc"]) == {("doc#0001", "alpha"), ("doc#0002", "beta")}
        assert store.current_generation(SCOPE) == 1

    def test_readers_do_not_see_an_open_unit_of_work(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.get_by_source``, ``ChunkStore.query``,
        ``ChunkStore.current_generation``, ``ChunkStore.list_invalidated_ids``: a reader in another
        thread sees nothing of a unit of work that is still open, and does not wait for it.

        If this fails, check that writes are isolated until commit and reads do not block.
        """
        _require_transactions(store)
        with store.unit_of_work(SCOPE) as uow:
            self._write_everything(uow)
            thread, outcome = _run_in_thread(
                lambda: (
                    _snapshot(store, SCOPE, ["doc"], hash_vector("alpha")),
                    store.list_invalidated_ids(SCOPE),
                ),
                READER_TIMEOUT_S,
            )
            uow.commit()
        seen = _reader_result(thread, outcome, "a unit of work was open")
        assert seen == ((frozenset(), frozenset(), 0), frozenset())

    @pytest.mark.parametrize(
        "foreign", [OTHER_CORPUS, OTHER_TENANT], ids=["other-corpus", "other-tenant"]
    )
    def test_add_rejects_a_record_of_another_scope(self, store: ChunkStore, foreign: Scope) -> None:
        """Checks ``RecordRepository.add``: a batch holding a record of another corpus or tenant
        raises ``ScopeError``, and no record of it is written in either scope.

        If this fails, check that add compares every record's scope with the unit of work's.
        """
        with store.unit_of_work(SCOPE) as uow:
            generation = uow.generations.stage()
            mine = make_batch(SCOPE, "doc", ["alpha"], generation=generation)
            theirs = make_batch(foreign, "doc", ["beta"], generation=generation)
            with pytest.raises(ScopeError):
                _add(uow, mine + theirs)
            uow.generations.publish(generation)
            uow.commit()
        for scope in (SCOPE, foreign):
            assert not store.get_by_source(scope, "doc")
            assert not store.query(scope, hash_vector("alpha"), limit=QUERY_ALL)

    @pytest.mark.parametrize(
        "mutate", [m for _, m in _BAD_VECTORS], ids=[name for name, _ in _BAD_VECTORS]
    )
    def test_add_rejects_malformed_vectors(
        self, store: ChunkStore, mutate: Callable[[np.ndarray], Any]
    ) -> None:
        """Checks ``RecordRepository.add``: a vector matrix with a row or column too many or too
        few, one dimension only, or a NaN or infinite value raises ``ValidationError`` and writes
        nothing.

        If this fails, check that add validates the whole matrix (rows, columns, finiteness)
        before writing any row.
        """
        with store.unit_of_work(SCOPE) as uow:
            generation = uow.generations.stage()
            batch = make_batch(SCOPE, "doc", ["alpha", "beta", "gamma"], generation=generation)
            bad = np.ascontiguousarray(mutate(batch.vectors.copy()), dtype=np.float32)
            with pytest.raises(ValidationError):
                uow.records.add(batch.records, bad)
            uow.generations.publish(generation)
            uow.commit()
        assert not store.get_by_source(SCOPE, "doc")
        assert not store.query(SCOPE, hash_vector("alpha"), limit=QUERY_ALL)

    def test_add_rejects_a_record_whose_dimensions_disagree(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.add``: a record declaring other dimensions than its vector row
        is a ``ValidationError``, and nothing is written.

        If this fails, check that add compares records[i].dimensions with vectors.shape[1].
        """
        with store.unit_of_work(SCOPE) as uow:
            generation = uow.generations.stage()
            batch = make_batch(SCOPE, "doc", ["alpha", "beta"], generation=generation)
            liar = attrs.evolve(batch.records[1], dimensions=DIMS * 2)
            with pytest.raises(ValidationError):
                uow.records.add((batch.records[0], liar), batch.vectors)
            uow.generations.publish(generation)
            uow.commit()
        assert not store.get_by_source(SCOPE, "doc")

    def test_add_rejects_a_live_id_of_another_source(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.add``: adding an id that is live for a different source raises
        ``ValidationError``; nothing of the batch is written and the live record stays.

        If this fails, check the id-uniqueness check in add (live rows of other sources).
        """
        _, written = publish_sources(store, SCOPE, {"a": ["alpha"]})
        with store.unit_of_work(SCOPE) as uow:
            generation = uow.generations.stage()
            fresh = make_batch(SCOPE, "b", ["beta", "gamma"], generation=generation)
            stolen = attrs.evolve(fresh.records[1], id="a#0001")
            with pytest.raises(ValidationError):
                uow.records.add((fresh.records[0], stolen), fresh.vectors)
            uow.generations.publish(generation)
            uow.commit()
        assert visible_pairs(store, SCOPE, ["a"]) == written["a"].pairs
        assert not store.get_by_source(SCOPE, "b")
        assert _query_pairs(store, SCOPE, hash_vector("beta")) == written["a"].pairs

    def test_retired_id_may_move_to_another_source(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.add``, ``RecordRepository.retire_source``: once
        ``retire_source`` retired a record, its id may be added for another source at the retiring
        generation (a rename).

        If this fails, check that the id-uniqueness check only looks at live rows.
        """
        publish_sources(store, SCOPE, {"a": ["alpha"]})
        with store.unit_of_work(SCOPE) as uow:
            generation = uow.generations.stage()
            assert uow.records.retire_source("a", generation=generation) == 1
            fresh = make_batch(SCOPE, "b", ["alpha"], generation=generation)
            _add(uow, Batch((attrs.evolve(fresh.records[0], id="a#0001"),), fresh.vectors))
            uow.generations.publish(generation)
            uow.commit()
        assert not store.get_by_source(SCOPE, "a")
        assert visible_pairs(store, SCOPE, ["b"]) == {("a#0001", "alpha")}
