"""``ragport sync folder`` and ``ragport sync drive``: keep a corpus equal to a source."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ragport.application import (
    Runtime,
    SharedGeneration,
    SyncFailure,
    SyncResult,
    WriteOptions,
    list_ingestion_status,
)
from ragport.application.sync import SyncOptions, SyncProgress
from ragport.bootstrap import (
    Stores,
    open_checkpoints,
    sync_connector,
)
from ragport.bootstrap.ingest import check_workers, default_workers
from ragport.cli.config import _embedder, _limits, _scope, _stores
from ragport.cli.ingest import DECODE_HINT, _generation_line, _text_encoding
from ragport.cli.options import (
    ENCODING_HELP,
    Parents,
    add_document_options,
    command,
    group,
)
from ragport.cli.output import _json
from ragport.cli.progress import track, wanted
from ragport.cli.settings import corpus_options, record
from ragport.domain.errors import (
    ValidationError,
)
from ragport.domain.limits import Limits
from ragport.domain.model import Scope
from ragport.domain.status import IngestionStatus
from ragport.ports.embedder import Embedder

if TYPE_CHECKING:
    from ragport.adapters.connectors.folder import UnlistedFile


def _still_failing(stores: Stores, scope: Scope) -> list[IngestionStatus]:
    """The scope's sources whose last attempt failed (withheld ones aside: the host's access
    mapping said no, which a retry does not change)."""
    found: list[IngestionStatus] = []
    cursor: str | None = None
    while True:
        page = list_ingestion_status(store=stores.status, scope=scope, limit=200, cursor=cursor)
        found.extend(s for s in page.items if s.state == "failed" and s.freshness != "unavailable")
        if page.cursor is None:
            return found
        cursor = page.cursor


def _print_sync(
    args: argparse.Namespace,
    result: SyncResult,
    seconds: float,
    still: Sequence[IngestionStatus],
    generations: tuple[int, ...] = (),
) -> int:
    if args.json:
        shown = _json.unstructure(result)
        del shown["cursor"]  # the connector's internal state: not for people or scripts
        shown["still_failing"] = [{"source_id": s.source_id, "error": s.error} for s in still]
        shown["generations"] = list(generations)
        print(json.dumps({**shown, "seconds": round(seconds, 3)}))
    else:
        print(
            f"synced corpus {args.corpus} in {seconds:.2f} s: {result.pages} page(s), "
            f"{result.upserted} upserted, {result.skipped} unchanged, {result.deleted} deleted"
            f"{f' ({result.swept} swept)' if result.swept else ''}, {result.withheld} withheld, "
            f"{result.failed} failed" + (" (full listing)" if result.bootstrapped else "")
        )
        if generations:
            print(_generation_line(generations))
        if result.failures:
            width = max(len(f.source_id) for f in result.failures)
            print("failed:")
            for f in result.failures:
                again = "retried next run" if f.retrying else "retried when it changes"
                hint = (
                    f"; {DECODE_HINT}"
                    if f.reason == "decode" and _decode_hint_applies(args)
                    else ""
                )
                print(f"  {f.source_id:<{width}}  {f.reason:<16} {f.error}{hint}  ({again})")
        earlier = [s for s in still if s.source_id not in {f.source_id for f in result.failures}]
        if earlier:
            print(f"{len(earlier)} source(s) still failing from earlier runs:")
            for s in earlier:
                print(f"  {s.source_id}  {s.error or ''}")
        if result.lost:
            print("another worker advanced the checkpoint first; this run stopped")
        elif not result.exhausted:
            print("more pages remain: run again to continue")
    return 1 if result.failed or still else 0


def _with_unlisted(result: SyncResult, unlisted: Sequence[UnlistedFile]) -> SyncResult:
    """``result`` with each file the listing met but could not name as a source (an
    undecodable name, say) counted failed, under the name ``ragport ingest`` gives it."""
    if not unlisted:
        return result
    extra = tuple(SyncFailure(u.name, u.reason, u.error, retrying=False) for u in unlisted)
    return attrs.evolve(result, failed=result.failed + len(extra), failures=result.failures + extra)


def _decode_hint_applies(args: argparse.Namespace) -> bool:
    """Whether a decode failure may be read with another ``--encoding`` (a folder sync not
    already detecting)."""
    return args.sync_command == "folder" and _text_encoding(args) != "auto"


def _sync_run(
    args: argparse.Namespace,
    connector_for: Callable[[Limits], Any],
    *,
    workers: int = 1,
    encodes: bool = False,
) -> int:
    """Open the stores, fill the options not given from the corpus's recorded settings
    (``corpus_options``), build the connector under the caps in effect (``connector_for``)
    and sync; ``encodes``: the connector reads text files (``--encoding``). The files a
    folder's listing could not name (``FolderConnector.unlisted``) are reported failed."""
    if args.workers is not None:
        check_workers(args.workers)  # before any store opens
    scope = _scope(args)
    shared = SharedGeneration()  # one generation per run: one rollback undoes it
    started = time.perf_counter()
    with _stores(args) as stores:
        options = corpus_options(args, stores, scope)
        encoding = options.checked(lambda: _text_encoding(args)) if encodes else "utf-8"
        limits = options.checked(lambda: _limits(args))
        connector = connector_for(limits)
        try:
            # the corpus's own embedder unless --embedder names one (another one is refused)
            embedder = _embedder(args, stores, [scope])
            record(options, scope)
            result = _synced(
                args, connector, stores, scope, embedder,
                limits=limits, workers=workers, encoding=encoding, shared=shared,
                restart=options.changed,  # a setting changed: every item is read under it
            )  # fmt: skip
        finally:
            close = getattr(connector, "close", None)
            if close is not None:
                close()
        result = _with_unlisted(result, getattr(connector, "unlisted", ()))
        still = _still_failing(stores, scope)
    return _print_sync(args, result, time.perf_counter() - started, still, shared.generations)


