"""``sync_connector``: ``sync_knowledge`` with ragport's parsers (``ragport sync``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict, Unpack

import attrs

from ragport.application import SharedGeneration, SyncResult
from ragport.application.deprecation import fold_run_options
from ragport.application.runtime import Runtime, check_runtime
from ragport.application.sync import SyncOptions, SyncProgress
from ragport.bootstrap.ingest import ingest_limits
from ragport.bootstrap.stores import Stores, sync_knowledge
from ragport.domain.limits import Limits
from ragport.domain.model import Scope
from ragport.ports.documents import Parser
from ragport.ports.embedder import Embedder
from ragport.ports.sync import CheckpointStore, Connector, Page


class _ReadWith:
    """``connector`` whose checkpoint also names the encoding its text files are read with:
    a sync under another ``encoding`` starts from a full listing, so files that failed to
    decode (and files read otherwise before) are read again, not skipped as unchanged."""

    def __init__(self, connector: Connector, encoding: str) -> None:
        self._connector = connector
        self._encoding = encoding

    @property
    def id(self) -> str:
        return f"{self._connector.id}+encoding-{self._encoding}"

    def bootstrap(self, cursor: str | None = None) -> Page:
        return self._connector.bootstrap(cursor)

    def changes(self, cursor: str) -> Page:
        return self._connector.changes(cursor)


class _OldSyncKeywords(TypedDict, total=False):
    """``sync_connector``'s keywords before ``options=`` and ``runtime=`` (deprecated)."""

    size: int
    overlap: int
    max_bytes: int
    on_progress: Callable[[SyncProgress], None] | None
    adopt: bool
    workers: int
    shared_generation: SharedGeneration | None
    limits: Limits | None
    restart: bool


def sync_connector(
    connector: Connector,
    *,
    stores: Stores,
    checkpoints: CheckpointStore,
    embedder: Embedder,
    scope: Scope,
    encoding: str = "utf-8",
    max_pages: int | None = None,
    options: SyncOptions | None = None,
    runtime: Runtime | None = None,
    **deprecated: Unpack[_OldSyncKeywords],
) -> SyncResult:
    """``sync_knowledge`` with ragport's parsers (``parser_for``) into ``stores``.

    ``options`` (``SyncOptions``) as there (the command line adopts: a corpus equals what it
    syncs; it syncs a folder with ``default_workers()`` parse threads, and restarts when a
    corpus setting changed). ``runtime``: its ``limits`` are the parsers' caps and ceilings,
    widened by ``ingest_limits`` for files past 1 MiB. ``encoding`` for the plain text,
    Markdown and reST parsers, checked before anything runs; another encoding than ``utf-8``
    keeps its own checkpoint (``_ReadWith``).

    Deprecated keywords (one release, ``DeprecationWarning``): ``size``, ``overlap``,
    ``shared_generation`` (now ``options.write``), ``on_progress``, ``adopt``, ``workers``,
    ``restart`` (now ``options``), ``limits`` and ``max_bytes`` (now ``runtime``).
    """
    from ragport.adapters.parsers import parser_for
    from ragport.adapters.parsers._common import check_encoding

    options, runtime = _old_keywords(options, runtime, deprecated)
    encoding = check_encoding(encoding)
    limits = ingest_limits(runtime.limits.parse_bytes, base=runtime.limits)
    if encoding != "utf-8":  # the default keeps the connector's own checkpoint
        connector = _ReadWith(connector, encoding)

    def parsers(media_type_or_name: str) -> Parser:
        return parser_for(media_type_or_name, limits=limits, encoding=encoding)

    return sync_knowledge(
        connector=connector,
        checkpoints=checkpoints,
        store=stores.chunks,
        embedder=embedder,
        scope=scope,
        status_store=stores.status,
        max_pages=max_pages,
        parser=parsers,
        options=options,
        runtime=attrs.evolve(runtime, limits=limits),
    )


def _old_keywords(
    options: SyncOptions | None, runtime: Runtime | None, old: _OldSyncKeywords
) -> tuple[SyncOptions, Runtime]:
    """``options`` and ``runtime`` with the deprecated keywords of ``sync_connector`` folded
    in (a ``DeprecationWarning`` naming them)."""
    runtime = Runtime() if runtime is None else check_runtime(runtime)
    folded, aside = fold_run_options(
        "sync_connector",
        SyncOptions() if options is None else options,
        old,
        "options=SyncOptions(write=WriteOptions(size=, overlap=, shared_generation=), "
        "workers=, adopt=, on_progress=, restart=) and runtime=Runtime(limits=)",
        write=("size", "overlap", "shared_generation"),
        aside=("limits", "max_bytes"),
    )
    limits = aside.get("limits") or runtime.limits
    if "max_bytes" in aside:
        limits = ingest_limits(aside["max_bytes"], base=limits)
    return folded, attrs.evolve(runtime, limits=limits)
