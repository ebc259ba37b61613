"""The PostgreSQL lexical leg's BM25 against a plain Python BM25 over the same documents.

The store runs with ``text_search_config="simple"`` and the documents are lower-case ASCII
words, so PostgreSQL's tokenisation is a whitespace split and the reference below sees the
same terms. The reference follows the docstring of ``lexical_leg`` (postgres/legs.py):
Lucene's idf, k1 1.2, b 0.75, ``dl`` = distinct terms of the document, statistics over the live documents.
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore
from ragport.domain.model import AccessDecision, Authorization, Grant, Tombstone

EMB = HashEmbedder(dimensions=16)
K1, B = 1.2, 0.75
TOLERANCE = 1e-6
VOCABULARY = ["apple", "brook", "cedar", "delta", "ember", "fjord", "2024"]
UNKNOWN = ["zephyr"]


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")


def _docs(**texts: str) -> dict[str, list[str]]:
    return {name: words.split() for name, words in texts.items()}


def _scope() -> ragport.Scope:
    return ragport.Scope("tenant-1", "kb", "c" + uuid.uuid4().hex[:12])


def _index(store: PostgresStore, scope: ragport.Scope, docs: Mapping[str, Sequence[str]]) -> None:
    """One single-chunk source per document, named by the document's key."""
    ragport.application.index_chunks(
        chunks=[ragport.Chunk.of(src, 0, " ".join(tokens)) for src, tokens in docs.items()],
        embedder=EMB,
        store=store,
        scope=scope,
    )


def _reference(
    docs: Mapping[str, Sequence[str]],
    terms: set[str],
    *,
    candidates: set[str] | None = None,
) -> dict[str, float]:
    """BM25 of every candidate (default: documents sharing a term with ``terms``)."""
    n = len(docs)
    dl = {d: len(set(tokens)) for d, tokens in docs.items()}
    avgdl = sum(dl.values()) / n
    df = {t: sum(t in tokens for tokens in docs.values()) for t in terms}
    if candidates is None:
        candidates = {d for d, tokens in docs.items() if terms & set(tokens)}
    scores = {}
    for d in candidates:
        tf = Counter(docs[d])
        score = 0.0
        for t in terms:
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                score += idf * tf[t] * (K1 + 1) / (tf[t] + K1 * (1 - B + B * dl[d] / avgdl))
        scores[d] = score
    return scores


def _scores(store: PostgresStore, scope: ragport.Scope, query: str, **kw) -> dict[str, float]:
    found = store.lexical_query(scope, query, limit=kw.pop("limit", 100), **kw)
    scores = [item.score for item in found]
    assert scores == sorted(scores, reverse=True)
    result = {item.record.source_id: item.score for item in found}
    assert len(result) == len(found)
    return result


def _assert_close(found: Mapping[str, float], expected: Mapping[str, float]) -> None:
    assert set(found) == set(expected)
    for d, score in expected.items():
        assert abs(found[d] - score) <= TOLERANCE, (d, found[d], score)


def test_scores_equal_python_bm25(store: PostgresStore) -> None:
    """Repeated terms, different lengths, an unknown term and a term in every document score
    as the Python reference. If this fails, check tf (positions), dl/avgdl and the idf."""
    docs = _docs(
        d1="apple apple apple brook 2024",
        d2="brook cedar 2024",
        d3="cedar cedar delta ember fjord apple 2024",
        d4="delta 2024",
        d5="ember ember ember ember ember fjord 2024 2024",
    )
    scope = _scope()
    _index(store, scope, docs)
    for query in ["apple", "apple zephyr", "2024", "brook apple ember 2024", "cedar cedar"]:
        found = _scores(store, scope, query)
        _assert_close(found, _reference(docs, set(query.split())))
    # "2024" is in every document: its idf is small but, unlike BM25Okapi's, still positive.
    assert all(score > 0 for score in _scores(store, scope, "2024").values())


@st.composite
def _corpora(draw: st.DrawFn) -> dict[str, list[str]]:
    docs = draw(st.lists(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=9), max_size=7))
    return {f"d{i}": tokens for i, tokens in enumerate([["2024"], *docs])}


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    docs=_corpora(),
    query=st.lists(st.sampled_from(VOCABULARY + UNKNOWN), min_size=1, max_size=4),
)
def test_scores_equal_python_bm25_on_random_corpora(
    store: PostgresStore, docs: dict[str, list[str]], query: list[str]
) -> None:
    """Random corpora and queries score as the Python reference (each example in a scope of its
    own). If this fails, check the statistics CTEs (N, avgdl, df) and repeated query terms."""
    scope = _scope()
    _index(store, scope, docs)
    _assert_close(_scores(store, scope, " ".join(query)), _reference(docs, set(query)))


def test_rare_term_outranks_common_term(store: PostgresStore) -> None:
    """A document with one rare query term beats one with a common term three times (the order
    ts_rank_cd, which has no idf, gets backwards). If this fails, check the idf factor."""
    docs = {f"filler{i}": ["apple", "cedar", "delta"] for i in range(8)}
    docs["common"] = ["apple", "apple", "apple", "delta"]
    docs["rare"] = ["fjord", "cedar", "delta", "ember"]
    scope = _scope()
    _index(store, scope, docs)
    found = store.lexical_query(scope, "apple fjord", limit=3)
    assert [item.record.source_id for item in found[:2]] == ["rare", "common"]


