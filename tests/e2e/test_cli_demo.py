"""The command line: `ragport demo` runs the bundled corpus through every step and checks
each outcome from the store (ragport/demo/run.py, printed by ragport/cli/demo.py through ragport/demo/report.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ragport.cli import main

ROOT = Path(__file__).resolve().parents[2]
STEPS = [
    "ingest",
    "questions",
    "unchanged",
    "replace",
    "access",
    "forget",
    "rollback",
    "folder_sync",
    "data",
]


def _demo_json(capsys, *argv: str) -> dict:
    assert main(["demo", "--embedder", "hash", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def memory_run() -> dict:
    """One in-memory demo run, shared by the step tests of this module."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["demo", "--store", "memory://", "--embedder", "hash", "--json"]) == 0
    return json.loads(out.getvalue())


def _step(run: dict, name: str) -> dict:
    return next(s for s in run["steps"] if s["name"] == name)["outcome"]


def test_demo_json_lists_the_nine_steps_with_explanations(memory_run):
    """`ragport demo --json` is one document: every step with name, explanation, outcome.

    If this fails, check run_demo's plan and EXPLANATIONS in ragport/demo/run.py.
    """
    assert [s["name"] for s in memory_run["steps"]] == STEPS
    assert [s["number"] for s in memory_run["steps"]] == list(range(1, 10))
    for step in memory_run["steps"]:
        assert step["explanation"].strip() and isinstance(step["outcome"], dict)
        assert step["seconds"] >= 0
    assert memory_run["kind"] == "memory" and memory_run["embedder"].startswith("hash-v1")


def test_step_1_ingests_every_format_with_its_parser(memory_run):
    """Markdown, HTML, a multi-page PDF over 100 kB and a DOCX are parsed by their parsers.

    If this fails, check the files under ragport/demo/ (make_corpus.py) and the package data.
    """
    files = _step(memory_run, "ingest")["files"]
    assert {f["parser"] for f in files} == {"markdown", "html", "pdf", "docx"}
    assert all(f["chunks"] > 0 for f in files)
    pdf = next(f for f in files if f["parser"] == "pdf")
    assert pdf["bytes"] > 100_000 and pdf["pages"] >= 4
    # one command, one generation (SharedGeneration): every file written at generation 1
    assert _step(memory_run, "ingest")["generation"] == 1
    assert {f["generation"] for f in files} == {1}


def test_step_2_answers_cite_file_heading_breadcrumb_and_pdf_page(memory_run):
    """Each question's top hit names its file; the PDF answer a page, the others a breadcrumb.

    If this fails, check DEMO_QUESTIONS and the texts of the bundled files.
    """
    answers = _step(memory_run, "questions")["answers"]
    assert len(answers) == 3
    brakes, car, forklift = (a["hits"][0] for a in answers)
    assert brakes["source_id"] == "fleet-maintenance.pdf" and brakes["page"] == 4
    assert "Brake pads" in brakes["text"]
    assert car["source_id"] == "travel-expenses.docx" and car["heading"][-1] == "Mileage"
    assert forklift["source_id"] == "warehouse-safety.html"
    assert forklift["heading"] == ["Warehouse safety", "Loading bays", "Forklifts"]
    assert all(
        h["citation_id"].startswith(h["source_id"] + "#") for a in answers for h in a["hits"]
    )


def test_step_3_unchanged_files_are_skipped_by_hash(memory_run):
    """Re-ingesting the same bytes embeds nothing and leaves the generation where it was.

    If this fails, check replace_document's skip key (ragport/application/documents.py).
    """
    step = _step(memory_run, "unchanged")
    assert step["skipped"] == len(step["files"]) == len(_step(memory_run, "ingest")["files"])
    assert step["indexed"] == 0 and step["generation_before"] == step["generation_after"]


def test_step_4_the_replaced_text_is_gone_and_the_new_found(memory_run):
    """After the replacement the old phrase has 0 hits from the source; the new one is found.

    If this fails, check replace_source's retirement of the previous rows.
    """
    step = _step(memory_run, "replace")
    assert step["old_phrase_hits_before"] >= 1
    assert step["old_phrase_hits"] == 0 and step["old_phrase_stored"] == 0
    assert step["new_phrase_hits"] >= 1
    assert step["generation"] == step["previous_generation"] + 1 and step["retired"] > 0


def test_step_5_the_denied_source_is_absent_and_reported(memory_run):
    """The principal's results hold nothing of the denied source; the report counts why.

    If this fails, check the access gate in ragport/application/retrieval.py.
    """
    step = _step(memory_run, "access")
    assert step["trusted_hits_from_source"] >= 1
    assert step["hits_from_source"] == 0 and step["hits"] > 0
    assert step["withheld"]["sources"] == [step["denied_source"]]
    assert step["withheld"]["reasons"].get("no_grant", 0) >= 1


def test_step_6_forgetting_a_source_removes_its_derived_summary(memory_run):
    """The summary resting on the forgotten source was found before and is gone after.

    If this fails, check the lineage closure in ragport/application/propagation.py.
    """
    step = _step(memory_run, "forget")
    assert step["derived_hits_before"] >= 1 and step["source_hits_before"] >= 1
    assert step["derived_hits"] == 0 and step["source_hits"] == 0
    assert set(step["tombstoned"]) == {step["source_id"], step["derived_id"]}


