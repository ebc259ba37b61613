"""`ragport query --under FOLDER` (one subfolder of a corpus) and the score kind of each hit
(issue 43, item 9), on the in-memory store and on PostgreSQL: the same hits on both."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest

import ragport.cli.ingest as cli_ingest
import ragport.cli.query as cli_query
from ragport.bootstrap import open_stores
from ragport.cli import EXIT_OK, EXIT_USAGE, main

HASH = ["--embedder", "hash"]
FILES = {
    "docs/guides/install.md": "# Install\n\nZebra install steps for the guide.\n",
    "docs/guides/deep/tuning.md": "# Tuning\n\nZebra tuning, deep in the guides.\n",
    "docs/guides-old/install.md": "# Old install\n\nZebra install, the old guide.\n",
    "docs/api/zebra.md": "# API\n\nThe zebra API reference.\n",
    "readme.md": "# Readme\n\nZebra readme at the root.\n",
}


@pytest.fixture(params=["memory", "postgres"])
def store(request, tmp_path, monkeypatch, capsys) -> Iterator[list[str]]:
    """The folder ingested as corpus kb; yields the store options. memory:// keeps nothing
    between commands, so there one store is shared by every command of the test."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    root = tmp_path / "corpus"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    if request.param == "memory":
        with open_stores("memory://") as shared:

            @contextlib.contextmanager
            def same(*args, **kwargs):
                yield shared

            monkeypatch.setattr(cli_ingest, "_stores", same)
            monkeypatch.setattr(cli_query, "_stores", same)
            options = ["--store", "memory://"]
            assert main(["ingest", str(root), "--corpus", "kb", *options, *HASH]) == EXIT_OK
            capsys.readouterr()
            yield options
        return
    pg_url, pg_schema = request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    options = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *options]) == EXIT_OK
    assert main(["ingest", str(root), "--corpus", "kb", *options, *HASH]) == EXIT_OK
    capsys.readouterr()
    yield options


def _sources(capsys, store: list[str], *args: str) -> tuple[list[str], dict]:
    code = main(["query", "zebra install guide", "--corpus", "kb", "--top-k", "10", "--json",
                 *store, *args])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK
    return sorted({h["source_id"] for h in out["hits"]}), out


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_under_keeps_the_hits_of_one_folder_and_its_subfolders(store, capsys, mode):
    """--under docs/guides keeps docs/guides/** (not docs/guides-old), however the folder is
    typed, in both retrieval modes, on both stores; with --filter both must hold.

    If this fails, check _under / _filters in ragport/cli/query.py and prefix_filter in
    ragport/domain/filters.py (each store compiles its range)."""
    guides = ["docs/guides/deep/tuning.md", "docs/guides/install.md"]
    everything, _ = _sources(capsys, store, "--mode", mode)
    assert everything == sorted(FILES)
    for typed in ("docs/guides", "docs/guides/", "./docs/guides/"):
        found, _ = _sources(capsys, store, "--mode", mode, "--under", typed)
        assert found == guides, typed
    found, _ = _sources(capsys, store, "--mode", mode, "--under", "docs/guides/deep")
    assert found == ["docs/guides/deep/tuning.md"]
    found, _ = _sources(capsys, store, "--mode", mode, "--under", "docs",
                        "--filter", '{"title": "Install"}')  # fmt: skip
    assert found == ["docs/guides/install.md"]


def test_under_a_folder_with_nothing_finds_nothing_and_a_bad_folder_is_a_usage_error(store, capsys):
    """A folder no source is under exits 1 (nothing found); an absolute path, `..` or an
    empty folder exits 2 naming --under, before any query runs.

    If this fails, check _under in ragport/cli/query.py."""
    code = main(["query", "zebra", "--corpus", "kb", *store, "--under", "nowhere"])
    assert code == 1
    capsys.readouterr()
    for bad in ("/docs/guides", "docs/../docs", "", "./", "."):
        code = main(["query", "zebra", "--corpus", "kb", *store, "--under", bad])
        assert code == EXIT_USAGE, bad
        assert "--under" in capsys.readouterr().err


def test_each_hit_says_which_score_it_carries(store, capsys):
    """Vector retrieval scores are cosine; with a lexical leg they are fused ranks (RRF, at most
    2/61 with the default weights): `score_kind` says which, in the JSON (per hit and for the
    answer) and in the table's score column.

    If this fails, check score_kind in ragport/cli/query.py `_query`."""
    _, out = _sources(capsys, store, "--mode", "vector")
    assert out["score_kind"] == "cosine"
    assert {h["score_kind"] for h in out["hits"]} == {"cosine"}
    _, out = _sources(capsys, store, "--mode", "hybrid")
    assert out["score_kind"] == "rrf"
    assert {h["score_kind"] for h in out["hits"]} == {"rrf"}
    assert all(0 < h["score"] <= 2 / 61 + 1e-9 for h in out["hits"])
    assert main(["query", "zebra", "--corpus", "kb", "--mode", "hybrid", *store]) == EXIT_OK
    header = capsys.readouterr().out.splitlines()[0].lower()
    assert "score (rrf)" in header
    assert main(["query", "zebra", "--corpus", "kb", *store]) == EXIT_OK
    assert "score (cosine)" in capsys.readouterr().out.splitlines()[0].lower()
