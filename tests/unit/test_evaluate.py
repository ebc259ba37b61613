"""Metrics, queries and qrels parsing of ragport.application.evaluation (docs/evaluation.md)."""

from __future__ import annotations

import math

import pytest

from ragport.application.evaluation import (
    EvalConfig,
    Query,
    evaluate,
    mrr_at,
    ndcg_at,
    parse_documents,
    parse_qrels,
    parse_queries,
    percentile,
    recall_at,
)
from ragport.domain.errors import ValidationError

GRADES = {"a": 3, "b": 1, "c": 2, "z": 0}


def test_recall_counts_relevant_in_the_first_k() -> None:
    """Recall@k is the share of grade>0 documents in the first k (grade 0 is not relevant).

    If this fails, check that recall_at drops grade-0 judgments from the denominator.
    """
    assert recall_at(["x", "a", "z", "c"], GRADES, 2) == pytest.approx(1 / 3)
    assert recall_at(["x", "a", "z", "c"], GRADES, 4) == pytest.approx(2 / 3)
    assert recall_at(["c", "b", "a"], GRADES, 3) == 1.0


def test_duplicate_ids_count_once() -> None:
    """A document's second chunk neither adds recall nor takes a rank.

    If this fails, check the de-duplication of ranked ids before the cut-off.
    """
    assert recall_at(["a", "a", "c"], GRADES, 2) == pytest.approx(2 / 3)
    assert mrr_at(["x", "x", "b"], GRADES) == pytest.approx(1 / 2)


def test_mrr_is_reciprocal_rank_of_first_relevant_within_10() -> None:
    """MRR@10: 1/rank of the first grade>0 document, 0 past rank 10.

    If this fails, check the rank count (from 1) and the cut-off.
    """
    assert mrr_at(["z", "x", "c"], GRADES) == pytest.approx(1 / 3)
    assert mrr_at([f"n{i}" for i in range(10)] + ["a"], GRADES) == 0.0
    assert mrr_at(["a"], GRADES) == 1.0


def test_graded_ndcg_by_hand() -> None:
    """nDCG@10 with linear gains: ranking c, x, a against grades a3 c2 b1.

    DCG = 2/log2(2) + 0 + 3/log2(4) = 2 + 1.5 = 3.5;
    IDCG = 3 + 2/log2(3) + 1/log2(4) = 3 + 1.26186 + 0.5 = 4.76186.
    If this fails, check the gain (grade, not 2^grade - 1) and the log2(rank + 1) discount.
    """
    idcg = 3 + 2 / math.log2(3) + 0.5
    assert ndcg_at(["c", "x", "a"], GRADES) == pytest.approx(3.5 / idcg)
    assert ndcg_at(["a", "c", "b"], GRADES) == pytest.approx(1.0)
    assert ndcg_at(["z", "x"], GRADES) == 0.0


def test_metrics_without_relevant_documents_are_zero() -> None:
    """A query with only grade-0 judgments scores 0 in each metric (evaluate skips it).

    If this fails, check the empty-denominator guards.
    """
    grades = {"z": 0}
    assert (recall_at(["z"], grades, 10), mrr_at(["z"], grades), ndcg_at(["z"], grades)) == (
        0.0,
        0.0,
        0.0,
    )


def test_evaluate_skips_and_counts_unjudged_queries() -> None:
    """Queries without a relevant judgment are skipped (counted), not averaged in as 0.

    If this fails, check evaluate's skip rule and the means over scored queries only.
    """
    queries = [Query("1", "one"), Query("2", "two"), Query("3", "three")]
    qrels = {"1": {"a": 2}, "2": {"b": 0}}
    ranked = {"one": ["x", "a"], "two": ["b"], "three": ["c"]}
    ticks = iter([0.0, 0.010])
    result = evaluate(
        queries, qrels, lambda text: ranked[text], EvalConfig("t"), k=10, clock=lambda: next(ticks)
    )
    assert (result.queries, result.skipped) == (1, 2)
    assert result.recall == 1.0
    assert result.mrr == pytest.approx(0.5)
    assert result.ndcg == pytest.approx((2 / math.log2(3)) / 2)
    assert result.p50_ms == pytest.approx(10.0)
    assert [s.id for s in result.per_query] == ["1"]


def test_evaluate_refuses_k_past_the_ceiling() -> None:
    """k is between 1 and HARD_LIMITS.top_k.

    If this fails, check evaluate's k check.
    """
    with pytest.raises(ValidationError) as info:
        evaluate([Query("1", "q")], {"1": {"a": 1}}, lambda t: [], EvalConfig("t"), k=33)
    assert info.value.field == "k"


