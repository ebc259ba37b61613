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
from typing import Literal, cast

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
from ragport.application.documents import ParserSelector, PreparedDocument, prepare_document
from ragport.application.indexing import _records
from ragport.application.pinned import retire_pinned_dependents
from ragport.application.pipeline import PipelineSteps
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.application.shared_generation import SharedGeneration, StagedWrite, staged_write
from ragport.domain.errors import (
    SyncCursorError,
    ValidationError,
    reason_code,
)
from ragport.domain.limits import DEFAULT_LIMITS, Limits, check_limit
from ragport.domain.model import Grant, Scope, validate_text
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

__all__ = ["SyncFailure", "SyncProgress", "SyncResult", "sync_knowledge"]
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
            size=self.size,
            overlap=self.overlap,
            limits=self.limits,
            abort=abort,
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
                offset = 0
                for prepared, _ in changed:
                    n = len(prepared.chunks)
                    uow.records.retire_source(prepared.source_id, generation=generation)
                    uow.records.add(
                        _records(
                            prepared.chunks,
                            texts[offset : offset + n],
                            scope=self.scope,
                            embedder=self.embedder,
                            generation=generation,
                            content_hash=prepared.skip_key,
                        ),
                        vectors[offset : offset + n],
                    )
                    offset += n
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


