"""Bm25Index against rank_bm25.BM25Okapi, plus the shared lexical tokenizer."""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Callable
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

import ragport.adapters.lexical.bm25 as bm25_module
from ragport.adapters.lexical import Bm25Index
from ragport.domain.errors import ValidationError
from ragport.domain.lexical import tokenize_lexical
from ragport.ports.lexical import LexicalIndex

# Lower-case ASCII words and digits survive tokenize_lexical unchanged, so the index and the
# reference see the same tokens when a token list is joined with spaces.
VOCABULARY = ["a", "b", "c", "d", "e", "f", "x1", "2024"]
UNKNOWN = ["zz", "q9"]
TOLERANCE = 1e-6


def _text(tokens: list[str]) -> str:
    text = " ".join(tokens)
    assert tokenize_lexical(text) == tokens, "test tokens must survive the tokenizer"
    return text


def _check_against_reference(
    index: Bm25Index,
    docs: dict[str, list[str]],
    query: list[str],
    **params: float,
) -> None:
    """Search results equal BM25Okapi over ``docs`` (in dict order) for ``query``."""
    results = index.search(_text(query), limit=len(docs) + 1)
    assert results == sorted(results, key=lambda pair: (-pair[1], pair[0]))
    found = dict(results)
    assert len(found) == len(results)
    terms = set(query)
    assert set(found) == {doc_id for doc_id, tokens in docs.items() if terms & set(tokens)}
    if not any(docs.values()):
        # BM25Okapi divides by zero on a corpus without a single token; nothing can match.
        assert results == []
        return
    reference = BM25Okapi(list(docs.values()), **params).get_scores(query)
    for doc_id, expected in zip(docs, reference.tolist(), strict=True):
        if doc_id in found:
            assert abs(found[doc_id] - expected) <= TOLERANCE, (doc_id, found[doc_id], expected)
        else:
            assert expected == 0.0


def _index_of(docs: dict[str, list[str]], **params: float) -> Bm25Index:
    index = Bm25Index(**params)
    index.add(list(docs), [_text(tokens) for tokens in docs.values()])
    return index


token_lists = st.lists(st.sampled_from(VOCABULARY), max_size=8)
queries = st.lists(st.sampled_from(VOCABULARY + UNKNOWN), max_size=6)
bm25_params = st.fixed_dictionaries(
    {
        "k1": st.sampled_from([0.5, 1.2, 1.5, 2.0]),
        "b": st.sampled_from([0.0, 0.5, 0.75, 0.9]),
        "epsilon": st.sampled_from([0.0, 0.25, 0.5]),
    }
)


@st.composite
def corpora(draw: st.DrawFn) -> dict[str, list[str]]:
    docs = draw(st.lists(token_lists, min_size=1, max_size=10))
    if draw(st.booleans()):
        # A term in every document has negative idf, so BM25Okapi's epsilon floor applies.
        docs = [[*tokens, "a"] for tokens in docs]
    return {f"doc-{i:02d}": tokens for i, tokens in enumerate(docs)}


@settings(max_examples=200, deadline=None)
@given(docs=corpora(), query=queries, params=bm25_params)
def test_scores_equal_bm25okapi_on_random_corpora(
    docs: dict[str, list[str]], query: list[str], params: dict[str, float]
) -> None:
    """Scores equal BM25Okapi.get_scores within 1e-6. If this fails, check the idf floor and
    average_idf over all terms, empty documents in avgdl, and repeated query terms."""
    _check_against_reference(_index_of(docs, **params), docs, query, **params)


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.lists(st.tuples(st.sampled_from("pqrstu"), token_lists), min_size=1, max_size=3),
        ),
        st.tuples(st.just("remove"), st.lists(st.sampled_from("pqrstuv"), max_size=3)),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(ops=operations, query=queries, compact_eagerly=st.booleans())