def _synced(
    args: argparse.Namespace,
    connector: Any,
    stores: Stores,
    scope: Scope,
    embedder: Embedder,
    *,
    limits: Limits,
    workers: int,
    encoding: str,
    shared: SharedGeneration,
    restart: bool,
) -> SyncResult:
    with track(
        f"sync {args.sync_command}", total=None, unit="items", enabled=wanted(json_out=args.json)
    ) as bar:

        def progress(seen: SyncProgress) -> None:
            bar.update(done=seen.done, total=seen.listed, item=seen.source_id or "")

        return sync_connector(
            connector,
            stores=stores,
            checkpoints=open_checkpoints(stores, schema=args.schema),
            embedder=embedder,
            scope=scope,
            encoding=encoding,
            max_pages=args.max_pages,
            options=SyncOptions(
                write=WriteOptions(size=args.size, overlap=args.overlap, shared_generation=shared),
                workers=workers if args.workers is None else args.workers,
                adopt=True,  # the corpus equals what it syncs, whoever wrote it before
                on_progress=progress,
                restart=restart,
            ),
            runtime=Runtime(limits=limits),
        )


def _sync_folder(args: argparse.Namespace) -> int:
    from ragport.adapters.connectors import FolderConnector

    _text_encoding(args)  # the options given: checked before the folder is listed
    _limits(args)  # --max-bytes, --timeout, [limits]

    def connector_for(limits: Limits) -> FolderConnector:
        return FolderConnector(
            args.path,
            max_bytes=limits.parse_bytes,
            binary_max_bytes=limits.binary_bytes,
            page_size=args.page_size,
            ceilings=limits.ceilings,
        )

    return _sync_run(args, connector_for, workers=default_workers(), encodes=True)


def _sync_drive(args: argparse.Namespace) -> int:
    from ragport.adapters.connectors import (
        DriveOptions,
        GoogleDriveConnector,
        HttpOptions,
        drive_permissions_access,
    )
    from ragport.adapters.connectors.drive import MAX_LIST_REQUESTS

    name = args.token_env
    if not os.environ.get(name):
        raise ValidationError(f"set the Drive access token in ${name}", field="token")

    def token_provider() -> str:
        return os.environ.get(name, "")

    _limits(args)  # --max-bytes, --timeout, [limits]: before any request
    budget = MAX_LIST_REQUESTS if args.max_list_requests is None else args.max_list_requests

    def connector_for(limits: Limits) -> GoogleDriveConnector:
        return GoogleDriveConnector(
            token_provider=token_provider,
            resolve_access=drive_permissions_access,
            folder_id=args.folder,
            shared_drive_id=args.shared_drive,
            base_url=args.base_url,
            http=HttpOptions(allow_loopback=args.allow_loopback),
            # A download may be a PDF or DOCX (up to binary_bytes); the parsers hold every
            # other type to parse_bytes, so a large text file still fails too_large, by name.
            options=DriveOptions(
                max_bytes=max(limits.parse_bytes, limits.binary_bytes),
                ceilings=limits.ceilings,
                max_list_requests=budget,
            ),
        )

    return _sync_run(args, connector_for)


def register(sub: Any, parents: Parents) -> None:
    """``sync folder|drive`` on ``sub``."""
    sync_sub = group(
        sub, "sync", "keep a corpus equal to a folder or a Google Drive",
        "Keep a corpus equal to a folder or a Google Drive (docs/sync.md).", "sync_command",
    )  # fmt: skip
    sync_common = argparse.ArgumentParser(
        add_help=False, parents=[parents.common, parents.json_out]
    )
    add_document_options(sync_common)
    sync_common.add_argument(
        "--max-pages", type=int,
        help="stop after N committed pages; the next run continues (default: until done)",
    )  # fmt: skip
    sync_common.add_argument(
        "--workers", type=int, default=None,
        help="items of a page loaded and parsed at once, 1..32 (default: the cores, 2 to 8, "
        "for a folder; 1 for a Drive)",
    )  # fmt: skip
    folder = command(
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
    drive = command(
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
