"""`--encoding` (and `encoding` in ragport.toml) for `ragport ingest` and `ragport sync folder`:
strict UTF-8 by default naming the file and the way out, `auto` for a cp1252 folder, a bad
name refused before any work."""

from __future__ import annotations

import json

import pytest

from ragport.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main

HASH = ["--embedder", "hash"]
LEGACY = "# Congés\n\nLe café du siège est fermé le dimanche.\n"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A folder with one cp1252 Markdown file and one UTF-8 one; the current folder and the
    data directory in the test's folder."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RAGPORT_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "conges.md").write_bytes(LEGACY.encode("cp1252"))
    (docs / "plain.md").write_text("# Plain\n\nNothing special here.\n", encoding="utf-8")
    return docs


@pytest.fixture
def pg(pg_url, pg_schema, capsys):
    store = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *store]) == EXIT_OK
    capsys.readouterr()
    return [*store, "--corpus", "legacy", *HASH]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _cafe_hit(capsys, pg: list[str]) -> dict:
    code, out, err = _run(capsys, "query", "café dimanche", "--json", "--top-k", "1", *pg)
    assert code == EXIT_OK, err
    return json.loads(out)["hits"][0]


def test_ingest_refuses_cp1252_by_default_and_reads_it_with_auto(folder, capsys, pg):
    """Strict UTF-8 fails the file by name with the --encoding hint; --encoding auto indexes
    it, the accented words are found and metadata records cp1252.

    If this fails, check _text_encoding/_hinted in ragport/cli/ingest.py and the encoding=
    of ingest_files in ragport/bootstrap/ingest.py.
    """
    code, out, _ = _run(capsys, "ingest", "docs", *pg)
    assert code == EXIT_FAILED
    failed = [line for line in out.splitlines() if "conges.md: FAILED (decode)" in line]
    assert failed and "--encoding auto" in failed[0]
    assert "] plain.md: 1 chunks" in out

    code, out, err = _run(capsys, "ingest", "docs", "--encoding", "auto", "--json", *pg)
    assert code == EXIT_OK, err
    states = {o["source_id"]: o["state"] for o in map(json.loads, out.splitlines())}
    assert states == {"conges.md": "indexed", "plain.md": "indexed"}  # the parser id changed
    hit = _cafe_hit(capsys, pg)
    assert hit["source_id"] == "conges.md" and "café" in hit["text"]
    assert hit["metadata"]["encoding"] == "cp1252"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_named_codec_reads_the_file_on_both_ingest_paths(folder, capsys, workers):
    """--encoding cp1252 reads the file on the serial and the pipelined path.

    If this fails, check that the parsers closure of ingest_files passes encoding=.
    """
    code, out, err = _run(
        capsys, "ingest", "docs", "--encoding", "CP1252", "--workers", workers, "--json",
        "--store", "memory://", *HASH,
    )  # fmt: skip
    assert code == EXIT_OK, err
    assert {json.loads(line)["state"] for line in out.splitlines()} == {"indexed"}


def test_a_bad_encoding_fails_before_any_work(folder, capsys, tmp_path):
    """An unknown codec (flag or ragport.toml) is exit 2 naming where it came from, before a
    store opens (memory:// would say so on stderr).

    If this fails, check _text_encoding in ragport/cli/ingest.py and CliConfig.encoding.
    """
    for argv in (["ingest", "docs"], ["sync", "folder", "docs"]):
        code, out, err = _run(capsys, *argv, "--encoding", "klingon", "--store", "memory://")
        assert code == EXIT_USAGE and "--encoding" in err
        assert "memory://" not in err and out == ""
    (tmp_path / "ragport.toml").write_text('encoding = "base64"\n', encoding="utf-8")
    code, _, err = _run(capsys, "ingest", "docs", "--store", "memory://", *HASH)
    assert code == EXIT_USAGE and "encoding in" in err and "ragport.toml" in err


def test_ragport_toml_encoding_is_the_default(folder, capsys, tmp_path):
    """`encoding = "auto"` in ragport.toml reads the cp1252 file without the flag.

    If this fails, check CliConfig.encoding in ragport/bootstrap/config.py.
    """
    (tmp_path / "ragport.toml").write_text('encoding = "auto"\n', encoding="utf-8")
    code, out, err = _run(capsys, "ingest", "docs", "--json", "--store", "memory://", *HASH)
    assert code == EXIT_OK, err
    assert {json.loads(line)["source_id"] for line in out.splitlines()} == {"conges.md", "plain.md"}


def test_sync_folder_takes_encoding(folder, capsys, pg):
    """sync folder: the default fails the file with the hint; --encoding auto syncs it.

    If this fails, check _sync_folder in ragport/cli/sync.py and sync_connector(encoding=).
    """
    code, out, _ = _run(capsys, "sync", "folder", "docs", *pg)
    assert code == EXIT_FAILED
    failed = [line for line in out.splitlines() if "conges.md" in line and "decode" in line]
    assert failed and "--encoding auto" in failed[0]
    code, out, err = _run(capsys, "sync", "folder", "docs", "--encoding", "auto", *pg)
    assert code == EXIT_OK, err + out
    hit = _cafe_hit(capsys, pg)
    assert hit["source_id"] == "conges.md" and hit["metadata"]["encoding"] == "cp1252"
