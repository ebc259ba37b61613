"""The ``ragport`` command line (composition root for the command line).

Every command takes ``--store URL`` (or ``RAGPORT_STORE``): ``memory://``, a
``postgresql://`` URL, or by default an embedded PostgreSQL + pgvector server under the
user's data directory, started on demand and reused by the next command.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import cattrs

from ragport.application import (
    RetrievalResult,
    SyncResult,
    delete_source,
    list_ingestion_status,
    retrieve_context,
)
from ragport.bootstrap import (
    CorpusRoots,
    FileOutcome,
    build_embedder,
    collect_documents,
    default_root,
    demo_documents,
    ingest_files,
    ingest_text,
    open_checkpoints,
    open_stores,
    sync_connector,
)
from ragport.domain.documents import DOCUMENT_SUFFIXES
from ragport.domain.errors import RagportError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, HARD_LIMITS
from ragport.domain.model import Scope

__all__ = ["main"]

DEMO_QUERIES = (
    "Who has to approve a large payment?",
    "How long is parental leave?",
)

_json = cattrs.Converter()
_json.register_unstructure_hook(datetime, lambda d: d.isoformat())


def _scope(args: argparse.Namespace) -> Scope:
    return Scope(args.tenant, args.resource, args.corpus)


def _store_url(args: argparse.Namespace) -> str | None:
    return args.store or os.environ.get("RAGPORT_STORE") or None


def _read_url(args: argparse.Namespace) -> str | None:
    return getattr(args, "read_store", None) or os.environ.get("RAGPORT_READ_STORE") or None


def _print_result(result: RetrievalResult) -> None:
    for hit in result.hits:
        heading = " > ".join(hit.metadata.get("heading", [])) or "(no heading)"
        if hit.metadata.get("page") is not None:
            heading = f"page {hit.metadata['page']}  {heading}"
        print(f"  [{hit.provenance.citation_id}] score={hit.score:.3f}  {heading}")
    if result.truncated:
        print("  (context truncated by the byte or token ceiling)")
    print("context:")
    for line in result.text.splitlines():
        print(f"    {line}")


def _demo(args: argparse.Namespace) -> int:
    embedder = build_embedder(args.embedder)
    scope = Scope(args.tenant, args.resource, "demo")
    with open_stores(_store_url(args), schema=args.schema, read_url=_read_url(args)) as stores:
        print(
            f"ragport demo: {stores.description}, embedder {embedder.id}, corpus {scope.corpus_id}"
        )
        for name, text in demo_documents().items():
            result = ingest_text(
                name=name,
                text=text,
                store=stores.chunks,
                status_store=stores.status,
                embedder=embedder,
                scope=scope,
                size=args.size,
                overlap=args.overlap,
            )
            state = "unchanged, skipped" if result.skipped else f"{result.indexed} chunks"
            print(f"  ingested {result.source_id}: {state} (generation {result.generation})")
        for query in args.query or DEMO_QUERIES:
            found = retrieve_context(
                query, embedder=embedder, store=stores.chunks, scope=scope, top_k=args.top_k
            )
            print(f"\nquery: {query}")
            _print_result(found)
    return 0


def _corpus_root(args: argparse.Namespace) -> Path:
    """``--root``, else the root recorded with the corpus, else the paths' common folder.

    The chosen root is recorded (except for ``memory://``), so later runs name every file
    the same way however its path is typed.
    """
    url = _store_url(args)
    # A store URL may carry a password: the file keeps only a digest of it.
    store = hashlib.sha256(url.encode()).hexdigest()[:16] if url else "embedded"
    key = "|".join([store, args.schema, args.tenant, args.resource, args.corpus])
    roots = None if url in ("memory://", "memory") else CorpusRoots()
    recorded = roots.get(key) if roots is not None else None
    if args.root:
        root = Path(args.root).resolve()
        if not root.is_dir():
            raise ValidationError("--root must be an existing folder", field="root")
        if recorded is not None and recorded != root:
            print(f"note: corpus root changed from {recorded} to {root}", file=sys.stderr)
    else:
        root = recorded or default_root(args.paths)
    if roots is not None and root != recorded:
        roots.set(key, root)
    return root


class _Progress:
    """A one-line bar (files done / total, rate, current file) on a terminal, else nothing."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled and total > 0
        self.done = 0
        self.started = time.perf_counter()

    def show(self, current: str) -> None:
        if not self.enabled:
            return
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        width = 24
        filled = int(width * self.done / self.total)
        bar = "#" * filled + "-" * (width - filled)
        line = f"[{bar}] {self.done}/{self.total} {self.done / elapsed:.1f} files/s {current}"
        columns = shutil.get_terminal_size().columns
        sys.stdout.write("\r" + line[: columns - 1].ljust(columns - 1))
        sys.stdout.flush()

    def clear(self) -> None:
        if self.enabled:
            sys.stdout.write("\r" + " " * (shutil.get_terminal_size().columns - 1) + "\r")
            sys.stdout.flush()


def _outcome_line(n: int, total: int, outcome: FileOutcome) -> str:
    name = outcome.source_id or outcome.path
    if outcome.state == "failed":
        detail = f"FAILED ({outcome.reason}) {outcome.error or ''}".rstrip()
    elif outcome.state == "unchanged":
        detail = f"unchanged (generation {outcome.generation})"
    else:
        detail = f"{outcome.chunks} chunks, {outcome.replaced} replaced (generation {outcome.generation})"
    return f"[{n}/{total}] {name}: {detail}"


def _ingest(args: argparse.Namespace) -> int:
    embedder = build_embedder(args.embedder)
    scope = _scope(args)
    root = _corpus_root(args)
    candidates = collect_documents(args.paths, root=root)
    total = len(candidates)
    progress = _Progress(total, sys.stdout.isatty() and not args.json)
    outcomes: list[FileOutcome] = []
    started = time.perf_counter()
    with open_stores(_store_url(args), schema=args.schema, read_url=_read_url(args)) as stores:
        results = ingest_files(
            candidates,
            root=root,
            store=stores.chunks,
            status_store=stores.status,
            embedder=embedder,
            scope=scope,
            size=args.size,
            overlap=args.overlap,
            max_bytes=args.max_bytes,
        )
        for n, outcome in enumerate(results, start=1):
            outcomes.append(outcome)
            progress.done = n
            if args.json:
                print(json.dumps(_json.unstructure(outcome), ensure_ascii=False), flush=True)
                continue
            if progress.enabled:
                progress.clear()
                if outcome.state == "failed":
                    print(_outcome_line(n, total, outcome))
                progress.show(outcome.source_id or outcome.path)
            else:
                print(_outcome_line(n, total, outcome), flush=True)
    progress.clear()
    failed = [o for o in outcomes if o.state == "failed"]
    if not args.json:
        counts = {
            state: sum(o.state == state for o in outcomes)
            for state in ("indexed", "unchanged", "failed")
        }
        seconds = time.perf_counter() - started
        print(f"{total} document(s) in corpus {scope.corpus_id} (root {root}) in {seconds:.1f} s")
        print(f"  {'indexed':<10}{counts['indexed']:>6}")
        print(f"  {'unchanged':<10}{counts['unchanged']:>6}")
        print(f"  {'failed':<10}{counts['failed']:>6}")
        if failed:
            width = max(len(o.source_id or o.path) for o in failed)
            print("failed:")
            for o in failed:
                print(f"  {(o.source_id or o.path):<{width}}  {o.reason or '':<16} {o.error or ''}")
    return 1 if failed else 0


def _query(args: argparse.Namespace) -> int:
    embedder = build_embedder(args.embedder)
    with open_stores(_store_url(args), schema=args.schema, read_url=_read_url(args)) as stores:
        result = retrieve_context(
            args.text,
            embedder=embedder,
            store=stores.chunks,
            scope=_scope(args),
            top_k=args.top_k,
            lexical=args.lexical or "off",
        )
    if args.json:
        print(json.dumps(_json.unstructure(result), indent=2, ensure_ascii=False))
    else:
        _print_result(result)
    return 0


def _delete(args: argparse.Namespace) -> int:
    with open_stores(_store_url(args), schema=args.schema, read_url=_read_url(args)) as stores:
        result = delete_source(
            source_id=args.source_id,
            store=stores.chunks,
            scope=_scope(args),
            status_store=stores.status,
        )
    print(
        f"{result.source_id}: {result.deleted} record(s) retired (generation {result.generation})"
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    with open_stores(_store_url(args), schema=args.schema, read_url=_read_url(args)) as stores:
        page = list_ingestion_status(
            store=stores.status, scope=_scope(args), limit=args.limit, cursor=args.cursor
        )
        generation = stores.chunks.current_generation(_scope(args))
    if args.json:
        print(json.dumps(_json.unstructure(page), indent=2))
        return 0
    print(f"corpus {args.corpus}: generation {generation}")
    rows = [("SOURCE", "STATE", "CHUNKS", "BYTES", "UPDATED", "ERROR")]
    for item in page.items:
        updated = item.updated_at.strftime("%Y-%m-%d %H:%M:%S") if item.updated_at else ""
        rows.append(
            (
                item.source_id,
                item.state,
                f"{item.chunks_indexed}/{item.chunks_total}",
                str(item.bytes),
                updated,
                item.error or "",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)]
        print("  " + "  ".join([*cells, row[5]]).rstrip())
    if page.cursor:
        print(f"more: --cursor {page.cursor}")
    return 0


def _db_upgrade(args: argparse.Namespace) -> int:
    with open_stores(
        _store_url(args),
        schema=args.schema,
        read_url=_read_url(args),
        upgrade=True,
        partitions=args.partitions,
    ) as stores:
        print(f"schema {args.schema!r} is up to date ({stores.description})")
    return 0


def _db_dump(args: argparse.Namespace) -> int:
    from ragport.adapters.postgres import dump_schema
    from ragport.bootstrap import postgres_url

    with postgres_url(_store_url(args)) as url:
        dump_schema(url, args.path, schema=args.schema)
    print(f"schema {args.schema!r} dumped to {args.path}")
    return 0


def _db_restore(args: argparse.Namespace) -> int:
    from ragport.adapters.postgres import restore_schema
    from ragport.bootstrap import postgres_url

    with postgres_url(_store_url(args)) as url:
        restore_schema(url, args.path, schema=args.schema)
    print(f"schema {args.schema!r} restored from {args.path}")
    return 0


def _db_copy(args: argparse.Namespace) -> int:
    import tempfile

    from ragport.adapters.postgres import copy_schema
    from ragport.bootstrap import postgres_url

    with postgres_url(_store_url(args)) as url, tempfile.TemporaryDirectory() as work:
        copy_schema(url, args.to, work, schema=args.schema)
    print(f"schema {args.schema!r} copied; continue with --store URL")
    return 0


def _db_stop(args: argparse.Namespace) -> int:
    from ragport.adapters.postgres import default_data_dir, stop_embedded_server

    stopped = stop_embedded_server(default_data_dir())
    print("embedded server stopped" if stopped else "no embedded server was running")
    return 0


def _mcp(args: argparse.Namespace) -> int:
    import contextlib

    from ragport.domain.errors import ValidationError
    from ragport.domain.model import Authorization
    from ragport.integrations.mcp import build_server, stdout_to_stderr

    if args.group and args.principal is None:
        raise ValidationError("--group needs --principal", field="group")
    authorization = (
        Authorization(args.principal, args.tenant, group_ids=args.group or ())
        if args.principal is not None
        else None
    )
    # stdout is the MCP channel: nothing started while opening the stores may write to it.
    with contextlib.ExitStack() as stack:
        with stdout_to_stderr():
            stores = stack.enter_context(
                open_stores(_store_url(args), schema=args.schema, read_url=_read_url(args))
            )
            embedder = build_embedder(args.embedder)
        build_server(
            store=stores.chunks,
            status_store=stores.status,
            embedder=embedder,
            scope=_scope(args),
            authorization=authorization,
        ).run("stdio")
    return 0


def _print_sync(args: argparse.Namespace, result: SyncResult, seconds: float) -> int:
    if args.json:
        print(json.dumps({**_json.unstructure(result), "seconds": round(seconds, 3)}))
    else:
        print(
            f"synced corpus {args.corpus} in {seconds:.2f} s: {result.pages} page(s), "
            f"{result.upserted} upserted, {result.skipped} unchanged, {result.deleted} deleted"
            f"{f' ({result.swept} swept)' if result.swept else ''}, {result.withheld} withheld, "
            f"{result.failed} failed" + (" (full listing)" if result.bootstrapped else "")
        )
        if result.lost:
            print("another worker advanced the checkpoint first; this run stopped")
        elif not result.exhausted:
            print("more pages remain: run again to continue")
    return 1 if result.failed else 0


def _sync_run(args: argparse.Namespace, connector: Any) -> int:
    embedder = build_embedder(args.embedder)
    started = time.perf_counter()
    with open_stores(_store_url(args), schema=args.schema) as stores:
        result = sync_connector(
            connector,
            stores=stores,
            checkpoints=open_checkpoints(stores, schema=args.schema),
            embedder=embedder,
            scope=_scope(args),
            size=args.size,
            overlap=args.overlap,
            max_bytes=args.max_bytes,
            max_pages=args.max_pages,
        )
    return _print_sync(args, result, time.perf_counter() - started)


def _sync_folder(args: argparse.Namespace) -> int:
    from ragport.adapters.connectors import FolderConnector

    return _sync_run(args, FolderConnector(args.path, max_bytes=args.max_bytes))


def _sync_drive(args: argparse.Namespace) -> int:
    from ragport.adapters.connectors import GoogleDriveConnector, drive_permissions_access

    name = args.token_env
    if not os.environ.get(name):
        raise ValidationError(f"set the Drive access token in ${name}", field="token")

    def token_provider() -> str:
        return os.environ.get(name, "")

    connector = GoogleDriveConnector(
        token_provider=token_provider,
        resolve_access=drive_permissions_access,
        folder_id=args.folder,
        shared_drive_id=args.shared_drive,
        base_url=args.base_url,
        allow_loopback=args.allow_loopback,
        max_bytes=args.max_bytes,
    )
    try:
        return _sync_run(args, connector)
    finally:
        connector.close()


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store", help="memory://, postgresql://... or embedded (default; env RAGPORT_STORE)"
    )
    common.add_argument(
        "--read-store",
        help="a streaming replica for reads: postgresql://... (env RAGPORT_READ_STORE)",
    )
    common.add_argument("--schema", default="ragport", help="PostgreSQL schema (default ragport)")
    common.add_argument("--tenant", default="local")
    common.add_argument("--resource", default="default")
    common.add_argument("--corpus", default="default")
    common.add_argument(
        "--embedder", default="minilm", choices=("minilm", "hash"), help="embedder (default minilm)"
    )

    parser = argparse.ArgumentParser(prog="ragport", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo", parents=[common], help="ingest the bundled corpus and print cited results"
    )
    demo.add_argument("--query", action="append", help="a query to run (repeatable)")
    demo.add_argument("--top-k", type=int, default=3)
    demo.add_argument("--size", type=int, default=400, help="chunk size in characters")
    demo.add_argument("--overlap", type=int, default=40)
    demo.set_defaults(func=_demo)

    ingest = sub.add_parser(
        "ingest",
        parents=[common],
        help="ingest documents (" + " ".join(DOCUMENT_SUFFIXES) + "; folders walked)",
    )
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument(
        "--root",
        help="corpus root: ids are paths relative to it (default: recorded, or common folder)",
    )
    ingest.add_argument("--size", type=int, default=1000)
    ingest.add_argument("--overlap", type=int, default=100)
    ingest.add_argument(
        "--max-bytes",
        type=int,
        default=DEFAULT_LIMITS.parse_bytes,
        help=f"document byte cap (default {DEFAULT_LIMITS.parse_bytes}, at most {HARD_LIMITS.parse_bytes})",
    )
    ingest.add_argument("--json", action="store_true", help="one JSON result object per file")
    ingest.set_defaults(func=_ingest)

    query = sub.add_parser("query", parents=[common], help="retrieve cited context")
    query.add_argument("text")
    query.add_argument("--top-k", type=int, default=5)
    query.add_argument("--lexical", choices=("bm25", "fts"))
    query.add_argument("--json", action="store_true")
    query.set_defaults(func=_query)

    delete = sub.add_parser("delete", parents=[common], help="retire every record of a source")
    delete.add_argument("source_id")
    delete.set_defaults(func=_delete)

    status = sub.add_parser("status", parents=[common], help="ingestion status of a corpus")
    status.add_argument("--limit", type=int, default=50)
    status.add_argument("--cursor")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)

    mcp = sub.add_parser("mcp", parents=[common], help="serve search over MCP (stdio)")
    mcp.add_argument("--principal", help="the caller every search runs as (grants enforced)")
    mcp.add_argument("--group", action="append", help="a group of the principal (repeatable)")
    mcp.set_defaults(func=_mcp)

    sync = sub.add_parser("sync", help="keep a corpus equal to a folder or a Google Drive")
    sync_sub = sync.add_subparsers(dest="sync_command", required=True)
    sync_common = argparse.ArgumentParser(add_help=False, parents=[common])
    sync_common.add_argument("--size", type=int, default=1000)
    sync_common.add_argument("--overlap", type=int, default=100)
    sync_common.add_argument("--max-bytes", type=int, default=DEFAULT_LIMITS.parse_bytes)
    sync_common.add_argument("--max-pages", type=int, help="stop after N committed pages")
    sync_common.add_argument("--json", action="store_true", help="the SyncResult as JSON")
    folder = sync_sub.add_parser(
        "folder", parents=[sync_common], help="sync a local folder (ids: paths relative to it)"
    )
    folder.add_argument("path")
    folder.set_defaults(func=_sync_folder)
    drive = sync_sub.add_parser(
        "drive", parents=[sync_common], help="sync a Google Drive folder or shared drive"
    )
    drive.add_argument("--folder", help="Drive folder id (its subfolders included)")
    drive.add_argument("--shared-drive", help="shared drive id")
    drive.add_argument(
        "--token-env",
        default="RAGPORT_DRIVE_ACCESS_TOKEN",
        help="environment variable holding the OAuth access token",
    )
    drive.add_argument("--base-url", default="https://www.googleapis.com", help=argparse.SUPPRESS)
    drive.add_argument("--allow-loopback", action="store_true", help=argparse.SUPPRESS)
    drive.set_defaults(func=_sync_drive)

    db = sub.add_parser("db", help="database administration")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_sub.add_parser("upgrade", parents=[common], help="apply schema migrations")
    upgrade.add_argument(
        "--partitions", type=int, help="create the tables PARTITION BY HASH (tenant_id), N parts"
    )
    upgrade.set_defaults(func=_db_upgrade)
    dump = db_sub.add_parser("dump", parents=[common], help="pg_dump the schema (custom format)")
    dump.add_argument("path")
    dump.set_defaults(func=_db_dump)
    restore = db_sub.add_parser("restore", parents=[common], help="pg_restore a dump")
    restore.add_argument("path")
    restore.set_defaults(func=_db_restore)
    copy = db_sub.add_parser("copy", parents=[common], help="copy the schema to another server")
    copy.add_argument("--to", required=True, help="postgresql://... of the target server")
    copy.set_defaults(func=_db_copy)
    stop = db_sub.add_parser("stop", help="stop the embedded PostgreSQL server")
    stop.set_defaults(func=_db_stop)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args: Any = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except RagportError as exc:
        print(f"ragport: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"ragport: {type(exc).__name__}: {exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
