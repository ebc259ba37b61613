"""Query, filters and the lexical leg.

``ChunkStoreQueryContract`` (ordering, cosine scores, shallow filters, dimensions, embedder
listing) and ``ChunkStoreFilterContract`` (the filter language); ``ChunkStoreLexicalContract``
moved to ``lexical.py`` (imported here too, for code that imported it from this module).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from ragport.contract_tests._support import (
    CONTRACT_EMBEDDER_ID,
    ContractEmbedder,
    derived_batch,
    direction,
    hash_vector,
    make_batch,
    publish_sources,
)
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    DIMS,
    OTHER_CORPUS,
    QUERY_ALL,
    SCOPE,
    _add,
    _ids,
    _query_pairs,
)
from ragport.contract_tests.chunk_store.lexical import ChunkStoreLexicalContract
from ragport.domain.filters import parse_filter
from ragport.ports.embedder import Vector
from ragport.ports.store import ChunkStore

__all__ = ["ChunkStoreFilterContract", "ChunkStoreLexicalContract", "ChunkStoreQueryContract"]

_EMBEDDER = ContractEmbedder()


class ChunkStoreQueryContract(_ChunkStoreContractBase):
    """Ordering, limits, cosine scores, metadata filters, dimensions and embedder listing."""

    def test_query_orders_by_score_then_id(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: results come by descending score, equal scores by ascending
        id, at most ``limit`` of them, and a smaller limit returns the head of the same order.

        If this fails, check the ORDER BY (score DESC, id ASC) and the LIMIT of query.
        """
        probe = direction(DIMS, 1.0)
        tie = direction(DIMS, 0.6, 0.8)
        vectors = {
            "near": direction(DIMS, 1.0, 0.1),
            "tie-b": tie,
            "tie-a": tie,
            "far": direction(DIMS, 0.0, 1.0),
            "opposite": direction(DIMS, -1.0, 0.2),
        }
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id, vector in vectors.items():
                _add(
                    uow,
                    make_batch(SCOPE, source_id, [source_id], generation=staged, vectors=[vector]),
                )
            _add(
                uow, make_batch(SCOPE, "mixed", [f"mixed {i}" for i in range(6)], generation=staged)
            )
            uow.generations.publish(staged)
            uow.commit()
        results = store.query(SCOPE, probe, limit=QUERY_ALL)
        assert len(results) == 11
        for before, after in itertools.pairwise(results):
            assert (before.score, after.record.id) >= (after.score, before.record.id), (
                before.record.id,
                after.record.id,
            )
        ids = _ids(results)
        assert ids[0] == "near#0001"
        assert ids.index("tie-a#0001") + 1 == ids.index("tie-b#0001")
        assert ids[-1] == "opposite#0001"
        for limit in (1, 3, 10):
            assert _ids(store.query(SCOPE, probe, limit=limit)) == ids[:limit]

    def test_query_scores_are_cosine_similarity(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: each score is the cosine similarity of the record's vector
        and the query vector (within 1e-5), so a record's own vector, scaled, scores 1 and ranks
        first.

        If this fails, check the score formula: cosine (1 - cosine distance), not a raw dot
        product or a distance.
        """
        texts = [f"passage {i}" for i in range(8)]
        _, written = publish_sources(store, SCOPE, {"doc": texts})
        batch = written["doc"]
        stored = {r.id: batch.vectors[i].astype(np.float64) for i, r in enumerate(batch.records)}
        for index in (0, 5):
            probe = np.ascontiguousarray(batch.vectors[index] * 3.0, dtype=np.float32)
            results = store.query(SCOPE, probe, limit=QUERY_ALL)
            assert results[0].record.id == batch.records[index].id
            assert results[0].score == pytest.approx(1.0, abs=1e-5)
            unit = probe.astype(np.float64) / np.linalg.norm(probe)
            for found in results:
                expected = float(
                    stored[found.record.id] @ unit / np.linalg.norm(stored[found.record.id])
                )
                assert found.score == pytest.approx(expected, abs=1e-5), found.record.id

    def test_metadata_filter_is_shallow_equality_before_top_k(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: a ``metadata_filter`` mapping keeps the records equal on
        every top-level filter key (whole values, types kept, a missing key never matching; ``{}``
        keeps all), applied before ``limit``.

        If this fails, check that the filter compares whole top-level values (no JSON
        containment, no string coercion), requires every key, and runs before the limit.
        """
        probe = direction(DIMS, 1.0)
        rows: list[tuple[str, dict[str, Any], Vector]] = [
            ("near-no-lang", {"kind": "faq"}, direction(DIMS, 1.0, 0.01)),
            ("near-de", {"lang": "de", "kind": "faq"}, direction(DIMS, 1.0, 0.02)),
            (
                "nested-superset",
                {"lang": "en", "tag": {"x": 1, "y": 2}},
                direction(DIMS, 1.0, 0.03),
            ),
            ("list-superset", {"lang": "en", "labels": ["a", "b"]}, direction(DIMS, 1.0, 0.04)),
            ("string-one", {"lang": "en", "n": "1"}, direction(DIMS, 1.0, 0.05)),
            (
                "en-faq",
                {"lang": "en", "kind": "faq", "tag": {"x": 1}, "labels": ["a"], "n": 1},
                direction(DIMS, 1.0, 1.0),
            ),
            ("en-guide", {"lang": "en", "kind": "guide"}, direction(DIMS, 0.0, 1.0)),
        ]
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id, metadata, vector in rows:
                _add(
                    uow,
                    make_batch(
                        SCOPE,
                        source_id,
                        [source_id],
                        generation=staged,
                        metadata=metadata,
                        vectors=[vector],
                    ),
                )
            uow.generations.publish(staged)
            uow.commit()

        def found(metadata_filter: dict[str, Any], limit: int = QUERY_ALL) -> list[str]:
            results = store.query(SCOPE, probe, limit=limit, metadata_filter=metadata_filter)
            return [r.record.source_id for r in results]

        assert found({"lang": "en", "kind": "faq"}, limit=1) == ["en-faq"]
        assert found({"tag": {"x": 1}}) == ["en-faq"]
        assert found({"labels": ["a"]}) == ["en-faq"]
        assert found({"n": 1}) == ["en-faq"]
        assert found({"n": "1"}) == ["string-one"]
        assert found({"kind": "guide"}) == ["en-guide"]
        assert found({"missing": "x"}) == []
        assert sorted(found({"lang": "en"})) == [
            "en-faq",
            "en-guide",
            "list-superset",
            "nested-superset",
            "string-one",
        ]
        assert len(found({})) == len(rows)

    def test_metadata_filter_compares_json_types(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: a ``metadata_filter`` value true matches only JSON true,
        never the number 1 (and 1 never true).

        If this fails, check that the filter compares JSON values with their types (Python's
        `True == 1` is not JSON equality; a SQL store comparing jsonb keeps them apart).
        """
        rows: list[tuple[str, dict[str, Any]]] = [
            ("flag-true", {"flag": True}),
            ("flag-one", {"flag": 1}),
            ("flag-zero", {"flag": 0}),
        ]
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id, metadata in rows:
                _add(
                    uow,
                    make_batch(SCOPE, source_id, [source_id], generation=staged, metadata=metadata),
                )
            uow.generations.publish(staged)
            uow.commit()
        probe = hash_vector("flag-true")

        def found(metadata_filter: dict[str, Any]) -> set[str]:
            results = store.query(SCOPE, probe, limit=QUERY_ALL, metadata_filter=metadata_filter)
            return {r.record.source_id for r in results}

        assert found({"flag": True}) == {"flag-true"}
        assert found({"flag": 1}) == {"flag-one"}
        assert found({"flag": False}) == set()

    def test_query_scores_only_records_of_the_query_dimension(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``, ``ChunkStore.list_embedders``: records stored at another
        dimension are never returned for a query vector, and ``list_embedders`` names both
        dimensions.

        If this fails, check that query filters on dimensions == len(vector).
        """
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            wide = make_batch(SCOPE, "wide", ["wide one", "wide two"], generation=staged)
            narrow = make_batch(
                SCOPE,
                "narrow",
                ["narrow one"],
                generation=staged,
                embedder_id="contract-v1:4",
                dimensions=4,
            )
            _add(uow, wide)
            _add(uow, narrow)
            uow.generations.publish(staged)
            uow.commit()
        assert _query_pairs(store, SCOPE, hash_vector("narrow one")) == wide.pairs
        assert _query_pairs(store, SCOPE, hash_vector("narrow one", 4)) == narrow.pairs
        assert store.list_embedders(SCOPE) == frozenset(
            {(CONTRACT_EMBEDDER_ID, DIMS), ("contract-v1:4", 4)}
        )

    def test_query_with_a_non_positive_limit_is_empty(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: ``limit`` 0 or -1 returns an empty sequence, not an error.

        If this fails, check the limit handling at the top of query.
        """
        publish_sources(store, SCOPE, {"lim": ["limit one", "limit two"]})
        assert len(store.query(SCOPE, hash_vector("limit one"), limit=QUERY_ALL)) == 2
        for limit in (0, -1):
            assert len(store.query(SCOPE, hash_vector("limit one"), limit=limit)) == 0, limit

    def test_list_embedders_reports_visible_rows_only(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.list_embedders``: it lists the (embedder_id, dimensions) of visible
        rows only: not of a deleted source, and (with ``generations``) not of staged rows.

        If this fails, check that list_embedders applies the generation visibility rule.
        """
        publish_sources(store, SCOPE, {"a": ["one", "two"]}, embedder_id="emb-a:8")
        publish_sources(store, SCOPE, {"b": ["three"]}, embedder_id="emb-b:8")
        assert store.list_embedders(SCOPE) == frozenset({("emb-a:8", DIMS), ("emb-b:8", DIMS)})
        publish_sources(store, SCOPE, {"a": None})
        assert store.list_embedders(SCOPE) == frozenset({("emb-b:8", DIMS)})
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            _add(uow, make_batch(SCOPE, "c", ["four"], generation=staged, embedder_id="emb-c:8"))
            uow.commit()
        if store.capabilities.generations:
            assert store.list_embedders(SCOPE) == frozenset({("emb-b:8", DIMS)})

    def test_foreign_embedders_reports_only_visible_rows_that_differ(
        self, store: ChunkStore
    ) -> None:
        """Checks ``ChunkStore.foreign_embedders``: it is empty for a consistent scope and names
        every visible (embedder_id, dimensions) that differs (another id, other dimensions, rows
        without an id), never retired rows or another scope's.

        If this fails, check the drift-guard read: other ids, other dimensions and rows
        without an embedder id must be reported; retired rows and other scopes must not.
        """
        publish_sources(store, SCOPE, {"a": ["one", "two"]}, embedder_id="emb-a:8")
        assert store.foreign_embedders(SCOPE, "emb-a:8", DIMS) == frozenset()
        publish_sources(store, SCOPE, {"b": ["three"]}, embedder_id="emb-b:8")
        publish_sources(store, SCOPE, {"c": ["four"]}, embedder_id=None)
        publish_sources(store, OTHER_CORPUS, {"d": ["five"]}, embedder_id="emb-d:8")
        assert store.foreign_embedders(SCOPE, "emb-a:8", DIMS) == frozenset(
            {("emb-b:8", DIMS), (None, DIMS)}
        )
        assert store.foreign_embedders(SCOPE, "emb-a:8", DIMS + 1) == frozenset(
            {("emb-a:8", DIMS), ("emb-b:8", DIMS), (None, DIMS)}
        )
        publish_sources(store, SCOPE, {"b": None, "c": None})
        assert store.foreign_embedders(SCOPE, "emb-a:8", DIMS) == frozenset()

    def test_get_by_source_orders_by_id_and_keeps_fields(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.get_by_source``, ``ChunkStore.query``: ``get_by_source`` returns the
        source's records ordered by id, whatever the write order, and both reads return text,
        metadata, source id, kind, embedder, dimensions and scope as written.

        If this fails, check the ORDER BY of get_by_source and the round trip of text,
        metadata, kind, embedder and dimensions.
        """
        texts = [f"part {i} – ünïcode ✓" for i in range(12)]
        metadata = [
            {"i": i, "heading": ["Top", f"Sub {i}"], "nested": {"ok": True, "n": None}}
            for i in range(12)
        ]
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            batch = make_batch(SCOPE, "doc", texts, generation=staged, metadata=metadata)
            order = [7, 0, 11, 3, 9, 1, 5, 10, 2, 8, 4, 6]  # a fixed shuffle
            uow.records.add([batch.records[i] for i in order], batch.vectors[order])
            uow.generations.publish(staged)
            uow.commit()
        records = store.get_by_source(SCOPE, "doc")
        assert [r.id for r in records] == [f"doc#{i + 1:04d}" for i in range(12)]
        for got, wrote in zip(records, batch.records, strict=True):
            assert (got.text, got.metadata, got.source_id, got.kind) == (
                wrote.text,
                wrote.metadata,
                wrote.source_id,
                wrote.kind,
            )
            assert (got.embedder_id, got.dimensions, got.scope) == (
                CONTRACT_EMBEDDER_ID,
                DIMS,
                SCOPE,
            )
        top = store.query(SCOPE, batch.vectors[4], limit=1)[0]
        assert (top.record.id, top.record.text, top.record.metadata) == (
            "doc#0005",
            texts[4],
            metadata[4],
        )

    def test_query_returns_derived_records_with_their_lineage(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: a derived record comes back with its kind, lineage (in
        order) and roots as written, its source id equal to its id.

        If this fails, check that kind, lineage and roots are stored and read back.
        """
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            _add(uow, make_batch(SCOPE, "s1", ["root text"], generation=staged))
            _add(
                uow,
                derived_batch(
                    SCOPE,
                    "summary-1",
                    "summary text",
                    roots=("s1", "s2"),
                    lineage=("s1", "note-9"),
                    generation=staged,
                ),
            )
            uow.generations.publish(staged)
            uow.commit()
        top = store.query(SCOPE, hash_vector("summary text"), limit=1)[0].record
        assert (top.id, top.source_id, top.kind) == ("summary-1", "summary-1", "derived")
        assert tuple(top.lineage) == ("s1", "note-9")
        assert set(top.roots) == {"s1", "s2"}


FILTER_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("f-0", {"lang": "en", "year": 2024, "draft": False}),
    ("f-1", {"lang": "de", "year": 2021, "tags": ["a", "b"]}),
    ("f-2", {"lang": "en", "year": 2019.5, "score": 1}),
    ("f-3", {"lang": "fr", "year": "2024", "draft": True}),
    ("f-4", {"year": None, "score": 1.0}),
    ("f-5", {"lang": "EN", "year": 2030}),
    ("f-6", {"lang": "en", "nested": {"a": 1}}),
    ("f-7", {}),
)
FILTER_CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("equality", {"lang": "en"}),
    ("two-keys", {"lang": "en", "draft": False}),
    ("ne-matches-missing", {"lang": {"$ne": "en"}}),
    ("in", {"lang": {"$in": ["de", "fr"]}}),
    ("nin-matches-missing", {"lang": {"$nin": ["en"]}}),
    ("range-numbers-only", {"year": {"$gte": 2020, "$lt": 2030}}),
    ("string-range", {"lang": {"$gt": "d"}}),
    ("exists-null", {"year": {"$exists": True}}),
    ("not-exists", {"lang": {"$exists": False}}),
    ("one-equals-one-point-zero", {"score": 1}),
    ("bool-is-not-number", {"draft": {"$eq": 0}}),
    ("object-equality", {"nested": {"$eq": {"a": 1}}}),
    ("or", {"$or": [{"lang": "de"}, {"year": {"$gt": 2025}}]}),
    ("not", {"$not": {"lang": "en"}}),
    (
        "and-of-or",
        {"$and": [{"$or": [{"lang": "en"}, {"lang": "fr"}]}, {"draft": {"$exists": True}}]},
    ),
)


class ChunkStoreFilterContract(_ChunkStoreContractBase):
    """The metadata filter language, applied by the store's own predicate before the limit."""

    @pytest.mark.parametrize(("case", "spec"), FILTER_CASES, ids=[c for c, _ in FILTER_CASES])
    def test_filter_language_conformance(
        self, store: ChunkStore, case: str, spec: dict[str, Any]
    ) -> None:
        """Checks ``ChunkStore.query``: each filter selects exactly the records
        ``parse_filter(spec).matches`` selects, and applies before ``limit``.

        If this fails, check the store's compilation of the filter operator named by ``case``
        against the semantics documented in ragport/domain/filters.py.
        """
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id, metadata in FILTER_ROWS:
                _add(
                    uow,
                    make_batch(SCOPE, source_id, [source_id], generation=staged, metadata=metadata),
                )
            uow.generations.publish(staged)
            uow.commit()
        parsed = parse_filter(spec)
        assert parsed is not None
        expected = {f"{sid}#0001" for sid, md in FILTER_ROWS if parsed.matches(md)}
        found = store.query(SCOPE, hash_vector("probe"), limit=QUERY_ALL, metadata_filter=spec)
        assert set(_ids(found)) == expected
        # A limit smaller than the table still returns only matching records.
        few = store.query(SCOPE, hash_vector("probe"), limit=1, metadata_filter=spec)
        assert set(_ids(few)) <= expected and len(few) == min(1, len(expected))