def test_incremental_add_remove_equals_fresh_bm25okapi(
    ops: list[tuple[object, ...]], query: list[str], compact_eagerly: bool
) -> None:
    """After adds, replacements and removals the index scores like a fresh BM25Okapi over the
    remaining documents. If this fails, check df/histogram bookkeeping, stale postings and
    _compact's slot renumbering."""
    model: dict[str, list[str]] = {}
    index = Bm25Index()
    with mock.patch.object(bm25_module, "_COMPACT_MIN_DEAD", 0 if compact_eagerly else 1024):
        for op in ops:
            if op[0] == "add":
                _, batch = op
                assert isinstance(batch, list)
                index.add([doc_id for doc_id, _ in batch], [_text(tokens) for _, tokens in batch])
                for doc_id, tokens in batch:
                    model.pop(doc_id, None)  # a replaced document moves to the end
                    model[doc_id] = tokens
            else:
                _, doc_ids = op
                assert isinstance(doc_ids, list)
                expected = len(set(doc_ids) & set(model))
                assert index.remove(doc_ids) == expected
                for doc_id in doc_ids:
                    model.pop(doc_id, None)
            # Query between mutations too, so lazily folded postings are exercised.
            _check_against_reference(index, model, query)
    assert len(index) == len(model)
    assert all(doc_id in index for doc_id in model)


def _zipf_corpus(seed: int, n_docs: int, vocabulary: int) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 40, size=n_docs)
    words = np.minimum(rng.zipf(1.3, size=int(lengths.sum())), vocabulary)
    tokens = [f"w{word}" for word in words.tolist()]
    docs, start = [], 0
    for length in lengths.tolist():
        docs.append(tokens[start : start + length])
        start += length
    return docs


@pytest.mark.parametrize(
    ("seed", "n_docs", "vocabulary"), [(1, 50, 30), (2, 500, 300), (3, 3000, 5000)]
)
def test_scores_equal_bm25okapi_on_zipf_corpora(seed: int, n_docs: int, vocabulary: int) -> None:
    """Larger Zipf corpora score like BM25Okapi for many queries. If this fails, check the
    vectorised postings arithmetic against rank_bm25.get_scores."""
    docs = {f"d{i}": tokens for i, tokens in enumerate(_zipf_corpus(seed, n_docs, vocabulary))}
    index = _index_of(docs)
    rng = np.random.default_rng(seed + 100)
    for _ in range(20):
        size = int(rng.integers(1, 7))
        query = [f"w{word}" for word in np.minimum(rng.zipf(1.3, size=size), vocabulary).tolist()]
        _check_against_reference(index, docs, query)


def test_many_removals_compact_and_still_match_reference() -> None:
    """Removing most of 3,000 documents triggers slot compaction and keeps exact scores. If
    this fails, check _compact (remap of postings, lengths, ids)."""
    docs = {f"d{i}": tokens for i, tokens in enumerate(_zipf_corpus(7, 3000, 400))}
    index = _index_of(docs)
    gone = [f"d{i}" for i in range(3000) if i % 5 != 0]
    assert index.remove(gone) == len(gone)
    assert len(index._slot_ids) == len(index) == 600  # compacted: no tombstoned slots left
    remaining = {doc_id: tokens for doc_id, tokens in docs.items() if doc_id not in set(gone)}
    index.add(["d1"], [_text(["w1", "w2", "w2"])])
    remaining["d1"] = ["w1", "w2", "w2"]
    for query in (["w1"], ["w2", "w3", "w3"], ["w7", "w40", "w1"], ["w399"]):
        _check_against_reference(index, remaining, query)


def test_repeated_query_term_counts_twice() -> None:
    """A repeated query token doubles its contribution, as in get_scores. If this fails, check
    that query tokens are counted, not deduplicated."""
    index = _index_of({"x": ["c", "d"], "y": ["d"], "z": ["e"]})
    once = dict(index.search("c", limit=5))
    twice = dict(index.search("c c", limit=5))
    assert twice["x"] == pytest.approx(2 * once["x"], abs=TOLERANCE)


def test_negative_scores_are_returned_for_matching_documents() -> None:
    """A match with a floored, negative idf is still a result. If this fails, check that
    search filters on matching a token, not on score > 0."""
    docs = {"only": ["hello", "world"]}
    index = _index_of(docs)
    [(doc_id, score)] = index.search("hello", limit=3)
    assert doc_id == "only" and score < 0
    _check_against_reference(index, docs, ["hello"])


