"""bench/RESULTS.md is generated from the benchmarks' JSON (issue 26), never hand-edited."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    sys.path.insert(0, str(BENCH))
    try:
        results = importlib.import_module("_results")
        render = importlib.import_module("render_results")
        run_all = importlib.import_module("run_all")
    finally:
        sys.path.remove(str(BENCH))
    return results, render, run_all


def _write_fixtures(results: ModuleType, out: Path) -> None:
    figures = {
        "ragport_ms": results.figure("retrieve_context per query", "ms", samples=[0.3, 0.2, 0.4]),
        "numpy_ms": results.figure("bare numpy top-k per query", "ms", samples=[0.2, 0.2, 0.2]),
        "ratio": results.ratio("ragport / bare numpy", 0.3, 0.2, ("ragport_ms", "numpy_ms")),
    }
    results.write_result(
        "foundation",
        figures=figures,
        targets=[results.target("ratio", "<=", 1.3)],
        command=".venv/bin/python bench/bench_foundation.py",
        out_dir=out,
    )
    results.write_result(
        "bm25",
        figures={"speedup": results.figure("speed-up over rank_bm25", "x", 62.0)},
        targets=[results.target("speedup", ">=", 10)],
        quick=True,
        command=".venv/bin/python bench/bench_bm25.py --quick",
        out_dir=out / "quick",
    )


def test_write_result_computes_met_from_the_figure_and_its_bound(bench_modules, tmp_path):
    """A target's met flag comes from op and bound applied to the figure's median.

    If this fails, check _results.write_result and is_met.
    """
    results, _, _ = bench_modules
    _write_fixtures(results, tmp_path)
    report = json.loads((tmp_path / "foundation.json").read_text())
    (t,) = report["targets"]
    assert t["value"] == pytest.approx(1.5)
    assert t["met"] is False
    assert report["figures"]["ragport_ms"]["median"] == pytest.approx(0.3)
    assert report["figures"]["ratio"]["ratio_of"] == ["ragport_ms", "numpy_ms"]
    assert report["quick"] is False
    assert {"cores", "memory_gb", "cpu", "python", "commit", "date"} <= set(report["machine"])
    quick = json.loads((tmp_path / "quick" / "bm25.json").read_text())
    assert quick["quick"] is True and quick["targets"][0]["met"] is True
    assert results.is_met(1.3, "<=", 1.3) is True
    assert results.is_met(0.9, ">=", 1.0) is False
    assert results.is_met(None, ">=", 1.0) is None


def test_render_shows_each_table_the_met_flag_and_not_run(bench_modules, tmp_path):
    """One table per benchmark; a failing target reads "not met"; no JSON reads "not run".

    If this fails, check render_results.render_section.
    """
    results, render, run_all = bench_modules
    _write_fixtures(results, tmp_path)
    text = render.render(tmp_path)
    foundation = text.split("## Foundation")[1].split("\n## ")[0]
    assert "| ragport / bare numpy | 1.50x | – | ≤ 1.30x | **not met** |" in foundation
    assert "| retrieve_context per query (ms) | 0.300 (0.200–0.400, n=3) | – |  |  |" in foundation
    assert "Quick: not run" in foundation
    bm25 = text.split("## Lexical index")[1].split("\n## ")[0]
    assert "| speed-up over rank_bm25 | – | 62.00x | ≥ 10.00x | met (quick) |" in bm25
    assert "Full: not run" in bm25
    forgetting = text.split("## Forgetting")[1].split("\n## ")[0]
    assert "Not run: no JSON" in forgetting
    assert text.count("\n## ") == len(run_all.BENCHMARKS) + 1  # Machines + one per benchmark
    assert render.render(tmp_path) == text  # deterministic


def test_committed_results_md_is_the_rendering_of_bench_results(bench_modules):
    """bench/RESULTS.md equals render(bench/results) and stays under 435 lines (one screenful
    per section; 300 until issue 28 added the million-row section, 330 until the bulk-load
    section grew its six variants and their ratios, 340 until issue 44 added the group-ceiling
    section, 365 until issue 45 added the peers section: a table per size and its targets, 410
    until issue 41 measured the 100k ABBA: hybrid p95 beside p50, 415 until the peers section's
    200,000-chunk table and its targets were first run to the end).

    If this fails, someone edited RESULTS.md by hand or a JSON file without re-rendering:
    run `.venv/bin/python bench/render_results.py`.
    """
    _, render, _ = bench_modules
    committed = (BENCH / "RESULTS.md").read_text()
    assert committed == render.render(BENCH / "results")
    assert committed.count("\n") < 435


FAKE_BENCH = """
import sys
from pathlib import Path

sys.path.insert(0, {bench!r})
from _results import figure, write_result

out = Path({out!r})
write_result(
    "foundation",
    figures={{"ratio": figure("ragport / bare numpy", "x", 1.2)}},
    quick=True,
    out_dir=out / "quick",
)
"""


def test_run_all_renders_what_ran_when_a_benchmark_fails_and_exits_1(
    bench_modules, tmp_path, monkeypatch
):
    """A failing benchmark does not stop the others; RESULTS.md is still rendered; exit 1.

    If this fails, check run_all.main: the render must come after the loop, before the
    failure's return.
    """
    _, _, run_all = bench_modules
    scripts, results = tmp_path / "bench", tmp_path / "results"
    scripts.mkdir()
    (scripts / "fails.py").write_text("raise SystemExit(3)\n")
    (scripts / "writes.py").write_text(FAKE_BENCH.format(bench=str(BENCH), out=str(results)))
    monkeypatch.setattr(run_all, "HERE", scripts)
    monkeypatch.setattr(run_all, "RESULTS", results)
    monkeypatch.setattr(run_all, "RESULTS_MD", tmp_path / "RESULTS.md")
    monkeypatch.setattr(
        run_all,
        "BENCHMARKS",
        (
            ("bm25", "fails.py", "Fails", (), ()),
            ("foundation", "writes.py", "Writes", (), ()),
        ),
    )
    assert run_all.main(["--quick"]) == 1
    rendered = (tmp_path / "RESULTS.md").read_text()
    foundation = rendered.split("## Foundation")[1].split("\n## ")[0]
    assert "| ragport / bare numpy | – | 1.20x |  |  |" in foundation
    assert "Not run: no JSON" in rendered.split("## Lexical index")[1].split("\n## ")[0]


def test_every_benchmark_run_all_runs_writes_its_json(bench_modules):
    """Each script of run_all.BENCHMARKS (or a bench module it imports) calls write_result.

    If this fails, a benchmark prints figures that never reach bench/RESULTS.md: give it
    a _results.write_result call with its headline figures and targets.
    """
    _, _, run_all = bench_modules
    local = {path.stem for path in BENCH.glob("*.py")}
    missing = []
    for _name, script, *_ in run_all.BENCHMARKS:
        source = (BENCH / script).read_text()
        helpers = {
            line.split()[1]
            for line in source.splitlines()
            if line.startswith("from ") and line.split()[1] in local - {"_results"}
        }
        texts = [source, *((BENCH / f"{helper}.py").read_text() for helper in helpers)]
        if not any("write_result(" in text for text in texts):
            missing.append(script)
    assert missing == []