def test_step_7_rollback_brings_the_previous_version_back(memory_run):
    """Rolling back to before the replacement shows the old phrase again, not the new one,
    and the forgotten source stays withheld (tombstones are not versioned).

    If this fails, check rollback_generation.
    """
    step = _step(memory_run, "rollback")
    assert step["generation"] == step["to"] == _step(memory_run, "replace")["previous_generation"]
    assert step["old_phrase_hits"] >= 1 and step["new_phrase_hits"] == 0
    assert step["forgotten_source_hits"] == 0 and step["restored"] > 0


def test_step_8_folder_sync_picks_up_an_edit_a_rename_and_a_deletion(memory_run):
    """The second sync of the temporary folder: 1 edited, 1 renamed, 1 deleted, 1 unchanged.

    If this fails, check FolderConnector's listing and sync_knowledge's deletions.
    """
    step = _step(memory_run, "folder_sync")
    assert step["first_sync"]["upserted"] == 4
    assert (step["edited"], step["renamed"], step["deleted"]) == (1, 1, 1)
    assert step["unchanged"] == 1 and step["added"] == 0
    assert step["renames"] == [step["changes"]["rename"]]


def test_step_9_says_where_the_data_lives(memory_run):
    """In memory there is nothing to remove, and the step says so.

    If this fails, check _data_outcome in ragport/demo/run.py.
    """
    step = _step(memory_run, "data")
    assert step["kind"] == "memory" and step["remove"] is None and step["where"] == "in memory"


def test_demo_prints_each_step_with_its_outcome(capsys):
    """The text output has a numbered line per step, the skip, a PDF page and a breadcrumb.

    If this fails, check the printers in ragport/cli/demo.py.
    """
    assert main(["demo", "--store", "memory://", "--embedder", "hash"]) == 0
    out = capsys.readouterr().out
    for number, name in enumerate(STEPS, start=1):
        assert re.search(rf"^{number}\. {name}: \S", out, re.M), name
    assert "unchanged, skipped" in out
    assert re.search(r"\[fleet-maintenance\.pdf#\d{4}\] fleet-maintenance\.pdf · page 4", out)
    assert "Warehouse safety > Loading bays > Forklifts" in out
    assert "-> 1 edited, 1 renamed, 1 deleted" in out


def test_demo_answers_a_question_of_ones_own_from_the_leave_policy(capsys):
    """`--query` replaces the three questions; the parental-leave one is answered from the
    leave policy's first version.

    If this fails, check the HashEmbedder features or the demo chunk size in ragport/cli/demo.py (register).
    """
    run = _demo_json(
        capsys, "--store", "memory://", "--query", "How many weeks of parental leave at full pay?"
    )
    (answer,) = _step(run, "questions")["answers"]
    top = answer["hits"][0]
    assert top["source_id"] == "leave-policy.md" and "16 weeks" in top["text"]


def test_console_script_runs_in_a_fresh_process():
    """`python -m ragport.cli demo` exits 0 in a new process (no state from this one).

    If this fails, check the package data (ragport/demo/*) in pyproject.toml.
    """
    done = subprocess.run(
        [sys.executable, "-m", "ragport.cli", "demo", "--store", "memory://", "--embedder",
         "hash", "--top-k", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.search(r"\[[\w.-]+#\d{4}\] ", done.stdout)


def test_bad_arguments_fail_with_a_typed_error_and_exit_code_2(capsys):
    """A top-k past the hard ceiling exits 2 naming the error type, without a traceback.

    If this fails, check the RagportError handling in ragport/cli/__init__.py `main`.
    """
    assert main(["demo", "--store", "memory://", "--top-k", "99"]) == 2
    err = capsys.readouterr().err
    assert "ValidationError" in err and "Traceback" not in err


def test_demo_on_postgresql_starts_empty_every_run_and_clean_drops_its_schema(
    capsys, pg_url, pg_engine
):
    """On PostgreSQL the demo uses schema ragport_demo, emptied first: a second run ingests
    again and checks the same outcomes; `--clean` drops the schema.

    If this fails, check open_demo_stores and clean_demo in ragport/demo/run.py.
    """
    from sqlalchemy import text

    for _ in range(2):
        run = _demo_json(capsys, "--store", pg_url)
        assert run["kind"] == "postgresql"
        assert _step(run, "ingest")["chunks"] > 0
        assert _step(run, "replace")["old_phrase_hits"] == 0
        assert _step(run, "access")["hits_from_source"] == 0
        assert _step(run, "forget")["derived_hits"] == 0
        assert _step(run, "rollback")["old_phrase_hits"] >= 1
        sync = _step(run, "folder_sync")
        assert (sync["edited"], sync["renamed"], sync["deleted"]) == (1, 1, 1)
        assert _step(run, "data")["schema"] == "ragport_demo"
    assert main(["demo", "--store", pg_url, "--clean"]) == 0
    assert "dropped" in capsys.readouterr().out
    with pg_engine.connect() as conn:
        left = conn.execute(
            text("SELECT 1 FROM pg_namespace WHERE nspname = 'ragport_demo'")
        ).first()
    assert left is None


def test_the_committed_pdf_is_what_make_corpus_writes():
    """ragport/demo/fleet-maintenance.pdf is the output of make_corpus.py (regenerate it).

    If this fails, run `.venv/bin/python ragport/demo/make_corpus.py` and commit the PDF.
    """
    path = ROOT / "ragport" / "demo" / "make_corpus.py"
    spec = importlib.util.spec_from_file_location("make_corpus", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.manual_pdf() == (ROOT / "ragport" / "demo" / "fleet-maintenance.pdf").read_bytes()
