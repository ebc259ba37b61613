"""Issue 26: an operator raises the per-document ceilings in ragport.toml ``[limits]``; the flags
``--max-bytes`` / ``--timeout`` go up to them; the absolute caps stay enforced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragport.cli import main

MIB = 1 << 20
HASH = ["--embedder", "hash", "--store", "memory://"]
WORDS = [
    "leave",
    "travel",
    "hotel",
    "budget",
    "policy",
    "claim",
    "receipt",
    "manager",
    "approval",
    "contract",
    "salary",
    "office",
    "remote",
    "laptop",
    "badge",
    "security",
    "audit",
    "review",
    "quarter",
    "holiday",
    "parental",
    "sick",
    "training",
]


@pytest.fixture(scope="module")
def big_page(tmp_path_factory) -> Path:
    """An 8.4 MB HTML page: many <p> paragraphs of varied words (text just under 8 Mi chars)."""
    folder = tmp_path_factory.mktemp("site")
    n = len(WORDS)
    paragraphs = []
    size = 0
    i = 0
    while size < 8_400_000:
        words = " ".join(WORDS[(i * k + k) % n] for k in range(1, 9))
        paragraph = f"<p>{words} {i}</p>\n"
        paragraphs.append(paragraph)
        size += len(paragraph)
        i += 1
    page = folder / "page.html"
    page.write_text(f"<html><body>{''.join(paragraphs)}</body></html>", encoding="utf-8")
    assert 8_400_000 <= page.stat().st_size < 8_500_000
    return page


def _toml(folder: Path, body: str) -> Path:
    path = folder / "ragport.toml"
    path.write_text(body, encoding="utf-8")
    path.chmod(0o600)
    return path


def _outcome(capsys) -> dict:
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    return json.loads(lines[0])


@pytest.mark.slow  # 17 s each: an 8.4 MB page parsed and chunked twice (make test-slow, CI)
@pytest.mark.parametrize("workers", ["1", "2"], ids=["serial", "pipelined"])
def test_an_8_4_mb_html_page_ingests_once_ragport_toml_raises_the_limits(
    big_page, tmp_path, monkeypatch, capsys, workers
):
    """With the defaults the page fails naming max_bytes (too_large); with [limits]
    parse_bytes = 16 MiB and chunks_per_source = 16384 it is indexed, serial and pipelined.

    If this fails, check LimitsConfig in ragport/bootstrap/config.py, _limits in
    ragport/cli/config.py and ingest_limits / ingest_files in ragport/bootstrap/ingest.py.
    """
    monkeypatch.chdir(tmp_path)
    run = ["ingest", str(big_page), *HASH, "--json", "--workers", workers]
    assert main(run) == 1
    failed = _outcome(capsys)
    assert failed["reason"] == "too_large" and "max_bytes=1048576" in failed["error"]
    _toml(tmp_path, "[limits]\nparse_bytes = 16777216\nchunks_per_source = 16384\n")
    assert main(run) == 0
    indexed = _outcome(capsys)
    assert indexed["state"] == "indexed" and indexed["chunks"] > 8_192


def test_a_raised_parse_bytes_alone_names_the_next_limit(big_page, tmp_path, monkeypatch, capsys):
    """parse_bytes raised but not chunks_per_source: the page fails naming chunks_per_source
    (never truncated to 8,192 chunks).

    If this fails, check ingest_limits (chunks_per_source rises only to its ceiling).
    """
    monkeypatch.chdir(tmp_path)
    _toml(tmp_path, "[limits]\nparse_bytes = 16777216\n")
    assert main(["ingest", str(big_page), *HASH, "--json", "--workers", "1"]) == 1
    outcome = _outcome(capsys)
    assert outcome["state"] == "failed" and outcome["reason"] == "chunks_per_source"


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ("parse_bytes = 268435457", "limits.parse_bytes"),  # 256 MiB + 1
        ("parse_ms = 600001", "limits.parse_ms"),
        ("pdf_pages = 65537", "limits.pdf_pages"),
        ("inflated_bytes = 1073741825", "limits.inflated_bytes"),
        ("chunks_per_source = 65537", "limits.chunks_per_source"),
        ("document_chars = 268435457", "limits.document_chars"),
        ("parse_bytes = 0", "limits.parse_bytes"),
        ("parse_bytes = 1.5", "limits.parse_bytes"),
        ('parse_bytes = "16777216"', "limits.parse_bytes"),
        ("top_k = 64", "limits.top_k"),
    ],
)
def test_limits_past_the_absolute_caps_are_refused_naming_the_key(
    tmp_path, monkeypatch, capsys, toml, field
):
    """A [limits] value past its absolute cap (or not a positive integer, or not a raisable
    limit) is exit 2 naming the key and the file, before any store opens.

    If this fails, check _limits_table in ragport/bootstrap/config.py and _ABSOLUTE in
    ragport/domain/limits.py.
    """
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.md").write_text("# A\n\nbody\n", encoding="utf-8")
    path = _toml(tmp_path, f"[limits]\n{toml}\n")
    # a store that cannot open: exit 3 would mean the check came after it
    args = ["ingest", "a.md", "--embedder", "hash", "--store", "postgresql://nobody@127.0.0.1:9/x"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert field in err and str(path) in err


def test_flags_go_up_to_the_configured_ceiling_and_no_further(tmp_path, monkeypatch, capsys):
    """--max-bytes and --timeout past the ceiling in effect are exit 2 naming the flag, before
    any store opens; under raised [limits] the same values are accepted.

    If this fails, check _limits in ragport/cli/config.py and the flags in ragport/cli/parser.py.
    """
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nbody text\n", encoding="utf-8")
    dead = ["--embedder", "hash", "--store", "postgresql://nobody@127.0.0.1:9/x"]
    too_far = [
        (["--max-bytes", str(16 * MIB)], "--max-bytes"),
        (["--timeout", "120"], "--timeout"),
        (["--timeout", "0"], "--timeout"),
    ]
    for command in (["ingest", "docs"], ["sync", "folder", "docs"]):
        for flags, named in too_far:
            assert main([*command, *dead, *flags]) == 2, (command, flags)
            assert named in capsys.readouterr().err
    _toml(tmp_path, "[limits]\nparse_bytes = 16777216\nparse_ms = 120000\n")
    for command in (["ingest", "docs"], ["sync", "folder", "docs"]):
        ok = [*command, *HASH, "--max-bytes", str(16 * MIB), "--timeout", "120"]
        assert main(ok) == 0, command
        assert main([*command, *dead, "--max-bytes", str(16 * MIB + 1)]) == 2
        assert "--max-bytes" in capsys.readouterr().err
        assert main([*command, *dead, "--timeout", "120.5"]) == 2
        assert "--timeout" in capsys.readouterr().err


def test_sync_folder_takes_the_raised_limits(tmp_path, monkeypatch, capsys):
    """A 1.5 MB text file fails a folder sync by default and syncs under [limits].

    If this fails, check _sync_folder / _sync_run in ragport/cli/sync.py (limits= and the
    FolderConnector's ceilings) and sync_connector in ragport/bootstrap/syncing.py.
    """
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "big.txt").write_text(
        " ".join(WORDS[i % len(WORDS)] for i in range(250_000)), encoding="utf-8"
    )
    run = ["sync", "folder", "docs", *HASH, "--json"]
    assert main(run) == 1
    assert json.loads(capsys.readouterr().out)["failed"] == 1
    _toml(tmp_path, "[limits]\nparse_bytes = 2000000\n")
    assert main(run) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["upserted"], result["failed"]) == (1, 0)
