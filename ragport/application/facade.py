"""``Rag``: the use cases bound to one store, one embedder and one scope (or several).

Every call to a use case repeats ``embedder=, store=, scope=``; a ``Rag`` binds them once,
with the host's telemetry, redactor and limits, and forwards everything else unchanged. The
functions stay the API; this is a convenience over them, nothing more (no state of its own,
no caching, no I/O at construction).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ragport.application._support import check_abort, require_scope, resolve_limits
from ragport.application._sync_state import SyncProgress, SyncResult
from ragport.application.admission import ReadmitResult, readmit_source
from ragport.application.derived import index_derived
from ragport.application.documents import ParserSelector, replace_document
from ragport.application.generations import compact, rollback_generation
from ragport.application.indexing import ReusableEmbeddings, delete_source, replace_source
from ragport.application.propagation import (
    PropagationResult,
    RagDeletionHandler,
    create_deletion_propagator,
)
from ragport.application.repoint import (
    RenameBatchResult,
    RenameEvent,
    RepointResult,
    apply_source_renames,
    repoint_source,
)
from ragport.application.results import (
    CompactResult,
    ReplaceResult,
    RetrievalResult,
    RollbackResult,
)
from ragport.application.retrieval import retrieve_context
from ragport.application.retrieval_request import DEFAULT_REQUEST, RetrievalRequest
from ragport.application.runtime import Runtime
from ragport.application.shared_generation import SharedGeneration
from ragport.application.status import list_ingestion_status
from ragport.application.sync import SyncOptions, sync_knowledge
from ragport.application.write_options import WriteOptions
from ragport.domain.chunking import chunk_markdown, chunk_text
from ragport.domain.errors import CapabilityError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, Limits
from ragport.domain.model import (
    AccessDecision,
    AccessDenial,
    Authorization,
    Chunk,
    Grant,
    Rename,
    Scope,
)
from ragport.domain.status import StatusPage
from ragport.ports.capabilities import supports
from ragport.ports.derived import DerivedArtifactHandler
from ragport.ports.documents import DocumentLoader, Parser
from ragport.ports.embedder import Embedder
from ragport.ports.history import GenerationChange, SupportsGenerationHistory
from ragport.ports.rerank import Reranker
from ragport.ports.runtime import Abort, Clock, Redactor, Telemetry
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore
from ragport.ports.sync import CheckpointStore, Connector

__all__ = ["Rag"]


class Rag:
    """The use cases bound to ``store``, ``embedder`` and ``scope`` (or ``scopes``).

    Writes need ``scope`` (one scope); ``retrieve`` searches ``scope`` or all of ``scopes``.
    ``telemetry``, ``redactor`` and ``limits`` are passed to every use case that takes them;
    ``status_store`` (optional) is used by the writes and by ``status``. Each method takes the
    same keyword arguments as its function, minus the bound ones, and every one is typed:
    a misspelt keyword is a type error (``mypy --strict``) and a ``TypeError`` at run time.

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
        self._runtime = Runtime(telemetry=telemetry, redactor=redactor, limits=self._limits)

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
        return {"embedder": self._embedder, "store": self._store, "scope": self._write_scope()}

    def _runtime_for(
        self,
        abort: Abort | None = None,
        secrets: Sequence[str] | None = None,
        clock: Clock | None = None,
    ) -> Runtime:
        """The bound runtime with this call's abort, secrets and clock."""
        if abort is None and secrets is None and clock is None:
            return self._runtime
        return attrs.evolve(self._runtime, abort=abort, secrets=secrets, clock=clock)

    def _write_scope(self) -> Scope:
        if self._scope is None:
            raise ValidationError(
                "this Rag is bound to several scopes: bind one scope= to write", field="scope"
            )
        return self._scope

    def replace_source(
        self,
        *,
        source_id: str,
        chunks: Sequence[Chunk],
        content_hash: str | None = None,
        skip_if_unchanged: bool | None = None,
        reuse_embeddings: ReusableEmbeddings | None = None,
        advance_generation: bool = True,
        batch_size: int = DEFAULT_LIMITS.embed_batch,
        abort: Abort | None = None,
        secrets: Sequence[str] | None = None,
        clock: Clock | None = None,
        shared_generation: SharedGeneration | None = None,
        grant: Grant | None = None,
    ) -> ReplaceResult:
        """``replace_source`` in the bound scope (``grant``: set with the content, in one unit
        of work)."""
        return replace_source(
            source_id=source_id,
            chunks=chunks,
            content_hash=content_hash,
            skip_if_unchanged=skip_if_unchanged,
            reuse_embeddings=reuse_embeddings,
            advance_generation=advance_generation,
            status_store=self._status,
            batch_size=batch_size,
            runtime=self._runtime_for(abort, secrets, clock),
            shared_generation=shared_generation,
            grant=grant,
            **self._bound_write(),
        )

    def replace_document(
        self,
        *,
        uri: str,
        loader: DocumentLoader,
        parser: Parser | ParserSelector | None = None,
        source_id: str | None = None,
        size: int = DEFAULT_LIMITS.chunk_size,
        overlap: int = DEFAULT_LIMITS.overlap,
        batch_size: int = DEFAULT_LIMITS.embed_batch,
        abort: Abort | None = None,
        secrets: Sequence[str] | None = None,
        clock: Clock | None = None,
        shared_generation: SharedGeneration | None = None,
        grant: Grant | None = None,
    ) -> ReplaceResult:
        """``replace_document`` in the bound scope (``parser`` a Parser or e.g. ``parser_for``;
        by default ``default_parser``; ``grant``: set with the content, in one unit of work)."""
        return replace_document(
            uri=uri,
            loader=loader,
            parser=parser if parser is not None else self.default_parser,
            source_id=source_id,
            size=size,
            overlap=overlap,
            status_store=self._status,
            batch_size=batch_size,
            runtime=self._runtime_for(abort, secrets, clock),
            shared_generation=shared_generation,
            grant=grant,
            **self._bound_write(),
        )

    def delete_source(
        self,
        *,
        source_id: str,
        abort: Abort | None = None,
        shared_generation: SharedGeneration | None = None,
    ) -> ReplaceResult:
        """``delete_source`` in the bound scope."""
        return delete_source(
            source_id=source_id,
            store=self._store,
            scope=self._write_scope(),
            status_store=self._status,
            telemetry=self._telemetry,
            abort=abort,
            shared_generation=shared_generation,
        )

    def readmit(self, source_id: str, *, abort: Abort | None = None) -> ReadmitResult:
        """``readmit_source`` in the bound scope: the way back after ``forget``, deliberate and
        audited (docs/forgetting.md); drops the bound status store's row."""
        return readmit_source(
            source_id=source_id,
            store=self._store,
            scope=self._write_scope(),
            status_store=self._status,
            runtime=self._runtime_for(abort),
        )

    def index_derived(
        self,
        *,
        record_id: str,
        text: str,
        lineage: Sequence[str],
        metadata: Mapping[str, Any] | None = None,
        pinned: bool = False,
        as_of: int | None = None,
        abort: Abort | None = None,
        secrets: Sequence[str] | None = None,
    ) -> ReplaceResult:
        """``index_derived`` in the bound scope (``pinned``: retired with its lineage's
        next version; ``as_of``: refused if the lineage changed after that generation)."""
        return index_derived(
            record_id=record_id,
            text=text,
            lineage=lineage,
            metadata=metadata,
            pinned=pinned,
            as_of=as_of,
            runtime=self._runtime_for(abort, secrets),
            **self._bound_write(),
        )

    def retrieve(
        self,
        query: str,
        *,
        request: RetrievalRequest | None = None,
        top_k: int | None = None,
        lexical: str | None = None,
        authorization: Authorization | None = None,
        on_access_denied: Callable[[AccessDenial], None] | None = None,
        reranker: Reranker | None = None,
        abort: Abort | None = None,
    ) -> RetrievalResult:
        """``retrieve_context`` over the bound scope or scopes.

        ``request`` says how (default ``RetrievalRequest()``); ``top_k`` and ``lexical`` are
        shortcuts that override its fields of those names. ``abort`` stops this call.
        """
        wanted = DEFAULT_REQUEST if request is None else request
        if top_k is not None or lexical is not None:
            if not isinstance(wanted, RetrievalRequest):
                raise ValidationError("request must be a RetrievalRequest", field="request")
            wanted = attrs.evolve(
                wanted,
                top_k=wanted.top_k if top_k is None else top_k,
                lexical=wanted.lexical if lexical is None else lexical,
            )
        runtime = self._runtime if abort is None else attrs.evolve(self._runtime, abort=abort)
        return retrieve_context(
            query,
            embedder=self._embedder,
            store=self._store,
            scope=self._scope if self._scopes is None else None,
            scopes=self._scopes,
            request=wanted,
            authorization=authorization,
            on_access_denied=on_access_denied,
            reranker=reranker,
            runtime=runtime,
        )

    def rollback(self, *, to: int) -> RollbackResult:
        """``rollback_generation`` of the bound scope (correcting the bound status store)."""
        return rollback_generation(
            store=self._store, scope=self._write_scope(), to=to, status_store=self._status
        )

    def status(self, *, limit: int | None = None, cursor: str | None = None) -> StatusPage:
        """``list_ingestion_status`` of the bound scope (needs ``status_store``), reconciled
        with the bound store: each source reports the chunks retrieval serves."""
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
            chunk_store=self._store,
        )

    # -- text, forgetting, re-pointing ------------------------------------------------------
    def replace_text(
        self,
        *,
        source_id: str,
        text: str,
        markdown: bool = False,
        metadata: Mapping[str, Any] | None = None,
        size: int = DEFAULT_LIMITS.chunk_size,
        overlap: int = DEFAULT_LIMITS.overlap,
        content_hash: str | None = None,
        abort: Abort | None = None,
        grant: Grant | None = None,
    ) -> ReplaceResult:
        """Chunk ``text`` (``chunk_markdown`` with ``markdown=True``, else ``chunk_text``) under
        the bound limits and ``replace_source`` it in the bound scope (``grant``: set with the
        content, in one unit of work)."""
        chunker = chunk_markdown if markdown else chunk_text
        chunks = chunker(
            text,
            source_id=source_id,
            size=size,
            overlap=overlap,
            metadata=metadata,
            limits=self._limits,
        )
        return self.replace_source(
            source_id=source_id, chunks=chunks, content_hash=content_hash, abort=abort, grant=grant
        )

    def forget(
        self,
        source_id: str,
        *,
        authorization: Authorization | None = None,
        as_owner: bool = False,
        handlers: Sequence[DerivedArtifactHandler] | None = None,
        abort: Abort | None = None,
    ) -> PropagationResult:
        """Deletion propagation of ``source_id`` in the bound scope: its lineage closure is
        tombstoned ``forgotten`` (docs/forgetting.md). ``authorization`` (holding a grant for
        the source on an ACL store) or ``as_owner=True`` (the host acting for the data's
        owner), not both. ``handlers`` default to ``RagDeletionHandler`` over the bound store
        and status store; pass your own list (for instance with ``DerivedErasureHandler``)
        to replace it. ``abort`` is checked before anything is written."""
        check_abort(abort)
        scope = self._write_scope()
        if handlers is None:
            handlers = (
                RagDeletionHandler(store=self._store, scope=scope, status_store=self._status),
            )
        propagator = create_deletion_propagator(
            scope=scope,
            store=self._store,
            authorization=authorization,
            handlers=handlers,
            limits=self._limits,
            redactor=self._redactor,
            as_owner=as_owner,
        )
        return propagator.propagate(source_id)

    def repoint(
        self,
        *,
        from_id: str,
        to_id: str,
        authorization: Authorization | None = None,
        handlers: Sequence[DerivedArtifactHandler] = (),
        cursor: str | None = None,
        max_records: int | None = None,
        abort: Abort | None = None,
    ) -> RepointResult:
        """``repoint_source`` in the bound scope (one page of ``page_size`` from the limits)."""
        return repoint_source(
            scope=self._write_scope(),
            store=self._store,
            from_id=from_id,
            to_id=to_id,
            authorization=authorization,
            handlers=handlers,
            page_size=self._limits.repoint_page,
            cursor=cursor,
            max_records=max_records,
            telemetry=self._telemetry,
            abort=abort,
        )

    def rename(
        self,
        renames: Sequence[Rename],
        *,
        authorization: Authorization | None = None,
        handlers: Sequence[DerivedArtifactHandler] = (),
        continue_on_error: bool = False,
        on_renamed: Callable[[RenameEvent], None] | None = None,
        abort: Abort | None = None,
    ) -> RenameBatchResult:
        """``apply_source_renames`` in the bound scope."""
        return apply_source_renames(
            scope=self._write_scope(),
            store=self._store,
            renames=renames,
            authorization=authorization,
            handlers=handlers,
            continue_on_error=continue_on_error,
            on_renamed=on_renamed,
            page_size=self._limits.repoint_page,
            redactor=self._redactor,
            telemetry=self._telemetry,
            abort=abort,
        )

    # -- grants and access ------------------------------------------------------------------
    def _acl(self, operation: str) -> ChunkStore:
        if self._store.capabilities.authorization != "acl":
            raise CapabilityError(
                f"{operation} needs a store with grants (capabilities.authorization == 'acl')",
                capability="acl",
            )
        return self._store

    def set_grants(self, grants: Sequence[Grant], *, abort: Abort | None = None) -> None:
        """Set the grants of their sources in the bound scope, in one unit of work (each
        replaces that source's grant whole; the others stay)."""
        check_abort(abort)
        self._acl("set_grants").set_source_access(self._write_scope(), list(grants))

    def grants(
        self, source_ids: Sequence[str], *, abort: Abort | None = None
    ) -> Mapping[str, Grant]:
        """The grants of ``source_ids`` in the bound scope (a source without one is absent)."""
        check_abort(abort)
        return self._acl("grants").get_source_access(self._write_scope(), list(source_ids))

    def check_access(
        self,
        source_ids: Sequence[str],
        authorization: Authorization,
        *,
        abort: Abort | None = None,
    ) -> Mapping[str, AccessDecision]:
        """The access decision of ``authorization`` for each of ``source_ids`` (the store's
        grant rule: no grant, an empty grant or a version mismatch deny)."""
        check_abort(abort)
        store = self._acl("check_access")
        return store.check_source_access(self._write_scope(), list(source_ids), authorization)

    # -- generations, listing, sync ---------------------------------------------------------
    def compact(
        self, *, keep: int = DEFAULT_LIMITS.compact_keep, abort: Abort | None = None
    ) -> CompactResult:
        """``compact`` of the bound scope: purge rows retired more than ``keep`` generations
        ago (a rollback can then go back at most ``keep`` generations)."""
        check_abort(abort)
        return compact(store=self._store, scope=self._write_scope(), keep=keep)

    def generation(self, *, abort: Abort | None = None) -> int:
        """The bound scope's current generation (its pointer)."""
        check_abort(abort)
        return self._store.current_generation(self._write_scope())

    def generations(
        self, *, limit: int = 10, max_ids: int = 100, abort: Abort | None = None
    ) -> Sequence[GenerationChange]:
        """What each recent generation of the bound scope wrote and retired, newest first
        (stores that declare ``generation_history``; ``CapabilityError`` otherwise)."""
        check_abort(abort)
        store = self._store
        if not supports(store, "generation_history"):
            raise CapabilityError(
                "this store keeps no generation history", capability="generation_history"
            )
        assert isinstance(store, SupportsGenerationHistory)
        return store.generation_history(self._write_scope(), limit=limit, max_ids=max_ids)

    def sources(
        self, *, after: str | None = None, limit: int = 1_000, abort: Abort | None = None
    ) -> Sequence[str]:
        """A page of the bound scope's source ids (visible chunks), in code-point order,
        after ``after``; page on with the last id returned."""
        check_abort(abort)
        return self._store.list_source_ids(self._write_scope(), after=after, limit=limit)

    def sync(
        self,
        *,
        connector: Connector,
        checkpoints: CheckpointStore,
        parser: Parser | ParserSelector | None = None,
        max_pages: int | None = None,
        size: int = DEFAULT_LIMITS.chunk_size,
        overlap: int = DEFAULT_LIMITS.overlap,
        on_progress: Callable[[SyncProgress], None] | None = None,
        adopt: bool = False,
        workers: int = 1,
        abort: Abort | None = None,
    ) -> SyncResult:
        """``sync_knowledge`` of ``connector`` into the bound scope and status store, parsing
        with ``parser`` or ``default_parser`` (docs/sync.md)."""
        return sync_knowledge(
            connector=connector,
            checkpoints=checkpoints,
            parser=parser if parser is not None else self.default_parser,
            status_store=self._status,
            max_pages=max_pages,
            options=SyncOptions(
                write=WriteOptions(size=size, overlap=overlap),
                on_progress=on_progress,
                adopt=adopt,
                workers=workers,
            ),
            runtime=self._runtime_for(abort),
            **self._bound_write(),
        )
