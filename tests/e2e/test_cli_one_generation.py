"""One generation per command line command: `ragport rollback --to g-1` undoes the command.

`ingest` of a folder (serial and pipelined), `sync folder` over several pages and
`delete --prefix` each pass one ``SharedGeneration`` to their writes (issue 26), so each
command adds one generation however many files it writes, and one rollback undoes all of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragport.cli import EXIT_OK, main


def _run(capsys: Any, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out


def _generations(capsys: Any, store: list[str]) -> dict[str, Any]:
    code, out = _run(capsys, "generations", "--corpus", "kb", "--json", *store)
    assert code == EXIT_OK
    return json.loads(out)


def _sources(capsys: Any, store: list[str]) -> set[str]:
    code, out = _run(capsys, "sources", "--corpus", "kb", "--json", *store)
    shown = json.loads(out)
    items = shown["items"] if isinstance(shown, dict) else shown
    assert code == (EXIT_OK if items else 1)  # an empty corpus is "nothing found"
    return {i["source_id"] for i in items}


def _folder(root: Path, n: int, word: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"f{i:02d}.md").write_text(f"# File {i}\n\n{word} number {i} of the folder.\n")
    return root


@pytest.fixture
def store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str, pg_schema: str
) -> list[str]:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    args = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *args]) == EXIT_OK
    return args


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_ingest_of_a_folder_is_one_generation_and_one_rollback_undoes_it(
    tmp_path: Path, capsys: Any, store: list[str], workers: str
) -> None:
    """Twelve files ingested by one command share one generation; `rollback --to` the one
    before brings back exactly the corpus as it was before the command.

    If this fails, check that ragport/cli/ingest.py passes one SharedGeneration to
    ingest_files and that ingest_files hands it to replace_document / the pipeline's
    replace_prepared (ragport/bootstrap/ingest.py, pipeline.py)."""
    docs = _folder(tmp_path / "docs", 3, "alpha")
    common = ["--corpus", "kb", "--embedder", "hash", "--workers", workers, *store]
    code, _ = _run(capsys, "ingest", str(docs), *common)
    assert code == EXIT_OK
    before = _generations(capsys, store)
    assert before["current"] == 1  # three files, one command, one generation
    _folder(docs, 12, "beta")  # rewrites the three, adds nine
    code, out = _run(capsys, "ingest", str(docs), *common)
    assert code == EXIT_OK
    assert "wrote generation 2 (undo: ragport rollback --to 1)" in out
    after = _generations(capsys, store)
    assert after["current"] == after["counter"] == 2
    assert after["changes"][0]["sources_written"] == 12
    assert _sources(capsys, store) == {f"f{i:02d}.md" for i in range(12)}
    code, _ = _run(capsys, "rollback", "--to", "1", "--corpus", "kb", "--yes", *store)
    assert code == EXIT_OK
    assert _sources(capsys, store) == {f"f{i:02d}.md" for i in range(3)}
    code, out = _run(capsys, "query", "alpha number", "--corpus", "kb", "--json", *store)
    assert code == EXIT_OK and "beta" not in out and "alpha" in out


def test_a_sync_over_several_pages_and_a_delete_by_prefix_are_one_generation_each(
    tmp_path: Path, capsys: Any, store: list[str]
) -> None:
    """`sync folder --page-size 2` commits five pages into one generation; `delete --prefix`
    of four sources retires them in one more; each rollback undoes one command.

    If this fails, check the SharedGeneration that ragport/cli/sync.py and _delete in
    ragport/cli/lifecycle.py pass down (sync_connector, delete_source)."""
    docs = _folder(tmp_path / "docs", 10, "gamma")
    code, out = _run(
        capsys, "sync", "folder", str(docs), "--corpus", "kb", "--embedder", "hash",
        "--page-size", "2", "--json", *store,
    )  # fmt: skip
    assert code == EXIT_OK
    shown = json.loads(out)
    assert shown["pages"] >= 5 and shown["upserted"] == 10
    assert shown["generations"] == [1]
    assert _generations(capsys, store)["current"] == 1
    code, out = _run(
        capsys, "delete", "--prefix", "f0", "--corpus", "kb", "--yes", "--json", *store
    )
    assert code == EXIT_OK
    deleted = json.loads(out)
    assert len(deleted) == 10 and {d["generation"] for d in deleted} == {2}
    assert _sources(capsys, store) == set()
    code, _ = _run(capsys, "rollback", "--to", "1", "--corpus", "kb", "--yes", *store)
    assert code == EXIT_OK
    assert _sources(capsys, store) == {f"f{i:02d}.md" for i in range(10)}