def test_search_respects_candidates_before_limit() -> None:
    """candidates restricts results before the cut to limit and leaves scores unchanged. If
    this fails, check the candidate mask in search."""
    fillers = {f"filler{i}": ["m"] for i in range(5)}
    index = _index_of(
        {"best": ["k", "k", "k"], "good": ["k", "m"], "ok": ["k", "m", "m", "m"], **fillers}
    )
    everyone = dict(index.search("k", limit=3))
    assert [doc_id for doc_id, _ in index.search("k", limit=3)] == ["best", "good", "ok"]
    assert index.search("k", limit=1, candidates={"good", "ok"}) == [("good", everyone["good"])]
    assert index.search("k", limit=5, candidates=["ok", "missing", "ok"]) == [
        ("ok", everyone["ok"])
    ]
    assert index.search("k", limit=5, candidates=[]) == []


def test_ties_break_by_id_including_at_the_limit() -> None:
    """Equal scores are ordered by id, also across the limit boundary. If this fails, check
    the partition threshold (>= kth) and the final sort key."""
    fillers = {f"filler{i}": ["u"] for i in range(5)}
    index = _index_of({"c": ["t"], "a": ["t"], "b": ["t"], "d": ["t", "u"], **fillers})
    results = index.search("t", limit=2)
    assert [doc_id for doc_id, _ in results] == ["a", "b"]
    assert results[0][1] == results[1][1]
    assert [doc_id for doc_id, _ in index.search("t", limit=10)] == ["a", "b", "c", "d"]


def test_remove_returns_number_of_distinct_present_ids() -> None:
    """remove counts distinct ids it actually removed. If this fails, check remove's dedup and
    unknown-id handling."""
    index = _index_of({"a": ["x1"], "b": ["x1"], "c": ["e"]})
    assert index.remove(["a", "a", "nope"]) == 1
    assert index.remove(["a"]) == 0
    assert index.remove([]) == 0
    assert len(index) == 2 and "a" not in index and "b" in index
    assert [doc_id for doc_id, _ in index.search("x1", limit=5)] == ["b"]


def test_readding_an_id_replaces_its_text() -> None:
    """Adding an id again replaces the document, also within one call. If this fails, check
    that add removes the old slot first."""
    index = _index_of({"a": ["e", "f"], "b": ["f"]})
    index.add(["a", "c", "c"], ["x1 x1", "e", "d"])
    assert len(index) == 3
    assert [doc_id for doc_id, _ in index.search("e", limit=5)] == []
    assert [doc_id for doc_id, _ in index.search("d", limit=5)] == ["c"]
    _check_against_reference(index, {"b": ["f"], "a": ["x1", "x1"], "c": ["d"]}, ["x1", "f", "d"])


def test_empty_query_empty_index_and_empty_documents() -> None:
    """No tokens or no documents give no results; an empty text is still a document. If this
    fails, check the early returns in _score."""
    index = Bm25Index()
    assert index.search("anything", limit=3) == []
    index.add(["blank", "text"], ["  ...  ", "some words"])
    assert len(index) == 2 and "blank" in index
    assert index.search("!!", limit=3) == []
    _check_against_reference(index, {"blank": [], "text": ["some", "words"]}, ["some"])


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda index: index.add(["a", "b"], ["x"]), "texts"),
        (lambda index: index.add("ab", ["x", "y"]), "ids"),
        (lambda index: index.add(["a"], [b"x"]), "texts"),
        (lambda index: index.remove("a"), "ids"),
        (lambda index: index.search("x", limit=0), "limit"),
        (lambda index: index.search("x", limit=True), "limit"),
        (lambda index: index.search("x", limit=2, candidates="a"), "candidates"),
        (lambda index: index.search(None, limit=2), "query"),
    ],
)
def test_bad_arguments_raise_validation_error_and_change_nothing(
    call: Callable[[Bm25Index], object], field: str
) -> None:
    """Malformed arguments raise ValidationError naming the field. If this fails, check the
    argument checks at the top of add/remove/search."""
    index = _index_of({"a": ["x1"]})
    with pytest.raises(ValidationError) as info:
        call(index)
    assert info.value.field == field
    assert len(index) == 1 and [doc_id for doc_id, _ in index.search("x1", limit=2)] == ["a"]


