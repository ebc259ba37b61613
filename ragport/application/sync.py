"""sync_knowledge: keep a scope equal to an external system, page by page, crash-safely.

1. Validate; read the checkpoint ``(cursor, version)`` of ``(connector.id, scope)``. Its
   cursor is the sync state (JSON): the mode (``bootstrap`` or ``changes``), the connector's
   cursor, the source ids this sync has indexed (``known``) and, during a bootstrap, the ids
   listed so far (``seen``). No checkpoint: a bootstrap from the start.
2. Ask the connector for one page: ``bootstrap(cursor)`` or ``changes(cursor)``. A
   ``SyncCursorError`` (an expired or foreign cursor, or a malformed state) restarts one
   bootstrap from the start unless ``on_cursor_error="raise"``.
3. For each upsert: an item whose access the host mapping withheld (``access is None``) is
   not loaded; otherwise load it, compute the ``replace_document`` skip key and stop there
   when the stored rows carry it (skipped); else parse and chunk. An item that fails to load
   or parse is recorded ``failed`` and keeps its previous version; the page goes on.
4. Embed every changed item's chunks (nothing touches the store yet).
5. In one unit of work: one generation staged for the page; deleted and withheld sources
   retired; each changed source's rows retired and its new rows added; grants set from each
   item's access (skipped and failed items too: a revocation never waits for content; withheld
   and deleted sources get an empty grant); the pointer published. At the end of a bootstrap
   the page also retires the sources the full listing no longer contains (the sweep).
6. Still in that unit of work, compare-and-set the checkpoint from the version read, then
   commit: the page and its checkpoint commit or fail together. A checkpoint store that
   ``SupportsCheckpointsInUnitOfWork`` for this store's unit of work makes this exact
   (PostgreSQL: one transaction; in memory: the scope's writer lock). Otherwise the version is
   read again inside the unit of work and compare-and-set right after the commit, which leaves
   a window; such a pair must run one worker per scope (docs/sync.md). A lost compare-and-set
   (another worker advanced the checkpoint) rolls the page back and stops this worker at once:
   ``SyncResult.lost``, nothing written. A crash before the commit replays the page on the
   next run: unchanged items are skipped by their skip key, so the replay writes the same rows.
7. Record ingestion status: ``indexed``/``current`` (written or unchanged), ``failed``/
   ``stale``, ``failed``/``unavailable`` (withheld); deleted sources lose their status.
8. Repeat until the listing is exhausted (a bootstrap ends after its last page), ``max_pages``
   pages were committed, or the caller aborts.

Steps 3 to 7 of a page are the named steps of ``_Run.apply``: ``classify_page`` (upserts,
deletions, sweep), ``load_parse_embed``, ``commit_page`` (with the checkpoint's
compare-and-set) and ``record_status``; the counts go into a typed ``_Tally``.

Failed (by a load failure, a parse timeout, a killed parser worker, or any exception other than
a parser's verdict on the bytes) and withheld items are retried: the checkpoint keeps them (``retry``: attempts and the
earliest next try) until they succeed or are deleted upstream. A run in ``changes`` mode with
a retry due starts with one full listing (a bootstrap that keeps what is known; unchanged
items are skipped by their skip key), at most once a run. The first retry is due at once (the
next run), then after 1, 2, 4, ... minutes, at most a day apart.

Any exception raised while one item is loaded, parsed or chunked is that item's failure (it
keeps its previous version); only abort, store and embedder failures sink the page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, TypedDict, Unpack, cast

import attrs

from ragport.application._support import (
    EMBED_CALL_BATCHES,
    Redaction,
    check_abort,
    embed_batches,
    require_kind,
    require_scope,
    require_transactions,
)
from ragport.application._sync_page import PageRun, PageWork, classify_page, prepare_page
from ragport.application._sync_state import (
    START,
    SyncFailure,
    SyncProgress,
    SyncResult,
    _decode_state,
    _next_state,
    _PageOutcome,
    _State,
    _Tally,
)
from ragport.application.admission import refuse_forgotten
from ragport.application.deprecation import fold_run_options
from ragport.application.documents import ParserSelector, PreparedDocument, prepare_document
from ragport.application.indexing import _records
from ragport.application.pinned import retire_pinned_dependents
from ragport.application.pipeline import (
    PipelineSteps,
    RunRuntime,
    check_pipeline_write,
    check_workers,
)
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.application.shared_generation import SharedGeneration, StagedWrite, staged_write
from ragport.application.write_options import DEFAULT_WRITE_OPTIONS, WriteOptions
from ragport.domain.errors import (
    SyncCursorError,
    ValidationError,
    reason_code,
)
from ragport.domain.limits import Limits
from ragport.domain.model import Grant, Record, Scope, validate_text
from ragport.domain.status import ERROR_MAX, Freshness, IngestionState, IngestionStatus
from ragport.ports.documents import LoadedDocument, Parser
from ragport.ports.embedder import Embedder, VectorMatrix
from ragport.ports.runtime import Abort, Clock, Telemetry
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore, SupportsPreparation, UnitOfWork, supports
from ragport.ports.sync import (
    CheckpointStore,
    Connector,
    Page,
    SupportsCheckpointsInUnitOfWork,
    Upsert,
)

__all__ = ["SyncFailure", "SyncOptions", "SyncProgress", "SyncResult", "sync_knowledge"]
WITHHELD_ERROR = "withheld by the host access mapping"


@attrs.define
class _Run:
    connector: Connector
    store: ChunkStore
    embedder: Embedder
    scope: Scope
    status_store: IngestionStatusStore | None
    parser: Parser | ParserSelector | None
    size: int
    overlap: int
    batch_size: int
    telemetry: Telemetry
    abort: Abort | None
    redact: Redaction
    limits: Limits
    clock: Clock
    workers: int = 1
    on_item: Callable[[str], None] | None = None
    shared: SharedGeneration | None = None
    # What ``prepare`` hands each upsert, built once per run (see ``RunRuntime``).
    _runtimes: RunRuntime = attrs.field(
        init=False,
        default=attrs.Factory(
            lambda self: RunRuntime(Runtime(limits=self.limits)), takes_self=True
        ),
    )
    _prepare_options: WriteOptions = attrs.field(
        init=False,
        default=attrs.Factory(
            lambda self: WriteOptions(size=self.size, overlap=self.overlap), takes_self=True
        ),
    )

    def prepare(self, upsert: Upsert, abort: Abort | None) -> tuple[PreparedDocument, int]:
        check_abort(abort)
        loaded = upsert.load()
        if isinstance(loaded, bytes):
            loaded = LoadedDocument(loaded, upsert.media_type)
        if not isinstance(loaded, LoadedDocument):
            raise ValidationError(
                "an upsert's load() did not return a LoadedDocument", field="load"
            )
        metadata = dict(loaded.metadata)
        if upsert.revision is not None:
            metadata.setdefault("revision", upsert.revision)
        if upsert.modified_at is not None:
            metadata.setdefault("modified_at", upsert.modified_at.isoformat())
        loaded = attrs.evolve(
            loaded, media_type=loaded.media_type or upsert.media_type, metadata=metadata
        )
        prepared = prepare_document(
            loaded,
            source_id=upsert.source_id,
            uri=upsert.source_id,
            parser=self.parser,
            embedder=self.embedder,
            store=self.store,
            scope=self.scope,
            runtime=self._runtimes(abort),
            write_options=self._prepare_options,
            pinned_metadata=upsert.metadata,
        )
        return prepared, len(loaded.data)

    def status(
        self,
        source_id: str,
        state: IngestionState,
        freshness: Freshness,
        *,
        size: int = 0,
        chunks: int = 0,
        error: str | None = None,
    ) -> None:
        if self.status_store is None:
            return
        self.status_store.put(
            IngestionStatus(
                scope=self.scope,
                source_id=source_id,
                state=state,
                bytes=size,
                chunks_total=chunks,
                chunks_indexed=chunks if state == "indexed" else 0,
                error=error[:ERROR_MAX] if error else None,
                updated_at=self.clock.now(),
                freshness=freshness,
            )
        )

    def apply(
        self,
        page: Page,
        sweep: Sequence[str],
        settle: Callable[[UnitOfWork, _PageOutcome], bool],
    ) -> _PageOutcome | None:
        """Steps 3 to 7 for one page: what it committed, or ``None`` when ``settle`` (the
        checkpoint's compare-and-set, called inside the unit of work before its commit) lost
        and the page was rolled back."""
        upserts, deletions, sweep = classify_page(page, sweep)
        work = self.load_parse_embed(upserts)  # steps 3-4: nothing touches the store yet
        check_abort(self.abort)
        if work.changed and supports(self.store, "preparation"):
            cast(SupportsPreparation, self.store).prepare(
                self.scope, dimensions=self.embedder.dimensions
            )
        outcome = self.commit_page(work, deletions, sweep, settle)  # steps 5-6
        if outcome is not None:
            self.record_status(work, [*deletions, *sweep])  # step 7
        return outcome

    def load_parse_embed(self, upserts: dict[str, Upsert]) -> PageWork:
        """Steps 3-4: load, skip-check, parse and embed every upsert of the page."""
        steps: PipelineSteps[Upsert] = PipelineSteps(
            prepare=self.prepare,
            embed=lambda texts, abort, _label: embed_batches(
                self.embedder, texts, batch_size=self.batch_size, abort=abort,
                telemetry=self.telemetry,
            ),
            texts_of=lambda prepared: [
                validate_text(self.redact(c.text), field="text") if self.redact.active else c.text
                for c in prepared.chunks
            ],
            threads="ragport-sync",
        )  # fmt: skip
        run = PageRun(
            steps=steps,
            error_of=lambda exc: (self.redact.error(exc), reason_code(exc)),
            dimensions=self.embedder.dimensions,
            call_size=self.batch_size * EMBED_CALL_BATCHES,
            workers=self.workers,
            abort=self.abort,
            on_item=self.on_item,
        )
        return prepare_page(upserts, run)

    def commit_page(
        self,
        work: PageWork,
        deletions: Sequence[str],
        sweep: Sequence[str],
        settle: Callable[[UnitOfWork, _PageOutcome], bool],
    ) -> _PageOutcome | None:
        """Steps 5-6: the page's writes and grants in one unit of work, committed only if
        ``settle`` (the checkpoint's compare-and-set) wins; ``None`` when it lost."""
        grants, withheld, failed, skipped = work.grants, work.withheld, work.failed, work.skipped
        changed, retryable, texts = work.changed, work.retryable, work.texts
        vectors = cast(VectorMatrix, work.vectors)
        retire = [*deletions, *sweep, *withheld]
        deleted: list[str] = []
        swept = 0
        with (
            self.telemetry.span("rag.sync.page") as span,
            self.store.unit_of_work(self.scope) as uow,
        ):
            for prepared, _ in changed:
                require_kind(uow, prepared.source_id, "chunk", field="source_id")
            # prepare_document refused forgotten ids item by item; a forget that committed
            # since then sinks the page (it replays, and the item is refused alone).
            refuse_forgotten(uow, [p.source_id for p, _ in changed])
            visible = [s for s in retire if uow.records.list_by_source(s)]
            write: StagedWrite | None = None
            if changed or visible:
                write = staged_write(
                    uow, self.shared, [*visible, *(p.source_id for p, _ in changed)]
                )
                generation = write.generation
                for source_id in visible:
                    retired = uow.records.retire_source(source_id, generation=generation)
                    if retired and source_id not in withheld:
                        deleted.append(source_id)
                        swept += source_id in sweep
                records: list[Record] = []  # the page's rows: one add (PostgreSQL COPYs them)
                for prepared, _ in changed:
                    n = len(prepared.chunks)
                    uow.records.retire_source(prepared.source_id, generation=generation)
                    records.extend(
                        _records(
                            prepared.chunks,
                            texts[len(records) : len(records) + n],
                            scope=self.scope,
                            embedder=self.embedder,
                            generation=generation,
                            content_hash=prepared.skip_key,
                        )
                    )
                if records:
                    uow.records.add(records, vectors[: len(records)])
                retire_pinned_dependents(
                    uow,
                    [*visible, *(p.source_id for p, _ in changed)],
                    generation=generation,
                    limits=self.limits,
                )
                write.publish()
            revoked = [Grant(s) for s in dict.fromkeys([*deletions, *sweep, *withheld])]
            if grants or revoked:
                uow.grants.set([*grants, *revoked])
            outcome = _PageOutcome(
                upserted=tuple(p.source_id for p, _ in changed),
                skipped=tuple(skipped),
                withheld=tuple(withheld),
                failed=tuple(failed),
                deleted=tuple(deleted),
                swept=swept,
                wrote=bool(changed or visible or grants or revoked),
                retryable=tuple(retryable),
                failures=tuple((s, reason, error) for s, (error, reason) in failed.items()),
            )
            check_abort(self.abort)
            if not settle(uow, outcome):
                span.set_attribute("rag.sync.lost", True)
                return None  # leaving without commit rolls the page back
            if write is None:
                uow.commit()  # grants or the checkpoint only: no generation
            else:
                write.commit()
            span.set_attribute("rag.sync.upserted", len(changed))
        return outcome

    def record_status(self, work: PageWork, gone: Sequence[str]) -> None:
        """Step 7: each item's ingestion status after the commit; ``gone`` lose theirs."""
        for prepared, size in work.changed:
            self.status(
                prepared.source_id, "indexed", "current", size=size, chunks=len(prepared.chunks)
            )
        for source_id, (size, stored) in work.skipped.items():
            self.status(source_id, "indexed", "current", size=size, chunks=stored)
        for source_id, (error, _) in work.failed.items():
            self.status(source_id, "failed", "stale", error=error)
        for source_id in work.withheld:
            self.status(source_id, "failed", "unavailable", error=WITHHELD_ERROR)
        if self.status_store is not None:
            for source_id in gone:
                self.status_store.delete(self.scope, source_id)


def _scope_source_ids(store: ChunkStore, scope: Scope) -> frozenset[str]:
    """Every source id with a chunk visible in ``scope`` (derived records are not sources)."""
    found: list[str] = []
    after: str | None = None
    while True:
        page = store.list_source_ids(scope, after=after, limit=1_000)
        found.extend(page)
        if len(page) < 1_000:
            return frozenset(found)
        after = page[-1]


def _on_cursor_error(value: object) -> Literal["bootstrap", "raise"]:
    if value not in ("bootstrap", "raise"):
        raise ValidationError(
            'on_cursor_error must be "bootstrap" or "raise"', field="on_cursor_error"
        )
    return value


def _flag(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(f"{field} must be True or False", field=field)
    return value


def _adopt(value: object) -> bool:
    return _flag(value, "adopt")


def _restart(value: object) -> bool:
    return _flag(value, "restart")


@attrs.frozen(kw_only=True)
class SyncOptions:
    """How ``sync_knowledge`` runs, checked when built (``ValidationError`` naming the field).

    - ``write``: the write options (``WriteOptions``): chunk ``size`` and ``overlap``, embed
      ``batch_size`` (texts per embedder call; a page's chunks go in calls of ``batch_size``
      x 4), ``shared_generation`` (every page this run commits writes into one generation
      while it stays the scope's newest, so one rollback undoes the run; each page is still
      its own unit of work) and ``status_store`` (when the call names none).
      ``advance_generation`` and ``skip_if_unchanged`` stay at their defaults: a page is
      always published, and an item skipped when its skip key is stored.
    - ``workers`` (1..32, default 1): more than 1 loads and parses up to that many items of a
      page at once on worker threads, and embeds the chunks of the items already parsed while
      later ones parse (the ingestion pipeline, ``ragport.application.pipeline``); the page is
      still written by one unit of work, so nothing else changes. The connector's
      ``Upsert.load`` callables are then called from those threads: a connector must allow
      that before a caller raises ``workers``.
    - ``adopt``: when this connector has no checkpoint for the scope yet, the sources already
      in the scope (written by ``ingest``, ``replace_document`` or another connector) count
      as this sync's own, so the end of the first full listing retires those the connector
      does not list: the scope then equals the connector. Without it (the default) they are
      left alone and only what this sync indexed is ever retired by it.
    - ``on_cursor_error``: ``"bootstrap"`` (default) restarts one full listing when the
      connector refuses the cursor; ``"raise"`` raises its ``SyncCursorError``.
    - ``on_progress``: called with a ``SyncProgress`` as pages are listed, items handled and
      pages committed (for a progress bar; it must not raise).
    - ``restart``: drop this connector's checkpoint for the scope first, so the run is a full
      listing and every item is read under the settings given (what it indexed before is
      then not its own: pair it with ``adopt`` to retire what the listing no longer holds).
    """

    write: WriteOptions = attrs.field(default=DEFAULT_WRITE_OPTIONS, converter=check_pipeline_write)
    workers: int = attrs.field(default=1, converter=check_workers)
    adopt: bool = attrs.field(default=False, converter=_adopt)
    on_cursor_error: Literal["bootstrap", "raise"] = attrs.field(
        default="bootstrap", converter=_on_cursor_error
    )
    on_progress: Callable[[SyncProgress], None] | None = None
    restart: bool = attrs.field(default=False, converter=_restart)


class _OldSyncKeywords(TypedDict, total=False):
    """``sync_knowledge``'s keywords before ``options=`` (deprecated)."""

    on_cursor_error: Literal["bootstrap", "raise"]
    size: int
    overlap: int
    batch_size: int
    on_progress: Callable[[SyncProgress], None] | None
    adopt: bool
    workers: int
    shared_generation: SharedGeneration | None


_OLD_WRITE_KEYWORDS = ("size", "overlap", "batch_size", "shared_generation")


def _old_sync_keywords(options: SyncOptions, old: _OldSyncKeywords) -> SyncOptions:
    """``options`` with the deprecated keywords of ``sync_knowledge`` folded in (a
    ``DeprecationWarning`` naming them)."""
    folded, _ = fold_run_options(
        "sync_knowledge",
        options,
        old,
        "options=SyncOptions(write=WriteOptions(size=, overlap=, batch_size=, "
        "shared_generation=), workers=, adopt=, on_cursor_error=, on_progress=)",
        write=_OLD_WRITE_KEYWORDS,
    )
    return folded


def sync_knowledge(
    *,
    connector: Connector,
    checkpoints: CheckpointStore,
    store: ChunkStore,
    embedder: Embedder,
    scope: Scope,
    status_store: IngestionStatusStore | None = None,
    max_pages: int | None = None,
    parser: Parser | ParserSelector | None = None,
    options: SyncOptions | None = None,
    runtime: Runtime | None = None,
    **deprecated: Unpack[_OldSyncKeywords],
) -> SyncResult:
    """Bring ``scope`` up to date with ``connector``; see the module docstring for the steps.

    ``parser`` is a ``Parser`` or a selector such as ``ragport.adapters.parsers.parser_for``
    (called with the item's media type, else its source id). ``options``: a ``SyncOptions``
    (write options, ``workers``, ``adopt``, ``on_cursor_error``, ``on_progress``,
    ``restart``). ``runtime``: telemetry, redaction, limits, clock and abort. Raises
    ``SyncCursorError`` only with ``on_cursor_error="raise"`` (or when the restarted
    bootstrap's cursor fails too), and what a store or embedder failure raised (the page in
    flight is not committed and replays).

    Deprecated keywords (one release, ``DeprecationWarning``): ``size``, ``overlap``,
    ``batch_size``, ``shared_generation`` (now ``options.write``), ``workers``, ``adopt``,
    ``on_cursor_error``, ``on_progress`` (now ``options``).
    """
    if options is not None and not isinstance(options, SyncOptions):
        raise ValidationError("options must be a SyncOptions", field="options")
    opts = _old_sync_keywords(SyncOptions() if options is None else options, deprecated)
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    scope = require_scope(scope)
    if not isinstance(connector, Connector):
        raise ValidationError("connector must be a Connector", field="connector")
    if not isinstance(checkpoints, CheckpointStore):
        raise ValidationError("checkpoints must be a CheckpointStore", field="checkpoints")
    if max_pages is not None and (
        isinstance(max_pages, bool) or not isinstance(max_pages, int) or max_pages < 1
    ):
        raise ValidationError("max_pages must be a positive integer or None", field="max_pages")
    write = opts.write.settings(rt.limits)
    if parser is None:
        raise ValidationError(
            "sync_knowledge needs parser=: a Parser, or a selector such as "
            "ragport.adapters.parsers.parser_for",
            field="parser",
        )
    require_transactions(store, "sync_knowledge")
    run = _Run(
        connector=connector,
        store=store,
        embedder=embedder,
        scope=scope,
        status_store=status_store if status_store is not None else write.status_store,
        parser=parser,
        size=write.size,
        overlap=write.overlap,
        batch_size=write.batch_size,
        telemetry=rt.effective_telemetry,
        abort=rt.abort,
        redact=rt.redaction,
        limits=rt.limits,
        clock=rt.effective_clock,
        workers=opts.workers,
        shared=write.shared_generation,
    )
    check_abort(rt.abort)
    if opts.restart:
        checkpoints.delete(connector.id, scope)
    return _Sync(run, checkpoints, opts).run(max_pages)


class _Sync:
    """Steps 1, 2, 6 and 8 of one ``sync_knowledge`` call: the checkpoint, the listing, the
    compare-and-set and the counts (``_Run`` does each page's steps 3 to 7)."""

    def __init__(self, run: _Run, checkpoints: CheckpointStore, options: SyncOptions) -> None:
        self.run_ = run
        self.checkpoints = checkpoints
        self.options = options
        self.connector_id = run.connector.id
        self.listed = 0
        self.done = 0
        self.totals = _Tally()
        self.bootstrapped = False
        self.restarted = False
        self.failures: list[SyncFailure] = []
        if options.on_progress is not None:
            run.on_item = self.item
        checkpoint = checkpoints.get(self.connector_id, run.scope)
        self.version = checkpoint.version
        try:
            self.state = _decode_state(checkpoint.cursor)
        except SyncCursorError:
            if options.on_cursor_error == "raise":
                raise
            self.state, self.restarted = START, True
        if options.adopt and self.version == 0 and self.state == START:
            self.state = attrs.evolve(self.state, known=_scope_source_ids(run.store, run.scope))
        self.joined = supports(checkpoints, "checkpoints_in_unit_of_work")
        self.new_state: _State = self.state
        self.settled_after: str | None = None
        self.page = Page()

    def report(self, source_id: str | None = None) -> None:
        if self.options.on_progress is not None:
            self.options.on_progress(
                SyncProgress(self.totals.pages, self.listed, self.done, source_id)
            )

    def item(self, source_id: str) -> None:
        self.report(source_id)
        self.done += 1

    def result(self, *, exhausted: bool, lost: bool = False) -> SyncResult:
        totals = self.totals
        return SyncResult(
            cursor=self.state.cursor,
            exhausted=exhausted,
            bootstrapped=self.bootstrapped,
            lost=lost,
            retrying=len(self.state.retry),
            failures=tuple(self.failures),
            pages=totals.pages,
            upserted=totals.upserted,
            deleted=totals.deleted,
            skipped=totals.skipped,
            withheld=totals.withheld,
            failed=totals.failed,
            swept=totals.swept,
        )

    def settle(self, uow: UnitOfWork, outcome: _PageOutcome) -> bool:
        """Step 6 inside the page's unit of work: compare-and-set the next state (computed
        here, so a malformed page cursor rolls the page back too)."""
        scope = self.run_.scope
        self.new_state = _next_state(self.state, self.page, outcome, self.run_.clock.now())
        self.settled_after = None
        if not (outcome.wrote or self.new_state != self.state or self.version == 0):
            return True  # nothing to commit, nothing to move
        checkpoints = self.checkpoints
        if self.joined and cast(SupportsCheckpointsInUnitOfWork, checkpoints).joins(uow):
            return cast(SupportsCheckpointsInUnitOfWork, checkpoints).compare_and_set_in(
                uow, self.connector_id, scope, self.version, self.new_state.encode()
            )
        # A checkpoint store that cannot join this unit of work: refuse a page another worker
        # already moved past, and compare-and-set right after the commit.
        if checkpoints.get(self.connector_id, scope).version != self.version:
            return False
        self.settled_after = self.new_state.encode()
        return True

    def next_page(self, retried: bool) -> tuple[Page | None, bool]:
        """Step 2: the next page of the listing (``None``: the cursor failed and one full
        listing restarts), and whether the retry listing has started."""
        state = self.state
        if state.mode == "changes" and not retried and state.retry_due(self.run_.clock.now()):
            # Failed or withheld items are due: one full listing finds them again (unchanged
            # items are skipped by their skip key); what it no longer lists is swept.
            retried = True
            state = self.state = _State("bootstrap", None, state.known, retry=state.retry)
        try:
            if state.mode == "bootstrap":
                self.bootstrapped = True
                page = self.run_.connector.bootstrap(state.cursor)
            else:
                page = self.run_.connector.changes(cast(str, state.cursor))
        except SyncCursorError:
            if self.options.on_cursor_error == "raise" or self.restarted:
                raise
            # One full listing from the start; what it no longer lists is swept at its end.
            self.restarted = True
            self.state = _State("bootstrap", None, state.known, retry=state.retry)
            return None, retried
        if not isinstance(page, Page):
            raise ValidationError("the connector did not return a Page", field="connector")
        return page, retried

    def run(self, max_pages: int | None) -> SyncResult:
        """Step 8: page after page until the listing is exhausted, ``max_pages`` or abort."""
        retried = False
        while max_pages is None or self.totals.pages < max_pages:
            check_abort(self.run_.abort)
            page, retried = self.next_page(retried)
            if page is None:
                continue
            self.page = page
            mode = self.state.mode
            in_page = {u.source_id for u in page.upserts}
            self.listed += len(in_page) + len(set(page.deletions) - in_page)
            self.report()
            sweep: list[str] = []
            if mode == "bootstrap" and page.exhausted:
                listed = self.state.seen | {u.source_id for u in page.upserts}
                sweep = sorted(self.state.known - listed)
            outcome = self.run_.apply(page, sweep, self.settle)
            if outcome is None:
                return self.result(exhausted=False, lost=True)  # rolled back: nothing written
            if not self.committed(outcome):
                return self.result(exhausted=False, lost=True)
            if page.exhausted:
                return self.result(exhausted=True)
        return self.result(exhausted=False)

    def committed(self, outcome: _PageOutcome) -> bool:
        """Count a committed page and move the checkpoint's version; ``False`` when the
        compare-and-set after the commit (not joined) lost: this worker stops."""
        self.totals.add(outcome)
        self.failures.extend(
            SyncFailure(source_id, reason, error, source_id in outcome.retryable)
            for source_id, reason, error in outcome.failures
        )
        self.done = self.listed
        self.report()
        if self.settled_after is not None:
            # Not joined: the page is committed; a lost compare-and-set now stops this worker.
            if not self.checkpoints.compare_and_set(
                self.connector_id, self.run_.scope, self.version, self.settled_after
            ):
                return False
            self.version += 1
        elif outcome.wrote or self.new_state != self.state or self.version == 0:
            self.version += 1
        self.state = self.new_state
        return True
