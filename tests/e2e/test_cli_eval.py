"""`ragport eval` end to end on memory:// with the hash embedder over the demo judged set
(bench/data/demo-*.{jsonl,tsv}); the same commands as docs/evaluation.md's example."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hostile import run_limited

from ragport.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main

ROOT = Path(__file__).resolve().parents[2]
QUERIES = str(ROOT / "bench" / "data" / "demo-queries.jsonl")
QRELS = str(ROOT / "bench" / "data" / "demo-qrels.tsv")
DEMO = [
    str(ROOT / "ragport" / "demo" / n)
    for n in ("leave-policy.md", "onboarding.md", "security-guide.md")
]
BASE = ["--store", "memory://", "--embedder", "hash", *[a for p in DEMO for a in ("--ingest", p)]]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RAGPORT_STORE", raising=False)
    monkeypatch.chdir(tmp_path)


def _eval_json(capsys, *args: str) -> dict:
    code = main(["eval", *args, "--json"])
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    return json.loads(captured.out)


def test_demo_judged_set_scores_every_query_within_bounds(capsys):
    """Every demo query is judged and scored; metrics lie in [0, 1]; per-query ids match.

    If this fails, check --ingest (ids as `ragport ingest` names them), the qrels ids in
    bench/data/demo-qrels.tsv, and EvalResult's fields.
    """
    out = _eval_json(capsys, QUERIES, QRELS, *BASE)
    queries = [json.loads(line)["id"] for line in Path(QUERIES).read_text().splitlines()]
    assert (out["qrels_format"], out["queries"], out["judged_queries"]) == (
        "tsv",
        len(queries),
        len(queries),
    )
    (result,) = out["results"]
    assert result["mode"] == "vector" and result["skipped"] == 0
    assert [q["id"] for q in result["per_query"]] == queries
    for key in ("recall", "mrr", "ndcg"):
        assert 0.0 <= result[key] <= 1.0
        assert all(0.0 <= q[key] <= 1.0 for q in result["per_query"])
    assert result["recall"] > 0.5  # three documents, top 10: the relevant ones are found
    assert 0 <= result["p50_ms"] <= result["p95_ms"]
    assert all(set(q["ranked"]) <= {Path(p).name for p in DEMO} for q in result["per_query"])


def test_compare_gives_one_row_per_configuration(capsys):
    """--compare runs each configuration: JSON has one result each, the table one row each.

    If this fails, check parse_compare and _configs (mode, lexical, rerank, name).
    """
    compare = ["--compare", "mode=vector", "--compare", "mode=lexical,name=bm25",
               "--compare", "mode=hybrid,rerank=fake,lexical-weight=2"]  # fmt: skip
    out = _eval_json(capsys, QUERIES, QRELS, *BASE, "--k", "1", *compare)
    rows = [(r["config"], r["mode"], r["lexical"], r["rerank"], r["k"]) for r in out["results"]]
    assert rows == [
        ("mode=vector", "vector", None, "none", 1),
        ("bm25", "lexical", "bm25", "none", 1),
        ("mode=hybrid,rerank=fake,lexical-weight=2", "hybrid", "bm25", "fake", 1),
    ]
    assert out["results"][2]["weights"] == {"vector": 1.0, "lexical": 2.0}
    assert main(["eval", QUERIES, QRELS, *BASE, *compare]) == EXIT_OK
    table = capsys.readouterr().out
    assert "RECALL@10" in table and "NDCG@10" in table
    body = [line for line in table.splitlines() if line.strip().startswith(("mode=", "bm25"))]
    assert len(body) == 3


def test_wrong_qrels_give_zero_recall(tmp_path, capsys):
    """Qrels naming documents the corpus does not hold score 0 everywhere.

    If this fails, the hits' source ids are not what the metrics compare against.
    """
    wrong = tmp_path / "wrong.trec"
    wrong.write_text("".join(f"d{n} 0 missing-{n}.md 3\n" for n in range(1, 14)))
    out = _eval_json(capsys, QUERIES, str(wrong), *BASE, "--mode", "hybrid")
    (result,) = out["results"]
    assert out["qrels_format"] == "trec"
    assert (result["queries"], result["recall"], result["mrr"], result["ndcg"]) == (
        13,
        0.0,
        0.0,
        0.0,
    )


def test_unjudged_queries_are_skipped_and_counted(tmp_path, capsys):
    """Queries without a relevant judgment are skipped, counted, and said on stderr.

    If this fails, check evaluate's skip rule.
    """
    few = tmp_path / "few.tsv"
    few.write_text("d1\tleave-policy.md\t3\nd2\tonboarding.md\t0\n")
    code = main(["eval", QUERIES, str(few), *BASE, "--json"])
    captured = capsys.readouterr()
    assert code == EXIT_OK
    (result,) = json.loads(captured.out)["results"]
    assert (result["queries"], result["skipped"]) == (1, 12)
    assert "12 query(ies) without a relevant judgment skipped" in captured.err


def test_usage_errors_and_empty_corpus(tmp_path, capsys):
    """Bad files, bad --compare and --k exit 2; an empty corpus exits 1.

    If this fails, check _eval's argument checks and the NothingFound on an empty corpus.
    """
    bad = tmp_path / "bad.tsv"
    bad.write_text("d1\tleave-policy.md\t3\nd2\tx\n")
    assert main(["eval", QUERIES, str(bad), *BASE]) == EXIT_USAGE
    assert main(["eval", QUERIES, str(tmp_path / "none.tsv"), *BASE]) == EXIT_USAGE
    assert main(["eval", QUERIES, QRELS, *BASE, "--compare", "colour=red"]) == EXIT_USAGE
    assert main(["eval", QUERIES, QRELS, *BASE, "--compare", "mode=sideways"]) == EXIT_USAGE
    assert main(["eval", QUERIES, QRELS, *BASE, "--k", "33"]) == EXIT_USAGE
    assert (
        main(["eval", QUERIES, QRELS, "--store", "memory://", "--embedder", "hash"]) == EXIT_FAILED
    )
    capsys.readouterr()


def test_docs_evaluation_example_runs_as_written(monkeypatch, capsys):
    """docs/evaluation.md's tested example runs from the repository root, each line exit 0.

    If this fails, the page and the command line disagree: fix whichever is wrong.
    """
    import re
    import shlex

    page = (ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8")
    block = re.search(
        r"elsewhere tests/e2e/test_cli_eval.py -->\n```sh\n(.*?)^```$", page, re.S | re.M
    )
    assert block is not None
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 2 and all(line.startswith("ragport eval ") for line in lines)
    monkeypatch.chdir(ROOT)
    outputs = []
    for line in lines:
        assert main(shlex.split(line)[1:]) == EXIT_OK, line
        outputs.append(capsys.readouterr().out)
    assert "NDCG@10" in outputs[0]
    assert [r["mode"] for r in json.loads(outputs[1])["results"]] == ["vector", "lexical", "hybrid"]


# --- hostile judged files (issue 43 item 11): bounded, typed, no hang -----------------------

HOSTILE_EVAL = """
    import json, os, sys
    from ragport.cli import main
    from ragport.domain.errors import ValidationError

    results = {}
    for name, queries in json.loads(os.environ["HOSTILE_QUERIES"]).items():
        print(f"case {name}", file=sys.stderr, flush=True)
        code = main(["eval", queries, os.environ["HOSTILE_QRELS"], "--store", "memory://",
                     "--embedder", "hash"])
        from ragport.bootstrap.evaluate import parse_queries, read_judged_file

        try:
            parse_queries(read_judged_file(queries, field="queries"))
            field = None
        except ValidationError as exc:
            field = exc.field
        results[name] = [code, field]
    emit(results)
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs and /dev/zero")
def test_hostile_queries_files_are_usage_errors_not_hangs_or_crashes(tmp_path):
    """A 100,000-deep JSON line, a symlink to /dev/zero and a FIFO as the queries file: each
    exits 2 with a ValidationError naming the file (and the line), no traceback, no hang, no
    MemoryError; run in a child with a 1 GiB address-space limit and a timeout.

    If this fails, check read_judged_file in ragport/bootstrap/evaluate.py and _json_line in
    ragport/application/evaluation.py and
    _parsed in ragport/cli/evaluate.py (stderr says which case the child reached).
    """
    cases = {name: tmp_path / f"{name}.jsonl" for name in ("deep", "dev-zero", "fifo")}
    cases["deep"].write_text("[" * 100_000 + "]" * 100_000 + "\n")  # past any parser's stack
    cases["dev-zero"].symlink_to("/dev/zero")  # size 0 to stat, endless to read
    os.mkfifo(cases["fifo"])  # nobody ever writes: a blocking open or read hangs for ever
    out = run_limited(
        HOSTILE_EVAL,
        memory_mb=1024,
        timeout_s=90,
        env={
            "HOSTILE_QUERIES": json.dumps({k: str(v) for k, v in cases.items()}),
            "HOSTILE_QRELS": QRELS,
        },
    )
    assert out.result == {
        "deep": [EXIT_USAGE, "queries:1"],
        "dev-zero": [EXIT_USAGE, "queries"],
        "fifo": [EXIT_USAGE, "queries"],
    }, out.stderr
    for path in cases.values():
        assert f"ragport: ValidationError: queries file {path}" in out.stderr or (
            f"ragport: ValidationError: {path}: queries line 1" in out.stderr
        )
    assert "Traceback" not in out.stderr and "MemoryError" not in out.stderr


def test_a_judged_file_over_the_byte_cap_is_refused_before_it_is_parsed(tmp_path):
    """A qrels file past the cap (a small cap here) is ValidationError(limit="max_bytes"),
    read no further than the cap; a folder is refused too.

    If this fails, check read_judged_file in ragport/bootstrap/evaluate.py.
    """
    from ragport.bootstrap.evaluate import read_judged_file
    from ragport.domain.errors import ValidationError

    big = tmp_path / "qrels.tsv"
    big.write_text("d1\tleave-policy.md\t3\n" * 100)
    assert read_judged_file(big, field="qrels", max_bytes=4096).count("\n") == 100
    with pytest.raises(ValidationError) as caught:
        read_judged_file(big, field="qrels", max_bytes=1024)
    assert (caught.value.field, caught.value.limit) == ("qrels", "max_bytes")
    with pytest.raises(ValidationError) as caught:
        read_judged_file(tmp_path, field="qrels")
    assert caught.value.field == "qrels"