@pytest.mark.parametrize(
    "params", [{"k1": -1.0}, {"k1": float("nan")}, {"b": 1.5}, {"epsilon": -0.1}, {"b": "x"}]
)
def test_bad_parameters_raise_validation_error(params: dict[str, object]) -> None:
    """k1, b and epsilon are range-checked so every score stays finite. If this fails, check
    _check_param in Bm25Index.__init__."""
    with pytest.raises(ValidationError) as info:
        Bm25Index(**params)  # type: ignore[arg-type]
    assert info.value.field == next(iter(params))


def test_bm25index_satisfies_the_lexical_index_port() -> None:
    """Bm25Index structurally implements LexicalIndex. If this fails, check the signatures
    against ragport/ports/lexical.py."""
    assert isinstance(Bm25Index(), LexicalIndex)


def test_concurrent_adds_and_searches_leave_a_consistent_index() -> None:
    """Threads adding, removing and searching at once end in the same state as serial calls.
    If this fails, check that every read and mutation holds the lock."""
    index = Bm25Index()
    errors: list[BaseException] = []

    def writer(worker: int) -> None:
        try:
            for i in range(200):
                index.add([f"w{worker}-{i}"], [f"common t{i % 7} w{worker}"])
                if i % 3 == 0:
                    index.remove([f"w{worker}-{i - 3}"])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(200):
                for _doc_id, score in index.search("common t3", limit=5):
                    assert np.isfinite(score)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    expected: dict[str, list[str]] = {}
    for worker in range(4):
        for i in range(200):
            expected[f"w{worker}-{i}"] = ["common", f"t{i % 7}", f"w{worker}"]
        for i in range(0, 200, 3):
            expected.pop(f"w{worker}-{i - 3}", None)
    assert len(index) == len(expected)
    _check_against_reference(index, expected, ["common", "t3", "w2"])


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("Hello, World! HELLO", ["hello", "world", "hello"]),
        ("café naïve Straße", ["café", "naïve", "strasse"]),
        ("Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ１２３", ["full", "width", "abc123"]),
        ("ﬁle x² ½", ["file", "x2", "1", "2"]),
        ("v2.0 released 2024-01-02", ["v2", "0", "released", "2024", "01", "02"]),
        ("e-mail: bob@example.com; (a/b)", ["e", "mail", "bob", "example", "com", "a", "b"]),
        ("snake_case __init__ ___ _", ["snake_case", "__init__"]),
        ("cafe\u0301", ["café"]),
        ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),
        ("日本語 テキスト", ["日本語", "テキスト"]),
        ("", []),
        (" \t\n.,;", []),
    ],
)
def test_tokenize_lexical_examples(text: str, tokens: list[str]) -> None:
    """The shared tokenizer applies NFKC, casefold and word runs with marks. If this fails,
    check the rules in ragport/domain/lexical.py."""
    assert tokenize_lexical(text) == tokens


def _reference_tokens(text: str) -> list[str]:
    """The module rules, spelled out character by character (re's \\w is isalnum() or '_')."""
    tokens, current = [], ""
    for char in unicodedata.normalize("NFKC", text).casefold():
        if char.isalnum() or char == "_" or unicodedata.category(char).startswith("M"):
            current += char
        else:
            tokens.append(current)
            current = ""
    tokens.append(current)
    return [token for token in tokens if token.strip("_")]


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40) | st.text(alphabet=st.characters(max_codepoint=127), max_size=40))
def test_tokenize_lexical_follows_its_rules_on_any_text(text: str) -> None:
    """tokenize_lexical (including its ASCII fast path) equals a per-character reading of the
    rules. If this fails, check _word_pattern's mark ranges and the ASCII fast path."""
    assert tokenize_lexical(text) == _reference_tokens(text)


def test_index_and_query_share_the_tokenizer() -> None:
    """Case, width and accents fold the same way for texts and queries. If this fails, check
    that Bm25Index tokenizes both sides with tokenize_lexical."""
    index = Bm25Index()
    index.add(["x", "y"], ["Ｃａｆé REPORT", "other words"])
    assert [doc_id for doc_id, _ in index.search("café report", limit=3)] == ["x"]
    assert index.search("cafe", limit=3) == []
