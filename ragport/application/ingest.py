"""ingest_documents: many documents into a corpus, one outcome each; a failure never stops the run.

1. Validate ``options.workers`` (1..32) and the runtime.
2. ``workers`` 1: each candidate through ``replace_document`` (load, parse, chunk, embed,
   write) one after another. More: the ingestion pipeline (``ragport.application.pipeline``):
   ``workers`` threads load and parse, one thread embeds the chunks of consecutive documents
   per call, and the changed documents are written here in input order, in batches
   (``ragport.application.batch``): up to ``limits.write_batch`` documents and
   ``limits.write_batch_chunks`` chunks in ONE unit of work at ONE generation, their rows in
   one ``records.add``, so each document is still all-or-nothing for readers. A document that
   failed before the write is left out of its batch; if a batch's write fails, each of its
   documents is written alone (its own ``replace_prepared``), so only the bad one fails and
   keeps its previous version. With a redactor, each document is written alone.
3. Yield one ``FileOutcome`` per candidate, in input order: a refused candidate (no
   ``source_id``) or a document that failed anywhere is that document's failure only
   (``failed`` with a text-free reason and error); ``AbortedError`` stops the run.

The loader and parser are ports: ``ragport.bootstrap.ingest_files`` wires the file loader and
ragport's parsers.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, cast

import attrs

from ragport.application._support import check_abort, embed_batches, put_status, require_scope
from ragport.application.batch import BatchItem, batch_bounds, write_batch, write_batched
from ragport.application.deprecation import folds_keywords
from ragport.application.documents import (
    ParserSelector,
    PreparedDocument,
    prepare_document,
    record_failed,
    replace_document,
    replace_prepared,
)
from ragport.application.indexing import _check_chunks, replace_source
from ragport.application.pipeline import (
    MAX_WORKERS,
    PipelineItem,
    PipelineSteps,
    RunRuntime,
    check_pipeline_write,
    check_workers,
    run_pipeline,
)
from ragport.application.results import ReplaceResult
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.application.write_options import (
    DEFAULT_WRITE_OPTIONS,
    WriteOptions,
    WriteSettings,
    check_write_options,
)
from ragport.domain.chunking import chunk_markdown, chunk_text
from ragport.domain.errors import AbortedError, RagportError, ValidationError, reason_code
from ragport.domain.limits import DEFAULT_LIMITS, Limits
from ragport.domain.model import Scope
from ragport.domain.values import validate_id
from ragport.ports.documents import DocumentLoader, Parser
from ragport.ports.embedder import Embedder, VectorMatrix
from ragport.ports.runtime import Abort
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

__all__ = [
    "MARKDOWN_SUFFIXES",
    "MAX_WORKERS",
    "Candidate",
    "FileOutcome",
    "IngestOptions",
    "IngestProgress",
    "check_workers",
    "ingest_documents",
    "ingest_limits",
    "ingest_text",
]


@attrs.frozen
class Candidate:
    """A document to ingest (``source_id``, read by the loader) or one refused before it
    (``source_id`` ``None``, with ``reason`` and ``detail``); ``path`` is what is shown."""

    path: Path
    source_id: str | None
    reason: str | None = None
    detail: str | None = None


@attrs.frozen
class FileOutcome:
    """What happened to one document of an ingest run."""

    path: str
    source_id: str | None
    state: str  # indexed | unchanged | failed
    chunks: int = 0
    replaced: int = 0
    generation: int | None = None
    reason: str | None = None
    error: str | None = None
    seconds: float = 0.0


class IngestProgress(Protocol):
    """What ``ingest_documents`` reports while documents are in flight (a progress display).

    Each stage a document goes through is reported when it starts (``working``) and when it
    is through, succeeded or not (``finished``), so a display shows what runs now and not
    what ran last. Called from the pipeline's threads: implementations must be thread-safe
    and quick, and must not raise (an exception escapes as the run's own failure). An object
    without ``finished`` (written before it existed) still works: it hears only the starts.
    """

    def working(self, source_id: str, stage: str) -> None:
        """``source_id`` starts ``stage``: ``parsing`` (load and parse, in a parse thread),
        ``embedding`` (one embedder call for a group of files: ``source_id`` is the group's
        first file and ``(+N more)``), ``writing``; serially (``workers=1``) one ``reading``
        covers the whole file (load, parse, embed and write)."""

    def finished(self, source_id: str, stage: str) -> None:
        """``source_id`` is through ``stage`` (as named to ``working``)."""

    def embedded(self, chunks: int) -> None:
        """``chunks`` more chunks were embedded (after each embedder call)."""


def _workers(workers: object) -> int | None:
    return None if workers is None else check_workers(workers)


@attrs.frozen(kw_only=True)
class IngestOptions:
    """How ``ingest_documents`` (and ``ragport.bootstrap.ingest_files``) runs, checked when built.

    ``write``: the write options (``WriteOptions``: chunk ``size`` and ``overlap``, embed
    ``batch_size``, ``shared_generation``: every document of the run shares one generation
    while it stays the scope's newest, so one rollback undoes the run; ``status_store`` when
    the call names none); ``advance_generation`` and ``skip_if_unchanged`` stay at their
    defaults (every document is published, and skipped when its skip key is stored).
    ``workers`` (1..32): parse threads; 1 runs the documents one after another; ``None``
    (the default): 1 for ``ingest_documents``, the cores (2 to 8) for ``ingest_files``.
    ``progress``: told the document in flight and each embedder call's chunks
    (``IngestProgress``). ``timer``: seconds for each outcome (default ``time.perf_counter``).
    """

    write: WriteOptions = attrs.field(default=DEFAULT_WRITE_OPTIONS, converter=check_pipeline_write)
    workers: int | None = attrs.field(default=None, converter=_workers)
    progress: IngestProgress | None = None
    timer: Callable[[], float] = time.perf_counter


@contextmanager
def progress_stage(progress: IngestProgress | None, name: str, stage: str) -> Iterator[None]:
    """Tell ``progress`` that ``name`` runs ``stage`` for the block, and when it is through."""
    if progress is None:
        yield
        return
    progress.working(name, stage)
    try:
        yield
    finally:
        finished = getattr(progress, "finished", None)
        if finished is not None:
            finished(name, stage)


def failed_outcome(
    shown: str, source_id: str | None, exc: BaseException, seconds: float
) -> FileOutcome:
    """A failed outcome: ragport errors keep their (text-free) message and reason; an
    ``OSError`` its strerror; any other exception only its type name."""
    if isinstance(exc, RagportError):
        return FileOutcome(
            shown, source_id, "failed", reason=reason_code(exc),
            error=f"{type(exc).__name__}: {exc}"[:256], seconds=seconds,
        )  # fmt: skip
    if isinstance(exc, OSError):
        return FileOutcome(
            shown, source_id, "failed", reason="os_error",
            error=f"{type(exc).__name__}: {exc.strerror or ''}", seconds=seconds,
        )  # fmt: skip
    # a parser's RecursionError, MemoryError...: a foreign message may quote the document
    return FileOutcome(
        shown, source_id, "failed", reason="internal", error=type(exc).__name__, seconds=seconds
    )


def written_outcome(shown: str, result: ReplaceResult, seconds: float) -> FileOutcome:
    """``indexed`` or ``unchanged``, from what ``replace_source`` did."""
    return FileOutcome(
        shown,
        result.source_id,
        "unchanged" if result.skipped else "indexed",
        chunks=result.indexed,
        replaced=result.deleted,
        generation=result.generation,
        seconds=seconds,
    )


def ingest_documents(
    candidates: Sequence[Candidate],
    *,
    loader: DocumentLoader,
    parser: Parser | ParserSelector,
    store: ChunkStore,
    embedder: Embedder,
    scope: Scope,
    status_store: IngestionStatusStore | None = None,
    options: IngestOptions | None = None,
    runtime: Runtime | None = None,
) -> Generator[FileOutcome, None, None]:
    """``replace_document`` for every candidate, one outcome each (see the module).

    Outcomes come in input order; each document is written atomically (serially by its own
    ``replace_source``; pipelined in batches, one unit of work and one generation each) in
    input order, so generations follow the input order. ``runtime.abort`` stops
    the run at the next check (``AbortedError``); closing the generator (or Ctrl-C) stops
    every thread before it returns, and the document in flight writes nothing.
    """
    options = IngestOptions() if options is None else _check_options(options)
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    write = options.write.settings(rt.limits)
    run = _Ingest(
        loader=loader,
        parser=parser,
        store=store,
        embedder=embedder,
        scope=require_scope(scope),
        status_store=status_store if status_store is not None else write.status_store,
        options=options,
        write=write,
        runtime=rt,
    )
    if (options.workers or 1) > 1:
        return run.pipelined(candidates)
    return run.serial(candidates)


def _check_options(options: object) -> IngestOptions:
    if not isinstance(options, IngestOptions):
        raise ValidationError("options must be an IngestOptions", field="options")
    return options


@attrs.frozen(kw_only=True)
class _Ingest:
    loader: DocumentLoader
    parser: Parser | ParserSelector
    store: ChunkStore
    embedder: Embedder
    scope: Scope
    status_store: IngestionStatusStore | None
    options: IngestOptions
    write: WriteSettings
    runtime: Runtime
    # What ``prepare`` hands each file, built once per run (see ``RunRuntime``).
    _runtimes: RunRuntime = attrs.field(
        init=False, default=attrs.Factory(lambda self: RunRuntime(self.runtime), takes_self=True)
    )
    _prepare_options: WriteOptions = attrs.field(
        init=False,
        default=attrs.Factory(lambda self: self.write_options(), takes_self=True),
    )

    def serial(self, candidates: Sequence[Candidate]) -> Generator[FileOutcome, None, None]:
        """One document after another through ``replace_document``."""
        o = self.options
        for candidate in candidates:
            shown = candidate.source_id or str(candidate.path)
            if candidate.source_id is None:
                yield FileOutcome(
                    shown, None, "failed", reason=candidate.reason, error=candidate.detail
                )
                continue
            started = o.timer()
            try:
                with progress_stage(o.progress, candidate.source_id, "reading"):
                    result = replace_document(
                        uri=candidate.source_id, loader=self.loader, parser=self.parser,
                        embedder=self.embedder, store=self.store, scope=self.scope,
                        source_id=candidate.source_id, runtime=self.runtime,
                        write_options=self.write_options(status_store=self.status_store),
                    )  # fmt: skip
            except AbortedError:
                raise
            except Exception as exc:
                yield failed_outcome(shown, candidate.source_id, exc, o.timer() - started)
                continue
            if o.progress is not None and result.indexed and not result.skipped:
                o.progress.embedded(result.indexed)
            yield written_outcome(shown, result, o.timer() - started)

    def pipelined(self, candidates: Sequence[Candidate]) -> Generator[FileOutcome, None, None]:
        """Through the ingestion pipeline; each document written here, in input order."""
        o = self.options
        started: deque[float] = deque()  # admission times: items come out in that order

        def parses(candidate: Candidate) -> bool:
            started.append(o.timer())
            if candidate.source_id is None:
                return False
            try:  # refused before any status is written, as replace_document does
                validate_id(candidate.source_id, field="source_id")
            except ValidationError:
                return False
            return True

        steps: PipelineSteps[Candidate] = PipelineSteps(
            prepare=self.prepare, embed=self.embed, parses=parses
        )
        workers = o.workers or 1
        items = run_pipeline(candidates, steps, workers=workers, abort=self.runtime.abort)
        batch = _Batch(self)
        try:
            for item in items:
                yield from batch.take(item, started.popleft())
            yield from batch.flush()
        finally:
            items.close()

    def write_options(self, *, status_store: IngestionStatusStore | None = None) -> WriteOptions:
        """The resolved write settings as the ``WriteOptions`` a use case takes."""
        w = self.write
        return WriteOptions(
            size=w.size, overlap=w.overlap, batch_size=w.batch_size,
            shared_generation=w.shared_generation, status_store=status_store,
        )  # fmt: skip

    def prepare(self, candidate: Candidate, abort: Abort) -> tuple[PreparedDocument, int]:
        check_abort(abort)
        sid = str(candidate.source_id)
        with progress_stage(self.options.progress, sid, "parsing"):
            loaded = self.loader.load(sid)
            prepared = prepare_document(
                loaded, source_id=sid, uri=sid, parser=self.parser, embedder=self.embedder,
                store=self.store, scope=self.scope,
                runtime=self._runtimes(abort), write_options=self._prepare_options,
            )  # fmt: skip
        return prepared, len(loaded.data)

    def embed(self, texts: list[str], abort: Abort, label: str) -> VectorMatrix:
        progress = self.options.progress
        with progress_stage(progress if label else None, label, "embedding"):
            return embed_batches(
                self.embedder, texts, batch_size=self.write.batch_size, abort=abort,
                telemetry=self.runtime.effective_telemetry,
                on_embedded=None if progress is None else progress.embedded,
            )  # fmt: skip

    def settle(self, item: PipelineItem[Candidate], started: float) -> FileOutcome:
        """The outcome of one document out of the pipeline: written alone, or its failure."""
        timer = self.options.timer
        candidate = item.item
        shown = candidate.source_id or str(candidate.path)
        sid = candidate.source_id
        if sid is None:
            return FileOutcome(
                shown, None, "failed", reason=candidate.reason, error=candidate.detail
            )
        if item.prepared is None and item.error is None:  # an id the domain refuses
            try:
                validate_id(sid, field="source_id")
            except ValidationError as exc:
                return failed_outcome(shown, sid, exc, timer() - started)
        if item.error is not None:  # its load, parse or embed failed: recorded as
            record_failed(  # replace_document would
                self.status_store, scope=self.scope, source_id=sid,
                size_bytes=item.size_bytes, error=item.error,
            )  # fmt: skip
            return failed_outcome(shown, sid, item.error, timer() - started)
        prepared = item.prepared
        assert prepared is not None
        with progress_stage(self.options.progress, prepared.source_id, "writing"):
            try:
                result = self.write_alone(item)
            except AbortedError:
                raise
            except Exception as exc:
                return failed_outcome(sid, sid, exc, timer() - started)
        return written_outcome(sid, result, timer() - started)

    def write_alone(self, item: PipelineItem[Candidate]) -> ReplaceResult:
        """One document by its own ``replace_prepared`` (its own transaction)."""
        prepared = item.prepared
        assert prepared is not None
        vectors: dict[str, tuple[str, Any]] | None = None
        if item.vectors is not None:
            vectors = {c.id: (c.text, item.vectors[i]) for i, c in enumerate(prepared.chunks)}
        return replace_prepared(
            prepared, size_bytes=item.size_bytes, embedder=self.embedder,
            store=self.store, scope=self.scope, vectors=vectors, runtime=self.runtime,
            write_options=self.write_options(status_store=self.status_store),
        )  # fmt: skip

    def batchable(self, item: PipelineItem[Candidate]) -> bool:
        """Whether ``item`` goes into a batch: a changed document with its vectors, no
        redactor (its vectors are of the stored text) and chunks ``replace_source`` accepts."""
        prepared = item.prepared
        if item.error is not None or prepared is None or prepared.unchanged:
            return False
        if item.vectors is None or self.runtime.redaction.active:
            return False
        try:
            _check_chunks(prepared.chunks, self.runtime.limits, source_id=prepared.source_id)
        except ValidationError:
            return False  # written alone, which reports it
        return True

    def write_batch(self, items: Sequence[PipelineItem[Candidate]]) -> list[ReplaceResult]:
        """Documents in one unit of work at one generation (``batch.write_batch``)."""
        rt = self.runtime
        batch = [
            BatchItem(p.source_id, p.chunks, [c.text for c in p.chunks], i.vectors, p.skip_key)
            for i in items
            if (p := i.prepared) is not None and i.vectors is not None
        ]
        generation, deleted = write_batch(
            batch, store=self.store, scope=self.scope, embedder=self.embedder,
            shared=self.write.shared_generation, limits=rt.limits,
            telemetry=rt.effective_telemetry, abort=rt.abort,
        )  # fmt: skip
        return [
            ReplaceResult(b.source_id, d, len(b.chunks), False, generation)
            for b, d in zip(batch, deleted, strict=True)
        ]

    def abandoned(self, items: Sequence[PipelineItem[Candidate]], exc: BaseException) -> None:
        """``failed`` for documents left unwritten by an abort (``replace_prepared`` records
        it), so none stays ``pending``."""
        for item in items:
            prepared = item.prepared
            assert prepared is not None
            record_failed(
                self.status_store, scope=self.scope, source_id=prepared.source_id,
                size_bytes=item.size_bytes, error=exc, redaction=self.runtime.redaction,
                clock=self.runtime.effective_clock,
            )  # fmt: skip

    def put_status(self, item: PipelineItem[Candidate], written: int | None) -> None:
        """``pending`` (``written`` ``None``) or ``indexed``, as ``replace_prepared`` records."""
        prepared = item.prepared
        assert prepared is not None
        total = len(prepared.chunks) if written is None else written
        put_status(
            self.status_store, scope=self.scope, source_id=prepared.source_id,
            state="pending" if written is None else "indexed",
            clock=self.runtime.effective_clock, size=item.size_bytes, total=total,
            indexed=0 if written is None else written,
        )  # fmt: skip


class _Batch:
    """The pipelined path's documents held for one batched write (``batch.write_batch``).

    Documents come in input order; a changed one joins the batch (``pending`` is recorded when
    the batch is written), any other is settled at once. Outcomes leave in input order: those after a held document wait
    for its batch. The batch is written when it holds ``limits.write_batch`` documents, when
    the next would pass ``limits.write_batch_chunks`` chunks or repeat a source id, and at the
    end; if that write fails, each of its documents is written alone (``write_batched``).
    """

    def __init__(self, run: _Ingest) -> None:
        self.run = run
        self.most, self.most_chunks = batch_bounds(run.runtime.limits)
        self.held: list[tuple[PipelineItem[Candidate], float]] = []  # to write
        self.queue: list[tuple[PipelineItem[Candidate], float] | FileOutcome] = []
        self.chunks = 0

    def take(
        self, item: PipelineItem[Candidate], started: float
    ) -> Generator[FileOutcome, None, None]:
        """Hold ``item`` for the batch, or settle it; yield what may leave now."""
        if not self.run.batchable(item):
            prepared = item.prepared
            if item.error is None and prepared is not None and not prepared.unchanged:
                yield from self.flush()  # written alone: after the documents before it
            outcome = self.run.settle(item, started)
            if not self.held:
                yield outcome
            else:
                self.queue.append(outcome)
            return
        prepared = item.prepared
        assert prepared is not None
        n = len(prepared.chunks)
        held_ids = {cast(PreparedDocument, h.prepared).source_id for h, _ in self.held}
        if self.held and (
            len(self.held) >= self.most
            or self.chunks + n > self.most_chunks
            or prepared.source_id in held_ids
        ):
            yield from self.flush()
        self.held.append((item, started))
        self.queue.append((item, started))
        self.chunks += n

    def flush(self) -> Generator[FileOutcome, None, None]:
        """Write the held documents, then yield every queued outcome in input order."""
        run, held = self.run, [h for h, _ in self.held]
        written: dict[int, ReplaceResult | Exception] = {}
        if held:
            first = cast(PreparedDocument, held[0].prepared).source_id
            label = first + (f" (+{len(held) - 1} more)" if len(held) > 1 else "")
            for item in held:  # recorded now: a run stopped before its batch changes nothing
                run.put_status(item, None)
            with progress_stage(run.options.progress, label, "writing"):
                results, batched = write_batched(
                    held, batch=run.write_batch, alone=run.write_alone, abandoned=run.abandoned
                )
            for item, result in zip(held, results, strict=True):
                written[id(item)] = result
                if batched and isinstance(result, ReplaceResult):
                    run.put_status(item, result.indexed)
        timer = run.options.timer
        for entry in self.queue:
            if isinstance(entry, FileOutcome):
                yield entry
                continue
            item, started = entry
            sid = cast(PreparedDocument, item.prepared).source_id
            result = written[id(item)]
            if isinstance(result, ReplaceResult):
                yield written_outcome(sid, result, timer() - started)
            else:
                yield failed_outcome(sid, sid, result, timer() - started)
        self.held, self.queue, self.chunks = [], [], 0


MARKDOWN_SUFFIXES = (".md", ".markdown")


@folds_keywords(write=("size", "overlap"))
def ingest_text(
    *,
    name: str,
    text: str,
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    embedder: Embedder,
    scope: Scope,
    source_id: str | None = None,
    runtime: Runtime | None = None,
    write_options: WriteOptions | None = None,
) -> ReplaceResult:
    """Chunk one document (Markdown by suffix) and replace its source atomically.

    The content hash makes re-ingesting an unchanged document a no-op (no embedding).
    ``write_options``: the chunk size and overlap (and the rest of a write's options; its
    ``status_store`` defaults to ``status_store``); ``size=`` and ``overlap=`` of before still
    work for one release, with a ``DeprecationWarning``.
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    options = check_write_options(write_options)
    if options.status_store is None:
        options = attrs.evolve(options, status_store=status_store)
    settings = options.settings(rt.limits)
    markdown = name.lower().endswith(MARKDOWN_SUFFIXES)
    sid = source_id or (Path(name).stem if markdown else name)
    chunker = chunk_markdown if markdown else chunk_text
    chunks = chunker(
        text, source_id=sid, size=settings.size, overlap=settings.overlap, limits=rt.limits
    )
    digest = hashlib.sha256(f"{settings.size}:{settings.overlap}:{text}".encode()).hexdigest()
    return replace_source(
        source_id=sid,
        chunks=chunks,
        embedder=embedder,
        store=store,
        scope=scope,
        content_hash=digest,
        runtime=rt,
        write_options=options,
    )


def ingest_limits(max_bytes: int, *, base: Limits | None = None) -> Limits:
    """``base`` (default ``DEFAULT_LIMITS``) with ``parse_bytes=max_bytes`` (checked against
    ``base.ceilings``); past the default 1 MiB, ``document_chars`` rises to ``max_bytes`` (up
    to its ceiling) and ``chunks_per_source`` to its ceiling, so such a document gets through
    the chunker, and ``binary_bytes`` (the file cap of PDF and DOCX) to at least
    ``max_bytes``."""
    base = DEFAULT_LIMITS if base is None else base
    base.ceilings.check("parse_bytes", max_bytes)
    if max_bytes <= DEFAULT_LIMITS.parse_bytes:
        return attrs.evolve(base, parse_bytes=max_bytes)
    chars = max(base.document_chars, min(max_bytes, base.ceilings.document_chars))
    return attrs.evolve(
        base,
        parse_bytes=max_bytes,
        binary_bytes=max(base.binary_bytes, max_bytes),
        document_chars=chars,
        chunks_per_source=base.ceilings.chunks_per_source,
    )
