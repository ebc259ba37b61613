"""``ChunkStoreGenerationHistoryContract``: ``generation_history`` reports what each recent
generation wrote and retired, and follows rollback, compaction, staging and forgetting.

Only for stores that declare ``capabilities.generation_history`` (``SupportsGenerationHistory``);
part of ``ChunkStoreContract``.
"""

from __future__ import annotations

from typing import Any

import pytest

from ragport.application.generations import compact, rollback_generation
from ragport.contract_tests._support import (
    derived_batch,
    make_batch,
    publish_sources,
    record_written,
)
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    OTHER_CORPUS,
    OTHER_TENANT,
    SCOPE,
    _require_generations,
    _require_implemented,
)
from ragport.domain.errors import ScopeError, ValidationError
from ragport.domain.model import Scope, Tombstone
from ragport.ports.history import GenerationChange, SupportsGenerationHistory
from ragport.ports.store import ChunkStore

__all__ = ["ChunkStoreGenerationHistoryContract"]


def _require_history(store: ChunkStore) -> None:
    _require_generations(store)
    if not store.capabilities.generation_history:
        pytest.skip(
            f"{type(store).__name__} declares capabilities.generation_history = False (the "
            "optional SupportsGenerationHistory), so `ragport generations` lists only what is "
            "visible now; declare and define it and this test must pass"
        )
    _require_implemented(store, "generation_history")


def _history(store: ChunkStore, scope: Scope = SCOPE, **kwargs: Any) -> list[GenerationChange]:
    assert isinstance(store, SupportsGenerationHistory)
    found = list(store.generation_history(scope, **kwargs))
    assert all(isinstance(change, GenerationChange) for change in found)
    return found


def _brief(changes: list[GenerationChange]) -> list[tuple[int, tuple[str, ...], tuple[str, ...]]]:
    return [(c.generation, c.written, c.retired) for c in changes]


def _three_generations(store: ChunkStore) -> tuple[int, int, int]:
    """g1 writes a (2 chunks) and b (1); g2 replaces a (3 chunks); g3 deletes b, writes c."""
    first, _ = publish_sources(store, SCOPE, {"a": ["a one", "a two"], "b": ["b one"]})
    second, _ = publish_sources(store, SCOPE, {"a": ["a uno", "a dos", "a tres"]})
    third, _ = publish_sources(store, SCOPE, {"b": None, "c": ["c one"]})
    return first, second, third


