"""A corpus remembers what it was ingested with: `--max-bytes`, `--encoding`, `--timeout`,
`--size` and `--overlap` given once are recorded with the corpus in its store, later `ingest`
and `sync folder` runs use them when the option is not given, and a change is explicit and
reported on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragport.cli import EXIT_OK, EXIT_USAGE, main

BIG = 1_048_576 + 50_000  # past the default --max-bytes


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def docs(tmp_path: Path, monkeypatch) -> Path:
    """``docs/big.txt`` (Latin-1, past the default byte cap) and ``docs/small.md`` (Latin-1);
    the data directory in the test's folder."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "docs"
    folder.mkdir()
    # few words in many bytes: the hash embedder's time goes by the words
    line = "Caf\u00e9 cr\u00e8me number {n}.\n" + "-" * 2_000 + "\n"
    text = "".join(line.format(n=n) for n in range(BIG // 2_000 + 1))
    (folder / "big.txt").write_bytes(text.encode("latin-1"))
    assert (folder / "big.txt").stat().st_size > BIG
    (folder / "small.md").write_bytes("# Men\u00fc\n\nSmall r\u00e9sum\u00e9.\n".encode("latin-1"))
    return folder


@pytest.fixture
def pg(pg_url, pg_schema, capsys) -> list[str]:
    store = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *store]) == EXIT_OK
    capsys.readouterr()
    return [*store, "--corpus", "kb", "--embedder", "hash"]


def _states(out: str) -> dict[str, str]:
    return {o["source_id"]: o["state"] for o in map(json.loads, out.splitlines())}


def test_a_plain_sync_after_ingest_uses_the_recorded_settings(docs, pg, capsys):
    """Ingest with --max-bytes, --encoding latin-1, --size and --overlap (a file needing
    each), then a plain `sync folder` and a plain `ingest`: nothing re-embedded, nothing
    failed; then `sync folder --size 8000` is reported on stderr, and recorded.

    If this fails, check corpus_options and record in ragport/cli/settings.py, their calls in
    _ingest (ragport/cli/ingest.py) and _sync_run (ragport/cli/sync.py), and
    CorpusSettingsStore in ragport/bootstrap/corpus_settings.py.
    """
    settings = ["--max-bytes", "1500000", "--encoding", "latin-1", "--size", "16000"]
    code, out, err = _run(capsys, "ingest", str(docs), *settings, "--overlap", "50", "--json", *pg)
    assert code == EXIT_OK, err
    assert _states(out) == {"big.txt": "indexed", "small.md": "indexed"}

    code, out, err = _run(capsys, "sync", "folder", str(docs), "--json", *pg)
    assert code == EXIT_OK, (out, err)
    synced = json.loads(out)
    assert (synced["upserted"], synced["failed"], synced["skipped"]) == (0, 0, 2)
    assert "recorded --encoding iso8859-1, --max-bytes 1500000" in err
    assert "--size 16000, --overlap 50" in err

    code, out, err = _run(capsys, "ingest", str(docs), "--json", *pg)
    assert code == EXIT_OK, err
    assert _states(out) == {"big.txt": "unchanged", "small.md": "unchanged"}

    code, out, err = _run(capsys, "sync", "folder", str(docs), "--size", "8000", "--json", *pg)
    assert code == EXIT_OK, (out, err)
    assert "corpus kb: --size changed from 16000 to 8000" in err
    assert json.loads(out)["upserted"] == 2  # an explicit change re-reads what it changes
    code, out, err = _run(capsys, "ingest", str(docs), "--json", *pg)
    assert code == EXIT_OK, err
    assert _states(out) == {"big.txt": "unchanged", "small.md": "unchanged"}
    assert "--size 8000" in err


def test_bad_chunking_is_refused_before_anything_is_recorded(docs, pg, capsys):
    """`--overlap` not below `--size` is a usage error (exit 2) before any file is read, and
    is not recorded: the next plain run uses the defaults.

    If this fails, check _check_chunking in ragport/cli/settings.py.
    """
    code, _, _ = _run(capsys, "ingest", str(docs / "small.md"), "--size", "50", "--overlap",
                      "50", *pg)  # fmt: skip
    assert code == EXIT_USAGE
    code, out, err = _run(capsys, "ingest", str(docs / "small.md"), "--encoding", "latin-1",
                          "--json", *pg)  # fmt: skip
    assert code == EXIT_OK, err
    assert "recorded" not in err and _states(out) == {"small.md": "indexed"}
