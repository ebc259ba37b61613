"""`ragport grants set --prefix` and how `grants show` names a source nobody may see (in
process, ``main``, on the session PostgreSQL server)."""

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
    docs = tmp_path / "docs"
    (docs / "hr").mkdir(parents=True)
    for name in ("hr/leave.md", "hr/pay.md", "travel.md"):
        (docs / name).write_text(f"# {name}\n\ntext of {name}\n")
    assert main(["ingest", str(docs), "--root", str(docs), "--corpus", "kb", *HASH, *store]) == 0
    capsys.readouterr()

    def run(*args: str) -> tuple[int, str, str]:
        code = main([*args, *store])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def _shown(cli) -> dict[str, dict]:
    code, out, err = cli("grants", "show", "--corpus", "kb", "--json")
    assert code == EXIT_OK, err
    return {g["source_id"]: g for g in json.loads(out)}


def test_grants_set_prefix_sets_every_matching_source_after_asking(cli, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    code, _, err = cli("grants", "set", "--prefix", "hr/", "--group", "hr", "--corpus", "kb")
    assert code == EXIT_USAGE and "--yes" in err
    assert not any(g["granted"] for g in _shown(cli).values())

    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda _prompt: "n")
    code, _, err = cli("grants", "set", "--prefix", "hr/", "--group", "hr", "--corpus", "kb")
    assert code == EXIT_FAILED and "no grant set" in err
    assert not any(g["granted"] for g in _shown(cli).values())

    code, out, _ = cli(
        "grants", "set", "--prefix", "hr/", "--group", "hr", "--corpus", "kb", "--yes"
    )
    assert code == EXIT_OK and "hr/leave.md" in out and "hr/pay.md" in out
    shown = _shown(cli)
    assert shown["hr/leave.md"]["group_ids"] == ["hr"] and shown["hr/pay.md"]["group_ids"] == ["hr"]
    assert shown["hr/leave.md"]["granted"] and not shown["travel.md"]["granted"]


def test_grants_set_refuses_both_or_neither_and_an_unmatched_prefix(cli):
    assert cli("grants", "set", "--group", "hr", "--corpus", "kb")[0] == EXIT_USAGE
    both = cli("grants", "set", "travel.md", "--prefix", "hr/", "--group", "x", "--corpus", "kb")
    assert both[0] == EXIT_USAGE
    code, _, err = cli("grants", "set", "--prefix", "nope/", "--group", "x", "--corpus", "kb")
    assert code == EXIT_FAILED and "nope/" in err


def test_no_grant_and_an_empty_grant_read_the_same(cli):
    """Both deny every caller with an authorization, so the table says it one way."""
    assert cli("grants", "set", "travel.md", "--corpus", "kb")[0] == EXIT_OK  # an empty grant
    shown = _shown(cli)
    assert shown["travel.md"]["principal_ids"] == [] and shown["hr/pay.md"]["principal_ids"] is None
    assert not shown["travel.md"]["granted"] and not shown["hr/pay.md"]["granted"]
    code, out, _ = cli("grants", "show", "--corpus", "kb")
    assert code == EXIT_OK
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()[:1] in "ht"}
    denied = "no grant: denied to every caller"
    assert denied in lines["travel.md"] and denied in lines["hr/pay.md"]


def test_sources_and_status_page_with_one_cursor_style_and_totals(cli):
    """Both print `more: --cursor X` and give `cursor` (null on the last page) and totals in
    JSON; following the cursors visits every source once."""
    seen: list[str] = []
    cursor: list[str] = []
    while True:
        code, out, _ = cli("sources", "--corpus", "kb", "--json", "--limit", "2", *cursor)
        shown = json.loads(out)
        assert code == EXIT_OK and shown["total"] == 3 and len(shown["items"]) <= 2
        seen += [row["source_id"] for row in shown["items"]]
        if shown["cursor"] is None:
            break
        cursor = ["--cursor", shown["cursor"]]
    assert seen == ["hr/leave.md", "hr/pay.md", "travel.md"]

    code, out, _ = cli("sources", "--corpus", "kb", "--limit", "2")
    assert "3 source(s), 2 shown" in out and "more: --cursor hr/pay.md" in out
    code, out, _ = cli("status", "--corpus", "kb", "--json", "--limit", "2")
    shown = json.loads(out)
    assert (shown["total"], shown["states"]) == (3, {"indexed": 3})
    assert len(shown["items"]) == 2 and shown["cursor"]
    code, out, _ = cli("status", "--corpus", "kb", "--limit", "2")
    assert "3 source(s) (3 indexed)" in out and "more: --cursor " in out
