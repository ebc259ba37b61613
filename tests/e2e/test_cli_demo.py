"""The command line: `ragport demo` prints cited results from the bundled corpus."""

from __future__ import annotations

import re
import subprocess
import sys

from ragport.cli import main


def test_demo_prints_cited_results_with_headings_and_scores(capsys):
    """The demo ingests the bundled Markdown and prints citation ids, headings and scores.

    If this fails, check ragport/cli/query.py `_demo` and the files under ragport/demo/.
    """
    assert main(["demo", "--store", "memory://"]) == 0
    out = capsys.readouterr().out
    assert "ingested security-guide" in out
    citations = re.findall(r"\[([\w-]+#\d{4})\] score=(-?\d\.\d{3})", out)
    assert len(citations) >= 2
    assert any(cid.startswith("security-guide#") for cid, _ in citations)
    assert any(cid.startswith("leave-policy#") for cid, _ in citations)
    assert "Leave policy > 3. Parental leave" in out


def test_demo_answers_the_parental_leave_question_from_the_leave_policy(capsys):
    """The top hit for the parental-leave query comes from the leave policy.

    If this fails, check the HashEmbedder features or the demo chunk size in ragport/cli/parser.py.
    """
    assert (
        main(
            [
                "demo",
                "--store",
                "memory://",
                "--query",
                "How many weeks of parental leave at full pay?",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    first = re.search(r"\[([\w-]+)#\d{4}\] score=", out)
    assert first is not None and first.group(1) == "leave-policy"
    assert "16 weeks" in out


def test_console_script_runs_in_a_fresh_process():
    """`python -m ragport.cli demo` exits 0 in a new process (no state from this one).

    If this fails, check the package data (ragport/demo/*.md) in pyproject.toml.
    """
    done = subprocess.run(
        [sys.executable, "-m", "ragport.cli", "demo", "--store", "memory://", "--top-k", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"\[[\w-]+#\d{4}\] score=", done.stdout)


def test_bad_arguments_fail_with_a_typed_error_and_exit_code_2(capsys):
    """A top-k past the hard ceiling exits 2 naming the error type, without a traceback.

    If this fails, check the RagportError handling in ragport/cli/__init__.py `main`.
    """
    assert main(["demo", "--store", "memory://", "--top-k", "99"]) == 2
    err = capsys.readouterr().err
    assert "ValidationError" in err and "Traceback" not in err
