"""`ragport query` options, `--help`, exit codes and configuration, in process (``main``) on the
session PostgreSQL server; the subprocess tests are in test_cli_lifecycle.py."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from ragport.cli import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_RERANK,
    EXIT_STORE,
    EXIT_USAGE,
    _iter_commands,
    _parser,
    main,
)

HASH = ["--embedder", "hash"]


@pytest.fixture
def kb(tmp_path, monkeypatch, pg_url, pg_schema, capsys):
    """Two corpora (kb: 12 documents, wiki: 1) in a fresh schema; returns the store options."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RAGPORT_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(12):
        body = "alpha " * 150 + f"document number {n} about travel expenses and hotels\n"
        (docs / f"d{n:02d}.md").write_text(f"# Doc {n}\n\n{body}")
    (docs / "zebra.md").write_text("# Zebras\n\nThe quagga zebra has stripes.\n")
    wiki = tmp_path / "wiki"
    wiki.mkdir()
    (wiki / "w.md").write_text("# Wiki\n\nHotels and travel in the wiki.\n")
    store = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *store]) == EXIT_OK
    assert main(["ingest", str(docs), "--corpus", "kb", *store, *HASH]) == EXIT_OK
    assert main(["ingest", str(wiki), "--corpus", "wiki", *store, *HASH]) == EXIT_OK
    capsys.readouterr()
    return store


