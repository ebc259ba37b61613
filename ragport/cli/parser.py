"""The argument parser of every ``ragport`` command (help text, defaults, examples)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from typing import Any

from ragport.cli.config import _config_show
from ragport.cli.db import _db_copy, _db_dump, _db_restore, _db_status, _db_stop, _db_upgrade
from ragport.cli.demo import _demo
from ragport.cli.evaluate import add_eval_command
from ragport.cli.ingest import _ingest
from ragport.cli.lifecycle import (
    _compact,
    _delete,
    _forget,
    _generations,
    _grants_set,
    _grants_show,
    _readmit,
    _reindex,
    _rollback,
    _sources,
    _status,
)
from ragport.cli.query import TOKENS_PER_HIT, _mcp, _query
from ragport.cli.sync import _sync_drive, _sync_folder
from ragport.domain.documents import DOCUMENT_SUFFIXES
from ragport.domain.limits import DEFAULT_LIMITS, HARD_LIMITS

DESCRIPTION = "The ``ragport`` command line (composition root for the command line)."
EMBEDDERS = ("minilm", "hash")


MODES = ("vector", "lexical", "hybrid")
ENCODING_HELP = (
    "how .txt .md .rst bytes are read: utf-8 (strict), auto (UTF-8, else detected: for "
    "Latin-1/cp1252 folders) or a codec name such as cp1252 (default: the one recorded with "
    "the corpus, else ragport.toml, else utf-8)"
)
MAX_BYTES_HELP = (
    f"document byte cap (default: recorded with the corpus, else [limits] parse_bytes in "
    f"ragport.toml, else {DEFAULT_LIMITS.parse_bytes}); at most {HARD_LIMITS.parse_bytes}, or "
    f"the parse_bytes ragport.toml sets; for PDF and DOCX it caps the extracted text, the file "
    f"itself may be up to [limits] binary_bytes, else {DEFAULT_LIMITS.binary_bytes} "
    f"(docs/limits.md)"
)
SIZE_HELP = "chunk size in characters (default: recorded with the corpus, else 1000)"
OVERLAP_HELP = "chunk overlap in characters (default: recorded with the corpus, else 100)"
TIMEOUT_HELP = (
    f"CPU seconds one document's parse may use (default: recorded with the corpus, else "
    f"[limits] parse_ms / 1000 in ragport.toml, else {DEFAULT_LIMITS.parse_ms // 1000}); at most "
    f"{HARD_LIMITS.parse_ms // 1000}, or what parse_ms in ragport.toml sets"
)
WALL_TIMEOUT_HELP = (
    f"wall-clock seconds one document's parse may take however busy the machine, a backstop "
    f"(default: recorded with the corpus, else [limits] parse_wall_ms / 1000 in ragport.toml, else "
    f"{DEFAULT_LIMITS.parse_wall_ms // 1000}); at most {HARD_LIMITS.parse_wall_ms // 1000}"
)

NO_CONFIG_HELP = (
    "read no ragport.toml at all, neither one found upward nor your own (also: RAGPORT_NO_CONFIG=1)"
)


class _Help(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples' layout and shows each option's default where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "%(default)" not in text
            and "default" not in text
            and action.option_strings
            and action.default not in (None, False, argparse.SUPPRESS)
        ):
            text += " (default: %(default)s)"
        return text


def _sub(
    sub: Any, name: str, summary: str, examples: Sequence[str], parents: Sequence[Any] = ()
) -> argparse.ArgumentParser:
    epilog = "examples:\n" + "".join(f"  {e}\n" for e in examples) if examples else None
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        parents=list(parents),
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=epilog,
        formatter_class=_Help,
    )
    _no_config_option(parser, argparse.SUPPRESS)  # given before or after the command: both work
    return parser


def _no_config_option(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument("--no-config", action="store_true", default=default, help=NO_CONFIG_HELP)


# Allow-listed function shape (pyproject [tool.ruff.lint]): the whole argument parser; each command registers its own subparser (issue 42).
def _parser() -> argparse.ArgumentParser:  # noqa: PLR0915
    from importlib.metadata import PackageNotFoundError, version

    try:
        ragport_version = version("ragport")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        ragport_version = "unknown"

    stored = argparse.ArgumentParser(add_help=False)
    stored.add_argument(
        "--store",
        help="memory://, postgresql://... or embedded (default: RAGPORT_STORE, "
        "ragport.toml, else the embedded server)",
    )
    stored.add_argument(
        "--read-store",
        help="a streaming replica for reads: postgresql://... (default: RAGPORT_READ_STORE)",
    )
    stored.add_argument("--schema", help="PostgreSQL schema (default: ragport.toml, else ragport)")
    stored.add_argument("--tenant", help="tenant id (default: ragport.toml, else local)")
    stored.add_argument("--resource", help="resource id (default: ragport.toml, else default)")
    one_corpus = argparse.ArgumentParser(add_help=False)
    one_corpus.add_argument("--corpus", help="corpus name (default: ragport.toml, else default)")
    one_corpus.set_defaults(corpus_many=False)
    embed = argparse.ArgumentParser(add_help=False)
    embed.add_argument(
        "--embedder",
        help="embedder: minilm, hash or an installed plugin's name (default: the one the "
        "corpus was ingested with, ragport.toml, else minilm)",
    )
    json_out = argparse.ArgumentParser(add_help=False)
    json_out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common = argparse.ArgumentParser(add_help=False, parents=[stored, one_corpus, embed])
    corpus_only = argparse.ArgumentParser(add_help=False, parents=[stored, one_corpus])

    parser = argparse.ArgumentParser(
        prog="ragport",
        description=DESCRIPTION,
        epilog="exit codes: 0 ok, 1 some inputs failed or nothing found, 2 usage, "
        "3 store unavailable, 4 the reranker failed or timed out. "
        "`ragport COMMAND --help` for each command.\n",
        formatter_class=_Help,
    )
    parser.add_argument("--version", action="version", version=f"ragport {ragport_version}")
    _no_config_option(parser, False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = _sub(sub, "demo", "run the bundled corpus through every guarantee, step by step",
                ["ragport demo", "ragport demo --store memory:// --embedder hash --json",
                 "ragport demo --clean"], [embed, json_out])  # fmt: skip
    demo.add_argument(
        "--store",
        help="memory://, postgresql://... or embedded (default: RAGPORT_STORE, ragport.toml, "
        "else the embedded server); the demo writes only to schema ragport_demo, emptied first",
    )
    demo.add_argument("--tenant", help="tenant id (default: ragport.toml, else local)")
    demo.add_argument("--resource", help="resource id (default: ragport.toml, else default)")
    demo.add_argument("--query", action="append", help="a question to ask in step 2 (repeatable)")
    demo.add_argument("--top-k", type=int, default=3, help="hits per question")
    demo.add_argument("--size", type=int, default=400, help="chunk size in characters")
    demo.add_argument("--overlap", type=int, default=40, help="chunk overlap in characters")
    demo.add_argument("--clean", action="store_true", help="remove the demo's data and exit")
    demo.set_defaults(func=_demo)

    ingest = _sub(
        sub, "ingest",
        "ingest documents (" + " ".join(DOCUMENT_SUFFIXES) + "; folders walked)",
        ["ragport ingest docs/ --corpus handbook", "ragport ingest a.md b.pdf --json"],
        [common, json_out],
    )  # fmt: skip
    ingest.add_argument("paths", nargs="+", help="files and folders to ingest")
    ingest.add_argument(
        "--root",
        help="corpus root: ids are paths relative to it (default: recorded, or common folder)",
    )
    ingest.add_argument("--size", type=int, default=None, help=SIZE_HELP)
    ingest.add_argument("--overlap", type=int, default=None, help=OVERLAP_HELP)
    ingest.add_argument("--max-bytes", type=int, default=None, help=MAX_BYTES_HELP)
    ingest.add_argument("--timeout", type=float, default=None, help=TIMEOUT_HELP)
    ingest.add_argument("--wall-timeout", type=float, default=None, help=WALL_TIMEOUT_HELP)
    ingest.add_argument(
        "--workers",
        type=int,
        default=None,
        help="parse threads of the pipelined ingest, 1..32 (1: one file after another; "
        "default: the cores, 2 to 8)",
    )
    ingest.add_argument("--encoding", help=ENCODING_HELP)
    ingest.add_argument(
        "-v", "--verbose", action="store_true",
        help="name each file a folder walk skipped for its type (the summary counts them)",
    )  # fmt: skip
    ingest.set_defaults(func=_ingest)

    query = _sub(
        sub, "query", "retrieve cited context from one or more corpora",
        [
            'ragport query "parental leave" --corpus handbook',
            'ragport query "leave" --mode hybrid --lexical-weight 2 --top-k 10',
            'ragport query "leave" --principal alice --group staff --filter \'{"lang": "en"}\'',
            'ragport query "leave" --corpus handbook --corpus wiki --json',
        ],
        [stored, embed, json_out],
    )  # fmt: skip
    query.add_argument("text", help="the query")
    query.add_argument(
        "--corpus", action="append", default=[],
        help="corpus to search (repeatable; default: ragport.toml, else default)",
    )  # fmt: skip
    query.set_defaults(corpus_many=True)
    query.add_argument(
        "--top-k", type=int, default=None,
        help=f"hits to return, at most {HARD_LIMITS.top_k} (default: ragport.toml, else 5)",
    )  # fmt: skip
    query.add_argument(
        "--max-tokens", type=int,
        help=f"context budget in tokens (default: {TOKENS_PER_HIT} per hit, "
        f"{DEFAULT_LIMITS.context_tokens} to {HARD_LIMITS.context_tokens})",
    )  # fmt: skip
    query.add_argument(
        "--mode", choices=MODES,
        help="vector only, lexical only, or hybrid (fused) retrieval "
        "(default: ragport.toml, else vector)",
    )  # fmt: skip
    query.add_argument(
        "--lexical",
        help="lexical index for --mode lexical|hybrid: one the store offers (bm25 on both "
        "built-in stores; fts, PostgreSQL's old name, is deprecated) (default: the store's "
        "first)",
    )
    query.add_argument(
        "--vector-weight", type=float, default=1.0, help="weight of the vector leg in fusion"
    )
    query.add_argument(
        "--lexical-weight", type=float, default=1.0, help="weight of the lexical leg in fusion"
    )
    query.add_argument("--filter", help="metadata filter as JSON (docs/access-control.md)")
    query.add_argument(
        "--under", metavar="FOLDER",
        help="only sources under this folder (their path relative to the corpus root, "
        "e.g. docs/guides/)",
    )  # fmt: skip
    query.add_argument("--principal", help="retrieve as this principal (grants enforced)")
    query.add_argument(
        "--keep-duplicates", action="store_true",
        help="show every copy of the same text (default: the best-ranked copy only)",
    )  # fmt: skip
    query.add_argument("--group", action="append", help="a group of the principal (repeatable)")
    query.add_argument(
        "--rerank",
        help="reranker kind: local, embedding, tei, openai-compatible, voyage, fake, none "
        "(default: ragport.toml, else none)",
    )
    query.add_argument(
        "--rerank-option", action="append", metavar="KEY=VALUE",
        help="a reranker option, e.g. model=... or base_url=... (repeatable; the API key "
        "comes from RAGPORT_RERANK_API_KEY)",
    )  # fmt: skip
    query.add_argument(
        "--rerank-timeout", type=float, metavar="SECONDS",
        help="time budget of the reranker, above 0 and at most "
        f"{HARD_LIMITS.rerank_ms // 1000} (default: {DEFAULT_LIMITS.local_rerank_ms // 1000} "
        f"for local and embedding, {DEFAULT_LIMITS.rerank_ms / 1000:g} for the others); "
        "past it: RerankError, exit 4",
    )  # fmt: skip
    query.set_defaults(func=_query)
    add_eval_command(sub, _sub, [common, json_out])

    delete = _sub(
        sub, "delete", "retire every record of one or more sources (a new generation)",
        ["ragport delete guides/old.md --corpus handbook", "ragport delete --prefix drafts/ --yes"],
        [corpus_only, json_out],
    )  # fmt: skip
    delete.add_argument("source_id", nargs="*", help="source ids (as `ragport sources` lists)")
    delete.add_argument("--prefix", help="also every source whose id starts with this")
    delete.add_argument("--yes", action="store_true", help="do not ask before a --prefix delete")
    delete.set_defaults(func=_delete)

    forget = _sub(
        sub, "forget",
        "forget a source everywhere: tombstone it and what rests on it, remove its rows",
        ["ragport forget leave.md --corpus handbook",
         "ragport forget leave.md --principal admin --corpus handbook"],
        [corpus_only, json_out],
    )  # fmt: skip
    forget.add_argument("source_id", help="the source id")
    forget.add_argument(
        "--principal",
        help="who forgets (needs a grant on the source); default: the corpus's owner, "
        "as for delete",
    )
    forget.add_argument("--group", action="append", help="a group of the principal (repeatable)")
    forget.set_defaults(func=_forget)

    readmit = _sub(
        sub, "readmit",
        "let a forgotten id be written again (audited): purges what is left of its forgotten "
        "content and revokes its grant; ingest it again afterwards",
        ["ragport readmit leave.md --corpus handbook"],
        [corpus_only, json_out],
    )  # fmt: skip
    readmit.add_argument("source_id", help="the forgotten source id")
    readmit.set_defaults(func=_readmit)

    status = _sub(sub, "status", "ingestion status of a corpus",
                  ["ragport status --corpus handbook"], [corpus_only, json_out])  # fmt: skip
    status.add_argument(
        "--limit", type=int, default=50, help=f"rows per page, at most {HARD_LIMITS.status_page}"
    )
    status.add_argument("--cursor", help="continue after this page (printed as `more:`)")
    status.set_defaults(func=_status)

    sources = _sub(
        sub, "sources",
        "every source of a corpus: chunks, generation, content hash, embedder",
        ["ragport sources --corpus handbook", "ragport sources --limit 100 --cursor guides/z.md"],
        [corpus_only, json_out],
    )  # fmt: skip
    sources.add_argument("--limit", type=int, help="rows per page (default: all)")
    sources.add_argument("--cursor", help="start after this source id")
    sources.set_defaults(func=_sources)

    grants = sub.add_parser(
        "grants", help="read and set who may see a source", formatter_class=_Help,
        description="Read and set who may see a source.",
    )  # fmt: skip
    grants_sub = grants.add_subparsers(dest="grants_command", required=True, metavar="COMMAND")
    gset = _sub(
        grants_sub, "set", "replace the grant of a source (or of every source under --prefix)",
        ["ragport grants set leave.md --principal alice --group staff --corpus handbook",
         "ragport grants set --prefix hr/ --group hr --corpus handbook --yes"],
        [corpus_only],
    )  # fmt: skip
    gset.add_argument("source_id", nargs="?", help="the source id")
    gset.add_argument("--prefix", help="every source whose id starts with this (asks first)")
    gset.add_argument("--yes", action="store_true", help="do not ask before a --prefix set")
    gset.add_argument("--principal", action="append", help="a principal id (repeatable)")
    gset.add_argument("--group", action="append", help="a group id (repeatable)")
    gset.add_argument("--access-version", type=int, default=1, help="the grant's access version")
    gset.set_defaults(func=_grants_set)
    gshow = _sub(grants_sub, "show", "show the grants of sources (default: every source)",
                 ["ragport grants show --corpus handbook"], [corpus_only, json_out])  # fmt: skip
    gshow.add_argument("source_id", nargs="*", help="source ids (default: every source)")
    gshow.set_defaults(func=_grants_show)

    generations = _sub(
        sub, "generations",
        "the generation pointer, the counter, and the sources each recent generation wrote and retired",
        ["ragport generations --corpus handbook"], [corpus_only, json_out],
    )  # fmt: skip
    generations.add_argument(
        "--limit", type=int, default=10, help="recent generations shown, at most 1000"
    )
    generations.add_argument(
        "--max-ids", type=int, default=20,
        help="source ids listed per generation and kind (the counts stay whole), at most 10000",
    )  # fmt: skip
    generations.set_defaults(func=_generations)

    rollback = _sub(sub, "rollback", "show the corpus as it was at generation N",
                    ["ragport rollback --to 3 --corpus handbook --yes"], [corpus_only, json_out])  # fmt: skip
    rollback.add_argument("--to", type=int, required=True, help="the generation to go back to")
    rollback.add_argument("--yes", action="store_true", help="do not ask before rolling back")
    rollback.set_defaults(func=_rollback)

    compact_p = _sub(
        sub, "compact",
        "physically remove retired rows (and their text) older than the last N generations",
        ["ragport compact --keep 2 --corpus handbook --yes"], [corpus_only, json_out],
    )  # fmt: skip
    compact_p.add_argument("--keep", type=int, default=1, help="generations kept for rollback")
    compact_p.add_argument("--yes", action="store_true", help="do not ask before removing rows")
    compact_p.set_defaults(func=_compact)

    reindex = _sub(
        sub, "reindex",
        "re-embed a corpus under another embedder (old vectors serve until the new commit)",
        ["ragport reindex --embedder minilm --corpus handbook"], [corpus_only, json_out],
    )  # fmt: skip
    reindex.add_argument(
        "--embedder", required=True, help="the new embedder: minilm, hash or a plugin's name"
    )
    reindex.set_defaults(func=_reindex)

    config = _sub(sub, "config", "show the configuration in effect and where it came from",
                  ["ragport config"], [stored, one_corpus, json_out])  # fmt: skip
    config.set_defaults(func=_config_show)

    mcp = _sub(sub, "mcp", "serve search over MCP (stdio)",
               ["ragport mcp --corpus handbook --principal alice --group staff"], [common])  # fmt: skip
    mcp.add_argument("--principal", help="the caller every search runs as (grants enforced)")
    mcp.add_argument("--group", action="append", help="a group of the principal (repeatable)")
    mcp.set_defaults(func=_mcp)

    sync = sub.add_parser(
        "sync", help="keep a corpus equal to a folder or a Google Drive", formatter_class=_Help,
        description="Keep a corpus equal to a folder or a Google Drive (docs/sync.md).",
    )  # fmt: skip
    sync_sub = sync.add_subparsers(dest="sync_command", required=True, metavar="COMMAND")
    sync_common = argparse.ArgumentParser(add_help=False, parents=[common, json_out])
    sync_common.add_argument("--size", type=int, default=None, help=SIZE_HELP)
    sync_common.add_argument("--overlap", type=int, default=None, help=OVERLAP_HELP)
    sync_common.add_argument("--max-bytes", type=int, default=None, help=MAX_BYTES_HELP)
    sync_common.add_argument("--timeout", type=float, default=None, help=TIMEOUT_HELP)
    sync_common.add_argument("--wall-timeout", type=float, default=None, help=WALL_TIMEOUT_HELP)
    sync_common.add_argument(
        "--max-pages", type=int,
        help="stop after N committed pages; the next run continues (default: until done)",
    )  # fmt: skip
    sync_common.add_argument(
        "--workers", type=int, default=None,
        help="items of a page loaded and parsed at once, 1..32 (default: the cores, 2 to 8, "
        "for a folder; 1 for a Drive)",
    )  # fmt: skip
    folder = _sub(
        sync_sub, "folder",
        "sync a local folder: new and edited files upserted, removed ones deleted "
        "(ids: paths relative to it)",
        ["ragport sync folder handbook/ --corpus handbook",
         "ragport sync folder handbook/ --corpus handbook --json"],
        [sync_common],
    )  # fmt: skip
    folder.add_argument("path", help="the folder to keep the corpus equal to")
    folder.add_argument(
        "--page-size", type=int, default=50,
        help="files per committed page (1..10000): an interrupt loses at most one page",
    )  # fmt: skip
    folder.add_argument("--encoding", help=ENCODING_HELP)
    folder.set_defaults(func=_sync_folder)
    drive = _sub(
        sync_sub, "drive",
        "sync a Google Drive folder (with its subfolders) or a shared drive",
        ["RAGPORT_DRIVE_ACCESS_TOKEN=... ragport sync drive --folder 1AbC --corpus team"],
        [sync_common],
    )  # fmt: skip
    drive.add_argument("--folder", help="Drive folder id, its subfolders included (default: none)")
    drive.add_argument("--shared-drive", help="shared drive id (default: none)")
    drive.add_argument(
        "--token-env",
        default="RAGPORT_DRIVE_ACCESS_TOKEN",
        help="environment variable holding the OAuth access token",
    )
    drive.add_argument(
        "--max-list-requests", type=int, metavar="N",
        help="Drive listing requests (pages, look-ups) one run may send (default: 10000, at "
        "most 1000000); past it the run stops with a LoadError, exit 1, and the next run "
        "continues from the last committed page",
    )  # fmt: skip
    drive.add_argument("--base-url", default="https://www.googleapis.com", help=argparse.SUPPRESS)
    drive.add_argument("--allow-loopback", action="store_true", help=argparse.SUPPRESS)
    drive.set_defaults(func=_sync_drive)

    db = sub.add_parser(
        "db", help="database administration", formatter_class=_Help,
        description="Database administration.",
    )  # fmt: skip
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    upgrade = _sub(db_sub, "upgrade", "apply schema migrations",
                   ["ragport db upgrade --store postgresql://me@db/rag",
                    "ragport db upgrade --store postgresql://me@db/rag --partitions 16",
                    "ragport db upgrade --store postgresql://me@db/rag --sql",
                    "ragport db upgrade --store postgresql://me@db/rag --extension-schema ext"],
                   [stored])  # fmt: skip
    upgrade.add_argument(
        "--partitions",
        type=int,
        help="create the tables PARTITION BY HASH (tenant_id) in N partitions (default: none)",
    )
    upgrade.add_argument(
        "--sql",
        action="store_true",
        help="print the pending migrations' SQL (one transaction, for psql) and apply nothing",
    )
    upgrade.add_argument(
        "--extension-schema",
        metavar="SCHEMA",
        help="create the vector extension in SCHEMA when the database lacks it (default: the "
        "first schema of the search_path); an installed extension is used where it is",
    )
    upgrade.set_defaults(func=_db_upgrade)
    dump = _sub(db_sub, "dump", "pg_dump ragport's schema to PATH (custom format)",
                ["ragport db dump backup.dump"], [stored])  # fmt: skip
    dump.add_argument("path", help="the dump file to write")
    dump.set_defaults(func=_db_dump)
    restore = _sub(db_sub, "restore", "pg_restore a dump into a server without that schema",
                   ["ragport db restore backup.dump --store postgresql://me@db/rag"],
                   [stored])  # fmt: skip
    restore.add_argument("path", help="the dump file to read")
    restore.set_defaults(func=_db_restore)
    copy = _sub(db_sub, "copy", "copy ragport's schema to another server (dump + restore)",
                ["ragport db copy --to postgresql://me@db/rag"], [stored])  # fmt: skip
    copy.add_argument("--to", required=True, help="postgresql://... of the target server")
    copy.set_defaults(func=_db_copy)
    stop = _sub(db_sub, "stop", "stop the embedded PostgreSQL server", ["ragport db stop"])
    stop.set_defaults(func=_db_stop)
    dbstatus = _sub(
        db_sub, "status", "which embedded server, which binaries, which data directory, how big",
        ["ragport db status"], [json_out],
    )  # fmt: skip
    dbstatus.set_defaults(func=_db_status)
    return parser


def _iter_commands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every (command path, parser) under ``parser`` (for the help tests and docs)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield name, child
                for sub_name, grandchild in _iter_commands(child):
                    yield f"{name} {sub_name}", grandchild