def test_statistics_come_from_visible_rows_only(store: PostgresStore, pg_schema: str) -> None:
    """A replaced source's retired version and a forgotten source change neither N, avgdl nor
    df. If this fails, check the visibility and tombstone predicates of the population."""
    docs = _docs(
        d1="apple brook",
        d2="apple cedar cedar",
        d3="brook delta ember",
        d4="apple apple fjord delta",
    )
    scope = _scope()
    _index(store, scope, docs)
    ragport.application.replace_source(
        source_id="d3",
        chunks=[ragport.Chunk.of("d3", 0, "fjord")],
        embedder=EMB,
        store=store,
        scope=scope,
    )
    docs["d3"] = ["fjord"]
    with store.engine.connect() as conn:
        retired = conn.execute(
            text(
                f'SELECT count(*) FROM "{pg_schema}".records WHERE corpus_id = :c '
                "AND retired_generation IS NOT NULL"
            ),
            {"c": scope.corpus_id},
        ).scalar_one()
    assert retired == 1, "the retired version must still be stored for this test to mean much"
    for query in ["apple brook", "fjord delta", "ember"]:
        _assert_close(_scores(store, scope, query), _reference(docs, set(query.split())))

    with store.unit_of_work(scope) as uow:
        uow.tombstones.add([Tombstone("d4")])
        uow.commit()
    del docs["d4"]
    for query in ["apple brook", "fjord delta"]:
        _assert_close(_scores(store, scope, query), _reference(docs, set(query.split())))


def _granted_corpus(store: PostgresStore) -> tuple[ragport.Scope, dict[str, list[str]]]:
    docs = _docs(
        open1="apple brook cedar",
        open2="apple apple delta",
        secret1="fjord apple",
        secret2="brook brook ember",
        other="cedar delta",
    )
    scope = _scope()
    _index(store, scope, docs)
    store.set_source_access(
        scope,
        [Grant(s, principal_ids=("alice",)) for s in ("open1", "open2", "other")]
        + [Grant("secret1", principal_ids=("bob",))],  # secret2: no grant at all
    )
    return scope, docs


ALICE = Authorization("alice", "tenant-1")


def test_grants_do_not_change_scores(store: PostgresStore) -> None:
    """Allowed documents keep exactly their unauthorized scores; withheld ones disappear. If
    this fails, check that the grant predicate filters candidates, never the statistics."""
    scope, docs = _granted_corpus(store)
    query = "apple brook fjord"
    everything = _scores(store, scope, query)
    _assert_close(everything, _reference(docs, set(query.split())))
    allowed = _scores(store, scope, query, authorization=ALICE)
    assert set(allowed) == {"open1", "open2"}
    assert allowed == {d: everything[d] for d in allowed}


def test_on_denied_reports_sources_withheld_from_the_lexical_top(store: PostgresStore) -> None:
    """``on_denied`` names the withheld sources among the grant-free BM25 top ``limit``, and no
    others. If this fails, check that _report_denied ranks with the same BM25 as the leg."""
    scope, _ = _granted_corpus(store)
    reports: list[Sequence[AccessDecision]] = []
    # The BM25 top 1 of "fjord apple" is secret1 (rare fjord); secret2 never matches.
    found = store.lexical_query(
        scope, "fjord apple", limit=1, authorization=ALICE, on_denied=reports.append
    )
    assert [item.record.source_id for item in found] == ["open2"]
    assert [[(d.source_id, d.allowed, d.reason) for d in r] for r in reports] == [
        [("secret1", False, "no_grant")]
    ]
    reports.clear()
    found = store.lexical_query(
        scope, "brook", limit=5, authorization=ALICE, on_denied=reports.append
    )
    assert [item.record.source_id for item in found] == ["open1"]
    assert [[d.source_id for d in r] for r in reports] == [["secret2"]]
    reports.clear()
    store.lexical_query(scope, "cedar", limit=5, authorization=ALICE, on_denied=reports.append)
    assert reports == []


def test_excluded_terms_filter_candidates_and_add_no_score(store: PostgresStore) -> None:
    """``-word`` removes the documents holding it and never scores; with ``or`` a document
    matching only the exclusion scores 0. If this fails, check the tsquery lexeme extraction."""
    docs = _docs(
        d1="apple brook",
        d2="apple cedar",
        d3="brook delta",
        d4="ember fjord",
    )
    scope = _scope()
    _index(store, scope, docs)
    _assert_close(
        _scores(store, scope, "apple -brook"),
        _reference(docs, {"apple"}, candidates={"d2"}),
    )
    _assert_close(
        _scores(store, scope, 'apple -"brook delta"'),
        _reference(docs, {"apple"}, candidates={"d1", "d2"}),
    )
    # 'apple' | !'brook': d4 holds neither (score 0), d3 only the excluded term (no match).
    found = _scores(store, scope, "apple or -brook")
    _assert_close(found, _reference(docs, {"apple"}, candidates={"d1", "d2", "d4"}))
    assert found["d4"] == 0.0