def _query(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = main(["query", *args, "--json"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out.strip() else None), captured.err


def test_top_k_20_returns_20_hits_and_a_small_budget_says_what_it_dropped(kb, capsys):
    """--top-k 20 gets a budget that fits 20 hits; --max-tokens 300 drops hits and says so.

    If this fails, check _budget and the dropped note in ragport/cli/query.py `_query`.
    """
    code, out, _ = _query(capsys, "travel hotels", "--corpus", "kb", "--top-k", "13", *kb)
    assert code == EXIT_OK and len(out["hits"]) == 13 and out["dropped"] == 0
    code, out, err = _query(
        capsys, "travel", "--corpus", "kb", "--top-k", "5", "--max-tokens", "300", *kb
    )
    assert code == EXIT_OK and len(out["hits"]) < 5
    assert out["dropped"] == 5 - len(out["hits"]) and out["truncated"] is True
    assert "--max-tokens" in err


def test_json_hits_carry_offsets_page_and_heading(kb, capsys):
    """Each hit has start/end offsets into its document, page (null for Markdown) and heading.

    If this fails, check HitOut and _offsets in ragport/cli/query.py.
    """
    code, out, _ = _query(capsys, "quagga zebra stripes", "--corpus", "kb", "--top-k", "1", *kb)
    hit = out["hits"][0]
    assert code == EXIT_OK and hit["source_id"] == "zebra.md"
    assert hit["start"] == 0 and hit["end"] == len(hit["text"])
    assert hit["page"] is None and hit["heading"] == ["Zebras"]
    assert {"rank", "citation_id", "score", "retrieval", "corpus", "provenance"} <= set(hit)


def test_several_corpora_filter_and_modes(kb, capsys):
    """Two --corpus search both; --filter narrows by metadata; --mode lexical labels every hit
    lexical; --lexical fts is bm25 under its deprecated name (a note on stderr); a lexical
    index the store lacks is a usage error naming the ones it offers.

    If this fails, check _query's scopes, _parse_filter and _lexical_for in ragport/cli/query.py.
    """
    code, out, _ = _query(
        capsys, "hotels travel", "--corpus", "kb", "--corpus", "wiki", "--top-k", "20", *kb
    )
    assert code == EXIT_OK and {h["corpus"] for h in out["hits"]} == {"kb", "wiki"}
    code, out, _ = _query(capsys, "travel", "--corpus", "kb", "--filter", '{"title": "Doc 3"}', *kb)
    assert code == EXIT_OK and [h["source_id"] for h in out["hits"]] == ["d03.md"]
    code, out, _ = _query(capsys, "quagga", "--corpus", "kb", "--mode", "lexical", *kb)
    assert code == EXIT_OK and [h["source_id"] for h in out["hits"]] == ["zebra.md"]
    assert out["hits"][0]["retrieval"] == "lexical" and out["lexical"] == "bm25"
    code, old, err = _query(
        capsys, "quagga", "--corpus", "kb", "--mode", "lexical", "--lexical", "fts", *kb
    )
    assert code == EXIT_OK and old["lexical"] == "bm25" and "--lexical fts is deprecated" in err
    assert [h["source_id"] for h in old["hits"]] == ["zebra.md"]
    code, auto, _ = _query(
        capsys, "quagga", "--corpus", "kb", "--mode", "lexical", "--lexical", "auto", *kb
    )
    assert code == EXIT_OK and auto["lexical"] == "bm25"  # "auto" as in RetrievalRequest
    code, out, _ = _query(
        capsys, "quagga", "--corpus", "kb", "--mode", "hybrid", "--lexical-weight", "5", *kb
    )
    assert code == EXIT_OK and out["hits"][0]["source_id"] == "zebra.md"
    assert (
        main(["query", "x", "--corpus", "kb", "--mode", "hybrid", "--lexical", "nope", *kb])
        == EXIT_USAGE
    )
    assert "bm25" in capsys.readouterr().err
    assert main(["query", "x", "--corpus", "kb", "--filter", "{not json", *kb]) == EXIT_USAGE
    assert main(["query", "x", "--corpus", "kb", "--vector-weight", "-1", *kb]) == EXIT_USAGE


def test_principal_sees_only_granted_sources_and_denials_go_to_stderr(kb, capsys):
    """With --principal, only granted sources come back; withheld ones are counted on stderr
    and in the JSON `withheld` field.

    If this fails, check the authorization and on_access_denied wiring in _query.
    """
    assert main(["grants", "set", "zebra.md", "--principal", "alice", "--corpus", "kb", *kb]) == 0
    capsys.readouterr()
    code, out, err = _query(
        capsys, "zebra travel", "--corpus", "kb", "--principal", "alice", "--top-k", "10", *kb
    )
    assert code == EXIT_OK and {h["source_id"] for h in out["hits"]} == {"zebra.md"}
    assert out["withheld"]["sources"] >= 1 and "no_grant" in out["withheld"]["reasons"]
    assert "withheld" in err
    code, out, _ = _query(capsys, "zebra", "--corpus", "kb", "--principal", "mallory", *kb)
    assert code == EXIT_FAILED and out["hits"] == []
    assert main(["query", "x", "--corpus", "kb", "--group", "g", *kb]) == EXIT_USAGE


def test_rerank_kind_reorders_through_resolve_reranker(kb, capsys):
    """--rerank fake runs the fake reranker; an unknown kind is a usage error.

    If this fails, check _rerank_config and resolve_reranker in ragport/cli/query.py.
    """
    code, out, _ = _query(capsys, "travel", "--corpus", "kb", "--rerank", "fake", *kb)
    assert code == EXIT_OK and out["hits"]
    assert main(["query", "travel", "--corpus", "kb", "--rerank", "nope", *kb]) == EXIT_USAGE
    capsys.readouterr()
    option = ["--rerank-option", "api_key=SECRET-KEY-123"]
    assert main(["query", "x", "--corpus", "kb", "--rerank", "tei", *option, *kb]) == EXIT_USAGE
    assert "SECRET-KEY-123" not in capsys.readouterr().err


def test_a_minilm_rerank_past_its_budget_exits_4_naming_rerank_error(kb, tmp_path):
    """`query --rerank embedding --rerank-option embedder=minilm --rerank-timeout 0.001` in a
    child process, on the real MiniLM model: exit 4 (EXIT_RERANK), stderr names RerankError and
    --rerank-timeout. (Before: no --rerank-timeout, and a timed-out rerank whose thread was
    still inside onnxruntime when the interpreter exited aborted it: exit 134.)

    If this fails, check _rerank_ms and _warm in ragport/cli/query.py, the worker thread of
    ragport/application/rerank.py (not a daemon; stopped at the next batch) and _exit_code.
    """
    done = subprocess.run(
        [sys.executable, "-m", "ragport.cli", "query", "travel hotels", "--corpus", "kb",
         "--top-k", "20", "--rerank", "embedding", "--rerank-option", "embedder=minilm",
         "--rerank-timeout", "0.001", *kb],
        capture_output=True, text=True, timeout=300, check=False, input="", cwd=tmp_path,
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")},
    )  # fmt: skip
    assert done.returncode == EXIT_RERANK, done.stderr[-2000:]
    assert "ragport: RerankError: " in done.stderr and "--rerank-timeout" in done.stderr
    assert "Traceback" not in done.stderr and "terminate" not in done.stderr
    assert done.stdout == ""


def test_a_rerank_timeout_out_of_range_or_without_a_reranker_is_a_usage_error(kb, capsys):
    """--rerank-timeout must be above 0 and at most the ceiling (300 s), and needs --rerank.

    If this fails, check _rerank_ms in ragport/cli/query.py and HARD_LIMITS.rerank_ms.
    """
    rerank = ["--rerank", "fake", "--rerank-timeout"]
    for seconds in ("0", "-1", "nan", "inf", "300.001"):
        assert main(["query", "travel", "--corpus", "kb", *rerank, seconds, *kb]) == EXIT_USAGE
        assert "--rerank-timeout" in capsys.readouterr().err, seconds
    assert main(["query", "travel", "--corpus", "kb", "--rerank-timeout", "5", *kb]) == EXIT_USAGE
    assert "--rerank" in capsys.readouterr().err
    code, out, _ = _query(capsys, "travel", "--corpus", "kb", *rerank, "300", *kb)
    assert code == EXIT_OK and out["hits"]


def test_empty_unknown_corpus_and_empty_query(kb, capsys):
    """An unknown corpus exits 1 on query and status and says so; an empty query exits 2.

    If this fails, check NothingFound in _query and _status.
    """
    assert main(["query", "x", "--corpus", "nope", *kb]) == EXIT_FAILED
    assert main(["status", "--corpus", "nope", *kb]) == EXIT_FAILED
    assert main(["sources", "--corpus", "nope", *kb]) == EXIT_FAILED
    assert "nope" in capsys.readouterr().err
    assert main(["query", "  ", "--corpus", "kb", *kb]) == EXIT_USAGE


def test_ingest_with_another_embedder_refuses_before_writing_and_names_reindex(
    kb, capsys, tmp_path
):
    """`ingest --embedder minilm` into a hash corpus exits 2 naming `ragport reindex`; nothing
    is written (the generation does not move).

    If this fails, check _embedder in ragport/cli/config.py.
    """
    main(["generations", "--corpus", "kb", "--json", *kb])
    before = json.loads(capsys.readouterr().out)["current"]
    extra = tmp_path / "docs" / "new.md"
    extra.write_text("# New\n\nnew text\n")
    assert main(["ingest", str(extra), "--corpus", "kb", "--embedder", "minilm", *kb]) == EXIT_USAGE
    assert "ragport reindex --embedder minilm" in capsys.readouterr().err
    main(["generations", "--corpus", "kb", "--json", *kb])
    assert json.loads(capsys.readouterr().out)["current"] == before
    # with no --embedder, the corpus's own embedder is used
    assert main(["ingest", str(extra), "--corpus", "kb", *kb]) == EXIT_OK


def test_memory_store_warns_that_nothing_is_kept(capsys):
    """--store memory:// prints a warning on stderr.

    If this fails, check _stores in ragport/cli/config.py.
    """
    assert main(["status", "--store", "memory://"]) == EXIT_FAILED
    assert "memory://" in capsys.readouterr().err


def test_unreachable_store_exits_3(capsys):
    """A refused connection is exit 3 with StoreError and no password on stderr.

    If this fails, check _exit_code in ragport/cli/__init__.py.
    """
    assert main(["status", "--store", "postgresql://u:pw-XYZ@127.0.0.1:1/db"]) == EXIT_STORE
    err = capsys.readouterr().err
    assert "StoreError" in err and "pw-XYZ" not in err and "Traceback" not in err


def test_every_command_and_option_has_help_and_defaults_are_shown():
    """Every command has a description and examples; every option has help text; options with
    a default show it.

    If this fails, add help= (and a default where one applies) to the option named.
    """
    commands = dict(_iter_commands(_parser()))
    for name in ("query", "ingest", "delete", "forget", "status", "sources", "grants set",
                 "grants show", "generations", "rollback", "compact", "reindex", "config",
                 "mcp", "db upgrade", "db stop", "db status", "demo", "sync folder",
                 "sync drive"):  # fmt: skip
        assert name in commands, name
    for name, parser in commands.items():
        if name in ("grants", "db", "sync"):
            continue  # command groups: their subcommands are checked
        assert parser.description and parser.epilog and "ragport " in parser.epilog, name
        text = parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, (name, action.dest)
            if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS):
                assert "default" in text, (name, action.dest)


def test_ragport_toml_found_upward_gives_corpus_and_query_defaults(
    kb, capsys, tmp_path, monkeypatch
):
    """A ragport.toml above the current directory sets corpus and query defaults; `ragport
    config` shows them and where the store came from; an unknown key is a usage error.

    If this fails, check find_config / load_config in ragport/bootstrap/config.py and _resolve in ragport/cli/config.py.
    """
    (tmp_path / "ragport.toml").write_text(
        f'store = "{kb[1]}"\nschema = "{kb[3]}"\ncorpus = "kb"\nembedder = "hash"\n'
        '[query]\ntop_k = 2\nmode = "hybrid"\n'
    )
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    monkeypatch.chdir(inner)
    code, out, _ = _query(capsys, "travel")
    assert (
        code == EXIT_OK and out["corpora"] == ["kb"] and out["top_k"] == 2 and len(out["hits"]) == 2
    )
    assert out["mode"] == "hybrid"
    assert main(["config", "--json"]) == EXIT_OK
    shown = json.loads(capsys.readouterr().out)
    assert shown["file"] == str(tmp_path / "ragport.toml") and shown["corpus"] == "kb"
    (tmp_path / "ragport.toml").write_text('corpuss = "kb"\n')
    assert main(["config"]) == EXIT_USAGE


def test_copies_of_one_file_fill_the_top_k_once_unless_kept(kb, tmp_path, capsys):
    """Three copies of one file under three names: one hit by default, every copy with
    --keep-duplicates."""
    copies = tmp_path / "copies"
    copies.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (copies / name).write_text("# Quagga\n\nThe quagga was a subspecies of zebra.\n")
    assert main(["ingest", str(copies), "--corpus", "copies", *kb, *HASH]) == EXIT_OK
    capsys.readouterr()
    code, out, _ = _query(capsys, "quagga subspecies", "--corpus", "copies", *kb)
    assert code == EXIT_OK and len(out["hits"]) == 1
    code, out, _ = _query(
        capsys, "quagga subspecies", "--corpus", "copies", "--keep-duplicates", *kb
    )
    assert code == EXIT_OK and sorted(h["source_id"] for h in out["hits"]) == [
        "a.md",
        "b.md",
        "c.md",
    ]
