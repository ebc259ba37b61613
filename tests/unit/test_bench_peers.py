"""bench/bench_peers.py's own logic on tiny data, without a server or the peers' venv: the
metrics, the seeded data plan, the reader's classification, the targets and the rendering."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def peers() -> tuple[ModuleType, ModuleType, ModuleType, ModuleType]:
    sys.path[:0] = [str(BENCH), str(BENCH / "peers")]
    try:
        common = importlib.import_module("common")
        worker = importlib.import_module("worker")
        driver = importlib.import_module("bench_peers")
        render = importlib.import_module("render_results")
    finally:
        sys.path.remove(str(BENCH))
        sys.path.remove(str(BENCH / "peers"))
    return common, worker, driver, render


def test_recall_and_ndcg_on_hand_computed_cases(peers):
    common, *_ = peers
    assert common.recall_at_k(["a", "b", "x"], ["a", "b", "c", "d"], k=4) == 0.5
    assert common.recall_at_k([], ["a"], k=10) == 0.0
    assert common.recall_at_k(["a"], ["a"], k=10) == 1.0  # fewer true rows than k
    gains = {"a": 2.0, "b": 1.0}
    assert common.ndcg_at_k(["a", "b"], gains) == pytest.approx(1.0)
    swapped = (1 / 1 + 2 / math.log2(3)) / (2 / 1 + 1 / math.log2(3))
    assert common.ndcg_at_k(["b", "a"], gains) == pytest.approx(swapped)
    # a duplicate (LlamaIndex's hybrid lists a node twice) counts once, and does not push
    # the next document down
    assert common.ndcg_at_k(["a", "a", "b"], gains) == pytest.approx(1.0)
    assert common.ndcg_at_k([f"x{i}" for i in range(10)] + ["a"], gains) == 0.0


def test_exact_top_respects_the_mask_and_breaks_ties_by_position(peers):
    common, *_ = peers
    matrix = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=np.float32)
    keys = ["a", "b", "c", "d"]
    q = np.array([1.0, 0.0], dtype=np.float32)
    assert common.exact_top(matrix, keys, q, None, 2) == (["a", "b"], 1.0)
    top, kth = common.exact_top(matrix, keys, q, np.array([False, True, True, False]), 3)
    assert top == ["b", "c"] and kth == -math.inf


def test_dataset_is_seeded_and_its_workloads_are_disjoint(peers):
    common, *_ = peers
    a, b = common.Dataset(80, updated=10, deleted=4), common.Dataset(80, updated=10, deleted=4)
    assert a.texts == b.texts and a.queries(12) == b.queries(12)
    assert not set(a.updates) & set(a.reader_updates)
    assert not (set(a.updates) | set(a.reader_updates)) & set(a.deletes)
    assert len(a.final_live()) == (80 - 20 - 4) * 10 + 20 * 8
    text = a.chunks(a.ids[0], 1)[0]["text"].split()
    assert text[0] == a.marker[a.ids[0]] and len(text) == 1 + common.WORDS_PER_CHUNK
    # workload 7: the user's two groups hold exactly the rows of the query's team
    for q in a.queries(12):
        by_groups = {c["key"] for c in a.final_live() if c["owner_group"] in q["groups"]}
        by_team = {c["key"] for c in a.final_live() if c["team"] == q["team"]}
        assert by_groups == by_team and len(q["groups"]) == 2
    v = common.feature_hash(["alpha beta", "alpha beta", ""])
    assert np.allclose(v[0], v[1]) and np.isclose(np.linalg.norm(v[0]), 1.0) and not v[2].any()


def test_the_reader_classifies_mixed_empty_and_partial_answers(peers):
    _, worker, *_ = peers
    assert worker.classify([("x#0001", 1)] * 1 + [("x#0101", 2)], 10, 8) == "mixed"
    assert worker.classify([], 10, 8) == "empty"
    assert worker.classify([(f"x#{i:04d}", 1) for i in range(10)], 10, 8) == "ok"
    assert worker.classify([(f"x#{i:04d}", 2) for i in range(7)], 10, 8) == "partial"


def test_targets_take_the_fastest_peer_and_ragports_own_filter(peers, tmp_path):
    _common, _, driver, render = peers
    rows = {
        "ragport": {"ingest_chunks_per_s": 240.0, "update_ms": 50.0, "delete_ms": 3.0,
                    "filter_ms": 4.0, "access_ms": 5.0, "team_filter_ms": 4.5, "hybrid_ms": 9.0,
                    "hybrid_p95_ms": 15.0,
                    "w3_wrong_answers": 0, "filter_recall": 0.95, "vector_recall": 0.94,
                    "access_recall": 0.93, "cranfield_ndcg": 0.40, "vector_ms": 4.0},
        "langchain": {"ingest_chunks_per_s": 100.0, "update_ms": 60.0, "delete_ms": 2.0,
                      "filter_ms": 11.0, "access_ms": 5.5, "hybrid_ms": 8.0,
                      "hybrid_p95_ms": 14.0, "filter_recall": 0.9, "vector_recall": 0.94,
                      "access_recall": 0.9, "cranfield_ndcg": 0.35, "vector_ms": 5.0},
        "haystack": {"ingest_chunks_per_s": 200.0, "update_ms": 55.0, "delete_ms": 8.0,
                     "filter_ms": 15.0, "access_ms": 27.0, "hybrid_ms": 120.0,
                     "hybrid_p95_ms": 170.0, "filter_recall": 1.0, "vector_recall": 0.99,
                     "access_recall": 1.0, "cranfield_ndcg": 0.30, "vector_ms": 100.0},
    }  # fmt: skip
    figures, targets = driver.figures_and_targets(rows)
    value = {t["figure"]: figures[t["figure"]]["value"] for t in targets}
    assert value["t1 ingest / fastest peer"] == pytest.approx(1.2)  # 240 / Haystack's 200
    assert value["t4 delete / fastest peer"] == pytest.approx(1.5)  # 3 / LangChain's 2
    # workload 7: over the equality filter selecting the same rows, not the 1% tag filter
    assert value["t7 access / own filter"] == pytest.approx(5.0 / 4.5)
    assert value["t5 filter recall - best peer"] == pytest.approx(-0.05)
    assert value["t6 Cranfield nDCG@10 - best peer"] == pytest.approx(0.05)
    results = importlib.import_module("_results")
    results.write_result(
        "peers",
        figures=figures,
        targets=targets,
        command=".venv/bin/python bench/bench_peers.py --chunks 20000",
        details={"chunks": 20000, "sources": 2000, "queries": 200, "rows": rows,
                 "correctness": {"ragport": {"w3_answers": {"ok": 5, "mixed": 0}}}},
        out_dir=tmp_path,
    )  # fmt: skip
    section = render.render(tmp_path).split("## Peers")[1].split("\n## ")[0]
    assert "| 1 ingest, chunks/s | 240.0 | 100.0 (0.417x) | 200.0 (0.833x) |" in section
    assert "| 5 filtered by tag (1%), ms (recall@10) | 4.00 (0.950) | 11.00 (2.75x, 0.900) |" in (
        section
    )
    assert "t1 ingest / fastest peer ≥ 1.20: 1.20 met;" in section
    assert "t4 delete / fastest peer ≤ 1.00: 1.50 **not met**;" in section
