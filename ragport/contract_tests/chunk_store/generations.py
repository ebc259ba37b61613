"""Replacement visibility and generations.

``ChunkStoreReplaceContract`` (a replacement is seen whole or not at all) and
``ChunkStoreGenerationContract`` (counter, pointer, staging, retirement, rollback, compaction).
"""

from __future__ import annotations

import pytest

from ragport.contract_tests._support import hash_vector, make_batch, publish_sources, visible_pairs
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    OTHER_CORPUS,
    QUERY_ALL,
    READER_TIMEOUT_S,
    SCOPE,
    _add,
    _Boom,
    _ids,
    _query_pairs,
    _reader_result,
    _require_generations,
    _require_transactions,
    _run_in_thread,
    _snapshot,
)
from ragport.domain.errors import ValidationError
from ragport.ports.store import ChunkStore

__all__ = ["ChunkStoreGenerationContract", "ChunkStoreReplaceContract"]


V1 = ("alpha v1", "beta v1")
V2 = ("alpha v2", "beta v2", "gamma v2")


class ChunkStoreReplaceContract(_ChunkStoreContractBase):
    """A replacement is seen whole or not at all: readers see v1 until v2 is committed."""

    def test_reader_sees_the_old_version_until_commit(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.unit_of_work``, ``ChunkStore.get_by_source``, ``ChunkStore.query``,
        ``ChunkStore.current_generation``: while a replacement (stage, retire, add, publish) is
        open, a reader in another thread sees exactly v1 and the old pointer, without waiting; after
        commit every reader sees exactly v2 and the new pointer.

        If this fails, check that retire/add/publish happen in one transaction, that readers
        use the committed pointer, and that reads do not block on an open unit of work.
        """
        _require_transactions(store)
        _require_generations(store)
        first, v1 = publish_sources(store, SCOPE, {"doc": V1})
        probe = hash_vector(V2[0])
        with store.unit_of_work(SCOPE) as uow:
            second = uow.generations.stage()
            assert second > first
            assert uow.records.retire_source("doc", generation=second) == len(V1)
            v2 = make_batch(SCOPE, "doc", V2, generation=second)
            _add(uow, v2)
            uow.generations.publish(second)
            thread, outcome = _run_in_thread(
                lambda: _snapshot(store, SCOPE, ["doc"], probe), READER_TIMEOUT_S
            )
            uow.commit()
        during = _reader_result(thread, outcome, "a replacement was open")
        assert during == (v1["doc"].pairs, v1["doc"].pairs, first)
        assert _snapshot(store, SCOPE, ["doc"], probe) == (v2.pairs, v2.pairs, second)
        after_thread, after_outcome = _run_in_thread(
            lambda: _snapshot(store, SCOPE, ["doc"], probe), READER_TIMEOUT_S
        )
        assert _reader_result(after_thread, after_outcome, "reading after commit") == (
            v2.pairs,
            v2.pairs,
            second,
        )

    def test_abandoned_replace_keeps_the_old_version(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.unit_of_work``, ``RecordRepository.retire_source``,
        ``GenerationRepository.publish``: a replacement that raises before commit leaves v1 visible
        and the pointer unchanged.

        If this fails, check that retire_source and publish are rolled back with the records.
        """
        _require_transactions(store)
        _require_generations(store)
        first, v1 = publish_sources(store, SCOPE, {"doc": V1})
        with pytest.raises(_Boom), store.unit_of_work(SCOPE) as uow:
            second = uow.generations.stage()
            uow.records.retire_source("doc", generation=second)
            _add(uow, make_batch(SCOPE, "doc", V2, generation=second))
            uow.generations.publish(second)
            raise _Boom
        probe = hash_vector(V2[0])
        assert _snapshot(store, SCOPE, ["doc"], probe) == (v1["doc"].pairs, v1["doc"].pairs, first)

    def test_replace_reuses_chunk_ids_without_duplicates(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.retire_source``, ``ChunkStore.get_by_source``,
        ``ChunkStore.query``: after a source is replaced, its chunk ids appear once each, with the
        new text, in ``get_by_source`` (ordered by id) and in ``query``.

        If this fails, check that retire_source hides the old rows at the new generation.
        """
        publish_sources(store, SCOPE, {"doc": V1})
        publish_sources(store, SCOPE, {"doc": V2})
        records = store.get_by_source(SCOPE, "doc")
        assert [r.id for r in records] == ["doc#0001", "doc#0002", "doc#0003"]
        assert [r.text for r in records] == list(V2)
        results = store.query(SCOPE, hash_vector(V1[0]), limit=QUERY_ALL)
        assert sorted(_ids(results)) == ["doc#0001", "doc#0002", "doc#0003"]


class ChunkStoreGenerationContract(_ChunkStoreContractBase):
    """Counter, pointer, staging, retirement, rollback and compaction of generations."""

    def test_fresh_scope_starts_at_generation_zero(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.current_generation``, ``GenerationRepository.current``,
        ``GenerationRepository.counter``, ``GenerationRepository.floor``: a scope never written has
        pointer, counter and floor 0.

        If this fails, check the defaults of the generation repository for an unknown scope.
        """
        _require_generations(store)
        assert store.current_generation(SCOPE) == 0
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.current() == 0
            assert uow.generations.counter() == 0
            assert uow.generations.floor() == 0

    def test_stage_hands_out_one_generation_until_published(self, store: ChunkStore) -> None:
        """Checks ``GenerationRepository.stage``, ``GenerationRepository.publish``,
        ``GenerationRepository.counter``, ``GenerationRepository.current``: ``stage()`` returns
        counter + 1, then the same number until it is published, then the next one; counter and
        pointer are kept across units of work.

        If this fails, check stage(): reuse counter() while it is above the pointer.
        """
        _require_generations(store)
        with store.unit_of_work(SCOPE) as uow:
            gens = uow.generations
            assert gens.stage() == 1
            assert gens.stage() == 1
            assert (gens.counter(), gens.current()) == (1, 0)
            gens.publish(1)
            assert (gens.counter(), gens.current()) == (1, 1)
            assert gens.stage() == 2
            uow.commit()
        assert store.current_generation(SCOPE) == 1
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.counter() == 2
            assert uow.generations.stage() == 2
            uow.generations.publish(2)
            assert uow.generations.stage() == 3
            uow.commit()
        assert store.current_generation(SCOPE) == 2

    def test_staged_rows_are_invisible_until_published(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.get_by_source``, ``ChunkStore.query``, ``ChunkStore.list_embedders``,
        ``GenerationRepository.stage``: rows committed at a staged generation stay invisible until a
        later unit of work publishes it, and ``stage()`` there hands out the same generation.

        If this fails, check that reads filter on generation <= pointer, not on the counter.
        """
        _require_generations(store)
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            batch = make_batch(SCOPE, "doc", V1, generation=staged)
            _add(uow, batch)
            uow.commit()
        assert store.current_generation(SCOPE) == 0
        assert not store.get_by_source(SCOPE, "doc")
        assert not store.query(SCOPE, hash_vector(V1[0]), limit=QUERY_ALL)
        assert store.list_embedders(SCOPE) == frozenset()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.stage() == staged
            uow.generations.publish(staged)
            uow.commit()
        assert visible_pairs(store, SCOPE, ["doc"]) == batch.pairs
        assert _query_pairs(store, SCOPE, hash_vector(V1[0])) == batch.pairs

    def test_retire_source_counts_previously_visible_rows(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.retire_source``: it returns how many rows were visible and are
        now retired (0 the second time and for an unknown source), and leaves other sources visible.

        If this fails, check the count retire_source returns.
        """
        _require_generations(store)
        publish_sources(store, SCOPE, {"doc": ["one", "two", "three"], "b": ["four"]})
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            assert uow.records.retire_source("doc", generation=staged) == 3
            assert uow.records.retire_source("doc", generation=staged) == 0
            assert uow.records.retire_source("missing", generation=staged) == 0
            uow.generations.publish(staged)
            uow.commit()
        assert not store.get_by_source(SCOPE, "doc")
        assert visible_pairs(store, SCOPE, ["b"]) == {("b#0001", "four")}

    def test_retire_source_drops_an_earlier_staged_write(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.retire_source``: retiring a source again at the same staged
        generation removes the rows staged there (and returns 0), so only the last write is
        published.

        If this fails, check that retire_source deletes the source's rows written at `generation`.
        """
        _require_generations(store)
        publish_sources(store, SCOPE, {"doc": V1})
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            uow.records.retire_source("doc", generation=staged)
            _add(uow, make_batch(SCOPE, "doc", V2, generation=staged))
            assert uow.records.retire_source("doc", generation=staged) == 0
            final = make_batch(SCOPE, "doc", ["final"], generation=staged)
            _add(uow, final)
            uow.generations.publish(staged)
            uow.commit()
        assert visible_pairs(store, SCOPE, ["doc"]) == final.pairs
        assert _query_pairs(store, SCOPE, hash_vector(V2[2])) == final.pairs

    def test_rollback_restores_an_earlier_snapshot(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.discard_above``, ``RecordRepository.restore_above``,
        ``GenerationRepository.reset``: ``discard_above(p)``, ``restore_above(p)`` and ``reset(p)``
        restore exactly what readers saw at pointer ``p``, return how many rows they removed and
        restored, and the counter goes on from ``p``.

        If this fails, check discard_above (rows written above p), restore_above (rows retired
        above p) and reset (pointer and counter).
        """
        _require_generations(store)
        sources = ["a", "b", "c"]
        probe = hash_vector("a one")
        first, _ = publish_sources(store, SCOPE, {"a": ["a one", "a two"], "b": ["b one"]})
        snapshot = _snapshot(store, SCOPE, sources, probe)
        publish_sources(store, SCOPE, {"a": ["a uno", "a dos", "a tres"]})
        publish_sources(store, SCOPE, {"b": None, "c": ["c one"]})
        assert _snapshot(store, SCOPE, sources, probe) != snapshot
        with store.unit_of_work(SCOPE) as uow:
            assert uow.records.discard_above(first) == 4  # a v2 (3) + c (1)
            assert uow.records.restore_above(first) == 3  # a v1 (2) + b (1)
            uow.generations.reset(first)
            uow.commit()
        assert _snapshot(store, SCOPE, sources, probe) == snapshot
        assert store.current_generation(SCOPE) == first
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.counter() == first
            assert uow.generations.stage() == first + 1

    def test_purge_retired_removes_only_rows_retired_through(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.purge_retired``, ``GenerationRepository.raise_floor``:
        ``purge_retired(t)`` removes the rows retired at or below ``t`` and returns their count (0
        the second time); rows retired later stay restorable and visible rows stay.

        If this fails, check the purge predicate: retired_generation IS NOT NULL AND <= t.
        """
        _require_generations(store)
        probe = hash_vector("v3 one")
        publish_sources(store, SCOPE, {"doc": ["v1 one", "v1 two"]})
        second, v2 = publish_sources(store, SCOPE, {"doc": ["v2 one", "v2 two", "v2 three"]})
        third, v3 = publish_sources(store, SCOPE, {"doc": ["v3 one"]})
        with store.unit_of_work(SCOPE) as uow:
            assert uow.records.purge_retired(second) == 2  # v1, retired at 2
            assert uow.records.purge_retired(second) == 0
            uow.generations.raise_floor(second)
            uow.commit()
        assert _snapshot(store, SCOPE, ["doc"], probe) == (v3["doc"].pairs, v3["doc"].pairs, third)
        with store.unit_of_work(SCOPE) as uow:  # v2 (retired at 3) must still be restorable
            assert uow.records.discard_above(second) == 1
            assert uow.records.restore_above(second) == 3
            uow.generations.reset(second)
            uow.commit()
        assert visible_pairs(store, SCOPE, ["doc"]) == v2["doc"].pairs

    def test_floor_round_trips(self, store: ChunkStore) -> None:
        """Checks ``GenerationRepository.floor``, ``GenerationRepository.raise_floor``: after
        ``raise_floor(g)``, ``floor()`` returns ``g`` in the same and in later units of work of that
        scope, and 0 in another corpus.

        If this fails, check that the floor is stored per scope and committed.
        """
        _require_generations(store)
        publish_sources(store, SCOPE, {"doc": ["one"]})
        publish_sources(store, SCOPE, {"doc": ["two"]})
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.floor() == 0
            uow.generations.raise_floor(2)
            assert uow.generations.floor() == 2
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.generations.floor() == 2
        with store.unit_of_work(OTHER_CORPUS) as uow:
            assert uow.generations.floor() == 0

    def test_the_floor_bounds_reset_and_never_passes_the_pointer(self, store: ChunkStore) -> None:
        """Checks ``GenerationRepository.reset``, ``GenerationRepository.raise_floor``:
        ``raise_floor`` above the pointer stops at the pointer, never goes down, and ``reset``
        below the floor is ``ValidationError(field="generation")`` with nothing changed.

        If this fails, check your generation steps against ``ragport.engine.generations``
        (``reset_to``, ``floor_raised``), the one statement of these rules.
        """
        _require_generations(store)
        publish_sources(store, SCOPE, {"doc": ["one"]})
        publish_sources(store, SCOPE, {"doc": ["two"]})
        with store.unit_of_work(SCOPE) as uow:
            uow.generations.raise_floor(99)
            assert uow.generations.floor() == 2  # the pointer
            uow.generations.raise_floor(1)
            assert uow.generations.floor() == 2  # never down
            with pytest.raises(ValidationError) as caught:
                uow.generations.reset(1)
            assert caught.value.field == "generation"
            assert (uow.generations.current(), uow.generations.counter()) == (2, 2)
            uow.commit()
        assert store.current_generation(SCOPE) == 2
