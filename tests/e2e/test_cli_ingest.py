"""`ragport ingest`: every format, keeps going past bad files, summary, --json, stable ids."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ragport.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
HASH = ["--embedder", "hash"]


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    (root / "nodejs").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD.md").write_text("# not a document\n")
    (root / ".notes.md").write_text("# hidden file\n")
    shutil.copy(DATA / "handbook.md", root / "handbook.md")
    shutil.copy(DATA / "travel-policy.pdf", root / "nodejs" / "travel-policy.pdf")
    shutil.copy(DATA / "security-handbook.docx", root / "nodejs" / "security.docx")
    shutil.copy(DATA / "site" / "leave.html", root / "nodejs" / "leave.html")
    shutil.copy(DATA / "guide.rst", root / "guide.rst")
    (root / "nodejs" / "bad.txt").write_bytes(b"one bad byte \xff")
    (root / "nodejs" / "empty.md").write_bytes(b"")
    (root / "big.txt").write_bytes(b"word " * 240_000)  # 1.2 MB
    (root / "image.png").write_bytes(b"\x89PNG")  # not a document suffix: not picked up
    return root


def test_ingest_reports_each_failure_by_name_and_keeps_going(corpus, capsys):
    """Bad UTF-8, an empty and an oversized file fail by name; the rest is indexed; exit 1.

    If this fails, check ingest_files in ragport/bootstrap/ingest.py and _ingest in ragport/cli/ingest.py.
    """
    assert main(["ingest", str(corpus), "--store", "memory://", *HASH]) == 1
    out = capsys.readouterr().out
    for name in ("handbook.md", "guide.rst", "nodejs/travel-policy.pdf", "nodejs/security.docx",
                 "nodejs/leave.html"):  # fmt: skip
        assert f"] {name}: " in out and f"{name}: FAILED" not in out
    assert "nodejs/bad.txt: FAILED (decode)" in out
    assert "nodejs/empty.md: FAILED (empty)" in out
    assert "big.txt: FAILED (too_large)" in out
    assert ".git" not in out and ".notes" not in out and "image.png" not in out
    assert "8 document(s) in corpus default" in out
    assert "  indexed        5" in out and "  failed         3" in out


def test_ingest_json_prints_one_object_per_file(corpus, capsys):
    """--json prints one JSON object per file with state, chunks and reason.

    If this fails, check the --json branch of _ingest (FileOutcome unstructuring).
    """
    assert main(["ingest", str(corpus), "--store", "memory://", "--json", *HASH]) == 1
    lines = capsys.readouterr().out.splitlines()
    results = {r["source_id"]: r for r in map(json.loads, lines)}
    assert len(lines) == len(results) == 8
    assert results["nodejs/travel-policy.pdf"]["state"] == "indexed"
    assert results["nodejs/travel-policy.pdf"]["chunks"] == 3  # one per page
    assert results["big.txt"]["reason"] == "too_large"


def test_max_bytes_raises_the_cap_up_to_the_hard_ceiling(corpus, capsys):
    """--max-bytes 2000000 lets the 1.2 MB file in; past 8 MiB is a ValidationError (exit 2).

    If this fails, check ingest_limits in ragport/bootstrap/ingest.py.
    """
    big = ["ingest", str(corpus / "big.txt"), "--store", "memory://", *HASH]
    assert main([*big, "--max-bytes", "2000000"]) == 0
    assert "big.txt: 1" in capsys.readouterr().out
    assert main([*big, "--max-bytes", str(8_388_609)]) == 2


def test_named_files_follow_the_same_suffix_rule(corpus, capsys):
    """A named file with another suffix is refused by name, not guessed.

    If this fails, check collect_documents for directly named files.
    """
    assert main(["ingest", str(corpus / "image.png"), "--store", "memory://", *HASH]) == 1
    assert "image.png: FAILED (unsupported_type)" in capsys.readouterr().out


def test_ids_do_not_depend_on_how_the_path_is_typed(
    corpus, capsys, monkeypatch, tmp_path, pg_url, pg_schema
):
    """The root recorded on the first ingest names files the same from another directory;
    a path outside an explicit --root is refused; a PDF hit cites its page.

    If this fails, check _corpus_root in ragport/cli/ingest.py and CorpusRoots in ragport/bootstrap/roots.py.
    """
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    store = ["--store", pg_url, "--schema", pg_schema, "--corpus", "kb", *HASH]
    assert main(["db", "upgrade", *store[:4]]) == 0
    main(["ingest", str(corpus), *store])
    first = capsys.readouterr().out
    assert "] nodejs/leave.html: " in first
    monkeypatch.chdir(corpus)
    main(["ingest", "nodejs", *store])
    again = capsys.readouterr().out
    assert "] nodejs/leave.html: unchanged" in again
    assert "] leave.html" not in again
    outside = tmp_path / "elsewhere.md"
    outside.write_text("# Elsewhere\n")
    assert main(["ingest", str(outside), "--root", str(corpus), *store]) == 1
    assert "FAILED (outside_root)" in capsys.readouterr().out
    assert main(["query", "hotel costs thirty days", "--json", "--top-k", "3", *store]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    pdf_hits = [h for h in hits if h["source_id"] == "nodejs/travel-policy.pdf"]
    assert pdf_hits and pdf_hits[0]["metadata"]["page"] == 3
    assert main(["query", "hotel costs thirty days", "--top-k", "1", *store]) == 0
    shown = capsys.readouterr().out
    # the results table: rank, citation, score, page, heading
    assert re.search(r"nodejs/travel-policy\.pdf#0003\s+\d\.\d{3}\s+3\s", shown), shown
    assert main(["status", *store[:-2]]) == 0  # status embeds nothing: no --embedder
    assert "nodejs/bad.txt" in capsys.readouterr().out
