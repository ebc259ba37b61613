"""The pipelined ingest behind ``ingest_files(workers > 1)``: files loaded and parsed in a
thread pool, their chunks embedded by one thread in groups of consecutive files, each file
written by its own ``replace_prepared`` in input order.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, cast

import attrs

from ragport.application._support import (
    EMBED_CALL_BATCHES,
    NOOP_TELEMETRY,
    EitherAbort,
    check_abort,
    embed_batches,
)
from ragport.application.documents import (
    PreparedDocument,
    prepare_document,
    record_failed,
    replace_prepared,
)
from ragport.application.runtime import Runtime
from ragport.application.shared_generation import SharedGeneration
from ragport.bootstrap.ingest import (
    Candidate,
    FileOutcome,
    IngestProgress,
    _failure,
    _stage,
    _success,
)
from ragport.domain.errors import AbortedError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, Limits
from ragport.domain.model import Scope
from ragport.domain.values import validate_id
from ragport.ports.documents import DocumentLoader, Parser
from ragport.ports.embedder import Embedder, VectorMatrix
from ragport.ports.runtime import Abort
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore


@attrs.define
class _Slot:
    """One file in flight in the pipeline, from its parse to its outcome."""

    candidate: Candidate
    started: float
    prepare: Future[tuple[PreparedDocument, int]] | None = None
    prepared: PreparedDocument | None = None
    size_bytes: int = 0
    error: BaseException | None = None
    embed: Future[VectorMatrix] | None = None
    rows: slice | None = None  # this file's rows in its embed call's answer
    solo: bool = False  # embedded alone after its group's call failed
    recorded: bool = True  # a failure gets a status row (not when its id is refused)


# A call groups the chunks of consecutive files up to this many texts (one embed_batches
# call: embed_batch x EMBED_CALL_BATCHES); a larger file is embedded alone, in such calls.
PIPELINE_CALL = DEFAULT_LIMITS.embed_batch * EMBED_CALL_BATCHES


# Allow-listed function shape (pyproject [tool.ruff.lint]): a use case with its public keyword surface; the write-options value of issue 42 narrows it.
def pipeline(  # noqa: C901, PLR0913, PLR0915
    candidates: Sequence[Candidate],
    *,
    loader: DocumentLoader,
    parsers: Callable[[str], Parser],
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    embedder: Embedder,
    scope: Scope,
    size: int,
    overlap: int,
    limits: Limits,
    tick: Callable[[], float],
    workers: int,
    abort: Abort | None,
    shared_generation: SharedGeneration | None = None,
    progress: IngestProgress | None = None,
) -> Iterator[FileOutcome]:
    """Load and parse in ``workers`` threads, embed in one thread, write here, in input order.

    Bounds (so memory does not grow with the folder): at most ``2 x workers`` files are
    submitted for loading and parsing and not yet handed on; parsed files wait as chunks, and
    no file is submitted while ``PIPELINE_CALL`` chunks or more wait (one file larger than
    that is held alone, as the serial path would); one embed call runs at a time, on the
    group ``_next_group`` packs (the same calls whatever the timing). Only the
    embed thread calls the embedder. A failed group call is retried one file per call, so
    a file the embedder refuses fails alone. Each file is written by ``replace_prepared``
    (its vectors through ``replace_source``'s reuse path: every validation kept) by this
    generator only, in input order. ``progress`` hears when each stage starts and ends: each
    file's parse (in the parse threads), each embed call (the group's first file, with how
    many more) and its chunks, each write.
    """
    stopped = threading.Event()  # set when the generator exits, early or not
    stop = EitherAbort(stopped, abort)
    telemetry = NOOP_TELEMETRY
    parse_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ragport-parse")
    embed_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragport-embed")
    queue = deque(candidates)
    slots: deque[_Slot] = deque()
    in_parse = 0
    waiting_chunks = 0  # chunks of parsed files not yet embedded
    running: Future[VectorMatrix] | None = None

    def prepare(candidate: Candidate) -> tuple[PreparedDocument, int]:
        check_abort(stop)
        sid = cast(str, candidate.source_id)
        with _stage(progress, sid, "parsing"):
            loaded = loader.load(sid)
            prepared = prepare_document(
                loaded, source_id=sid, uri=sid, parser=parsers, embedder=embedder, store=store,
                scope=scope, size=size, overlap=overlap, limits=limits, abort=stop,
            )  # fmt: skip
        return prepared, len(loaded.data)

    def embed(texts: list[str], label: str = "") -> VectorMatrix:
        with _stage(progress if label else None, label, "embedding"):
            return embed_batches(
                embedder, texts, batch_size=DEFAULT_LIMITS.embed_batch, abort=stop,
                telemetry=telemetry, on_embedded=None if progress is None else progress.embedded,
            )  # fmt: skip

    def submit_embed(group: list[_Slot]) -> Future[VectorMatrix]:
        texts: list[str] = []
        for slot in group:
            chunks = cast(PreparedDocument, slot.prepared).chunks
            slot.rows = slice(len(texts), len(texts) + len(chunks))
            texts.extend(c.text for c in chunks)
        ids = [cast(PreparedDocument, s.prepared).source_id for s in group]
        label = ids[0] + (f" (+{len(ids) - 1} more)" if len(ids) > 1 else "")
        future = embed_pool.submit(embed, texts, label)
        for slot in group:
            slot.embed = future
        return future

    try:
        while queue or slots:
            check_abort(stop)
            # 1. admit files while the bounds allow
            while queue and in_parse < 2 * workers and waiting_chunks < PIPELINE_CALL:
                candidate = queue.popleft()
                slot = _Slot(candidate, tick())
                slots.append(slot)
                if candidate.source_id is None:
                    continue
                try:  # refused before any status is written, as replace_document does
                    validate_id(candidate.source_id, field="source_id")
                except ValidationError as exc:
                    slot.error, slot.recorded = exc, False
                    continue
                slot.prepare = parse_pool.submit(prepare, candidate)
                in_parse += 1
            # 2. harvest finished parses (any order), counting their chunks as waiting
            for slot in slots:
                if slot.prepare is not None and slot.prepare.done():
                    future, slot.prepare = slot.prepare, None
                    in_parse -= 1
                    try:
                        slot.prepared, slot.size_bytes = future.result()
                    except AbortedError:
                        raise
                    except Exception as exc:
                        slot.error = exc
                        continue
                    if not slot.prepared.unchanged:
                        waiting_chunks += len(slot.prepared.chunks)
            # 3. when the embedder is idle, hand it the next group of parsed files
            if running is None or running.done():
                group, texts = _next_group(slots, more=bool(queue))
                if group:
                    running = submit_embed(group)
                    waiting_chunks -= texts
            # 4. write (and yield) the files at the head that are ready, in input order
            wrote = False
            while slots:
                head = slots[0]
                if head.prepare is not None:
                    break
                outcome = _settle(
                    head, tick, submit_solo=lambda s: _solo(s, embed_pool, embed),
                    status_store=status_store, scope=scope,
                )  # fmt: skip
                if outcome is None:
                    break
                slots.popleft()
                wrote = True
                if outcome is not _WRITE:
                    yield cast(FileOutcome, outcome)
                    continue
                with _stage(progress, cast(PreparedDocument, head.prepared).source_id, "writing"):
                    written = _write(
                        head, store=store, status_store=status_store, embedder=embedder,
                        scope=scope, limits=limits, tick=tick, stop=stop,
                        shared_generation=shared_generation,
                    )  # fmt: skip
                yield written
            if wrote:
                continue
            # 5. nothing to write yet: wait for a parse or the embed call to finish
            pending: list[Future[Any]] = [s.prepare for s in slots if s.prepare is not None]
            pending.extend({s.embed for s in slots if s.embed is not None and not s.embed.done()})
            if pending:
                wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
    finally:
        stopped.set()  # parsers and the embedder stop at their next check
        parse_pool.shutdown(wait=True, cancel_futures=True)
        embed_pool.shutdown(wait=True, cancel_futures=True)


_WRITE = object()


def _next_group(slots: deque[_Slot], *, more: bool) -> tuple[list[_Slot], int]:
    """The next embed call's files and their chunk count, or ``([], 0)`` to wait.

    Groups are a function of the input order and each file's chunk count only, never of
    timing: consecutive files still to embed (failed and unchanged ones skipped) are packed
    until the next would pass ``PIPELINE_CALL`` texts; a file larger than that is a group
    alone. A group that could still grow waits while a file in it or after it is parsing
    (``slot.prepare``) or still queued (``more``); the last group goes when nothing follows.
    """
    group: list[_Slot] = []
    texts = 0
    for slot in slots:
        if slot.prepare is not None:
            return [], 0  # the group is not settled until this file's chunk count is known
        if slot.error is not None or slot.embed is not None:
            continue
        prepared = slot.prepared
        if prepared is None or prepared.unchanged:
            continue
        if group and texts + len(prepared.chunks) > PIPELINE_CALL:
            return group, texts
        group.append(slot)
        texts += len(prepared.chunks)
        if texts >= PIPELINE_CALL:
            return group, texts
    if more:
        return [], 0
    return group, texts


def _solo(
    slot: _Slot, pool: ThreadPoolExecutor, embed: Callable[[list[str]], VectorMatrix]
) -> None:
    chunks = cast(PreparedDocument, slot.prepared).chunks
    slot.rows = slice(0, len(chunks))
    slot.solo = True
    slot.embed = pool.submit(embed, [c.text for c in chunks])


def _settle(
    slot: _Slot,
    tick: Callable[[], float],
    *,
    submit_solo: Callable[[_Slot], None],
    status_store: IngestionStatusStore | None,
    scope: Scope,
) -> object | None:
    """The head file's outcome when it has one without writing, ``_WRITE`` when it is ready
    to write, ``None`` while it waits (for its embed call, or a solo retry just submitted)."""
    candidate = slot.candidate
    shown = candidate.source_id or str(candidate.path)
    if candidate.source_id is None:
        return FileOutcome(shown, None, "failed", reason=candidate.reason, error=candidate.detail)
    if slot.error is not None:  # its load or parse failed: recorded as replace_document would
        if not slot.recorded:
            return _failure(shown, candidate.source_id, slot.error, tick() - slot.started)
        record_failed(
            status_store, scope=scope, source_id=candidate.source_id,
            size_bytes=slot.size_bytes, error=slot.error,
        )  # fmt: skip
        return _failure(shown, candidate.source_id, slot.error, tick() - slot.started)
    prepared = slot.prepared
    if prepared is None:
        return None
    if prepared.unchanged:
        return _WRITE
    if slot.embed is None or not slot.embed.done():
        return None
    exc = slot.embed.exception()
    if exc is None:
        return _WRITE
    if isinstance(exc, AbortedError):
        raise exc
    if not slot.solo:
        submit_solo(slot)  # the group's call failed: this file alone says whether it is its own
        return None
    record_failed(
        status_store, scope=scope, source_id=candidate.source_id,
        size_bytes=slot.size_bytes, error=exc,
    )  # fmt: skip
    return _failure(shown, candidate.source_id, exc, tick() - slot.started)


def _write(
    slot: _Slot,
    *,
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    embedder: Embedder,
    scope: Scope,
    limits: Limits,
    tick: Callable[[], float],
    stop: Abort,
    shared_generation: SharedGeneration | None = None,
) -> FileOutcome:
    """Write one parsed and embedded file (its own transaction) and say what happened."""
    prepared = cast(PreparedDocument, slot.prepared)
    sid = prepared.source_id
    vectors: dict[str, tuple[str, Any]] | None = None
    if slot.embed is not None and slot.rows is not None:
        answer = slot.embed.result()[slot.rows]
        vectors = {c.id: (c.text, answer[i]) for i, c in enumerate(prepared.chunks)}
    try:
        result = replace_prepared(
            prepared, size_bytes=slot.size_bytes, embedder=embedder, store=store, scope=scope,
            status_store=status_store, vectors=vectors,
            runtime=Runtime(limits=limits, abort=stop), shared_generation=shared_generation,
        )  # fmt: skip
    except AbortedError:
        raise
    except Exception as exc:
        return _failure(sid, sid, exc, tick() - slot.started)
    return _success(sid, result, tick() - slot.started)
