"""Every `$ ragport ...` line of docs/cli.md runs, in order, with the exit code it documents,
and together they cover every command."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from ragport.cli import _iter_commands, _parser, main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
PAGE = ROOT / "docs" / "cli.md"
BLOCK = re.compile(r"^```console\n(.*?)^```$", re.S | re.M)
EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")
NOT_RUN = {"mcp"}  # serves stdio until its client closes it
NOT_HERE = {
    "grants", "db", "sync",  # groups: each of their subcommands needs its own example
    # run against a second server in docs/operations.md (tests/e2e/test_scaling_out_doc.py)
    "db dump", "db restore", "db copy",
}  # fmt: skip


def _lines() -> list[tuple[str, int]]:
    found = []
    for block in BLOCK.findall(PAGE.read_text(encoding="utf-8")):
        for line in block.splitlines():
            if not line.startswith("$ ragport"):
                continue
            command = line[2:]
            match = EXIT.search(command)
            code = int(match.group(1)) if match else 0
            found.append((EXIT.sub("", command), code))
    return found


def _command_of(argv: list[str], names: set[str]) -> str | None:
    words = [a for a in argv if not a.startswith("-")]
    if len(words) >= 2 and f"{words[0]} {words[1]}" in names:
        return f"{words[0]} {words[1]}"
    return words[0] if words and words[0] in names else None


def test_every_documented_command_runs_with_its_exit_code(
    tmp_path, monkeypatch, pg_url, pg_schema, capsys
):
    """Each example line exits as documented; every command has at least one example.

    If this fails, the docs and the command line disagree at the line named: fix whichever
    is wrong.
    """
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RAGPORT_STORE", raising=False)
    monkeypatch.delenv("RAGPORT_RERANK_API_KEY", raising=False)
    monkeypatch.delenv("RAGPORT_DRIVE_ACCESS_TOKEN", raising=False)
    (tmp_path / "handbook").mkdir()
    shutil.copy(DATA / "handbook.md", tmp_path / "handbook" / "handbook.md")
    shutil.copy(DATA / "travel-policy.pdf", tmp_path / "handbook" / "travel-policy.pdf")
    (tmp_path / "ragport.toml").write_text(
        f'store = "{pg_url}"\nschema = "{pg_schema}"\nembedder = "hash"\n', encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    names = {name for name, _ in _iter_commands(_parser())}
    covered = set()
    lines = _lines()
    assert lines, "docs/cli.md has no `$ ragport` examples"
    for command, expected in lines:
        argv = shlex.split(command)[1:]
        name = _command_of(argv, names)
        covered.add(name)
        if name in NOT_RUN:
            continue
        try:
            code = main(argv)
        except SystemExit as exc:  # --version, argparse usage errors
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        assert code == expected, f"{command!r} exited {code}, documented {expected}: {captured.err}"
    missing = {n for n in names if n not in covered and n not in NOT_HERE}
    assert not missing, f"commands without an example in docs/cli.md: {sorted(missing)}"
