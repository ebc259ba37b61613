"""The ingestion pipeline: items loaded and parsed on worker threads, their chunks embedded on
one more thread, handed back in input order with their vectors.

It serves both writers of documents: ``ingest_files`` (each item written by its own
``replace_prepared`` as it comes out) and ``sync_knowledge`` (a page's items collected, then
written by one unit of work). The pipeline writes nothing; it takes its steps as callables
(``PipelineSteps``), so it needs no adapter.

1. Admit items in input order while the bounds allow: at most ``2 x workers`` items are
   loading and parsing at once, and no item is admitted while ``call_size`` chunks or more
   wait for the embedder (one item larger than that is held alone): memory does not grow
   with the input.
2. ``prepare`` each admitted item on a parse thread (``workers`` of them; with ``workers`` 1
   on the calling thread, no thread at all). An item ``parses`` refuses is never prepared
   and comes out as it is. A prepare failure (anything but ``AbortedError``) is that item's.
3. One embed call at a time, on the group ``_next_group`` packs: consecutive items still to
   embed, up to ``call_size`` texts (a larger item alone). Groups depend on the input order
   and each item's chunk count only, never on timing, so every run makes the same calls.
4. Hand items back in input order as soon as the head is ready. A failed group call is, with
   ``retry_alone``, retried one item per call, so an item the embedder refuses fails alone;
   without it the failure raises out (a sync page sinks whole).

Leaving the generator, early or not (an exception, ``close()``, Ctrl-C), stops every thread
before it returns: the parse threads and the embed call check the abort at their next step.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from typing import Any, Generic, TypeVar, cast

import attrs

from ragport.application._support import EMBED_CALL_BATCHES, EitherAbort, check_abort
from ragport.application.documents import PreparedDocument
from ragport.application.runtime import Runtime
from ragport.application.write_options import WriteOptions
from ragport.domain.errors import AbortedError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS
from ragport.ports.embedder import VectorMatrix
from ragport.ports.runtime import Abort

__all__ = [
    "MAX_WORKERS",
    "PIPELINE_CALL",
    "PipelineItem",
    "PipelineSteps",
    "RunRuntime",
    "check_pipeline_write",
    "check_workers",
    "run_pipeline",
]

T = TypeVar("T")


class RunRuntime:
    """A run's ``Runtime`` with the abort signal its ``prepare`` step is handed, built once
    per signal: the pipeline hands every item of a run the same one, and building a
    ``Runtime`` per file re-runs its converters (the abort's protocol check among them,
    about 20 µs a file). Safe across parse threads: a race builds an equal value twice."""

    __slots__ = ("_base", "_last")

    def __init__(self, base: Runtime) -> None:
        self._base = base
        self._last: tuple[object, Runtime] | None = None

    def __call__(self, abort: Abort | None) -> Runtime:
        last = self._last
        if last is not None and last[0] is abort:
            return last[1]
        runtime = attrs.evolve(self._base, abort=abort)
        self._last = (abort, runtime)
        return runtime


# An embed call groups the chunks of consecutive items up to this many texts (one
# embed_batches call: embed_batch x EMBED_CALL_BATCHES); a larger item is embedded alone.
PIPELINE_CALL = DEFAULT_LIMITS.embed_batch * EMBED_CALL_BATCHES
MAX_WORKERS = 32


def check_workers(workers: object) -> int:
    """``workers`` as given when it is an integer in 1..32, else ``ValidationError``."""
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise ValidationError(f"workers must be an integer in 1..{MAX_WORKERS}", field="workers")
    return workers


def check_pipeline_write(write: object) -> WriteOptions:
    """``write`` when it is a ``WriteOptions`` the pipeline's writers can honour: they always
    publish (``advance_generation``) and skip by the document's skip key (``skip_if_unchanged``
    left at ``None``); else ``ValidationError(field="write")``."""
    if not isinstance(write, WriteOptions):
        raise ValidationError("write must be a WriteOptions", field="write")
    if not write.advance_generation or write.skip_if_unchanged is not None:
        raise ValidationError(
            "ingest and sync always publish and skip unchanged documents by their skip key: "
            "leave advance_generation and skip_if_unchanged at their defaults",
            field="write",
        )
    return write


@attrs.frozen
class PipelineSteps(Generic[T]):
    """What the pipeline does to an item.

    ``prepare(item, abort)``: load, skip-check, parse and chunk (a parse thread), giving the
    prepared document and its size in bytes. ``embed(texts, abort, label)``: one embed call
    (the embed thread); ``label`` names the group (its first item's source id and
    ``(+N more)``), empty for a lone retry. ``texts_of(prepared)``: the texts to embed
    (the chunks' own by default; sync redacts them). ``parses(item)``: whether the item is
    prepared at all (default: every item). ``threads``: the threads' name prefix.
    """

    prepare: Callable[[T, Abort], tuple[PreparedDocument, int]]
    embed: Callable[[list[str], Abort, str], VectorMatrix]
    texts_of: Callable[[PreparedDocument], list[str]] | None = None
    parses: Callable[[T], bool] | None = None
    threads: str = "ragport"


@attrs.define
class PipelineItem(Generic[T]):
    """One item from its admission to its hand-back.

    Handed back: ``prepared`` (``None`` when not parsed or failed), ``size_bytes``,
    ``error`` (its prepare or embed failure), ``texts`` (what was embedded, in chunk order)
    and ``vectors`` (their rows; ``None`` when unchanged, failed or not parsed).
    """

    item: T
    prepared: PreparedDocument | None = None
    size_bytes: int = 0
    error: BaseException | None = None
    texts: list[str] = attrs.field(factory=list)
    vectors: VectorMatrix | None = None
    # in flight
    prepare_future: Future[tuple[PreparedDocument, int]] | None = None
    embed_future: Future[VectorMatrix] | None = None
    rows: slice | None = None  # this item's rows in its embed call's answer
    solo: bool = False  # embedded alone after its group's call failed


class _Inline(Executor):
    """An executor that runs each call at once on the calling thread (``workers`` 1)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future


def run_pipeline(
    items: Sequence[T],
    steps: PipelineSteps[T],
    *,
    workers: int,
    abort: Abort | None,
    call_size: int | None = None,
    retry_alone: bool = True,
) -> Generator[PipelineItem[T], None, None]:
    """Every item of ``items``, in input order, prepared and embedded (see the module).

    ``call_size``: texts per embed call (default ``PIPELINE_CALL``). ``retry_alone``: a failed
    group call is retried one item per call and a failure is the item's own; else it raises.
    ``AbortedError`` (``abort`` set, or raised by a step) always raises.
    """
    run = _Run(steps, workers=workers, call_size=call_size or PIPELINE_CALL, abort=abort)
    return run.items(items, retry_alone=retry_alone)


class _Run(Generic[T]):
    def __init__(
        self, steps: PipelineSteps[T], *, workers: int, call_size: int, abort: Abort | None
    ) -> None:
        self.steps = steps
        self.workers = workers
        self.call_size = call_size
        self.stopped = threading.Event()  # set when the generator exits, early or not
        self.stop = EitherAbort(self.stopped, abort)
        self.parse_pool: Executor = _Inline()
        self.embed_pool: Executor = _Inline()
        if workers > 1:
            self.parse_pool = ThreadPoolExecutor(workers, f"{steps.threads}-parse")
            self.embed_pool = ThreadPoolExecutor(1, f"{steps.threads}-embed")

    def texts_of(self, prepared: PreparedDocument) -> list[str]:
        if self.steps.texts_of is None:
            return [c.text for c in prepared.chunks]
        return self.steps.texts_of(prepared)

    def embed(self, group: list[PipelineItem[T]], label: str) -> Future[VectorMatrix]:
        texts: list[str] = []
        for slot in group:
            slot.rows = slice(len(texts), len(texts) + len(slot.texts))
            texts.extend(slot.texts)
        future = self.embed_pool.submit(self.steps.embed, texts, self.stop, label)
        for slot in group:
            slot.embed_future = future
        return future

    def items(
        self, items: Sequence[T], *, retry_alone: bool
    ) -> Generator[PipelineItem[T], None, None]:
        queue = deque(items)
        slots: deque[PipelineItem[T]] = deque()
        in_parse = 0
        waiting = 0  # chunks of parsed items not yet embedded
        running: Future[VectorMatrix] | None = None
        parses = self.steps.parses
        try:
            while queue or slots:
                check_abort(self.stop)
                # 1-2. admit items while the bounds allow
                while queue and in_parse < 2 * self.workers and waiting < self.call_size:
                    slot = PipelineItem(queue.popleft())
                    slots.append(slot)
                    if parses is None or parses(slot.item):
                        slot.prepare_future = self.parse_pool.submit(
                            self.steps.prepare, slot.item, self.stop
                        )
                        in_parse += 1
                # harvest finished parses (any order), counting their chunks as waiting
                for slot in slots:
                    if slot.prepare_future is not None and slot.prepare_future.done():
                        future, slot.prepare_future = slot.prepare_future, None
                        in_parse -= 1
                        waiting += self._harvest(slot, future)
                # 3. when the embedder is idle, hand it the next group
                if running is None or running.done():
                    group, texts = _next_group(slots, more=bool(queue), limit=self.call_size)
                    if group:
                        running = self.embed(group, _label(group))
                        waiting -= texts
                # 4. hand back the items at the head that are ready, in input order
                handed = False
                while slots and self._ready(slots[0], retry_alone=retry_alone):
                    handed = True
                    yield slots.popleft()
                if handed:
                    continue
                # nothing ready: wait for a parse or the embed call to finish
                pending: list[Future[Any]] = [
                    s.prepare_future for s in slots if s.prepare_future is not None
                ]
                pending.extend(
                    {
                        s.embed_future
                        for s in slots
                        if s.embed_future is not None and not s.embed_future.done()
                    }
                )
                if pending:
                    wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        finally:
            self.stopped.set()  # parsers and the embedder stop at their next check
            self.parse_pool.shutdown(wait=True, cancel_futures=True)
            self.embed_pool.shutdown(wait=True, cancel_futures=True)

    def _harvest(self, slot: PipelineItem[T], future: Future[tuple[PreparedDocument, int]]) -> int:
        """Take a finished parse into ``slot``; the chunks it adds to the embedder's wait."""
        try:
            slot.prepared, slot.size_bytes = future.result()
        except AbortedError:
            raise
        except Exception as exc:
            slot.error = exc
            return 0
        if slot.prepared.unchanged:
            return 0
        slot.texts = self.texts_of(slot.prepared)
        return len(slot.texts)

    def _ready(self, slot: PipelineItem[T], *, retry_alone: bool) -> bool:
        """Whether the head item can be handed back (its vectors taken from its call's answer);
        a failed group call is retried alone here (then the item waits for it)."""
        if slot.prepare_future is not None:
            return False
        prepared = slot.prepared
        if prepared is None or slot.error is not None or prepared.unchanged:
            return True  # not parsed, failed or unchanged: nothing to embed
        if not slot.texts:
            return True  # no chunk: nothing to embed
        future = slot.embed_future
        if future is None or not future.done():
            return False
        exc = future.exception()
        if exc is None:
            slot.vectors = future.result()[cast(slice, slot.rows)]
            return True
        if isinstance(exc, AbortedError) or not retry_alone:
            raise exc
        if slot.solo:
            slot.error = exc
            return True
        # the group's call failed: this item alone says whether it is its own failure
        slot.solo = True
        self.embed([slot], "")
        return False


def _label(group: list[PipelineItem[Any]]) -> str:
    ids = [cast(PreparedDocument, s.prepared).source_id for s in group]
    return ids[0] + (f" (+{len(ids) - 1} more)" if len(ids) > 1 else "")


def _next_group(
    slots: deque[PipelineItem[T]], *, more: bool, limit: int
) -> tuple[list[PipelineItem[T]], int]:
    """The next embed call's items and their text count, or ``([], 0)`` to wait.

    Groups are a function of the input order and each item's chunk count only, never of
    timing: consecutive items still to embed (failed, unchanged and unparsed ones skipped)
    are packed until the next would pass ``limit`` texts; an item larger than that is a
    group alone. A group that could still grow waits while an item in it or after it is
    parsing or still queued (``more``); the last group goes when nothing follows.
    """
    group: list[PipelineItem[T]] = []
    texts = 0
    for slot in slots:
        if slot.prepare_future is not None:
            return [], 0  # the group is not settled until this item's chunk count is known
        if slot.error is not None or slot.embed_future is not None or not slot.texts:
            continue
        if group and texts + len(slot.texts) > limit:
            return group, texts
        group.append(slot)
        texts += len(slot.texts)
        if texts >= limit:
            return group, texts
    if more:
        return [], 0
    return group, texts
