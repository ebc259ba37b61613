"""``Rag``: the use cases bound to one store, one embedder and one scope (or several).

Every call to a use case repeats ``embedder=, store=, scope=``; a ``Rag`` binds them once,
with the host's telemetry, redactor and limits, and forwards everything else unchanged. The
functions stay the API; this is a convenience over them, nothing more (no state of its own,
no caching, no I/O at construction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragport.application._support import require_scope, resolve_limits
from ragport.application.derived import index_derived
from ragport.application.documents import ParserSelector, replace_document
from ragport.application.generations import rollback_generation
from ragport.application.indexing import delete_source, replace_source
from ragport.application.results import ReplaceResult, RetrievalResult, RollbackResult
from ragport.application.retrieval import retrieve_context
from ragport.application.status import list_ingestion_status
from ragport.domain.errors import CapabilityError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, Limits
from ragport.domain.model import Chunk, Scope
from ragport.domain.status import StatusPage
from ragport.ports.documents import DocumentLoader, Parser
from ragport.ports.embedder import Embedder
from ragport.ports.runtime import Redactor, Telemetry
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

__all__ = ["Rag"]


class Rag:
    """The use cases bound to ``store``, ``embedder`` and ``scope`` (or ``scopes``).

    Writes need ``scope`` (one scope); ``retrieve`` searches ``scope`` or all of ``scopes``.
    ``telemetry``, ``redactor`` and ``limits`` are passed to every use case that takes them;
    ``status_store`` (optional) is used by the writes and by ``status``. Each method takes the
    same keyword arguments as its function, minus the bound ones.

    ``default_parser`` is what ``replace_document`` parses with when no ``parser=`` is given:
    none here (the application knows no parser adapter), ``parser_for`` in ``ragport.Rag``
    (the wired subclass in ``ragport.bootstrap``).
    """

    default_parser: Parser | ParserSelector | None = None

    def __init__(
        self,
        *,
        store: ChunkStore,
        embedder: Embedder,
        scope: Scope | None = None,
        scopes: Sequence[Scope] | None = None,
        telemetry: Telemetry | None = None,
        redactor: Redactor | None = None,
        limits: Limits = DEFAULT_LIMITS,
        status_store: IngestionStatusStore | None = None,
    ) -> None:
        if (scope is None) == (scopes is None):
            raise ValidationError("pass exactly one of scope or scopes", field="scope")
        self._scope = require_scope(scope) if scope is not None else None
        self._scopes = (
            tuple(require_scope(s, field="scopes") for s in scopes) if scopes is not None else None
        )
        self._store = store
        self._embedder = embedder
        self._telemetry = telemetry
        self._redactor = redactor
        self._limits = resolve_limits(limits)
        self._status = status_store

    @property
    def store(self) -> ChunkStore:
        return self._store

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def scope(self) -> Scope | None:
        return self._scope

    @property
    def status_store(self) -> IngestionStatusStore | None:
        return self._status

    @property
    def scopes(self) -> tuple[Scope, ...]:
        """Every scope ``retrieve`` searches."""
        return self._scopes if self._scopes is not None else (self._write_scope(),)

    def _bound_write(self) -> dict[str, Any]:
        """What every embedding write of this Rag is bound to."""
        return {
            "embedder": self._embedder,
            "store": self._store,
            "scope": self._write_scope(),
            "telemetry": self._telemetry,
            "redactor": self._redactor,
            "limits": self._limits,
        }

    def _write_scope(self) -> Scope:
        if self._scope is None:
            raise ValidationError(
                "this Rag is bound to several scopes: bind one scope= to write", field="scope"
            )
        return self._scope

    def replace_source(
        self, *, source_id: str, chunks: Sequence[Chunk], **options: Any
    ) -> ReplaceResult:
        """``replace_source`` in the bound scope."""
        options.setdefault("status_store", self._status)
        return replace_source(
            source_id=source_id,
            chunks=chunks,
            **self._bound_write(),
            **options,
        )

    def replace_document(
        self,
        *,
        uri: str,
        loader: DocumentLoader,
        parser: Parser | ParserSelector | None = None,
        **options: Any,
    ) -> ReplaceResult:
        """``replace_document`` in the bound scope (``parser`` a Parser or e.g. ``parser_for``;
        by default ``default_parser``)."""
        options.setdefault("status_store", self._status)
        return replace_document(
            uri=uri,
            loader=loader,
            parser=parser if parser is not None else self.default_parser,
            **self._bound_write(),
            **options,
        )

    def delete_source(self, *, source_id: str, **options: Any) -> ReplaceResult:
        """``delete_source`` in the bound scope."""
        options.setdefault("status_store", self._status)
        return delete_source(
            source_id=source_id,
            store=self._store,
            scope=self._write_scope(),
            telemetry=self._telemetry,
            **options,
        )

    def index_derived(
        self, *, record_id: str, text: str, lineage: Sequence[str], **options: Any
    ) -> ReplaceResult:
        """``index_derived`` in the bound scope."""
        return index_derived(
            record_id=record_id,
            text=text,
            lineage=lineage,
            **self._bound_write(),
            **options,
        )

    def retrieve(self, query: str, **options: Any) -> RetrievalResult:
        """``retrieve_context`` over the bound scope or scopes."""
        bound: dict[str, Any] = (
            {"scopes": list(self._scopes)} if self._scopes is not None else {"scope": self._scope}
        )
        return retrieve_context(
            query,
            embedder=self._embedder,
            store=self._store,
            telemetry=self._telemetry,
            redactor=self._redactor,
            limits=self._limits,
            **bound,
            **options,
        )

    def rollback(self, *, to: int) -> RollbackResult:
        """``rollback_generation`` of the bound scope (correcting the bound status store)."""
        return rollback_generation(
            store=self._store, scope=self._write_scope(), to=to, status_store=self._status
        )

    def status(self, *, limit: int | None = None, cursor: str | None = None) -> StatusPage:
        """``list_ingestion_status`` of the bound scope (needs ``status_store``)."""
        if self._status is None:
            raise CapabilityError(
                "this Rag has no status_store: pass one to read ingestion status",
                capability="status",
            )
        return list_ingestion_status(
            store=self._status,
            scope=self._write_scope(),
            limit=self._limits.status_page if limit is None else limit,
            cursor=cursor,
        )