# Allow-listed function shape (pyproject [tool.ruff.lint]): a use case with its public keyword surface; the write-options value of issue 42 narrows it.
def sync_knowledge(  # noqa: C901, PLR0913, PLR0915
    *,
    connector: Connector,
    checkpoints: CheckpointStore,
    store: ChunkStore,
    embedder: Embedder,
    scope: Scope,
    status_store: IngestionStatusStore | None = None,
    max_pages: int | None = None,
    on_cursor_error: Literal["bootstrap", "raise"] = "bootstrap",
    parser: Parser | ParserSelector | None = None,
    size: int = DEFAULT_LIMITS.chunk_size,
    overlap: int = DEFAULT_LIMITS.overlap,
    batch_size: int = DEFAULT_LIMITS.embed_batch,
    runtime: Runtime | None = None,
    on_progress: Callable[[SyncProgress], None] | None = None,
    adopt: bool = False,
    workers: int = 1,
    shared_generation: SharedGeneration | None = None,
) -> SyncResult:
    """Bring ``scope`` up to date with ``connector``; see the module docstring for the steps.

    ``adopt``: when this connector has no checkpoint for ``scope`` yet, the sources already in
    the scope (written by ``ingest``, ``replace_document`` or another connector) count as
    this sync's own, so the end of the first full listing retires those the connector does
    not list: the scope then equals the connector. Without it (the default) they are left
    alone and only what this sync indexed is ever retired by it.

    ``workers`` (1..32, default 1): more than 1 loads and parses up to that many items of a
    page at once on worker threads, and embeds the chunks of the items already parsed while
    later ones parse (the ingestion pipeline, ``ragport.application.pipeline``); the page is still written by one
    unit of work, so nothing else changes. The connector's ``Upsert.load`` callables are then
    called from those threads: a connector must allow that before a caller raises ``workers``.

    ``shared_generation``: every page this run commits writes into one generation while it
    stays the scope's newest (``SharedGeneration``), so one rollback undoes the run; each page
    is still its own unit of work.

    ``on_progress`` is called with a ``SyncProgress`` as pages are listed, items handled and
    pages committed (for a progress bar; it must not raise).

    ``parser`` is a ``Parser`` or a selector such as ``ragport.adapters.parsers.parser_for``
    (called with the item's media type, else its source id). Raises ``SyncCursorError`` only
    with ``on_cursor_error="raise"`` (or when the restarted bootstrap's cursor fails too), and
    what a store or embedder failure raised (the page in flight is not committed and replays).
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    abort = rt.abort
    scope = require_scope(scope)
    if not isinstance(connector, Connector):
        raise ValidationError("connector must be a Connector", field="connector")
    if not isinstance(checkpoints, CheckpointStore):
        raise ValidationError("checkpoints must be a CheckpointStore", field="checkpoints")
    if not isinstance(adopt, bool):
        raise ValidationError("adopt must be True or False", field="adopt")
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 32:
        raise ValidationError("workers must be an integer in 1..32", field="workers")
    if shared_generation is not None and not isinstance(shared_generation, SharedGeneration):
        raise ValidationError(
            "shared_generation must be a SharedGeneration", field="shared_generation"
        )
    if on_cursor_error not in ("bootstrap", "raise"):
        raise ValidationError(
            'on_cursor_error must be "bootstrap" or "raise"', field="on_cursor_error"
        )
    if max_pages is not None and (
        isinstance(max_pages, bool) or not isinstance(max_pages, int) or max_pages < 1
    ):
        raise ValidationError("max_pages must be a positive integer or None", field="max_pages")
    check_limit("chunk_size", size)
    check_limit("overlap", overlap)
    check_limit("embed_batch", batch_size)
    if overlap >= size:
        raise ValidationError("overlap must be smaller than size", field="overlap", limit="overlap")
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
        status_store=status_store,
        parser=parser,
        size=size,
        overlap=overlap,
        batch_size=batch_size,
        telemetry=rt.effective_telemetry,
        abort=abort,
        redact=rt.redaction,
        limits=rt.limits,
        clock=rt.effective_clock,
        workers=workers,
        shared=shared_generation,
    )
    check_abort(abort)
    counts = {"listed": 0, "done": 0}

    def report(source_id: str | None = None) -> None:
        if on_progress is not None:
            on_progress(SyncProgress(totals.pages, counts["listed"], counts["done"], source_id))

    def item(source_id: str) -> None:
        report(source_id)
        counts["done"] += 1

    if on_progress is not None:
        run.on_item = item

    connector_id = connector.id
    checkpoint = checkpoints.get(connector_id, scope)
    version = checkpoint.version
    restarted = False
    totals = _Tally()
    bootstrapped = False
    failures: list[SyncFailure] = []
    try:
        state = _decode_state(checkpoint.cursor)
    except SyncCursorError:
        if on_cursor_error == "raise":
            raise
        state, restarted = START, True
    if adopt and version == 0 and state == START:
        state = attrs.evolve(state, known=_scope_source_ids(store, scope))

    def result(*, exhausted: bool, lost: bool = False) -> SyncResult:
        return SyncResult(
            cursor=state.cursor,
            exhausted=exhausted,
            bootstrapped=bootstrapped,
            lost=lost,
            retrying=len(state.retry),
            failures=tuple(failures),
            pages=totals.pages,
            upserted=totals.upserted,
            deleted=totals.deleted,
            skipped=totals.skipped,
            withheld=totals.withheld,
            failed=totals.failed,
            swept=totals.swept,
        )

    joined = supports(checkpoints, "checkpoints_in_unit_of_work")
    new_state: _State = state
    settled_after: str | None = None
    page = Page()

    def settle(uow: UnitOfWork, outcome: _PageOutcome) -> bool:
        """Step 6 inside the page's unit of work: compare-and-set the next state (computed
        here, so a malformed page cursor rolls the page back too)."""
        nonlocal new_state, settled_after
        new_state = _next_state(state, page, outcome, run.clock.now())
        settled_after = None
        if not (outcome.wrote or new_state != state or version == 0):
            return True  # nothing to commit, nothing to move
        if joined and cast(SupportsCheckpointsInUnitOfWork, checkpoints).joins(uow):
            return cast(SupportsCheckpointsInUnitOfWork, checkpoints).compare_and_set_in(
                uow, connector_id, scope, version, new_state.encode()
            )
        # A checkpoint store that cannot join this unit of work: refuse a page another worker
        # already moved past, and compare-and-set right after the commit.
        if checkpoints.get(connector_id, scope).version != version:
            return False
        settled_after = new_state.encode()
        return True

    retried = False

    while max_pages is None or totals.pages < max_pages:
        check_abort(abort)
        if state.mode == "changes" and not retried and state.retry_due(run.clock.now()):
            # Failed or withheld items are due: one full listing finds them again (unchanged
            # items are skipped by their skip key); what it no longer lists is swept.
            retried = True
            state = _State("bootstrap", None, state.known, retry=state.retry)
        mode = state.mode
        try:
            if mode == "bootstrap":
                bootstrapped = True
                page = connector.bootstrap(state.cursor)
            else:
                page = connector.changes(cast(str, state.cursor))
        except SyncCursorError:
            if on_cursor_error == "raise" or restarted:
                raise
            # One full listing from the start; what it no longer lists is swept at its end.
            restarted = True
            state = _State("bootstrap", None, state.known, retry=state.retry)
            continue
        if not isinstance(page, Page):
            raise ValidationError("the connector did not return a Page", field="connector")
        in_page = {u.source_id for u in page.upserts}
        counts["listed"] += len(in_page) + len(set(page.deletions) - in_page)
        report()
        sweep: list[str] = []
        if mode == "bootstrap" and page.exhausted:
            listed = state.seen | {u.source_id for u in page.upserts}
            sweep = sorted(state.known - listed)
        outcome = run.apply(page, sweep, settle)
        if outcome is None:
            return result(exhausted=False, lost=True)  # rolled back: nothing written
        totals.add(outcome)
        failures.extend(
            SyncFailure(source_id, reason, error, source_id in outcome.retryable)
            for source_id, reason, error in outcome.failures
        )
        counts["done"] = counts["listed"]
        report()
        if settled_after is not None:
            # Not joined: the page is committed; a lost compare-and-set now stops this worker.
            if not checkpoints.compare_and_set(connector_id, scope, version, settled_after):
                return result(exhausted=False, lost=True)
            version += 1
        elif outcome.wrote or new_state != state or version == 0:
            version += 1
        state = new_state
        if page.exhausted:
            return result(exhausted=True)
    return result(exhausted=False)
