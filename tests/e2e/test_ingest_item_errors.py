"""`ragport ingest`'s loop (bootstrap.ingest.ingest_files) treats any exception from one file as
that file's failure (issue 24 item 7): a parser raising RecursionError, MemoryError, KeyError
or any other builtin exception fails that file only; the folder goes on."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest
from doubles import CountingEmbedder

import ragport
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.bootstrap.ingest import collect_documents, ingest_files
from ragport.ports.documents import ParsedDocument

SCOPE = ragport.Scope("tenant-1", "kb", "ingest-errors")
EXCEPTIONS = sorted(
    {v for v in vars(builtins).values() if isinstance(v, type) and issubclass(v, Exception)},
    key=lambda t: t.__name__,
)


class RaisingParser:
    """Raises the builtin exception its input names (not a BaseParser: nothing translates)."""

    id = "raising-v1"
    max_bytes = 1 << 20

    def parse(self, data: bytes, *, media_type=None, abort=None) -> ParsedDocument:
        name = data.decode().strip()
        if name == "fine":
            return ParsedDocument("a fine document about gamma", {}, "text/plain")
        error = getattr(builtins, name)
        if issubclass(error, UnicodeError):
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")
        raise error("secret document text")


def test_any_exception_from_one_file_fails_that_file_only(tmp_path: Path, monkeypatch):
    """Every builtin exception type from the parser is one failed outcome, with the type name
    only; the fine file is indexed; nothing raises out of the loop."""
    import ragport.adapters.parsers as parsers

    monkeypatch.setattr(parsers, "parser_for", lambda *_a, **_k: RaisingParser())
    root = tmp_path / "docs"
    root.mkdir()
    for error in EXCEPTIONS:
        (root / f"{error.__name__}.txt").write_text(error.__name__)
    (root / "fine.txt").write_text("fine")
    store = InMemoryStore()
    outcomes = list(
        ingest_files(
            collect_documents([root], root=root),
            root=root,
            store=store,
            status_store=InMemoryStatusStore(),
            embedder=CountingEmbedder(),
            scope=SCOPE,
        )
    )
    by_name = {o.path: o for o in outcomes}
    assert by_name["fine.txt"].state == "indexed"
    failed = [o for o in outcomes if o.state == "failed"]
    assert len(failed) == len(EXCEPTIONS)
    for outcome in failed:
        assert "secret" not in (outcome.error or "")
    assert store.get_by_source(SCOPE, "fine.txt")


@pytest.mark.parametrize("error", [RecursionError, MemoryError, KeyError])
def test_the_cli_reports_a_raising_parser_as_a_failed_file(
    tmp_path: Path, monkeypatch, capsys, error
):
    """`ragport ingest` on a folder whose parser raises exits 1 (some inputs failed), with no
    traceback, and indexes the other file."""
    import ragport.adapters.parsers as parsers
    from ragport.cli import main

    real = parsers.parser_for

    def pick(name, **kwargs):
        plain = str(name).endswith(".txt") or str(name).startswith("text/plain")
        return RaisingParser() if plain else real(name, **kwargs)

    monkeypatch.setattr(parsers, "parser_for", pick)
    root = tmp_path / "docs"
    root.mkdir()
    (root / "bad.txt").write_text(error.__name__)
    (root / "good.md").write_text("# Good\n\nA good document.\n")
    code = main(
        ["ingest", str(root), "--store", "memory://", "--corpus", "c", "--embedder", "hash"]
    )
    out = capsys.readouterr()
    assert code == 1
    assert "Traceback" not in out.err + out.out
    assert "bad.txt" in out.err + out.out


def test_a_broken_symlink_is_reported_as_such(tmp_path: Path) -> None:
    """A dangling symlink, found in a folder or given by name, is `broken_symlink` (not
    `outside_root` or `not_found`); a symlink to a file outside the root stays `outside_root`.
    If this fails, check collect_documents in ragport/bootstrap/ingest.py."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "ok.md").write_text("# Ok\n\nfine\n")
    (root / "gone.md").symlink_to(tmp_path / "nowhere" / "gone.md")
    (root / "gone-inside.md").symlink_to(root / "missing.md")
    outside = tmp_path / "outside.md"
    outside.write_text("# Out\n")
    (root / "out.md").symlink_to(outside)
    found = collect_documents([root], root=root.resolve())
    reasons = {c.path.name: c.reason for c in found}
    assert reasons == {
        "ok.md": None, "gone.md": "broken_symlink", "gone-inside.md": "broken_symlink",
        "out.md": "outside_root",
    }, reasons  # fmt: skip
    named = collect_documents([root / "gone.md"], root=root.resolve())
    assert [(c.path.name, c.reason) for c in named] == [("gone.md", "broken_symlink")]
    detail = next(c.detail for c in found if c.path.name == "gone.md")
    assert "symlink" in detail and "nowhere" not in detail
