"""Every lifecycle command on the embedded default server: one server (one private user data
directory) for the module.

The commands run through ``main()`` in this process (tests/support/cli_inprocess.py: a child
costs seconds before it starts, and these promises are about exit codes and output); the
real entry point (``python -m ragport.cli``) runs for --version and a closed pipe, and
tests/e2e/test_cli_persistent.py covers what one process leaves for the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_inprocess import run_cli

HASH = ("--embedder", "hash")


def _run(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cli(env, *args, stdin=stdin)


def _entry(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m ragport.cli ARGS`` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "ragport.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
        input="",
        cwd=env["RAGPORT_TEST_CWD"],
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    """A private data directory (so a private embedded server), stopped after the module."""
    base = tmp_path_factory.mktemp("cli-lifecycle")
    e = dict(os.environ)
    e.pop("RAGPORT_STORE", None)
    e["XDG_DATA_HOME"] = str(base / "data")
    e["RAGPORT_TEST_CWD"] = str(base)
    docs = base / "docs"
    (docs / "drafts").mkdir(parents=True)
    (docs / "zebra.md").write_text("# Zebras\n\nZebras have black and white stripes.\n")
    (docs / "penguin.md").write_text("# Penguins\n\nPenguins live in the south.\n")
    (docs / "drafts" / "a.md").write_text("# Draft A\n\nA draft about zebras.\n")
    (docs / "drafts" / "b.md").write_text("# Draft B\n\nAnother draft.\n")
    yield e
    _run(e, "db", "stop")


def _json(done: subprocess.CompletedProcess[str]):
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_failures_have_their_exit_codes(env):
    """A missing path is named (exit 1), an empty query is usage (2), an unknown corpus is
    'nothing found' (1), --version and --help exit 0, a closed pipe exits quietly.

    If this fails, check main and _exit_code in ragport/cli/__init__.py.
    """
    missing = _run(env, "ingest", "no/such/file.md", "--corpus", "kb", *HASH)
    assert missing.returncode == 1 and "no/such/file.md" in missing.stderr
    assert _run(env, "query", "", "--corpus", "kb").returncode == 2
    unknown = _run(env, "query", "zebra", "--corpus", "never-made")
    assert unknown.returncode == 1 and "never-made" in unknown.stderr
    assert _run(env, "status", "--corpus", "never-made").returncode == 1
    version = _entry(env, "--version")
    assert version.returncode == 0 and version.stdout.startswith("ragport ")
    helped = _run(env, "query", "--help")
    assert helped.returncode == 0 and "--top-k" in helped.stdout and "examples:" in helped.stdout
    assert _run(env, "query", "--no-such-option", "x").returncode == 2
    # a reader that goes away after the first line: no traceback, no BrokenPipeError
    reader = subprocess.Popen(
        [sys.executable, "-m", "ragport.cli", "config"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=env, cwd=env["RAGPORT_TEST_CWD"],
    )  # fmt: skip
    assert reader.stdout is not None
    reader.stdout.readline()
    reader.stdout.close()
    _, err = reader.communicate(timeout=60)
    assert reader.returncode == 0 and b"Traceback" not in err and b"BrokenPipe" not in err


def test_the_lifecycle_of_a_corpus(env):
    """ingest, sources, grants, delete (unknown refused, --prefix confirmed), generations,
    rollback, compact, reindex, forget, db status: each exits as documented.

    If this fails, the command named in the failing assertion is the place to look.
    """
    root = Path(env["RAGPORT_TEST_CWD"]) / "docs"
    assert _run(env, "ingest", str(root), "--corpus", "kb", *HASH).returncode == 0
    sources = _json(_run(env, "sources", "--corpus", "kb", "--json"))["items"]
    assert [s["source_id"] for s in sources] == [
        "drafts/a.md",
        "drafts/b.md",
        "penguin.md",
        "zebra.md",
    ]
    assert all(s["chunks"] == 1 and s["embedder"] == "hash-v1:256" for s in sources)
    before = _json(_run(env, "generations", "--corpus", "kb", "--json"))

    # another embedder is refused before anything is written, naming reindex
    other = _run(env, "ingest", str(root / "zebra.md"), "--corpus", "kb", "--embedder", "minilm")
    assert other.returncode == 2 and "ragport reindex" in other.stderr

    # grants
    assert (
        _run(
            env,
            "grants",
            "set",
            "zebra.md",
            "--principal",
            "alice",
            "--group",
            "staff",
            "--corpus",
            "kb",
        ).returncode
        == 0
    )
    assert (
        _run(env, "grants", "set", "nope.md", "--principal", "alice", "--corpus", "kb").returncode
        == 1
    )
    shown = {
        g["source_id"]: g for g in _json(_run(env, "grants", "show", "--corpus", "kb", "--json"))
    }
    assert shown["zebra.md"]["principal_ids"] == ["alice"] and shown["zebra.md"]["group_ids"] == [
        "staff"
    ]
    assert shown["penguin.md"]["principal_ids"] is None

    # delete: an unknown id refuses the whole command and writes nothing
    refused = _run(env, "delete", "zebra.md", "nope.md", "--corpus", "kb")
    assert refused.returncode == 1 and "nope.md" in refused.stderr
    assert (
        _json(_run(env, "generations", "--corpus", "kb", "--json"))["counter"] == before["counter"]
    )
    assert (
        _run(env, "delete", "--prefix", "drafts/", "--corpus", "kb").returncode == 2
    )  # no tty, no --yes
    deleted = _json(_run(env, "delete", "--prefix", "drafts/", "--yes", "--corpus", "kb", "--json"))
    assert sorted(d["source_id"] for d in deleted) == ["drafts/a.md", "drafts/b.md"]
    left = [
        s["source_id"] for s in _json(_run(env, "sources", "--corpus", "kb", "--json"))["items"]
    ]
    assert left == ["penguin.md", "zebra.md"]

    # rollback brings the drafts back; compact says what it removed
    back = _json(
        _run(env, "rollback", "--to", str(before["current"]), "--corpus", "kb", "--json", "--yes")
    )
    assert back["generation"] == before["current"] and back["restored"] == 2
    assert len(_json(_run(env, "sources", "--corpus", "kb", "--json"))["items"]) == 4
    gens = _json(_run(env, "generations", "--corpus", "kb", "--json"))
    assert gens["current"] == before["current"] and gens["written"]
    compacted = _run(env, "compact", "--keep", "0", "--corpus", "kb", "--yes")
    assert compacted.returncode == 0 and "physically removed" in compacted.stdout

    # reindex under minilm: every source moves at once, queries then run under minilm
    reindexed = _json(_run(env, "reindex", "--embedder", "minilm", "--corpus", "kb", "--json"))
    assert reindexed["sources"] == 4 and reindexed["embedder"].startswith("all-minilm")
    assert {
        s["embedder"] for s in _json(_run(env, "sources", "--corpus", "kb", "--json"))["items"]
    } == {reindexed["embedder"]}
    found = _json(_run(env, "query", "striped animals", "--corpus", "kb", "--json", "--top-k", "1"))
    assert found["hits"][0]["source_id"] in ("zebra.md", "drafts/a.md")

    # forget needs a principal with a grant on the source
    assert _run(env, "forget", "zebra.md", "--principal", "bob", "--corpus", "kb").returncode == 1
    forgotten = _json(
        _run(env, "forget", "zebra.md", "--principal", "alice", "--corpus", "kb", "--json")
    )
    assert forgotten["tombstoned"] >= 1
    # without --principal the command line acts for the owner, as delete does: no grant needed
    owner = _json(_run(env, "forget", "drafts/a.md", "--corpus", "kb", "--json"))
    assert owner["tombstoned"] >= 1
    assert "zebra.md" not in [
        s["source_id"] for s in _json(_run(env, "sources", "--corpus", "kb", "--json"))["items"]
    ]

    status = _json(_run(env, "db", "status", "--json"))
    assert status["running"] is True and status["ours"] is True
    assert status["recorded_binaries"] == status["our_binaries"] and status["size_bytes"] > 0


def test_sync_folder_then_generations_names_what_the_second_wrote(env):
    """`sync folder` twice (the second with the corpus's own embedder), then `generations`
    names what the second sync wrote and retired; no progress output without a terminal;
    `sync drive` without a token is a usage error; `sync folder --help` shows the defaults.

    If this fails, check _sync_run in ragport/cli/sync.py, _generations in
    ragport/cli/lifecycle.py and progress.console in ragport/cli/progress.py.
    """
    root = Path(env["RAGPORT_TEST_CWD"]) / "synced"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nfirst a\n")
    (root / "b.md").write_text("# B\n\nfirst b\n")
    first = _json(_run(env, "sync", "folder", str(root), "--corpus", "sy", *HASH, "--json"))
    assert (first["upserted"], first["bootstrapped"]) == (2, True)
    (root / "a.md").write_text("# A\n\nsecond a\n")
    (root / "b.md").unlink()
    again = _run(env, "sync", "folder", str(root), "--corpus", "sy")  # no --embedder: hash
    assert again.returncode == 0, again.stderr
    assert "1 upserted" in again.stdout and "1 deleted" in again.stdout
    assert "\r" not in again.stdout + again.stderr and "━" not in again.stdout + again.stderr
    gens = _json(_run(env, "generations", "--corpus", "sy", "--json"))
    latest = gens["changes"][0]
    assert (latest["generation"], latest["written"], latest["retired"]) == (
        gens["current"],
        ["a.md"],
        ["a.md", "b.md"],
    )
    assert gens["history"] is True and gens["changes"][-1]["written"] == ["a.md", "b.md"]

    no_token = dict(env)
    no_token.pop("RAGPORT_DRIVE_ACCESS_TOKEN", None)
    drive = _run(no_token, "sync", "drive", "--folder", "1AbC", "--corpus", "team")
    assert drive.returncode == 2 and "RAGPORT_DRIVE_ACCESS_TOKEN" in drive.stderr
    helped = _run(env, "sync", "folder", "--help")
    assert helped.returncode == 0 and "corpus, else 1000)" in helped.stdout
