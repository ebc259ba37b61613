"""One sync page's items through the ingestion pipeline, collected for the page's unit of work.

``prepare_page`` hands the page's upserts (in listing order) to ``run_pipeline``
(``ragport.application.pipeline``): with ``workers`` 1 each item is loaded, skip-checked and
parsed on the calling thread and the chunks are embedded there too; with more, up to
``workers`` items are prepared at once on worker threads while one more thread embeds the
chunks of the items already prepared. Either way the result is the same: the outcomes in
listing order, and the vectors in the order of the texts. Nothing touches the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs
import numpy as np

from ragport.application._support import check_abort
from ragport.application._sync_state import is_retryable
from ragport.application.documents import PreparedDocument
from ragport.application.pipeline import PipelineSteps, run_pipeline
from ragport.domain.errors import (
    AbortedError,
    CapabilityError,
    EmbedderError,
    EmbedderMismatchError,
    StoreError,
    ValidationError,
)
from ragport.domain.model import Grant
from ragport.domain.sync import Access
from ragport.ports.embedder import VectorMatrix
from ragport.ports.runtime import Abort
from ragport.ports.sync import Page, Upsert

# What sinks the page rather than one item (nothing committed, the page replays): the caller's
# abort, the store, the embedder. Any other exception from loading, parsing or chunking one item
# (a parser's RecursionError or MemoryError included) is that item's failure.
PAGE_ERRORS = (AbortedError, StoreError, EmbedderError, EmbedderMismatchError, CapabilityError)


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


@attrs.frozen(kw_only=True)
class PageRun:
    """How a page's items go through the pipeline: its ``steps`` (``prepare``, ``embed``,
    ``texts_of``), ``error_of`` (an item's redacted error and reason), the embedder's
    ``dimensions``, texts per embed call, parse threads, the caller's ``abort`` and
    ``on_item`` (called on the calling thread for each item, in listing order)."""

    steps: PipelineSteps[Upsert]
    error_of: Callable[[BaseException], tuple[str, str]]
    dimensions: int
    call_size: int
    workers: int = 1
    abort: Abort | None = None
    on_item: Callable[[str], None] | None = None


def prepare_page(upserts: Mapping[str, Upsert], run: PageRun) -> PageWork:
    """Steps 3 and 4 of ``sync_knowledge`` for one page's upserts (the last listing of each id).

    An item whose access is ``None`` is withheld (never loaded); an item whose ``prepare``
    raised anything but ``PAGE_ERRORS`` is that item's failure; a ``PAGE_ERRORS`` exception
    or an embed failure raises out, after every thread stopped.
    """
    work = PageWork()
    vectors: list[VectorMatrix] = []
    steps = attrs.evolve(run.steps, parses=lambda upsert: isinstance(upsert.access, Access))
    items = run_pipeline(
        list(upserts.values()), steps, workers=run.workers, abort=run.abort,
        call_size=run.call_size, retry_alone=False,
    )  # fmt: skip
    try:
        for item in items:
            upsert = item.item
            source_id = upsert.source_id
            check_abort(run.abort)
            if run.on_item is not None:
                run.on_item(source_id)
            access = upsert.access
            if access is None:
                work.withheld.append(source_id)
                continue
            if not isinstance(access, Access):
                raise ValidationError(
                    "an upsert's access must be an Access or None", field="access"
                )
            work.grants.append(Grant(source_id, access.principal_ids, access.group_ids))
            if item.error is not None:
                if isinstance(item.error, PAGE_ERRORS):
                    raise item.error
                work.failed[source_id] = run.error_of(item.error)  # the item's own failure
                if is_retryable(item.error):
                    work.retryable.append(source_id)
                continue
            prepared = item.prepared
            assert prepared is not None
            if prepared.unchanged:
                work.skipped[source_id] = (item.size_bytes, prepared.stored)
                continue
            work.changed.append((prepared, item.size_bytes))
            work.texts.extend(item.texts)
            if item.vectors is not None:
                vectors.append(item.vectors)
    finally:
        items.close()
    check_abort(run.abort)
    work.vectors = (
        np.concatenate(vectors) if vectors else np.empty((0, run.dimensions), dtype=np.float32)
    )
    return work


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