def test_percentile_nearest_rank() -> None:
    """p95 of 1..20 is 19, p50 is 10 (nearest rank).

    If this fails, check the ceil(p/100 * n) - 1 index.
    """
    values = [float(v) for v in range(20, 0, -1)]
    assert (percentile(values, 95), percentile(values, 50), percentile([], 95)) == (19.0, 10.0, 0.0)


def test_tsv_qrels_with_header() -> None:
    """TSV with a header line, graded; blank lines skipped.

    If this fails, check header detection (a non-integer grade on the first line).
    """
    qrels, fmt = parse_qrels("query_id\tdoc_id\tgain\n1\ta.md\t3\n\n1\tb.md\t0\n2\tc\t1\n")
    assert fmt == "tsv"
    assert qrels == {"1": {"a.md": 3, "b.md": 0}, "2": {"c": 1}}


def test_trec_qrels() -> None:
    """TREC qrels: qid iteration docid grade, whitespace-separated.

    If this fails, check the four-field detection and that the iteration is ignored.
    """
    qrels, fmt = parse_qrels("1 0 doc-1 2\n1 0 doc-2 1\n7  Q0  x 4\n")
    assert fmt == "trec"
    assert qrels == {"1": {"doc-1": 2, "doc-2": 1}, "7": {"x": 4}}


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("1\ta\t2\n1\ta\tbad\n", 2),  # grade not an integer after the header slot
        ("1\ta\t2\n1\ta\n", 2),  # too few fields
        ("1\ta\t2\n2\tb\t-1\n", 2),  # negative grade
        ("1 0 a 2\n2 0 b\n", 2),  # TREC line with three fields
        ("1 0 a 2\n1 0 a 3\n", 2),  # judged twice
        ("h\th\th\nnot a qrels line\n", 2),  # after a header, a line that is not TSV
        ("just two\n", 1),  # neither format
    ],
)
def test_bad_qrels_lines_are_refused_by_line(text: str, line: int) -> None:
    """A malformed qrels line is a ValidationError whose field names its line.

    If this fails, check parse_qrels' per-line checks and the field=f"qrels:{n}" form.
    """
    with pytest.raises(ValidationError) as info:
        parse_qrels(text)
    assert info.value.field == f"qrels:{line}"


def test_empty_qrels_refused() -> None:
    """A qrels file without a judgment is refused.

    If this fails, check the final 'no judgments' check.
    """
    with pytest.raises(ValidationError) as info:
        parse_qrels("query_id\tdoc_id\tgain\n")
    assert info.value.field == "qrels"


def test_queries_jsonl() -> None:
    """Queries parse from JSONL; integer ids become strings.

    If this fails, check parse_queries' id handling.
    """
    assert parse_queries('{"id": "a", "text": "x"}\n\n{"id": 2, "text": "y"}\n') == [
        Query("a", "x"),
        Query("2", "y"),
    ]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('{"id": "a", "text": "x"}\nnot json\n', 2),
        ('{"id": "a", "text": "x"}\n["a"]\n', 2),
        ('{"id": "", "text": "x"}\n', 1),
        ('{"id": "a", "text": " "}\n', 1),
        ('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', 2),
    ],
)
def test_bad_query_lines_are_refused_by_line(text: str, line: int) -> None:
    """A malformed queries line is a ValidationError naming its line.

    If this fails, check parse_queries' per-line checks.
    """
    with pytest.raises(ValidationError) as info:
        parse_queries(text)
    assert info.value.field == f"queries:{line}"


def test_query_count_ceiling() -> None:
    """More queries than max_queries are refused with the limit named.

    If this fails, check the ceiling in parse_queries.
    """
    text = "".join(f'{{"id": "{i}", "text": "q"}}\n' for i in range(3))
    with pytest.raises(ValidationError) as info:
        parse_queries(text, max_queries=2)
    assert info.value.limit == "max_queries"


def test_documents_jsonl_allows_empty_text() -> None:
    """Documents {"id", "text"}: empty text is kept (Cranfield has empty abstracts), non-str refused.

    If this fails, check parse_documents.
    """
    docs = parse_documents('{"id": 1, "text": ""}\n{"id": "b", "text": "t", "title": "x"}\n')
    assert [(d.id, d.text) for d in docs] == [("1", ""), ("b", "t")]
    with pytest.raises(ValidationError) as info:
        parse_documents('{"id": "a", "text": 3}\n')
    assert info.value.field == "documents:1"
