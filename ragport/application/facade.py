"""``Rag``: the use cases bound to one store, one embedder and one scope (or several).

Every call to a use case repeats ``embedder=, store=, scope=``; a ``Rag`` binds them once,
with the host's ``Runtime`` (telemetry, redactor, secrets, limits, clock, abort) and status
store, and forwards everything else unchanged. The functions stay the API; this is a
convenience over them, nothing more (no state of its own, no caching, no I/O at
construction).

Each method takes ``runtime=`` (``None``: the bound one; a ``Runtime`` given is used whole,
e.g. ``attrs.evolve(rag.runtime, abort=stop)``) and, for writes, ``write_options=`` (a
``WriteOptions``; its ``status_store`` defaults to the bound one). The per-call ``abort=``,
``secrets=``, ``clock=`` and the write keywords (``size=``, ``overlap=``, ``batch_size=``,
``shared_generation=``, ...) still work for one release, with a ``DeprecationWarning``
(docs/deprecations.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ragport.application._support import check_abort, require_scope
from ragport.application._sync_state import SyncProgress, SyncResult
from ragport.application.admission import ReadmitResult, readmit_source
from ragport.application.batch import ReplaceBatchResult, SourceWrite, replace_sources
from ragport.application.deprecation import WRITE_KEYWORDS, folds_keywords
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
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.application.status import list_ingestion_status
from ragport.application.sync import SyncOptions, sync_knowledge
from ragport.application.write_options import WriteOptions, check_write_options
from ragport.domain.chunking import chunk_markdown, chunk_text
from ragport.domain.errors import CapabilityError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS
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
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore
from ragport.ports.sync import CheckpointStore, Connector

__all__ = ["Rag"]

# A Rag method's per-call keywords of old: folded into this call's runtime (over the bound one)
# and write options, for one release (docs/deprecations.md).
_CALL_KEYWORDS = folds_keywords(runtime=("abort", "secrets", "clock"), bound=True)
_WRITE_KEYWORDS = folds_keywords(
    runtime=("abort", "secrets", "clock"), write=WRITE_KEYWORDS, bound=True
)


class Rag:
    """The use cases bound to ``store``, ``embedder`` and ``scope`` (or ``scopes``).

    Writes need ``scope`` (one scope); ``retrieve`` searches ``scope`` or all of ``scopes``.
    ``runtime`` (a ``Runtime``) is passed to every use case (``telemetry=``, ``redactor=`` and
    ``limits=`` of old still work for one release, deprecated); ``status_store`` (optional)
    is used by the writes and by ``status``. Each method takes the
    same keyword arguments as its function, minus the bound ones, and every one is typed:
    a misspelt keyword is a type error (``mypy --strict``) and a ``TypeError`` at run time.

    ``default_parser`` is what ``replace_document`` parses with when no ``parser=`` is given:
    none here (the application knows no parser adapter), ``parser_for`` in ``ragport.Rag``
    (the wired subclass in ``ragport.bootstrap``).
    """

    default_parser: Parser | ParserSelector | None = None

    @folds_keywords(runtime=("telemetry", "redactor", "limits"), name="Rag")
    def __init__(
        self,
        *,
        store: ChunkStore,
        embedder: Embedder,
        scope: Scope | None = None,
        scopes: Sequence[Scope] | None = None,
        runtime: Runtime | None = None,
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
        self._runtime = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
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
    def runtime(self) -> Runtime:
        """The bound ``Runtime``: what every call runs with unless given ``runtime=``."""
        return self._runtime

    @property
    def scopes(self) -> tuple[Scope, ...]:
        """Every scope ``retrieve`` searches."""
        return self._scopes if self._scopes is not None else (self._write_scope(),)

    def _bound_write(self) -> dict[str, Any]:
        """What every embedding write of this Rag is bound to."""
        return {"embedder": self._embedder, "store": self._store, "scope": self._write_scope()}

    def _runtime_for(self, runtime: Runtime | None) -> Runtime:
        """This call's runtime: the one given, else the bound one."""
        return self._runtime if runtime is None else check_runtime(runtime)

    def _options_for(self, write_options: WriteOptions | None) -> WriteOptions:
        """This call's write options, recording status in the bound status store unless
        they name their own."""
        options = check_write_options(write_options)
        if options.status_store is None and self._status is not None:
            options = attrs.evolve(options, status_store=self._status)
        return options

    def _write_scope(self) -> Scope:
        if self._scope is None:
            raise ValidationError(
                "this Rag is bound to several scopes: bind one scope= to write", field="scope"
            )
        return self._scope

    @_WRITE_KEYWORDS
    def replace_source(
        self,
        *,
        source_id: str,
        chunks: Sequence[Chunk],
        content_hash: str | None = None,
        reuse_embeddings: ReusableEmbeddings | None = None,
        runtime: Runtime | None = None,
        write_options: WriteOptions | None = None,
        grant: Grant | None = None,
    ) -> ReplaceResult:
        """``replace_source`` in the bound scope (``grant``: set with the content, in one unit
        of work)."""
        return replace_source(
            source_id=source_id,
            chunks=chunks,
            content_hash=content_hash,
            reuse_embeddings=reuse_embeddings,
            runtime=self._runtime_for(runtime),
            write_options=self._options_for(write_options),
            grant=grant,
            **self._bound_write(),
        )

    def replace_sources(
        self,
        batch: Sequence[SourceWrite],
        *,
        runtime: Runtime | None = None,
        write_options: WriteOptions | None = None,
    ) -> ReplaceBatchResult:
        """``replace_sources`` in the bound scope: many sources, each atomically, in batches of
        ``limits.write_batch`` at one unit of work and one generation each; a source that
        fails is in ``failures`` and keeps its previous version."""
        return replace_sources(
            batch,
            runtime=self._runtime_for(runtime),
            write_options=self._options_for(write_options),
            **self._bound_write(),
        )

    @_WRITE_KEYWORDS
    def replace_document(
        self,
        *,
        uri: str,
        loader: DocumentLoader,
        parser: Parser | ParserSelector | None = None,
        source_id: str | None = None,
        runtime: Runtime | None = None,
        write_options: WriteOptions | None = None,
        grant: Grant | None = None,
    ) -> ReplaceResult:
        """``replace_document`` in the bound scope (``parser`` a Parser or e.g. ``parser_for``;
        by default ``default_parser``; ``grant``: set with the content, in one unit of work)."""
        return replace_document(
            uri=uri,
            loader=loader,
            parser=parser if parser is not None else self.default_parser,
            source_id=source_id,
            runtime=self._runtime_for(runtime),
            write_options=self._options_for(write_options),
            grant=grant,
            **self._bound_write(),
        )

    @_WRITE_KEYWORDS
    def delete_source(
        self,
        *,
        source_id: str,
        runtime: Runtime | None = None,
        write_options: WriteOptions | None = None,
    ) -> ReplaceResult:
        """``delete_source`` in the bound scope (of ``write_options``, ``shared_generation``
        and ``status_store`` matter)."""
        return delete_source(
            source_id=source_id,
            store=self._store,
            scope=self._write_scope(),
            runtime=self._runtime_for(runtime),
            write_options=self._options_for(write_options),
        )

    @_CALL_KEYWORDS
    def readmit(self, source_id: str, *, runtime: Runtime | None = None) -> ReadmitResult:
        """``readmit_source`` in the bound scope: the way back after ``forget``, deliberate and
        audited (docs/forgetting.md); drops the bound status store's row."""
        return readmit_source(
            source_id=source_id,
            store=self._store,
            scope=self._write_scope(),
            status_store=self._status,
            runtime=self._runtime_for(runtime),
        )

    @_CALL_KEYWORDS
    def index_derived(
        self,
        *,
        record_id: str,
        text: str,
        lineage: Sequence[str],
        metadata: Mapping[str, Any] | None = None,
        pinned: bool = False,
        as_of: int | None = None,
        runtime: Runtime | None = None,
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
            runtime=self._runtime_for(runtime),
            **self._bound_write(),
        )

    @_CALL_KEYWORDS
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
        runtime: Runtime | None = None,
    ) -> RetrievalResult:
        """``retrieve_context`` over the bound scope or scopes.

        ``request`` says how (default ``RetrievalRequest()``); ``top_k`` and ``lexical`` are
        shortcuts that override its fields of those names.
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
            runtime=self._runtime_for(runtime),
        )

    def rollback(self, *, to: int, runtime: Runtime | None = None) -> RollbackResult:
        """``rollback_generation`` of the bound scope (correcting the bound status store)."""
        return rollback_generation(
            store=self._store,
            scope=self._write_scope(),
            to=to,
            status_store=self._status,
            runtime=self._runtime_for(runtime),
        )

    def status(
        self, *, limit: int | None = None, cursor: str | None = None, runtime: Runtime | None = None
    ) -> StatusPage:
        """``list_ingestion_status`` of the bound scope (needs ``status_store``), reconciled
        with the bound store: each source reports the chunks retrieval serves."""
        if self._status is None:
            raise CapabilityError(
                "this Rag has no status_store: pass one to read ingestion status",
                capability="status",
            )
        rt = self._runtime_for(runtime)
        return list_ingestion_status(
            store=self._status,
            scope=self._write_scope(),
            limit=rt.limits.status_page if limit is None else limit,
            cursor=cursor,
            chunk_store=self._store,
            runtime=rt,
        )

    # -- text, forgetting, re-pointing ------------------------------------------------------
    @_WRITE_KEYWORDS
    def replace_text(
        self,
        *,
        source_id: str,
        text: str,
        markdown: bool = False,
        metadata: Mapping[str, Any] | None = None,
        content_hash: str | None = None,
        runtime: Runtime | None = None,
        write_options: WriteOptions | None = None,
        grant: Grant | None = None,
    ) -> ReplaceResult:
        """Chunk ``text`` (``chunk_markdown`` with ``markdown=True``, else ``chunk_text``) with
        ``write_options``' size and overlap under the call's limits and ``replace_source`` it
        in the bound scope (``grant``: set with the content, in one unit of work)."""
        rt = self._runtime_for(runtime)
        options = self._options_for(write_options)
        settings = options.settings(rt.limits)
        chunker = chunk_markdown if markdown else chunk_text
        chunks = chunker(
            text,
            source_id=source_id,
            size=settings.size,
            overlap=settings.overlap,
            metadata=metadata,
            limits=rt.limits,
        )
        return self.replace_source(
            source_id=source_id,
            chunks=chunks,
            content_hash=content_hash,
            runtime=rt,
            write_options=options,
            grant=grant,
        )

    @_CALL_KEYWORDS
    def forget(
        self,
        source_id: str,
        *,
        authorization: Authorization | None = None,
        as_owner: bool = False,
        handlers: Sequence[DerivedArtifactHandler] | None = None,
        runtime: Runtime | None = None,
    ) -> PropagationResult:
        """Deletion propagation of ``source_id`` in the bound scope: its lineage closure is
        tombstoned ``forgotten`` (docs/forgetting.md). ``authorization`` (holding a grant for
        the source on an ACL store) or ``as_owner=True`` (the host acting for the data's
        owner), not both. ``handlers`` default to ``RagDeletionHandler`` over the bound store
        and status store; pass your own list (for instance with ``DerivedErasureHandler``)
        to replace it. ``runtime.abort`` is checked before anything is written."""
        rt = self._runtime_for(runtime)
        check_abort(rt.abort)
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
            runtime=rt,
            as_owner=as_owner,
        )
        return propagator.propagate(source_id)

    @_CALL_KEYWORDS
    def repoint(
        self,
        *,
        from_id: str,
        to_id: str,
        authorization: Authorization | None = None,
        handlers: Sequence[DerivedArtifactHandler] = (),
        cursor: str | None = None,
        max_records: int | None = None,
        runtime: Runtime | None = None,
    ) -> RepointResult:
        """``repoint_source`` in the bound scope (one page of ``page_size`` from the limits)."""
        rt = self._runtime_for(runtime)
        return repoint_source(
            scope=self._write_scope(),
            store=self._store,
            from_id=from_id,
            to_id=to_id,
            authorization=authorization,
            handlers=handlers,
            page_size=rt.limits.repoint_page,
            cursor=cursor,
            max_records=max_records,
            runtime=rt,
        )

    @_CALL_KEYWORDS
    def rename(
        self,
        renames: Sequence[Rename],
        *,
        authorization: Authorization | None = None,
        handlers: Sequence[DerivedArtifactHandler] = (),
        continue_on_error: bool = False,
        on_renamed: Callable[[RenameEvent], None] | None = None,
        runtime: Runtime | None = None,
    ) -> RenameBatchResult:
        """``apply_source_renames`` in the bound scope."""
        rt = self._runtime_for(runtime)
        return apply_source_renames(
            scope=self._write_scope(),
            store=self._store,
            renames=renames,
            authorization=authorization,
            handlers=handlers,
            continue_on_error=continue_on_error,
            on_renamed=on_renamed,
            page_size=rt.limits.repoint_page,
            runtime=rt,
        )

    # -- grants and access ------------------------------------------------------------------
    def _acl(self, operation: str) -> ChunkStore:
        if self._store.capabilities.authorization != "acl":
            raise CapabilityError(
                f"{operation} needs a store with grants (capabilities.authorization == 'acl')",
                capability="acl",
            )
        return self._store

    @_CALL_KEYWORDS
    def set_grants(self, grants: Sequence[Grant], *, runtime: Runtime | None = None) -> None:
        """Set the grants of their sources in the bound scope, in one unit of work (each
        replaces that source's grant whole; the others stay)."""
        check_abort(self._runtime_for(runtime).abort)
        self._acl("set_grants").set_source_access(self._write_scope(), list(grants))

    @_CALL_KEYWORDS
    def grants(
        self, source_ids: Sequence[str], *, runtime: Runtime | None = None
    ) -> Mapping[str, Grant]:
        """The grants of ``source_ids`` in the bound scope (a source without one is absent)."""
        check_abort(self._runtime_for(runtime).abort)
        return self._acl("grants").get_source_access(self._write_scope(), list(source_ids))

    @_CALL_KEYWORDS
    def check_access(
        self,
        source_ids: Sequence[str],
        authorization: Authorization,
        *,
        runtime: Runtime | None = None,
    ) -> Mapping[str, AccessDecision]:
        """The access decision of ``authorization`` for each of ``source_ids`` (the store's
        grant rule: no grant, an empty grant or a version mismatch deny)."""
        check_abort(self._runtime_for(runtime).abort)
        store = self._acl("check_access")
        return store.check_source_access(self._write_scope(), list(source_ids), authorization)

    # -- generations, listing, sync ---------------------------------------------------------
    @_CALL_KEYWORDS
    def compact(
        self, *, keep: int = DEFAULT_LIMITS.compact_keep, runtime: Runtime | None = None
    ) -> CompactResult:
        """``compact`` of the bound scope: purge rows retired more than ``keep`` generations
        ago (a rollback can then go back at most ``keep`` generations)."""
        return compact(
            store=self._store,
            scope=self._write_scope(),
            keep=keep,
            runtime=self._runtime_for(runtime),
        )

    @_CALL_KEYWORDS
    def generation(self, *, runtime: Runtime | None = None) -> int:
        """The bound scope's current generation (its pointer)."""
        check_abort(self._runtime_for(runtime).abort)
        return self._store.current_generation(self._write_scope())

    @_CALL_KEYWORDS
    def generations(
        self, *, limit: int = 10, max_ids: int = 100, runtime: Runtime | None = None
    ) -> Sequence[GenerationChange]:
        """What each recent generation of the bound scope wrote and retired, newest first
        (stores that declare ``generation_history``; ``CapabilityError`` otherwise)."""
        check_abort(self._runtime_for(runtime).abort)
        store = self._store
        if not supports(store, "generation_history"):
            raise CapabilityError(
                "this store keeps no generation history", capability="generation_history"
            )
        assert isinstance(store, SupportsGenerationHistory)
        return store.generation_history(self._write_scope(), limit=limit, max_ids=max_ids)

    @_CALL_KEYWORDS
    def sources(
        self, *, after: str | None = None, limit: int = 1_000, runtime: Runtime | None = None
    ) -> Sequence[str]:
        """A page of the bound scope's source ids (visible chunks), in code-point order,
        after ``after``; page on with the last id returned."""
        check_abort(self._runtime_for(runtime).abort)
        return self._store.list_source_ids(self._write_scope(), after=after, limit=limit)

    @_WRITE_KEYWORDS
    def sync(
        self,
        *,
        connector: Connector,
        checkpoints: CheckpointStore,
        parser: Parser | ParserSelector | None = None,
        max_pages: int | None = None,
        on_progress: Callable[[SyncProgress], None] | None = None,
        adopt: bool = False,
        workers: int = 1,
        runtime: Runtime | None = None,
        write_options: WriteOptions | None = None,
    ) -> SyncResult:
        """``sync_knowledge`` of ``connector`` into the bound scope and status store, parsing
        with ``parser`` or ``default_parser`` (docs/sync.md); of ``write_options`` it uses
        ``size``, ``overlap``, ``batch_size``, ``shared_generation`` and ``status_store``
        (``advance_generation`` and ``skip_if_unchanged`` stay at their defaults: see
        ``SyncOptions``)."""
        rt = self._runtime_for(runtime)
        write = self._options_for(write_options)
        return sync_knowledge(
            connector=connector,
            checkpoints=checkpoints,
            parser=parser if parser is not None else self.default_parser,
            status_store=write.status_store,
            max_pages=max_pages,
            options=SyncOptions(
                write=attrs.evolve(write, status_store=None),
                on_progress=on_progress,
                adopt=adopt,
                workers=workers,
            ),
            runtime=rt,
            **self._bound_write(),
        )
