"""The corpus root of `ragport ingest`: the folder given, a file under the current folder,
widening to hold paths outside the recorded root with every id kept, refusal past home."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragport import RetrievalRequest
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.application import retrieve_context
from ragport.application.ingest import IngestOptions
from ragport.bootstrap.ingest import collect_documents, ingest_files
from ragport.bootstrap.roots import widen_corpus_root
from ragport.cli import EXIT_OK, EXIT_USAGE, main
from ragport.domain.model import Grant, Scope, Tombstone

HASH = ["--embedder", "hash"]


def _write(path: Path, word: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {word.title()}\n\nThe {word} document mentions {word} only.\n")


@pytest.fixture
def project(tmp_path, monkeypatch):
    """``proj/docs/sub/a.md``, ``proj/docs/b.md``, ``proj/c.md``; the data directory (where the
    roots are recorded) in the test's folder; the current folder outside the project."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    proj = tmp_path / "proj"
    _write(proj / "docs" / "sub" / "a.md", "aardvark")
    _write(proj / "docs" / "b.md", "bison")
    _write(proj / "c.md", "caribou")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return proj


@pytest.fixture
def pg(pg_url, pg_schema, capsys):
    store = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *store]) == EXIT_OK
    capsys.readouterr()
    return [*store, "--corpus", "kb", *HASH]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _sources(capsys, store: list[str], field: str | None = None) -> Any:
    """The corpus's source ids (``ragport sources``), or ``{id: item[field]}``."""
    code, out, err = _run(capsys, "sources", "--json", *store[:-2])
    assert code == EXIT_OK, err
    items = json.loads(out)["items"]
    if field is not None:
        return {item["source_id"]: item[field] for item in items}
    return [item["source_id"] for item in items]


def _ingested(out: str) -> dict[str, dict]:
    return {o["source_id"]: o for o in map(json.loads, out.splitlines())}


def test_widening_twice_keeps_one_id_per_file(project, capsys, monkeypatch, pg):
    """docs/sub/a.md, then docs/b.md, then the project: the root widens twice, every file keeps
    one id (the old ones are gone), nothing is re-embedded or re-written, a grant follows its
    file, each file is found once.

    If this fails, check _corpus_root/_widen in ragport/cli/ingest.py and widen_corpus_root in
    ragport/bootstrap/roots.py.
    """
    code, out, err = _run(capsys, "ingest", str(project / "docs" / "sub" / "a.md"), "--json", *pg)
    assert code == EXIT_OK, err
    assert list(_ingested(out)) == ["a.md"]  # a file outside the current folder: its folder
    code, out, err = _run(capsys, "ingest", str(project / "docs" / "b.md"), "--json", *pg)
    assert code == EXIT_OK, err
    assert f"corpus root widened from {project / 'docs' / 'sub'} to {project / 'docs'}" in err
    assert "1 sources renamed" in err
    assert _ingested(out)["b.md"]["state"] == "indexed"
    assert _sources(capsys, pg) == ["b.md", "sub/a.md"]
    code, _, err = _run(capsys, "grants", "set", "sub/a.md", "--group", "zoo", *pg[:-2])
    assert code == EXIT_OK, err

    monkeypatch.chdir(project)
    code, out, err = _run(capsys, "ingest", ".", "--json", *pg)
    assert code == EXIT_OK, err
    assert f"corpus root widened from {project / 'docs'} to {project}; 2 sources renamed" in err
    outcomes = _ingested(out)
    assert outcomes["docs/sub/a.md"]["state"] == outcomes["docs/b.md"]["state"] == "unchanged"
    assert outcomes["c.md"]["state"] == "indexed" and outcomes["c.md"]["generation"] == 3
    # renames write no generation: each row keeps the one it was written at
    assert _sources(capsys, pg, "generation") == {"c.md": 3, "docs/b.md": 2, "docs/sub/a.md": 1}

    code, out, _ = _run(capsys, "grants", "show", "--json", *pg[:-2])
    grants = {g["source_id"]: g for g in json.loads(out)}
    assert grants["docs/sub/a.md"]["group_ids"] == ["zoo"]
    assert "sub/a.md" not in grants or not grants["sub/a.md"]["granted"]

    for word, source in (("aardvark", "docs/sub/a.md"), ("bison", "docs/b.md")):
        code, out, err = _run(capsys, "query", word, "--json", "--top-k", "5", *pg)
        assert code == EXIT_OK, err
        hits = json.loads(out)["hits"]
        assert hits[0]["source_id"] == source
        assert len({h["source_id"] for h in hits}) == len(hits) == 3  # each source once

    code, out, err = _run(capsys, "ingest", ".", "--json", *pg)  # the root is the project now
    assert code == EXIT_OK and "widened" not in err
    assert {o["state"] for o in _ingested(out).values()} == {"unchanged"}
    code, out, err = _run(capsys, "status", "--json", *pg[:-2])
    assert code == EXIT_OK, err
    assert "sub/a.md" not in {s["source_id"] for s in json.loads(out)["items"]}


