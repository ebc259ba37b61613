"""`ragport generations`: what each recent generation wrote and retired, through rollback and
compaction (in process, ``main``, on the session PostgreSQL server)."""

from __future__ import annotations

import json

import pytest

from ragport.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main

HASH = ["--embedder", "hash"]


@pytest.fixture
def cli(tmp_path, monkeypatch, pg_url, pg_schema, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    store = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *store]) == EXIT_OK
    capsys.readouterr()

    def run(*args: str) -> tuple[int, str, str]:
        code = main([*args, *store])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def _generations(cli, *extra: str) -> dict:
    code, out, err = cli("generations", "--corpus", "kb", "--json", *extra)
    assert code == EXIT_OK, err
    return json.loads(out)


def test_generations_show_sources_written_and_retired(cli, tmp_path):
    """An ingest, an edit and a delete: each generation lists what it wrote and retired, with
    counts; rollback and compaction change the history as they change the corpus.

    If this fails, check _generations in ragport/cli/lifecycle.py and the store's
    generation_history.
    """
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nfirst a\n")
    (docs / "b.md").write_text("# B\n\nfirst b\n")
    assert cli("ingest", str(docs), "--corpus", "kb", *HASH)[0] == EXIT_OK
    (docs / "a.md").write_text("# A\n\nsecond a\n")
    assert cli("ingest", str(docs / "a.md"), "--corpus", "kb", *HASH)[0] == EXIT_OK
    assert cli("delete", "b.md", "--corpus", "kb")[0] == EXIT_OK
    shown = _generations(cli)
    current = shown["current"]
    assert shown["history"] is True
    changes = {c["generation"]: (c["written"], c["retired"]) for c in shown["changes"]}
    assert changes[current] == ([], ["b.md"])  # the delete
    assert changes[current - 1] == (["a.md"], ["a.md"])  # the edit replaced a
    assert shown["written"][str(current - 1)] == ["a.md"]
    assert shown["retired"][str(current)] == ["b.md"]
    latest = shown["changes"][0]
    assert (latest["sources_retired"], latest["records_retired"], latest["records_written"]) == (
        1,
        1,
        0,
    )

    # the table names both
    code, out, _ = cli("generations", "--corpus", "kb")
    assert code == EXIT_OK and "b.md" in out and "retired" in out.lower()

    # rollback: the delete is gone from the history, b is visible again
    assert cli("rollback", "--to", str(current - 1), "--corpus", "kb", "--yes")[0] == EXIT_OK
    back = _generations(cli)
    assert back["current"] == current - 1
    assert back["changes"][0]["generation"] == current - 1
    assert all("b.md" not in c["retired"] for c in back["changes"])

    # compaction: only generations above the floor are shown
    assert cli("compact", "--keep", "0", "--corpus", "kb", "--yes")[0] == EXIT_OK
    compacted = _generations(cli)
    assert compacted["floor"] == compacted["current"] - 1
    assert [c["generation"] for c in compacted["changes"]] == [compacted["current"]]

    # --limit and --max-ids: the newest generation only, ids capped, counts whole
    (docs / "c.md").write_text("# C\n\nc\n")
    (docs / "d.md").write_text("# D\n\nd\n")
    assert cli("ingest", str(docs / "c.md"), str(docs / "d.md"), "--corpus", "kb", *HASH)[0] == 0
    one = _generations(cli, "--limit", "1", "--max-ids", "0")
    # one command, one generation: both files in it
    assert [(c["written"], c["sources_written"]) for c in one["changes"]] == [([], 2)]
    assert _generations(cli, "--limit", "1")["changes"][0]["written"] == ["c.md", "d.md"]


def test_generations_refuses_bad_limits_and_an_empty_corpus(cli):
    """--limit 0 is a usage error (2); an unknown corpus is nothing found (1).

    If this fails, check check_history_args and the NothingFound at the end of _generations.
    """
    assert cli("generations", "--corpus", "kb", "--limit", "0")[0] == EXIT_USAGE
    assert cli("generations", "--corpus", "nope")[0] == EXIT_FAILED


def test_rollback_and_compact_ask_first_like_delete_prefix(cli, tmp_path, monkeypatch):
    """Without --yes: refused when stdin is no terminal (exit 2), and a "no" at the prompt
    changes nothing (exit 1); --yes runs them."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nfirst\n")
    assert cli("ingest", str(docs / "a.md"), "--corpus", "kb", *HASH)[0] == EXIT_OK
    (docs / "a.md").write_text("# A\n\nsecond\n")
    assert cli("ingest", str(docs / "a.md"), "--corpus", "kb", *HASH)[0] == EXIT_OK
    current = _generations(cli)["current"]

    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    for command in (["rollback", "--to", str(current - 1)], ["compact", "--keep", "0"]):
        code, _, err = cli(*command, "--corpus", "kb")
        assert code == EXIT_USAGE and "--yes" in err
    assert _generations(cli)["current"] == current

    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda _prompt: "n")
    code, _, err = cli("rollback", "--to", str(current - 1), "--corpus", "kb")
    assert code == EXIT_FAILED and "nothing rolled back" in err
    code, _, err = cli("compact", "--keep", "0", "--corpus", "kb")
    assert code == EXIT_FAILED and "nothing removed" in err
    shown = _generations(cli)
    assert (shown["current"], shown["floor"]) == (current, 0)

    monkeypatch.setattr("builtins.input", lambda _prompt: "y")
    assert cli("rollback", "--to", str(current - 1), "--corpus", "kb")[0] == EXIT_OK
    assert _generations(cli)["current"] == current - 1
