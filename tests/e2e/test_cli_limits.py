"""Issue 26: an operator raises the per-document ceilings in ragport.toml ``[limits]``; the flags
``--max-bytes`` / ``--timeout`` go up to them; the absolute caps stay enforced. Issue 43:
``--timeout`` (CPU seconds) and ``--wall-timeout`` go up to their hard ceilings without a
ragport.toml, and PDF / DOCX files of several megabytes ingest with the defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from docx_bytes import padded_docx
from pdf_bytes import manual

from ragport.cli import main
from ragport.cli.config import _limits
from ragport.cli.parser import _parser

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

    If this fails, check _limits in ragport/cli/config.py and the flags in ragport/cli/ingest.py (register).
    """
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nbody text\n", encoding="utf-8")
    dead = ["--embedder", "hash", "--store", "postgresql://nobody@127.0.0.1:9/x"]
    too_far = [
        (["--max-bytes", str(16 * MIB)], "--max-bytes"),
        (["--timeout", "300.5"], "--timeout"),
        (["--timeout", "0"], "--timeout"),
        (["--wall-timeout", "3600.5"], "--wall-timeout"),
        (["--wall-timeout", "0"], "--wall-timeout"),
    ]
    for command in (["ingest", "docs"], ["sync", "folder", "docs"]):
        for flags, named in too_far:
            assert main([*command, *dead, *flags]) == 2, (command, flags)
            assert named in capsys.readouterr().err
    _toml(tmp_path, "[limits]\nparse_bytes = 16777216\nparse_ms = 400000\n")
    for command in (["ingest", "docs"], ["sync", "folder", "docs"]):
        ok = [*command, *HASH, "--max-bytes", str(16 * MIB), "--timeout", "400"]
        assert main(ok) == 0, command
        assert main([*command, *dead, "--max-bytes", str(16 * MIB + 1)]) == 2
        assert "--max-bytes" in capsys.readouterr().err
        assert main([*command, *dead, "--timeout", "400.5"]) == 2
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


def test_timeouts_go_up_to_their_hard_ceilings_without_a_config_file(tmp_path, monkeypatch):
    """--timeout 300 (CPU seconds: the hard ceiling, where 30 was the most without a
    ragport.toml) and --wall-timeout 3600 are taken by ingest and sync folder with no
    ragport.toml, and reach the limits the parsers get.

    If this fails, check the parse_ms / parse_wall_ms ceilings in ragport/domain/limits.py and
    _limits / _with_seconds in ragport/cli/config.py.
    """
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nbody text\n", encoding="utf-8")
    flags = ["--timeout", "300", "--wall-timeout", "3600"]
    for command in (["ingest", "docs"], ["sync", "folder", "docs"]):
        assert main([*command, *HASH, *flags]) == 0, command
        limits = _limits(_parser().parse_args([*command, *HASH, *flags]))
        assert (limits.parse_ms, limits.parse_wall_ms) == (300_000, 3_600_000)
    default = _limits(_parser().parse_args(["ingest", "docs", *HASH]))
    assert (default.parse_ms, default.parse_wall_ms) == (30_000, 600_000)


def test_multi_megabyte_pdf_and_docx_ingest_with_the_defaults(tmp_path, monkeypatch, capsys):
    """A 4 MB PDF and a 3 MB DOCX (the 1 MiB --max-bytes used to refuse both) are indexed by a
    plain ingest; a 2 MB text file still fails too_large, naming --max-bytes.

    If this fails, check ingest_files / ingest_limits (binary_bytes) in
    ragport/bootstrap/ingest.py and FileCaps in ragport/adapters/_files.py.
    """
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "manual.pdf").write_bytes(manual(4, size=4_000_000))
    (folder / "handbook.docx").write_bytes(padded_docx(3_000_000))
    (folder / "notes.txt").write_bytes(b"words " * (2 * MIB // 6))
    assert main(["ingest", "docs", *HASH, "--json"]) == 1
    outcomes = {o["source_id"]: o for o in map(json.loads, capsys.readouterr().out.splitlines())}
    assert outcomes["manual.pdf"]["state"] == "indexed"
    assert outcomes["handbook.docx"]["state"] == "indexed"
    assert outcomes["notes.txt"]["reason"] == "too_large"
    assert "--max-bytes" in outcomes["notes.txt"]["error"]