class ChunkStoreGenerationHistoryContract(_ChunkStoreContractBase):
    """What each generation in ``(floor, pointer]`` wrote and retired, newest first."""

    def test_history_lists_sources_written_and_retired_per_generation(
        self, store: ChunkStore
    ) -> None:
        """Checks ``SupportsGenerationHistory.generation_history``: each published generation
        reports, newest first, the sources it wrote and retired and the counts of sources and
        records.

        If this fails, check that a row counts as written at its ``generation`` and as retired
        at its ``retired_generation``, that ids are distinct and sorted, and that the newest
        generation comes first.
        """
        _require_history(store)
        first, second, third = _three_generations(store)
        changes = _history(store)
        assert _brief(changes) == [
            (third, ("c",), ("b",)),
            (second, ("a",), ("a",)),
            (first, ("a", "b"), ()),
        ]
        counts = [
            (c.sources_written, c.sources_retired, c.records_written, c.records_retired)
            for c in changes
        ]
        assert counts == [(1, 1, 1, 1), (1, 1, 3, 2), (2, 0, 3, 0)]

    def test_history_is_scoped_exactly_and_empty_for_an_unwritten_scope(
        self, store: ChunkStore
    ) -> None:
        """Checks ``SupportsGenerationHistory.generation_history``: another corpus or tenant sees no
        history of this scope; an unwritten scope has none.

        If this fails, check that every table the history reads is filtered on tenant,
        resource and corpus.
        """
        _require_history(store)
        _three_generations(store)
        assert _history(store, OTHER_CORPUS) == []
        assert _history(store, OTHER_TENANT) == []

    def test_history_limit_and_id_cap_are_exact_and_visible(self, store: ChunkStore) -> None:
        """Checks ``SupportsGenerationHistory.generation_history``: ``limit`` keeps the newest
        generations; ``max_ids`` caps each list in code-point order while the counts stay whole (a
        capped list is never silent).

        If this fails, check the ORDER BY (code points: "B" before "a") and that the counts
        are taken before the cap.
        """
        _require_history(store)
        publish_sources(store, SCOPE, {"a": ["a"], "B": ["B"], "c": ["c"]})
        publish_sources(store, SCOPE, {"c": ["c again"]})
        publish_sources(store, SCOPE, {"a": None})
        assert [c.generation for c in _history(store, limit=2)] == [3, 2]
        oldest = _history(store, limit=3, max_ids=2)[-1]
        assert (oldest.generation, oldest.written, oldest.sources_written) == (1, ("B", "a"), 3)
        none = _history(store, limit=3, max_ids=0)[-1]
        assert (none.written, none.sources_written, none.records_written) == ((), 3, 3)

    def test_history_follows_rollback(self, store: ChunkStore) -> None:
        """Checks ``SupportsGenerationHistory.generation_history``: after a rollback to p,
        generations above p are gone and what they retired is no longer retired; the next write
        reuses p + 1 and reports only itself.

        If this fails, check that the history reads the rows as rollback left them (discarded
        rows gone, restored rows un-retired) and stops at the pointer.
        """
        _require_history(store)
        first, _, _ = _three_generations(store)
        rollback_generation(store=store, scope=SCOPE, to=first)
        assert _brief(_history(store)) == [(first, ("a", "b"), ())]
        again, _ = publish_sources(store, SCOPE, {"d": ["d one"]})
        assert again == first + 1
        assert _brief(_history(store)) == [(again, ("d",), ()), (first, ("a", "b"), ())]

    def test_history_stops_at_the_compaction_floor(self, store: ChunkStore) -> None:
        """Checks ``SupportsGenerationHistory.generation_history``: after ``compact(keep=1)`` only
        the generations above the floor are reported, complete.

        If this fails, check that the history starts above ``floor()`` (what older generations
        retired was purged, so their entries would be wrong).
        """
        _require_history(store)
        _, second, third = _three_generations(store)
        fourth, _ = publish_sources(store, SCOPE, {"c": ["c two"]})
        result = compact(store=store, scope=SCOPE, keep=1)
        assert result.floor == second and result.purged > 0
        assert _brief(_history(store)) == [(fourth, ("c",), ("c",)), (third, ("c",), ("b",))]

    def test_history_leaves_out_staged_generations(self, store: ChunkStore) -> None:
        """Checks ``SupportsGenerationHistory.generation_history``: rows written or retired at a
        staged generation above the pointer are not history yet.

        If this fails, check that the history stops at the pointer, not at the counter.
        """
        _require_history(store)
        first, _ = publish_sources(store, SCOPE, {"a": ["a one"]})
        record_written(SCOPE, "s")
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            batch = make_batch(SCOPE, "s", ["staged"], generation=staged)
            uow.records.add(batch.records, batch.vectors)
            uow.records.retire_source("a", generation=staged)
            uow.commit()
        assert _brief(_history(store)) == [(first, ("a",), ())]

    def test_history_never_lists_a_forgotten_id(self, store: ChunkStore) -> None:
        """Checks ``SupportsGenerationHistory.generation_history``: a source id a ``forgotten``
        tombstone withholds appears in no list and no count.

        If this fails, check that the history filters on the scope's forgotten tombstones
        (``is_forgotten``: record id, source id, lineage, roots), as every read does.
        """
        _require_history(store)
        first, _ = publish_sources(store, SCOPE, {"a": ["a one"], "secret": ["s one", "s two"]})
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add([Tombstone("secret")])
            uow.commit()
        [change] = _history(store)
        assert (change.generation, change.written, change.sources_written) == (first, ("a",), 1)
        assert change.records_written == 1

    def test_history_leaves_out_what_rests_on_a_forgotten_id(self, store: ChunkStore) -> None:
        """Checks ``SupportsGenerationHistory.generation_history``: a derived record withheld
        by a ``forgotten`` tombstone on one of its roots or lineage ids (not on its own id)
        appears in no list and no count, as it appears in no read.

        If this fails, check that the history leaves rows out by the forgotten predicate
        every read uses (``ragport.domain.model.is_forgotten``: id, source, lineage and
        roots), not by record id and source id alone.
        """
        _require_history(store)
        record_written(SCOPE, "a", "secret", "d-root", "d-edge", "gone-edge")
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for batch in (
                make_batch(SCOPE, "a", ["a one"], generation=staged),
                make_batch(SCOPE, "secret", ["s one"], generation=staged),
                derived_batch(
                    SCOPE, "d-root", "on the secret", roots=("secret",), generation=staged
                ),
                derived_batch(
                    SCOPE,
                    "d-edge",
                    "on a forgotten edge",
                    roots=("a",),
                    lineage=("a", "gone-edge"),
                    generation=staged,
                ),
            ):
                uow.records.add(batch.records, batch.vectors)
            uow.generations.publish(staged)
            uow.tombstones.add([Tombstone("secret"), Tombstone("gone-edge")])
            uow.commit()
        [change] = _history(store)
        assert (change.generation, change.written, change.sources_written) == (staged, ("a",), 1)
        assert change.records_written == 1

    @pytest.mark.parametrize(
        "kwargs",
        [{"limit": 0}, {"limit": 1001}, {"limit": True}, {"max_ids": -1}, {"max_ids": 10_001}],
        ids=["limit-0", "limit-1001", "limit-bool", "max_ids-negative", "max_ids-over"],
    )
    def test_history_refuses_bad_arguments(self, store: ChunkStore, kwargs: Any) -> None:
        """Checks ``SupportsGenerationHistory.generation_history``: an out-of-range or bool
        ``limit``, or an out-of-range ``max_ids``, is a ``ValidationError``.

        If this fails, call ragport.ports.history.check_history_args first.
        """
        _require_history(store)
        with pytest.raises(ValidationError):
            _history(store, **kwargs)

    def test_history_refuses_a_non_scope(self, store: ChunkStore) -> None:
        """Checks ``SupportsGenerationHistory.generation_history``: a scope that is not a ``Scope``
        is a ``ScopeError``.

        If this fails, check the scope type before building the read.
        """
        _require_history(store)
        assert isinstance(store, SupportsGenerationHistory)
        with pytest.raises(ScopeError):
            store.generation_history(("t", "r", "c"))  # type: ignore[arg-type]
