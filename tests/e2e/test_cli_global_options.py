"""Global options before the command (`ragport --store memory:// ingest docs`) mean what they
mean after it; given both, the one after the command wins; one the command does not take is
a usage error naming it. Real invocations: `main` in process and one `python -m ragport`."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragport.cli import EXIT_OK, EXIT_STORE, EXIT_USAGE, _iter_commands, _parser, main
from ragport.cli.options import GLOBAL_OPTIONS

HASH = ["--embedder", "hash"]
# Nothing listens on port 9: a store that cannot be reached, refused before any work.
UNREACHABLE = "postgresql://nobody@127.0.0.1:9/none"


@pytest.fixture
def docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RAGPORT_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "leave.md").write_text("# Leave\n\nParental leave lasts 16 weeks.\n")
    (folder / "travel.md").write_text("# Travel\n\nBook trains through the portal.\n")
    return folder


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _lines(out: str) -> list[dict[str, object]]:
    """The JSON lines of `ingest --json`, without their timings."""
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def _ingested(out: str) -> list[object]:
    return sorted(str(row["source_id"]) for row in _lines(out))


def test_every_global_option_before_the_command_means_the_same_as_after(docs, capsys):
    """`ragport --store memory:// --corpus kb --embedder hash --json ingest docs` ingests
    exactly as the same options after the command do (the same JSON lines).

    If this fails, check apply_global_options in ragport/cli/options.py.
    """
    options = ["--store", "memory://", "--corpus", "kb", *HASH, "--json"]
    code, before, err = _run(capsys, *options, "ingest", str(docs))
    assert code == EXIT_OK, err
    code, after, err = _run(capsys, "ingest", str(docs), *options)
    assert code == EXIT_OK, err
    assert _ingested(before) == ["leave.md", "travel.md"]
    assert _lines(before) == _lines(after)


def test_the_option_after_the_command_wins(docs, capsys):
    """Given before and after the command, the one after is used: an unreachable store
    after a working one fails with exit 3, and the other way round succeeds.

    If this fails, check that apply_global_options leaves an option given after the command.
    """
    code, _, err = _run(
        capsys, "--store", "memory://", "ingest", str(docs), "--store", UNREACHABLE, *HASH
    )
    assert code == EXIT_STORE, err
    code, out, err = _run(
        capsys, "--store", UNREACHABLE, "ingest", str(docs), "--store", "memory://", *HASH,
        "--json",
    )  # fmt: skip
    assert code == EXIT_OK, err
    assert _ingested(out) == ["leave.md", "travel.md"]
    args = _parser().parse_args(["--corpus", "a", "query", "x", "--corpus", "b"])
    assert args.corpus == ["b"]  # a repeatable option too: the ones after the command
    assert _parser().parse_args(["--corpus", "a", "query", "x"]).corpus == ["a"]


def test_a_global_option_the_command_does_not_take_is_a_usage_error(docs, capsys):
    """`ragport --corpus kb db stop` (db stop has no corpus) and `ragport --json grants set`
    exit 2 naming the option and the command, before anything runs.

    If this fails, check the refusal in apply_global_options.
    """
    for argv, flag, name in (
        (["--corpus", "kb", "db", "stop"], "--corpus", "ragport db stop"),
        (["--json", "grants", "set", "x", "--principal", "a"], "--json", "ragport grants set"),
        (["--schema", "s", "demo"], "--schema", "ragport demo"),
    ):
        code, out, err = _run(capsys, *argv)
        assert code == EXIT_USAGE and out == ""
        assert flag in err and f"`{name}`" in err, err


# The arguments each command needs to parse (a new command must be added here).
MINIMAL = {
    "demo": [], "ingest": ["d"], "query": ["q"], "eval": ["q.jsonl", "r.tsv"], "delete": [],
    "forget": ["s"], "readmit": ["s"], "status": [], "sources": [], "grants set": ["s"],
    "grants show": [], "generations": [], "rollback": ["--to", "1"], "compact": [],
    "reindex": ["--embedder", "hash"], "config": [], "mcp": [], "sync folder": ["p"],
    "sync drive": [], "db upgrade": [], "db dump": ["p"], "db restore": ["p"],
    "db copy": ["--to", "u"], "db stop": [], "db status": [],
}  # fmt: skip


def test_global_options_apply_to_every_command_that_takes_them():
    """For every command and every global option: before the command it parses to exactly
    the arguments it gives after the command when the command takes it, and is a usage
    error when not.

    If this fails, check GLOBAL_OPTIONS and apply_global_options in ragport/cli/options.py
    (or add a new command to MINIMAL).
    """
    parser = _parser()
    leaves = {
        name: child
        for name, child in _iter_commands(parser)
        if not any(isinstance(a, argparse._SubParsersAction) for a in child._actions)
    }
    assert set(leaves) == set(MINIMAL)
    same = refused = 0
    for name, child in leaves.items():
        takes = {s for a in child._actions for s in a.option_strings}
        for flag, metavar, _ in GLOBAL_OPTIONS:
            option = [flag] if metavar is None else [flag, "v1"]
            if flag in MINIMAL[name]:
                continue  # required after the command (reindex --embedder)
            before = [*option, *name.split(), *MINIMAL[name]]
            if flag not in takes:
                with pytest.raises(SystemExit) as info:
                    parser.parse_args(before)
                assert info.value.code == EXIT_USAGE
                refused += 1
                continue
            after = [*name.split(), *MINIMAL[name], *option]
            assert vars(parser.parse_args(before)) == vars(parser.parse_args(after)), (name, flag)
            same += 1
    assert same >= 100 and refused >= 20, (same, refused)


def test_the_documented_invocation_runs_as_a_process(docs, tmp_path):
    """`python -m ragport.cli --store memory:// ingest docs` (the form of shared/API.md) exits 0
    and says what it ingested.

    If this fails, check ragport/cli/parser.py (_RagportParser).
    """
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg"), "RAGPORT_NO_CONFIG": "1"}
    env.pop("RAGPORT_STORE", None)
    done = subprocess.run(
        [sys.executable, "-m", "ragport.cli", "--store", "memory://", "--json", "ingest", str(docs),
         *HASH],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    assert _ingested(done.stdout) == ["leave.md", "travel.md"]
