"""Terminal escape injection: nothing `ragport` prints carries a raw control character.

Document text (clear screen, OSC 52 clipboard writes, window titles), file names and error
messages reach stdout and stderr with every C0 control but newline and tab, DEL, every C1
control and the bidirectional overrides written as ``\\uXXXX``: visible, inert, and still
valid JSON (where ``json.dumps`` leaves C1, DEL and bidi controls raw, they are escaped too).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from ragport.cli import EXIT_OK, main, output, progress
from ragport.cli.output import escape_controls

HASH = ["--embedder", "hash"]
HOSTILE = (
    "Quagga stripes \x1b]52;c;SGVsbG8=\x07 then \x1b[2J\x1b]0;title\x07 and \x9b31m \u202egnp.exe"
)
NAME = "red\x1b[31mzebra.md"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def kb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str, pg_schema: str, capsys):
    """A hostile document, a file with a hostile name (refused as a source id: its name is
    printed in the failure lines) and a plain one, for a fresh PostgreSQL schema."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RAGPORT_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "zebra.md").write_text(f"# Zebra \x1b[5mheading\n\n{HOSTILE}\n")
    (docs / NAME).write_text("# Red\n\nA red zebra.\n")
    (docs / "plain.md").write_text("# Plain\n\nNothing odd here.\n")
    store = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *store]) == EXIT_OK
    capsys.readouterr()
    return store, docs


def _clean(text: str) -> None:
    assert not RAW.search(text), repr(RAW.search(text))


def test_ingest_and_query_print_no_raw_control_characters(kb, capsys) -> None:
    """`ingest` (file names) and `query` (document text, headings) escape control characters
    in plain output, and the escaped text is still there to read.

    If this fails, check escape_controls and the escaping streams main installs
    (ragport/cli/output.py, ragport/cli/__init__.py)."""
    store, docs = kb
    main(["ingest", str(docs), *store, *HASH])
    ingested = capsys.readouterr()
    _clean(ingested.out + ingested.err)
    assert "red\\u001b[31mzebra.md" in ingested.out + ingested.err
    assert main(["query", "quagga stripes", *store, *HASH]) == EXIT_OK
    queried = capsys.readouterr()
    _clean(queried.out + queried.err)
    assert "\\u001b]52;c;SGVsbG8=\\u0007" in queried.out and "\\u001b[2J" in queried.out
    assert "\\u202egnp.exe" in queried.out and "\\u009b31m" in queried.out


def test_json_output_stays_valid_json_with_the_text_intact(kb, capsys) -> None:
    """`--json` output has no raw C1, DEL or bidi control either, and decodes to the text.

    If this fails, check escape_controls (it must write JSON-valid \\uXXXX escapes)."""
    store, docs = kb
    main(["ingest", str(docs), *store, *HASH, "--json"])
    lines = capsys.readouterr().out.splitlines()
    _clean("\n".join(lines))
    assert any(NAME in json.loads(line)["path"] for line in lines)
    assert main(["query", "quagga stripes", *store, *HASH, "--json"]) == EXIT_OK
    out = capsys.readouterr().out
    _clean(out)
    assert HOSTILE in json.loads(out)["hits"][0]["text"]


def test_rich_tables_and_the_progress_bar_escape_too(kb, capsys, monkeypatch) -> None:
    """On a terminal (rich), table cells, per-file lines and the bar's item name are escaped.

    If this fails, check _table and _rich_console in ragport/cli/output.py and progress.py."""
    store, docs = kb
    screen = io.StringIO()
    bar = io.StringIO()

    def console(*_args, **_kwargs):
        return Console(file=screen, force_terminal=True, width=200, color_system=None)

    monkeypatch.setattr(output, "_rich_console", console)
    monkeypatch.setattr(
        progress,
        "console",
        lambda: Console(file=bar, force_terminal=True, width=200, color_system=None),
    )
    main(["ingest", str(docs), *store, *HASH])
    assert main(["sources", *store]) == EXIT_OK
    assert main(["query", "quagga stripes", *store, *HASH]) == EXIT_OK
    captured = capsys.readouterr()
    shown = screen.getvalue() + bar.getvalue() + captured.out + captured.err
    for raw in ("\x1b[31m", "\x1b]52", "\x1b[2J", "\x1b[5m", "\x07", "\x9b", "\u202e"):
        assert raw not in shown, repr(raw)
    assert "red\\u001b[31mzebra.md" in bar.getvalue()
    assert "\\u001b[5mheading" in screen.getvalue()


def test_errors_are_escaped(tmp_path: Path, capsys) -> None:
    """An error naming a hostile path (here a missing file) reaches stderr escaped.

    If this fails, check the stderr stream main installs (ragport/cli/__init__.py)."""
    missing = tmp_path / "no\x1b]0;owned\x07such.md"
    main(["ingest", str(missing), "--store", "memory://", *HASH])
    captured = capsys.readouterr()
    _clean(captured.out + captured.err)
    assert "\\u001b]0;owned\\u0007" in captured.err


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a\x1bb", "a\\u001bb"),
        ("keep\nnew\tlines", "keep\nnew\tlines"),
        ("\r\x00\x7f\x85\x9f", "\\u000d\\u0000\\u007f\\u0085\\u009f"),
        ("\u202a\u202e\u2066\u2069", "\\u202a\\u202e\\u2066\\u2069"),
        ("caf\u00e9 \u00a0ok", "caf\u00e9 \u00a0ok"),
    ],
)
def test_escape_controls(raw: str, shown: str) -> None:
    """The one escape function: C0 but newline and tab, DEL, C1 and bidi controls only.

    If this fails, check escape_controls in ragport/cli/output.py."""
    assert escape_controls(raw) == shown
