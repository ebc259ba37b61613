"""One sync page's items prepared (load, parse, skip check) and embedded, optionally overlapped.

With ``workers`` 1 the items are loaded and parsed one after another on the calling thread,
then embedded, as ``sync_knowledge`` always did. With more, up to ``workers`` items are loaded
and parsed at once in a thread pool (at most ``2 x workers`` submitted ahead), and the chunks
of the items already prepared, in listing order, are embedded on one more thread in calls of
``batch_size x EMBED_CALL_BATCHES`` texts while later items still parse. Either way the result
is the same: the outcomes in listing order, and the vectors in the order of the texts.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import attrs
import numpy as np

from ragport.application._support import EMBED_CALL_BATCHES, EitherAbort, check_abort
from ragport.application._sync_state import is_retryable
from ragport.application.documents import PreparedDocument
from ragport.domain.errors import ValidationError
from ragport.domain.model import Grant
from ragport.domain.sync import Access
from ragport.ports.embedder import VectorMatrix
from ragport.ports.runtime import Abort
from ragport.ports.sync import Page, Upsert

Prepare = Callable[[Upsert, Abort], tuple[PreparedDocument, int]]
Embed = Callable[[list[str], Abort], VectorMatrix]


@attrs.define
class PageWork:
    """What one page's items came to, before its unit of work."""

    grants: list[Grant] = attrs.field(factory=list)
    withheld: list[str] = attrs.field(factory=list)
    failed: dict[str, tuple[str, str]] = attrs.field(factory=dict)  # id -> (error, reason)
    skipped: dict[str, tuple[int, int]] = attrs.field(factory=dict)  # id -> (bytes, chunks)
    changed: list[tuple[PreparedDocument, int]] = attrs.field(factory=list)
    retryable: list[str] = attrs.field(factory=list)
    texts: list[str] = attrs.field(factory=list)  # the changed items' chunk texts, in order
    vectors: VectorMatrix | None = None


# Allow-listed function shape (pyproject [tool.ruff.lint]): a use case with its public keyword surface; the write-options value of issue 42 narrows it.
def prepare_page(  # noqa: C901, PLR0915
    upserts: Mapping[str, Upsert],
    *,
    prepare: Prepare,
    embed: Embed,
    texts_of: Callable[[PreparedDocument], list[str]],
    error_of: Callable[[BaseException], tuple[str, str]],
    page_errors: tuple[type[BaseException], ...],
    batch_size: int,
    dimensions: int,
    abort: Abort | None,
    on_item: Callable[[str], None] | None = None,
    workers: int = 1,
) -> PageWork:
    """Steps 3 and 4 of ``sync_knowledge`` for one page's upserts (the last listing of each id).

    An item whose access is ``None`` is withheld; an item whose ``prepare`` raised anything but
    ``page_errors`` is that item's failure (``error_of`` gives its redacted error and reason);
    a ``page_errors`` exception (or an embed failure) raises out, after every thread stopped.
    ``on_item`` is called on the calling thread for each item, in listing order.
    """
    stopped = threading.Event()  # set when the page leaves, early or not
    stop = EitherAbort(stopped, abort)
    work = PageWork()
    step = batch_size * EMBED_CALL_BATCHES
    parse_pool = ThreadPoolExecutor(workers, "ragport-sync-parse") if workers > 1 else None
    embed_pool = ThreadPoolExecutor(1, "ragport-sync-embed") if workers > 1 else None
    calls: list[tuple[int, Future[VectorMatrix] | VectorMatrix]] = []  # (first row, answer)
    sent = 0  # texts handed to the embedder so far

    def send(until: int) -> None:
        nonlocal sent
        while sent < until:
            end = min(until, sent + step)
            batch = work.texts[sent:end]
            if embed_pool is not None:
                calls.append((sent, embed_pool.submit(embed, batch, stop)))
            else:
                calls.append((sent, embed(batch, stop)))
            sent = end

    def in_order() -> Iterator[tuple[str, Upsert, Future[tuple[PreparedDocument, int]] | None]]:
        """Every item in listing order; those with an ``Access`` come with their parse,
        submitted up to ``2 x workers`` ahead (the others are never parsed)."""
        assert parse_pool is not None
        parseable = deque(u for u in upserts.values() if isinstance(u.access, Access))
        ahead: deque[Future[tuple[PreparedDocument, int]]] = deque()
        for source_id, upsert in upserts.items():
            if not isinstance(upsert.access, Access):
                yield source_id, upsert, None
                continue
            while parseable and len(ahead) < 2 * workers:
                ahead.append(parse_pool.submit(prepare, parseable.popleft(), stop))
            yield source_id, upsert, ahead.popleft()

    try:
        items = in_order() if parse_pool is not None else ((s, u, None) for s, u in upserts.items())
        for source_id, upsert, future in items:
            check_abort(stop)
            if on_item is not None:
                on_item(source_id)
            access = upsert.access
            if access is None:
                work.withheld.append(source_id)
                continue
            if not isinstance(access, Access):
                raise ValidationError(
                    "an upsert's access must be an Access or None", field="access"
                )
            work.grants.append(Grant(source_id, access.principal_ids, access.group_ids))
            try:
                prepared, size = prepare(upsert, stop) if future is None else future.result()
            except page_errors:
                raise
            except Exception as exc:  # the item's own failure, whatever raised it
                work.failed[source_id] = error_of(exc)
                if is_retryable(exc):
                    work.retryable.append(source_id)
                continue
            if prepared.unchanged:
                work.skipped[source_id] = (size, prepared.stored)
                continue
            work.changed.append((prepared, size))
            work.texts.extend(texts_of(prepared))
            if embed_pool is not None and len(work.texts) - sent >= step:
                send(sent + (len(work.texts) - sent) // step * step)  # full calls only
        send(len(work.texts))
        out = np.empty((len(work.texts), dimensions), dtype=np.float32)
        for first, answer in calls:
            vectors = answer.result() if isinstance(answer, Future) else answer
            out[first : first + len(vectors)] = vectors
        check_abort(stop)
        work.vectors = out
        return work
    finally:
        stopped.set()  # parses and embed calls still running stop at their next check
        for pool in (parse_pool, embed_pool):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)


def classify_page(
    page: Page, sweep: Sequence[str]
) -> tuple[dict[str, Upsert], list[str], list[str]]:
    """Step 3's first half: the page's upserts by id (the last listing of an id wins), its
    deletions and the sweep, neither naming an upserted id (nor the sweep a deleted one)."""
    upserts: dict[str, Upsert] = {}
    for upsert in page.upserts:
        upserts[upsert.source_id] = upsert
    deletions = [d for d in dict.fromkeys(page.deletions) if d not in upserts]
    kept = [s for s in sweep if s not in upserts and s not in deletions]
    return upserts, deletions, kept
