"""Hybrid retrieval on the in-memory store: the BM25 leg, reciprocal-rank fusion, leg labels."""

from __future__ import annotations

import pytest
from rank_bm25 import BM25Okapi

import ragport
from ragport import Authorization, Chunk, Grant, RetrievalRequest, Scope
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application import replace_source, retrieve_context
from ragport.domain.fusion import fuse_reciprocal_rank
from ragport.domain.lexical import tokenize_lexical

SCOPE = Scope("t", "r", "c")
EMBEDDER = HashEmbedder(64)


def _put(store: InMemoryStore, source: str, *texts: str, scope: Scope = SCOPE) -> None:
    chunks = [Chunk.of(source, i, text) for i, text in enumerate(texts)]
    replace_source(source_id=source, chunks=chunks, embedder=EMBEDDER, store=store, scope=scope)


def test_rrf_scores_are_sums_of_reciprocal_ranks_with_ties_by_id():
    """score = sum 1/(k + rank), rank from 1; equal scores are ordered by id.

    If this fails, check ragport/domain/fusion.py `fuse_ranked`.
    """
    fused = fuse_reciprocal_rank({"a": ["x", "y", "z"], "b": ["y", "w"]}, k=60)
    scores = {c.id: c.score for c in fused}
    assert scores["y"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["x"] == pytest.approx(1 / 61)
    assert [c.id for c in fused][:1] == ["y"]
    assert next(c for c in fused if c.id == "y").legs == ("a", "b")
    tied = fuse_reciprocal_rank({"a": ["q"], "b": ["p"]}, k=60)
    assert [c.id for c in tied] == ["p", "q"]


def test_rrf_k_past_its_ceiling_is_refused():
    """rrf_k above 1,000 is a ValidationError naming the limit.

    If this fails, check check_limit("rrf_k") in fuse_ranked.
    """
    with pytest.raises(ragport.ValidationError) as info:
        fuse_reciprocal_rank({"a": ["x"]}, k=1001)
    assert info.value.limit == "rrf_k"


def test_store_bm25_scores_equal_rank_bm25_over_the_visible_records():
    """lexical_query scores equal BM25Okapi over exactly the scope's visible texts.

    If this fails, check `ScopeLexicon.sync` in ragport/adapters/memory/lexical.py.
    """
    store = InMemoryStore()
    _put(store, "a", "the cat sat on the mat", "dogs chase cats")
    _put(store, "b", "a cat and a hat", "the mat is red")
    _put(store, "a", "the cat sat on the warm mat", "dogs chase many cats")  # replaces a
    _put(store, "c", "other corpus words", scope=Scope("t", "r", "other"))
    visible = sorted(
        store.get_by_source(SCOPE, "a") + store.get_by_source(SCOPE, "b"), key=lambda r: r.id
    )
    reference = BM25Okapi([tokenize_lexical(r.text) for r in visible])
    expected = dict(
        zip([r.id for r in visible], reference.get_scores(tokenize_lexical("cat mat")), strict=True)
    )
    found = store.lexical_query(SCOPE, "cat mat", limit=10, mode="bm25")
    assert found
    for item in found:
        assert item.score == pytest.approx(expected[item.record.id], abs=1e-6)


def test_lexical_leg_applies_grants_before_top_k():
    """With limit 1, a denied better match does not crowd out the allowed one.

    If this fails, check the candidates passed to Bm25Index.search in lexical_query.
    """
    store = InMemoryStore()
    for n in range(5):
        _put(store, f"secret{n}", "zebra zebra zebra stripes")
    _put(store, "open", "a zebra")
    store.set_source_access(SCOPE, [Grant("open", principal_ids=("alice",))])
    found = store.lexical_query(
        SCOPE, "zebra", limit=1, mode="bm25", authorization=Authorization("alice", "t")
    )
    assert [item.record.source_id for item in found] == ["open"]


def test_hybrid_labels_each_hit_with_the_legs_that_found_it():
    """A lexical-only match is 'lexical', a match of both legs 'hybrid', vector-only 'vector'.

    If this fails, check `_search` in ragport/application/retrieval.py.
    """
    store = InMemoryStore()
    _put(store, "both", "quarterly access review of shared drives")
    _put(store, "lex", "xylophone")
    _put(store, "vec", "access reviews happen quarterly for drives")
    result = retrieve_context(
        "xylophone access review",
        embedder=EMBEDDER,
        store=store,
        scope=SCOPE,
        request=RetrievalRequest(lexical="bm25", top_k=10),
    )
    legs = {hit.source_id: hit.provenance.retrieval for hit in result.hits}
    assert legs["lex"] in ("lexical", "hybrid")
    assert "hybrid" in legs.values()
    plain = retrieve_context(
        "xylophone", embedder=EMBEDDER, store=store, scope=SCOPE, request=RetrievalRequest(top_k=10)
    )
    assert {hit.provenance.retrieval for hit in plain.hits} == {"vector"}
    ranks = [hit.retrieval_rank for hit in result.hits]
    assert ranks == list(range(1, len(ranks) + 1))


def test_multi_scope_hybrid_keeps_equal_record_ids_of_different_scopes_apart():
    """The same source id in two corpora yields two hits, one per scope.

    If this fails, check that fusion keys on (scope, record id).
    """
    store = InMemoryStore()
    other = Scope("t", "r", "c2")
    _put(store, "doc", "shared words about penguins")
    _put(store, "doc", "shared words about penguins", scope=other)
    result = retrieve_context(
        "penguins",
        embedder=EMBEDDER,
        store=store,
        scopes=[SCOPE, other],
        request=RetrievalRequest(lexical="bm25", top_k=10),
    )
    assert sorted(hit.provenance.corpus_id for hit in result.hits) == ["c", "c2"]


def test_lexical_leg_never_returns_replaced_or_tombstoned_text():
    """Old versions and forgotten sources do not come back through the BM25 leg.

    If this fails, check `Snapshot.searchable()` and `ScopeLexicon.sync` in the in-memory store.
    """
    store = InMemoryStore()
    _put(store, "a", "walrus tusks")
    _put(store, "a", "sea lions")
    _put(store, "gone", "walrus colony")
    with store.unit_of_work(SCOPE) as uow:
        uow.tombstones.add([ragport.domain.Tombstone("gone")])
        uow.commit()
    assert store.lexical_query(SCOPE, "walrus", limit=5, mode="bm25") == ()
