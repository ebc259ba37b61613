"""``sync_connector``: ``sync_knowledge`` with ragport's parsers (``ragport sync``)."""

from __future__ import annotations

from collections.abc import Callable

from ragport.application import SharedGeneration, SyncResult
from ragport.application.runtime import Runtime
from ragport.application.sync import SyncProgress
from ragport.bootstrap.ingest import ingest_limits
from ragport.bootstrap.stores import Stores, sync_knowledge
from ragport.domain.limits import DEFAULT_LIMITS, Limits
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


# Allow-listed function shape (pyproject [tool.ruff.lint]): a use case with its public keyword surface; the write-options value of issue 42 narrows it.
def sync_connector(  # noqa: PLR0913
    connector: Connector,
    *,
    stores: Stores,
    checkpoints: CheckpointStore,
    embedder: Embedder,
    scope: Scope,
    size: int = 1_000,
    overlap: int = 100,
    max_bytes: int = DEFAULT_LIMITS.parse_bytes,
    max_pages: int | None = None,
    on_progress: Callable[[SyncProgress], None] | None = None,
    adopt: bool = False,
    workers: int = 1,
    encoding: str = "utf-8",
    shared_generation: SharedGeneration | None = None,
    limits: Limits | None = None,
    restart: bool = False,
) -> SyncResult:
    """``sync_knowledge`` with ragport's parsers (``parser_for`` under ``max_bytes``);
    ``adopt`` and ``workers`` as there (the command line adopts: a corpus equals what it
    syncs; it syncs a folder with ``default_workers()`` parse threads); ``encoding`` for the
    plain text, Markdown and reST parsers (``parser_for``), checked before anything runs;
    another encoding than ``utf-8`` keeps its own checkpoint (``_ReadWith``);
    ``shared_generation``: the pages of this run share one generation (``SharedGeneration``);
    ``limits``: the parsers' caps and ceilings, ``max_bytes`` replacing its ``parse_bytes``
    (``ingest_limits``); ``restart``: drop this connector's checkpoint first, so the run is a
    full listing and every item is read under the settings given (the command line restarts
    when a corpus setting changes)."""
    from ragport.adapters.parsers import parser_for
    from ragport.adapters.parsers._common import check_encoding

    encoding = check_encoding(encoding)
    limits = ingest_limits(max_bytes, base=limits)
    if encoding != "utf-8":  # the default keeps the connector's own checkpoint
        connector = _ReadWith(connector, encoding)
    if restart:
        checkpoints.delete(connector.id, scope)

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
        size=size,
        overlap=overlap,
        on_progress=on_progress,
        adopt=adopt,
        workers=workers,
        shared_generation=shared_generation,
        runtime=Runtime(limits=limits),
    )
