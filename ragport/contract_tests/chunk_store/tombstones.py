"""``ChunkStoreTombstoneContract``: tombstones round-trip; ``forgotten`` ones withhold records."""

from __future__ import annotations

from typing import cast

import pytest

from ragport.contract_tests._support import derived_batch, hash_vector, make_batch, publish_sources
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    OTHER_CORPUS,
    QUERY_ALL,
    SCOPE,
    _add,
    _ids,
    _query_pairs,
    _require_implemented,
)
from ragport.domain.model import Tombstone
from ragport.ports.store import ChunkStore, SupportsForgottenLookup, SupportsLexicalSearch

__all__ = ["ChunkStoreTombstoneContract"]


class ChunkStoreTombstoneContract(_ChunkStoreContractBase):
    """Tombstones round-trip, and ``forgotten`` ones withhold ids, sources and lineage."""

    def test_tombstone_add_counts_new_rows_and_lists_by_id(self, store: ChunkStore) -> None:
        """Checks ``TombstoneRepository.add``, ``TombstoneRepository.list``: ``add`` returns how
        many ids are new (a repeat within a call or across calls counts once), and ``list`` has one
        row per id, ordered by id.

        If this fails, check duplicate handling (within a call and across calls) and ordering.
        """
        with store.unit_of_work(SCOPE) as uow:
            assert (
                uow.tombstones.add([Tombstone("b"), Tombstone("a"), Tombstone("c", "corrected")])
                == 3
            )
            assert uow.tombstones.add([Tombstone("a"), Tombstone("d"), Tombstone("d")]) == 1
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.tombstones.add([Tombstone("b")]) == 0
            listed = [(t.id, t.reason) for t in uow.tombstones.list()]
        assert listed == [
            ("a", "forgotten"),
            ("b", "forgotten"),
            ("c", "corrected"),
            ("d", "forgotten"),
        ]

    def test_forgotten_id_stays_forgotten(self, store: ChunkStore) -> None:
        """Checks ``TombstoneRepository.add``, ``ChunkStore.list_invalidated_ids``: a later
        ``corrected`` tombstone for a forgotten id neither adds a row nor un-forgets it.

        If this fails, check that tombstones.add keeps the existing row for an id (insert-if-absent,
        not upsert): replacing the reason would make a forgotten id visible again.
        """
        with store.unit_of_work(SCOPE) as uow:
            assert uow.tombstones.add([Tombstone("doc")]) == 1
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.tombstones.add([Tombstone("doc", "corrected")]) == 0
            uow.commit()
        assert store.list_invalidated_ids(SCOPE) == frozenset({"doc"})
        with store.unit_of_work(SCOPE) as uow:
            assert [(t.id, t.reason) for t in uow.tombstones.list()] == [("doc", "forgotten")]

    def test_list_invalidated_ids_reports_forgotten_only(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.list_invalidated_ids``: it returns the ids of the scope's
        ``forgotten`` tombstones, not ``corrected`` ones, and nothing for another corpus.

        If this fails, check the reason filter of list_invalidated_ids.
        """
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add(
                [Tombstone("doc#0001"), Tombstone("src"), Tombstone("fixed#0001", "corrected")]
            )
            uow.commit()
        assert store.list_invalidated_ids(SCOPE) == frozenset({"doc#0001", "src"})
        assert store.list_invalidated_ids(OTHER_CORPUS) == frozenset()

    def test_forgotten_among_answers_what_the_list_answers(self, store: ChunkStore) -> None:
        """Checks ``SupportsForgottenLookup.forgotten_among``: ``forgotten_among(scope, ids)`` is
        ``list_invalidated_ids(scope) & set(ids)``, per exact scope, and empty for no ids.

        Only for stores that declare ``forgotten_lookup`` (``SupportsForgottenLookup``). If
        this fails, check forgotten_among: the exact scope, ``forgotten`` only (not
        ``corrected``), ids without a tombstone left out, repeats answered once.
        """
        if not store.capabilities.forgotten_lookup:
            pytest.skip(
                f"{type(store).__name__} does not declare capabilities.forgotten_lookup "
                "(the optional SupportsForgottenLookup); retrieval lists every forgotten id"
            )
        _require_implemented(store, "forgotten_lookup")
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add(
                [Tombstone("doc#0001"), Tombstone("src"), Tombstone("fixed#0001", "corrected")]
            )
            uow.commit()
        with store.unit_of_work(OTHER_CORPUS) as uow:
            uow.tombstones.add([Tombstone("other")])
            uow.commit()
        lookup = cast(SupportsForgottenLookup, store)
        asked = ["doc#0001", "src", "fixed#0001", "other", "never", "src", "doc#0002"]
        assert lookup.forgotten_among(SCOPE, asked) == frozenset({"doc#0001", "src"})
        assert lookup.forgotten_among(SCOPE, asked) == store.list_invalidated_ids(SCOPE) & set(
            asked
        )
        assert lookup.forgotten_among(OTHER_CORPUS, asked) == frozenset({"other"})
        assert lookup.forgotten_among(SCOPE, []) == frozenset()

    def test_query_withholds_forgotten_ids_sources_and_lineage(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: records whose id, source id or any lineage entry a
        ``forgotten`` tombstone names are withheld before ``limit``; a ``corrected`` tombstone
        withholds nothing.

        If this fails, check the tombstone predicate of query: record id, source_id and every
        lineage element, reason 'forgotten' only, applied before the limit.
        """
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id in ("keep", "gone-src", "partly"):
                _add(
                    uow,
                    make_batch(
                        SCOPE,
                        source_id,
                        [f"{source_id} one", f"{source_id} two"],
                        generation=staged,
                    ),
                )
            _add(uow, make_batch(SCOPE, "fixed", ["fixed one"], generation=staged))
            _add(
                uow, derived_batch(SCOPE, "d-ok", "derived ok", roots=("keep",), generation=staged)
            )
            _add(
                uow,
                derived_batch(
                    SCOPE,
                    "d-lineage",
                    "derived on gone",
                    roots=("keep",),
                    lineage=("keep", "gone-root"),
                    generation=staged,
                ),
            )
            _add(
                uow,
                derived_batch(SCOPE, "d-self", "derived self", roots=("keep",), generation=staged),
            )
            uow.generations.publish(staged)
            uow.tombstones.add(
                [
                    Tombstone("gone-src"),
                    Tombstone("partly#0001"),
                    Tombstone("gone-root"),
                    Tombstone("d-self"),
                    Tombstone("fixed#0001", "corrected"),
                ]
            )
            uow.commit()
        visible = {"keep#0001", "keep#0002", "partly#0002", "fixed#0001", "d-ok"}
        for text in ("keep one", "gone-src one", "derived on gone", "derived self"):
            assert set(_ids(store.query(SCOPE, hash_vector(text), limit=QUERY_ALL))) == visible, (
                text
            )
        for text in ("gone-src two", "partly one", "derived on gone", "derived self"):
            top = store.query(SCOPE, hash_vector(text), limit=1)
            assert len(top) == 1 and top[0].record.id in visible, text

    def test_tombstones_apply_to_their_scope_only(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: a ``forgotten`` tombstone in one corpus does not hide the
        same ids in another.

        If this fails, check that the query's tombstone predicate is keyed by exact scope.
        """
        _, kept = publish_sources(store, OTHER_CORPUS, {"doc": ["alpha"]})
        publish_sources(store, SCOPE, {"doc": ["alpha"]})
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add([Tombstone("doc")])
            uow.commit()
        assert not store.query(SCOPE, hash_vector("alpha"), limit=QUERY_ALL)
        assert _query_pairs(store, OTHER_CORPUS, hash_vector("alpha")) == kept["doc"].pairs

    def test_tombstone_get_answers_by_id(self, store: ChunkStore) -> None:
        """Checks ``TombstoneRepository.get``: the tombstones of the ids asked for (both
        reasons), ids without one absent, repeats answered once, nothing of another corpus,
        and an empty map for no ids; it sees the unit of work's own uncommitted tombstones.

        If this fails, check get: the exact scope, by id, every reason.
        """
        with store.unit_of_work(OTHER_CORPUS) as uow:
            uow.tombstones.add([Tombstone("other")])
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add([Tombstone("gone"), Tombstone("fixed", "corrected")])
            found = uow.tombstones.get(["gone", "fixed", "never", "other", "gone"])
            assert {i: t.reason for i, t in found.items()} == {
                "gone": "forgotten",
                "fixed": "corrected",
            }
            assert dict(uow.tombstones.get([])) == {}
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            assert set(uow.tombstones.get(["gone", "other"])) == {"gone"}

    def test_readmit_turns_forgotten_into_corrected(self, store: ChunkStore) -> None:
        """Checks ``TombstoneRepository.readmit``, ``ChunkStore.list_invalidated_ids``: readmit
        counts the ``forgotten`` ids it turned ``corrected`` (a ``corrected`` id, an id without
        a tombstone and a rolled-back unit change nothing), the row stays, another corpus's
        tombstone of the same id stays forgotten, and a later ``forgotten`` one wins again.

        If this fails, check readmit: only ``forgotten`` rows of the exact scope change, to
        ``corrected`` (never deleted), inside the unit of work.
        """
        for scope in (SCOPE, OTHER_CORPUS):
            with store.unit_of_work(scope) as uow:
                uow.tombstones.add(
                    [Tombstone("doc"), Tombstone("src"), Tombstone("ok", "corrected")]
                )
                uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            assert uow.tombstones.readmit(["doc"]) == 1
            # not committed: rolled back
        assert store.list_invalidated_ids(SCOPE) == frozenset({"doc", "src"})
        with store.unit_of_work(SCOPE) as uow:
            assert uow.tombstones.readmit(["doc", "ok", "never", "doc"]) == 1
            uow.commit()
        assert store.list_invalidated_ids(SCOPE) == frozenset({"src"})
        assert store.list_invalidated_ids(OTHER_CORPUS) == frozenset({"doc", "src"})
        with store.unit_of_work(SCOPE) as uow:
            assert [(t.id, t.reason) for t in uow.tombstones.list()] == [
                ("doc", "corrected"),
                ("ok", "corrected"),
                ("src", "forgotten"),
            ]
            assert uow.tombstones.readmit(["doc"]) == 0
            assert uow.tombstones.readmit([]) == 0
            assert uow.tombstones.add([Tombstone("doc")]) == 0
            uow.commit()
        assert store.list_invalidated_ids(SCOPE) == frozenset({"doc", "src"})

    def test_readmit_serves_what_no_other_tombstone_withholds(self, store: ChunkStore) -> None:
        """Checks ``TombstoneRepository.readmit``, ``ChunkStore.query``,
        ``SupportsLexicalSearch.lexical_query``: once ``src`` is re-admitted its records are
        served again, on the vector leg and every lexical mode, while a derived record resting
        on it that its own ``forgotten`` tombstone, or a root still forgotten, names stays
        withheld; the lexical scores equal a twin corpus's where nothing was ever forgotten
        (withheld records count in no statistic, re-admitted ones count again).

        If this fails, check that the store's tombstone predicate reads the reason (a
        ``corrected`` tombstone withholds nothing), that readmit changes only ``:ids``, and
        that it puts back into the lexical statistics exactly the records no other
        ``forgotten`` tombstone names (PostgreSQL: ``tombstones_readmit``).
        """
        texts = {"src": ["walrus tusk", "walrus two"], "keep": ["walrus"]}
        for scope in (SCOPE, OTHER_CORPUS):
            publish_sources(store, scope, texts)
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for record_id, roots in (("d-own", ("src",)), ("d-both", ("src", "gone"))):
                batch = derived_batch(SCOPE, record_id, f"walrus {record_id}", roots=roots,
                                      generation=staged)  # fmt: skip
                _add(uow, batch)
            uow.generations.publish(staged)
            uow.tombstones.add([Tombstone("src"), Tombstone("d-own"), Tombstone("gone")])
            uow.commit()
        assert set(_ids(store.query(SCOPE, hash_vector("walrus"), limit=QUERY_ALL))) == {
            "keep#0001"
        }
        with store.unit_of_work(SCOPE) as uow:
            assert uow.tombstones.readmit(["src"]) == 1
            uow.commit()
        served = {"src#0001", "src#0002", "keep#0001"}
        assert set(_ids(store.query(SCOPE, hash_vector("walrus"), limit=QUERY_ALL))) == served
        lexical = cast(SupportsLexicalSearch, store)
        for mode in store.capabilities.lexical_modes:
            mine = lexical.lexical_query(SCOPE, "walrus tusk", limit=QUERY_ALL, mode=mode)
            twin = lexical.lexical_query(OTHER_CORPUS, "walrus tusk", limit=QUERY_ALL, mode=mode)
            assert {r.record.id for r in mine} == served, mode
            assert [r.record.id for r in mine] == [r.record.id for r in twin], mode
            for a, b in zip(mine, twin, strict=True):
                assert abs(a.score - b.score) <= 1e-4 * max(1.0, abs(b.score)), (mode, a.score)
