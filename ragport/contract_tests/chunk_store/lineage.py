"""Lineage and re-pointing: ``ChunkStoreLineageContract``, ``ChunkStoreRepointContract``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from ragport.contract_tests._support import (
    Batch,
    derived_batch,
    hash_vector,
    make_batch,
    publish_sources,
    record_written,
    visible_pairs,
)
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    OTHER_CORPUS,
    SCOPE,
    _add,
    _query_pairs,
    _require_generations,
)
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope
from ragport.ports.store import ChunkStore

__all__ = ["ChunkStoreLineageContract", "ChunkStoreRepointContract"]


def _derived_ids(records: Sequence[Any]) -> list[str]:
    return [r.id for r in records]


class ChunkStoreLineageContract(_ChunkStoreContractBase):
    """Lineage reads and rewrites behind deletion propagation and re-pointing."""

    def _seed_lineage(self, store: ChunkStore) -> None:
        """lin-src and lin-other (chunks); d1 on src, d2 on d1, d3 on other, d4 on both,
        d6 on src then re-written on other (the old version retired), d5 on src staged only."""
        with store.unit_of_work(SCOPE) as uow:
            g1 = uow.generations.stage()
            _add(uow, make_batch(SCOPE, "lin-src", ["lineage source one"], generation=g1))
            _add(uow, make_batch(SCOPE, "lin-other", ["lineage other one"], generation=g1))
            for record_id, lineage, roots in (
                ("lin-d1", ("lin-src",), ("lin-src",)),
                ("lin-d2", ("lin-d1",), ("lin-src",)),
                ("lin-d3", ("lin-other",), ("lin-other",)),
                ("lin-d4", ("lin-src", "lin-other"), ("lin-src", "lin-other")),
                ("lin-d6", ("lin-src",), ("lin-src",)),
            ):
                _add(
                    uow,
                    derived_batch(
                        SCOPE,
                        record_id,
                        f"{record_id} text",
                        roots=roots,
                        lineage=lineage,
                        generation=g1,
                    ),
                )
            uow.generations.publish(g1)
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            g2 = uow.generations.stage()
            uow.records.retire_source("lin-d6", generation=g2)
            _add(
                uow,
                derived_batch(
                    SCOPE, "lin-d6", "lin-d6 text v2", roots=("lin-other",), generation=g2
                ),
            )
            uow.generations.publish(g2)
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            g3 = uow.generations.stage()
            _add(
                uow,
                derived_batch(SCOPE, "lin-d5", "lin-d5 text", roots=("lin-src",), generation=g3),
            )
            uow.commit()  # staged, never published
        # The same lineage in another corpus must never be found from SCOPE.
        with store.unit_of_work(OTHER_CORPUS) as uow:
            g = uow.generations.stage()
            _add(
                uow,
                derived_batch(
                    OTHER_CORPUS, "lin-d1", "elsewhere", roots=("lin-src",), generation=g
                ),
            )
            uow.generations.publish(g)
            uow.commit()

    def test_find_dependents_returns_derived_records_of_every_generation_whose_lineage_overlaps(
        self, store: ChunkStore
    ) -> None:
        """Checks ``RecordRepository.find_dependents``: it returns every stored derived record whose
        lineage (not roots) names any of the ids, live, staged and retired versions alike (a
        rollback could bring a retired one back), of the exact scope, each once; no ids find
        nothing.

        If this fails, check find_dependents: kind 'derived', no pointer or retirement test,
        array overlap on lineage (not roots), exact scope, one row per stored version.
        """
        self._seed_lineage(store)
        with store.unit_of_work(SCOPE) as uow:
            cases = {
                ("lin-src",): {"lin-d1", "lin-d4", "lin-d5", "lin-d6"},
                ("lin-d1",): {"lin-d2"},
                ("lin-other",): {"lin-d3", "lin-d4", "lin-d6"},
                ("lin-src", "lin-d1"): {"lin-d1", "lin-d2", "lin-d4", "lin-d5", "lin-d6"},
                ("lin-src#0001",): set(),
                ("no-such-id",): set(),
            }
            for ids, expected in cases.items():
                found = list(uow.records.find_dependents(list(ids)))
                got = _derived_ids(found)
                assert len(got) == len(set(got)), f"duplicates for {ids}: {got}"
                assert set(got) == expected, ids
                assert all(r.kind == "derived" and r.scope == SCOPE for r in found), ids
            (d6,) = [r for r in uow.records.find_dependents(["lin-src"]) if r.id == "lin-d6"]
            assert d6.retired_generation is not None, "the retired first version of lin-d6"
            assert tuple(d6.lineage) == ("lin-src",)
            (d4,) = [r for r in uow.records.find_dependents(["lin-src"]) if r.id == "lin-d4"]
            assert tuple(d4.lineage) == ("lin-src", "lin-other")
            assert set(d4.roots) == {"lin-src", "lin-other"}
            assert list(uow.records.find_dependents([])) == []
        with store.unit_of_work(OTHER_CORPUS) as uow:
            assert _derived_ids(uow.records.find_dependents(["lin-src"])) == ["lin-d1"]
            assert _derived_ids(uow.records.find_dependents(["lin-other"])) == []

    def test_rewrite_lineage_rewrites_lineage_and_roots_and_counts_edges(
        self, store: ChunkStore
    ) -> None:
        """Checks ``RecordRepository.rewrite_lineage``: it swaps one id in the lineage and roots of
        derived records of every generation (retired versions included), keeps the order, returns
        the number of lineage entries replaced, and changes nothing else.

        If this fails, check rewrite_lineage: it replaces ``from_id`` in both arrays (order
        kept) on live, staged and retired rows, returns the number of lineage entries replaced,
        and touches nothing else.
        """
        self._seed_lineage(store)
        with store.unit_of_work(SCOPE) as uow:
            # lineage edges on lin-src: d1, d4, the staged d5 and the retired first version of
            # d6 (d2 has it in roots only)
            assert uow.records.rewrite_lineage("lin-src", "lin-moved") == 4
            assert uow.records.rewrite_lineage("no-such-id", "lin-moved") == 0
            uow.commit()

        def record(record_id: str, scope: Scope = SCOPE) -> Any:
            (found,) = store.get_by_source(scope, record_id)
            return found

        assert tuple(record("lin-d1").lineage) == ("lin-moved",)
        assert tuple(record("lin-d1").roots) == ("lin-moved",)
        assert tuple(record("lin-d2").lineage) == ("lin-d1",)
        assert tuple(record("lin-d2").roots) == ("lin-moved",)
        assert tuple(record("lin-d3").lineage) == ("lin-other",)
        assert tuple(record("lin-d4").lineage) == ("lin-moved", "lin-other")
        assert set(record("lin-d4").roots) == {"lin-moved", "lin-other"}
        assert tuple(record("lin-d6").lineage) == ("lin-other",)
        assert record("lin-d1").text == "lin-d1 text"
        assert visible_pairs(store, SCOPE, ["lin-src", "lin-other"]) == {
            ("lin-src#0001", "lineage source one"),
            ("lin-other#0001", "lineage other one"),
        }
        with store.unit_of_work(SCOPE) as uow:
            (d5,) = [r for r in uow.records.list_live("lin-d5")]
            assert tuple(d5.lineage) == ("lin-moved",)
            assert _derived_ids(uow.records.find_dependents(["lin-src"])) == []
            (d6,) = [r for r in uow.records.find_dependents(["lin-moved"]) if r.id == "lin-d6"]
            assert d6.retired_generation is not None
            assert (tuple(d6.lineage), tuple(d6.roots)) == (("lin-moved",), ("lin-moved",))
        assert tuple(record("lin-d1", OTHER_CORPUS).lineage) == ("lin-src",)

    def test_purge_source_removes_every_generation_of_one_source_only(
        self, store: ChunkStore
    ) -> None:
        """Checks ``RecordRepository.purge_source``: it deletes a source's rows of every generation
        and returns their count (0 the second time); other sources, derived records and other
        corpora stay, and ``restore_above`` brings nothing of it back.

        If this fails, check purge_source: a physical delete on exact scope and source id,
        regardless of generation or retired_generation, returning the row count.
        """
        publish_sources(store, SCOPE, {"lin-src": ["v1 one", "v1 two"], "lin-other": ["other"]})
        publish_sources(store, SCOPE, {"lin-src": ["v2 one", "v2 two", "v2 three"]})
        publish_sources(store, OTHER_CORPUS, {"lin-src": ["elsewhere"]})
        with store.unit_of_work(SCOPE) as uow:
            g = uow.generations.stage()
            _add(uow, derived_batch(SCOPE, "lin-d1", "derived", roots=("lin-src",), generation=g))
            uow.generations.publish(g)
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.records.purge_source("lin-src") == 5  # 2 retired + 3 live
            assert uow.records.purge_source("lin-src") == 0
            uow.commit()
        assert not store.get_by_source(SCOPE, "lin-src")
        assert visible_pairs(store, SCOPE, ["lin-other"]) == {("lin-other#0001", "other")}
        assert [r.id for r in store.get_by_source(SCOPE, "lin-d1")] == ["lin-d1"]
        assert visible_pairs(store, OTHER_CORPUS, ["lin-src"]) == {("lin-src#0001", "elsewhere")}
        with store.unit_of_work(SCOPE) as uow:
            uow.records.restore_above(0)  # would bring retired rows back, were any left
            assert list(uow.records.list_live("lin-src")) == []
            uow.rollback()


_CODE_POINT_SUFFIXES = ("B", "Z", "_", "a", "~", "\ufffd", "\U0001f600")
"""Record id suffixes in code-point order; collations, case folding and UTF-16 disagree."""


class ChunkStoreRepointContract(_ChunkStoreContractBase):
    """Paging a source's live records and re-keying them without re-embedding."""

    def test_list_live_orders_by_code_point_with_after_and_limit(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.list_live``, ``RecordRepository.retire_ids``: ``list_live``
        pages a source's live records (staged included, retired ones left out) in code-point id
        order, starting after ``after`` (an id that need not exist), at most ``limit``.

        If this fails, check list_live: retired_generation IS NULL (no pointer test), exact
        source, ORDER BY id in code-point order (COLLATE "C" in PostgreSQL), ``id > after``
        and ``limit``.
        """
        _require_generations(store)
        ids = [f"rp-from#{suffix}" for suffix in _CODE_POINT_SUFFIXES]
        with store.unit_of_work(SCOPE) as uow:
            g1 = uow.generations.stage()
            batch = make_batch(SCOPE, "rp-from", [*ids, "rp-from#old"], generation=g1)
            records = tuple(
                attrs.evolve(r, id=new_id)
                for r, new_id in zip(batch.records, [*reversed(ids), "rp-from#old"], strict=True)
            )
            _add(uow, Batch(records, batch.vectors))
            _add(uow, make_batch(SCOPE, "rp-other", ["other"], generation=g1))
            uow.generations.publish(g1)
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            g2 = uow.generations.stage()
            uow.records.retire_ids(["rp-from#old"], generation=g2)
            staged = make_batch(SCOPE, "rp-from", ["staged"], generation=g2)
            _add(
                uow, Batch((attrs.evolve(staged.records[0], id="rp-from#staged"),), staged.vectors)
            )
            uow.commit()  # staged, not published
        expected = sorted([*ids, "rp-from#staged"])
        assert expected[:4] == ["rp-from#B", "rp-from#Z", "rp-from#_", "rp-from#a"]
        with store.unit_of_work(SCOPE) as uow:

            def live(after: str | None = None, limit: int | None = None) -> list[str]:
                found = list(uow.records.list_live("rp-from", after=after, limit=limit))
                assert all(r.source_id == "rp-from" for r in found)
                assert all(r.retired_generation is None for r in found)
                return [r.id for r in found]

            assert live() == expected
            assert live(limit=2) == expected[:2]
            assert live(after="rp-from#_") == expected[3:]
            assert live(after="rp-from#C") == expected[1:]  # an id that does not exist
            assert live(after="rp-from#a", limit=2) == expected[4:6]
            assert live(after=expected[-1]) == []
            pages: list[str] = []
            cursor: str | None = None
            while True:
                page = live(after=cursor, limit=3)
                if not page:
                    break
                pages.extend(page)
                cursor = page[-1]
            assert pages == expected
            assert [r.id for r in uow.records.list_live("rp-other")] == ["rp-other#0001"]
            assert list(uow.records.list_live("no-such-source")) == []

    def test_rekey_moves_ids_and_source_and_keeps_everything_else(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.rekey``: it re-files live records under new ids and a new
        source and returns how many moved; text, metadata, vector, offsets, chunk index, embedder
        and generation are copied verbatim, and retired versions stay under the old source.

        If this fails, check rekey: only id and source_id change; text, metadata, vector,
        offsets, chunk index, embedder and generation stay; retired versions do not move.
        """
        publish_sources(store, SCOPE, {"rp-from": ["old one", "old two"]})
        _, written = publish_sources(
            store,
            SCOPE,
            {"rp-from": ["move one", "move two", "stay three"]},
            metadata=[{"n": 1}, {"n": 2}, {"n": 3}],
        )
        before = {r.id: r for r in store.get_by_source(SCOPE, "rp-from")}
        moves = {"rp-from#0001": "rp-to#0001", "rp-from#0002": "rp-to#0002"}
        record_written(SCOPE, "rp-to")
        with store.unit_of_work(SCOPE) as uow:
            assert uow.records.rekey(moves, to_source_id="rp-to") == 2
            assert uow.records.rekey({}, to_source_id="rp-to") == 0
            uow.commit()
        assert [r.id for r in store.get_by_source(SCOPE, "rp-from")] == ["rp-from#0003"]
        after = {r.id: r for r in store.get_by_source(SCOPE, "rp-to")}
        assert sorted(after) == ["rp-to#0001", "rp-to#0002"]
        for old_id, new_id in moves.items():
            old, new = before[old_id], after[new_id]
            assert new.source_id == "rp-to"
            assert attrs.evolve(new, id=old.id, source_id=old.source_id) == old, new_id
        batch = written["rp-from"]
        for row, new_id in ((0, "rp-to#0001"), (1, "rp-to#0002")):
            (top,) = store.query(SCOPE, batch.vectors[row], limit=1)
            assert top.record.id == new_id
            assert top.score == pytest.approx(1.0, abs=1e-3)
        with store.unit_of_work(SCOPE) as uow:
            # The retired v1 rows stayed where they were: restoring them shows them under rp-from.
            uow.records.restore_above(0)
            restored = {(r.id, r.text) for r in uow.records.list_live("rp-from")}
            uow.rollback()
        assert restored >= {("rp-from#0001", "old one"), ("rp-from#0002", "old two")}

    def test_rekey_onto_a_live_id_of_another_source_is_rejected(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.rekey``: a rekey whose new id is live for another source is a
        ``ValidationError``, and nothing moves.

        If this fails, check that rekey looks up every destination id among live rows of the
        scope before changing any row.
        """
        _, written = publish_sources(
            store, SCOPE, {"rp-from": ["from one", "from two"], "rp-other": ["other one"]}
        )
        moves = {"rp-from#0001": "rp-to#0001", "rp-from#0002": "rp-other#0001"}
        record_written(SCOPE, "rp-to")
        with store.unit_of_work(SCOPE) as uow:
            with pytest.raises(ValidationError):
                uow.records.rekey(moves, to_source_id="rp-to")
            assert [r.id for r in uow.records.list_live("rp-from")] == [
                "rp-from#0001",
                "rp-from#0002",
            ]
            assert list(uow.records.list_live("rp-to")) == []
        assert visible_pairs(store, SCOPE, ["rp-from", "rp-other"]) == (
            written["rp-from"].pairs | written["rp-other"].pairs
        )
        assert not store.get_by_source(SCOPE, "rp-to")
        assert _query_pairs(store, SCOPE, hash_vector("other one")) == (
            written["rp-from"].pairs | written["rp-other"].pairs
        )

    def test_rekey_never_overwrites_a_destination_record_of_the_same_generation(
        self, store: ChunkStore
    ) -> None:
        """Checks ``RecordRepository.rekey``: a retired destination row written at a moved row's
        generation makes the rekey a ``ValidationError``, and nothing moves.

        If this fails, check that rekey refuses instead of overwriting history that a
        rollback could still restore (the (id, generation) pair must stay unique).
        """
        _require_generations(store)
        _, written = publish_sources(store, SCOPE, {"rp-from": ["from one"], "rp-to": ["to one"]})
        publish_sources(store, SCOPE, {"rp-to": None})
        with store.unit_of_work(SCOPE) as uow, pytest.raises(ValidationError):
            uow.records.rekey({"rp-from#0001": "rp-to#0001"}, to_source_id="rp-to")
        assert visible_pairs(store, SCOPE, ["rp-from"]) == written["rp-from"].pairs
