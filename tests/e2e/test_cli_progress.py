"""Progress of `ragport ingest`, `reindex` and `sync`: nothing without a terminal, a rich bar on
stderr with one, never on stdout (in process, ``main``; the bar is seen through a rich Console
forced to a terminal and writing into a buffer)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

import ragport.cli.progress as progress
from ragport.adapters.connectors import FolderConnector
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStore
from ragport.adapters.parsers import parser_for
from ragport.application.sync import SyncOptions, SyncProgress, sync_knowledge
from ragport.cli import EXIT_OK, main
from ragport.domain.model import Scope

HASH = ["--embedder", "hash"]
BAR = "━"  # rich's bar glyph


@pytest.fixture
def folder(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("alpha", "beta", "gamma"):
        (docs / f"{name}.md").write_text(f"# {name.title()}\n\nText about {name}.\n")
    return docs


@pytest.fixture
def terminal(monkeypatch):
    """Progress drawn on a forced-terminal Console into a buffer; returns the buffer."""
    buffer = io.StringIO()

    def console():
        return Console(file=buffer, force_terminal=True, width=120, color_system=None)

    monkeypatch.setattr(progress, "console", console)
    return buffer


def test_without_a_terminal_ingest_and_sync_print_no_progress(folder, capsys, monkeypatch):
    """stderr is not a terminal under pytest: no bar anywhere, the per-file lines on stdout.

    If this fails, check progress.console (stderr.isatty) and the plain branch of _ingest.
    """
    monkeypatch.setenv("XDG_DATA_HOME", str(folder.parent / "xdg"))
    assert main(["ingest", str(folder), "--store", "memory://", *HASH]) == EXIT_OK
    out, err = capsys.readouterr()
    assert [line.split("]")[0] for line in out.splitlines()[:3]] == ["[1/3", "[2/3", "[3/3"]
    assert BAR not in out + err and "\r" not in out + err
    assert main(["sync", "folder", str(folder), "--store", "memory://", *HASH]) == EXIT_OK
    out, err = capsys.readouterr()
    assert "3 upserted" in out and BAR not in out + err and "\r" not in out + err


def test_ingest_draws_its_bar_on_the_terminal_and_keeps_json_on_stdout(
    folder, terminal, capsys, monkeypatch
):
    """With a terminal the bar shows "ingest", done/total and the unit; --json stdout is still
    one JSON object per line and nothing else.

    If this fails, check track() in ragport/cli/progress.py and _ingest's bar.update.
    """
    monkeypatch.setenv("XDG_DATA_HOME", str(folder.parent / "xdg"))
    assert main(["ingest", str(folder), "--store", "memory://", "--json", *HASH]) == EXIT_OK
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["source_id"] for r in rows] == ["alpha.md", "beta.md", "gamma.md"]
    drawn = terminal.getvalue()
    assert "ingest" in drawn and "3/3" in drawn and "files" in drawn and BAR in drawn
    assert BAR not in out


def test_sync_folder_draws_a_bar_that_grows_with_the_listing(folder, terminal, capsys):
    """sync's total is learnt from the listing: the bar reaches listed/listed items.

    If this fails, check the on_progress hook of sync_knowledge and _sync_run's callback.
    """
    assert main(["sync", "folder", str(folder), "--store", "memory://", "--json", *HASH]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["upserted"] == 3
    drawn = terminal.getvalue()
    assert "sync folder" in drawn and "3/3" in drawn and "items" in drawn


def test_reindex_draws_a_bar_per_source(tmp_path, terminal, capsys, monkeypatch, pg_url, pg_schema):
    """reindex counts sources on the bar; its result stays on stdout.

    If this fails, check _reindex's tick and reindex_corpus's on_source.
    """
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(4):
        (docs / f"d{n}.md").write_text(f"# Doc {n}\n\nbody {n}\n")
    store = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *store]) == EXIT_OK
    assert main(["ingest", str(docs), "--corpus", "kb", *store, *HASH]) == EXIT_OK
    terminal.seek(0)
    terminal.truncate()
    capsys.readouterr()
    assert main(["reindex", "--embedder", "hash", "--corpus", "kb", "--json", *store]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["sources"] == 4
    drawn = terminal.getvalue()
    assert "reindex" in drawn and "4/4" in drawn and "sources" in drawn


def test_sync_knowledge_reports_progress_page_by_page(tmp_path):
    """on_progress sees listed grow page by page and done reach it, never above it.

    If this fails, check the counts kept beside the page loop of sync_knowledge.
    """
    root = tmp_path / "docs"
    root.mkdir()
    for n in range(5):
        (root / f"f{n}.md").write_text(f"# F{n}\n\nfile {n}\n")
    seen: list[SyncProgress] = []
    result = sync_knowledge(
        connector=FolderConnector(root, page_size=2),
        checkpoints=InMemoryCheckpointStore(),
        store=InMemoryStore(),
        embedder=HashEmbedder(),
        scope=Scope("t", "r", "c"),
        parser=parser_for,
        options=SyncOptions(on_progress=seen.append),
    )
    assert result.upserted == 5 and result.pages == 3
    assert all(0 <= p.done <= p.listed for p in seen)
    assert [p.listed for p in seen if p.source_id is None and p.done == p.listed] == [2, 4, 5]
    assert sorted({p.source_id for p in seen if p.source_id}) == [f"f{n}.md" for n in range(5)]
    assert seen[-1] == SyncProgress(pages=3, listed=5, done=5)
