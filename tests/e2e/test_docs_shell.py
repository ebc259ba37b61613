"""Every ```sh block of README.md and docs/*.md runs as written (docs/cli.md's ```console
lines run in tests/e2e/test_cli_docs.py; ```python blocks in test_docs_examples.py).

Each ``ragport`` line runs in process (``main``) in a sandbox: the working directory holds a
``docs/``, a ``handbook/`` and ``~/notes`` of small Markdown files, and a ``ragport.toml``
that points at the session PostgreSQL server (its own schema) with the hash embedder; it
must exit 0, or the code a trailing comment documents (``# ...: exit N``). ``export NAME=value`` sets a
variable; ``$NAME`` and ``~`` expand (``$SERVER`` is the test server). A block that cannot run here says so with an HTML
comment on the line before its fence, and the reason:

- ``<!-- docs-test: skip-commands pip, make -->``: lines starting with those commands are
  not run (installing, the Makefile); every other line still is;
- ``<!-- docs-test: elsewhere tests/e2e/test_x.py -->``: another test runs this block (it
  must exist and name the page);
- ``<!-- docs-test: not-a-command -->``: the block shows text that is not a shell session.

A block without a marker whose lines are not ``ragport`` or ``export`` fails: a new example
is tested or says why not.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from ragport.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(
    r"(?:^<!-- docs-test: (?P<marker>[^>]*?) -->\n)?^```(?:sh|bash|shell)\n(?P<body>.*?)^```$",
    re.S | re.M,
)
EXIT = re.compile(r"#[^#]*\bexit\s+(\d+)\s*$")
NOT_HERE = "docs/cli.md"  # its examples are ```console, run by test_cli_docs.py


def _blocks() -> list[tuple[str, str | None, str]]:
    found = []
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        # a ```sh fence inside a ````python example is the example's text, not a block
        text = re.sub(r"^````.*?^````$", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        for n, match in enumerate(FENCE.finditer(text), start=1):
            found.append((f"{name}#{n}", match["marker"], match["body"]))
    return found


BLOCKS = _blocks()


def _lines(body: str) -> list[str]:
    """Shell lines with ``\\`` continuations joined and blank and comment lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [line.strip() for line in joined.splitlines() if line.strip() and line.strip()[0] != "#"]


def _words(line: str, env: dict[str, str]) -> tuple[list[str], int]:
    match = EXIT.search(line)
    expected = int(match[1]) if match else 0
    words = shlex.split(line, comments=True)
    home = env["HOME"]
    words = [os.path.expandvars(w) if "$" in w else w for w in words]
    words = [home + w[1:] if w.startswith("~") else w for w in words]
    return words, expected


@pytest.fixture
def sandbox(tmp_path, monkeypatch, pg_url, pg_schema):
    home = tmp_path / "home"
    for folder in (tmp_path / "docs", tmp_path / "handbook", home / "notes"):
        folder.mkdir(parents=True)
        (folder / "leave.md").write_text(
            "# Leave\n\n## Parental leave\n\nParental leave lasts up to 16 weeks at full pay.\n"
        )
        (folder / "travel.md").write_text("# Travel\n\nBook trains for trips under 500 km.\n")
    (tmp_path / "ragport.toml").write_text(
        f'store = "{pg_url}"\nschema = "{pg_schema}"\nembedder = "hash"\n', encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RAGPORT_STORE", raising=False)
    monkeypatch.setenv("SERVER", pg_url)  # docs/operations.md's name for a PostgreSQL server
    assert main(["db", "upgrade"]) == 0
    return tmp_path


def test_the_pages_have_shell_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize(("where", "marker", "body"), BLOCKS, ids=[w for w, _, _ in BLOCKS])
def test_shell_block_runs(where, marker, body, sandbox, monkeypatch, capsys):
    """The block at ``where`` runs as written in the sandbox, or its marker says why not.

    If this fails, the page and the command line disagree at the line named: fix whichever
    is wrong (or mark the block, with the reason).
    """
    skip: set[str] = set()
    if marker is not None:
        kind, _, rest = marker.partition(" ")
        if kind == "not-a-command":
            return
        if kind == "elsewhere":
            test = ROOT / rest.strip()
            assert test.is_file(), f"{where}: {rest} does not exist"
            page = where.split("#")[0]
            assert page in test.read_text(encoding="utf-8"), f"{test} does not read {page}"
            return
        assert kind == "skip-commands", f"{where}: unknown marker {marker!r}"
        skip = {c.strip() for c in rest.split(",") if c.strip()}
    env = dict(os.environ)
    for line in _lines(body):
        if any(line == c or line.startswith(c + " ") for c in skip):
            continue
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            value = shlex.split(value, comments=True)[0] if value.strip() else ""
            if name == "RAGPORT_STORE":
                continue  # the sandbox's ragport.toml points at the test server instead
            monkeypatch.setenv(name, value)
            env[name] = value
            continue
        words, expected = _words(line, env)
        assert words[0] == "ragport", f"{where}: {line!r} is not a ragport command (mark it)"
        try:
            code = main(words[1:])
        except SystemExit as exc:  # --help, argparse usage errors
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        assert code == expected, f"{where}: {line!r} exited {code}, not {expected}: {captured.err}"