def test_a_file_under_the_current_folder_is_named_from_it(project, capsys, monkeypatch, pg):
    """`ingest docs/sub/a.md` from the project names it docs/sub/a.md, so `ingest .` later
    adds the rest without a duplicate or a rename; a folder given is its own root.

    If this fails, check first_root in ragport/bootstrap/roots.py.
    """
    monkeypatch.chdir(project)
    code, out, err = _run(capsys, "ingest", "docs/sub/a.md", "--json", *pg)
    assert code == EXIT_OK, err
    assert list(_ingested(out)) == ["docs/sub/a.md"]
    code, out, err = _run(capsys, "ingest", ".", "--json", *pg)
    assert code == EXIT_OK and "widened" not in err
    assert _ingested(out)["docs/sub/a.md"]["state"] == "unchanged"
    assert _sources(capsys, pg) == ["c.md", "docs/b.md", "docs/sub/a.md"]

    code, out, _ = _run(capsys, "ingest", "docs", "--json", "--store", "memory://", *HASH)
    assert code == EXIT_OK
    assert sorted(_ingested(out)) == ["b.md", "sub/a.md"]  # the folder given is the root


def test_a_root_above_home_is_refused_until_asked_for(project, capsys, tmp_path, pg):
    """Widening from ~/notes to a folder above the home folder is a usage error naming --root;
    nothing moves; with --root that folder it widens.

    If this fails, check check_root in ragport/bootstrap/roots.py.
    """
    _write(tmp_path / "home" / "notes" / "n.md", "narwhal")
    code, _, err = _run(capsys, "ingest", str(tmp_path / "home" / "notes"), *pg)
    assert code == EXIT_OK, err
    code, _, err = _run(capsys, "ingest", str(project / "c.md"), *pg)
    assert code == EXIT_USAGE and f"--root {tmp_path}" in err
    assert _sources(capsys, pg) == ["n.md"]
    code, _, err = _run(capsys, "ingest", str(project / "c.md"), "--root", str(tmp_path), *pg)
    assert code == EXIT_OK and "1 sources renamed" in err
    assert _sources(capsys, pg) == ["home/notes/n.md", "proj/c.md"]


def test_memory_store_widening_moves_rows_grants_statuses_and_tombstones(tmp_path):
    """widen_corpus_root on the in-memory store: rows keep their vectors and generations, a
    rename onto another source's old id waits for that one to move, grants and statuses move,
    the old id loses its grant, a forgotten file stays forgotten under its new id, a file gone
    from the old root keeps its id; the next ingest finds everything unchanged.

    If this fails, check widen_corpus_root and _batches in ragport/bootstrap/roots.py.
    """
    old = tmp_path / "sub"
    for name, word in (("a.md", "aardvark"), ("sub/a.md", "axolotl"), ("gone.md", "gnu"),
                       ("secret.md", "sphinx")):  # fmt: skip
        _write(old / name, word)
    store, status, embedder = InMemoryStore(), InMemoryStatusStore(), HashEmbedder()
    scope = Scope("t", "r", "c")

    def ingest(root: Path) -> dict[str, str]:
        found = collect_documents([root], root=root)
        return {
            o.source_id or o.path: o.state
            for o in ingest_files(found, root=root, store=store, status_store=status,
                                  embedder=embedder, scope=scope,
                                  options=IngestOptions(workers=1))
        }  # fmt: skip

    assert set(ingest(old).values()) == {"indexed"}
    (old / "gone.md").unlink()
    store.set_source_access(scope, [Grant("a.md", group_ids=("g",))])
    with store.unit_of_work(scope) as uow:
        uow.tombstones.add([Tombstone("secret.md", "forgotten")])
        uow.commit()
    before = {r.id: r for r in store.get_by_source(scope, "sub/a.md")}
    pointer = store.current_generation(scope)

    done = widen_corpus_root(store=store, status_store=status, scope=scope, old=old, new=tmp_path)
    assert (done.renamed, done.kept, done.failures) == (2, 2, ())
    assert store.current_generation(scope) == pointer
    ids = set(store.list_source_ids(scope))
    assert ids == {"sub/a.md", "sub/sub/a.md", "gone.md", "secret.md"}
    moved = {r.id: r for r in store.get_by_source(scope, "sub/sub/a.md")}
    assert [(r.text, r.generation) for r in moved.values()] == [
        (r.text, r.generation) for r in before.values()
    ]
    grants = store.get_source_access(scope, ["a.md", "sub/a.md"])
    assert grants["sub/a.md"].group_ids == ("g",) and grants["a.md"].group_ids == ()
    assert status.get(scope, "sub/sub/a.md") is not None and status.get(scope, "a.md") is None
    with store.unit_of_work(scope) as uow:
        assert "sub/secret.md" in {t.id for t in uow.tombstones.list()}

    again = ingest(tmp_path)
    assert again["sub/a.md"] == again["sub/sub/a.md"] == "unchanged"
    hits = retrieve_context(
        "axolotl", store=store, embedder=embedder, scope=scope, request=RetrievalRequest(top_k=10)
    ).hits
    assert [h.source_id for h in hits].count("sub/sub/a.md") == 1
    assert "sub/secret.md" not in {h.source_id for h in hits}
