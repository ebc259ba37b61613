"""Move a scope between content snapshots: publish staged writes, roll back, compact.

rollback_generation:
1. Validate ``to``; refuse stores without transactions and generations.
2. In one unit of work: refuse ``to`` above the pointer (rows above it are gone after a
   rollback, so there is no roll-forward) or below the compaction floor (those snapshots
   were purged); discard rows written above ``to``; restore rows retired above ``to``; set
   pointer and counter to ``to``; commit.
3. With a ``status_store``: correct the ingestion status of every source whose visible rows
   the rollback changed. A source with no chunk rows left at ``to`` loses its status row; one
   shown at an older version (or brought back) gets ``indexed``, freshness ``stale``, the
   chunk count it has at ``to`` and ``bytes=0`` (unknown). The changed sources come from the
   store's generation history when it has one (and it covers every generation above ``to``
   in full); otherwise every source with a status row is compared before and after, and a
   source brought back that had no status row gets none.

compact: purge rows retired more than ``keep`` generations ago (``retired_generation <
pointer - keep``), so rollback to any generation ``>= pointer - keep - 1`` still works, and
raise the floor to that generation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from ragport.application._support import (
    SYSTEM_CLOCK,
    check_abort,
    require_scope,
    require_transactions,
)
from ragport.application.deprecation import folds_keywords
from ragport.application.results import CompactResult, RollbackResult
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.domain.errors import ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.domain.model import Record, Scope
from ragport.domain.status import IngestionStatus
from ragport.ports.history import MAX_HISTORY, MAX_HISTORY_IDS, SupportsGenerationHistory
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore, supports

__all__ = ["compact", "publish_generation", "rollback_generation"]


def _from_history(store: ChunkStore, scope: Scope, to: int) -> tuple[int, set[str]] | None:
    """``(pointer, sources written or retired above to)`` from the store's history, or
    ``None`` when it has none or cannot list every generation and source in full."""
    if not supports(store, "generation_history"):
        return None
    pointer = store.current_generation(scope)
    if pointer - to > MAX_HISTORY:
        return None
    if pointer <= to:
        return pointer, set()
    history = cast(SupportsGenerationHistory, store).generation_history(
        scope, limit=pointer - to, max_ids=MAX_HISTORY_IDS
    )
    changed: set[str] = set()
    for change in history:
        if change.generation <= to:
            continue
        if (
            len(change.written) < change.sources_written
            or len(change.retired) < change.sources_retired
        ):
            return None
        changed.update(change.written, change.retired)
    return pointer, changed


def _status_ids(status_store: IngestionStatusStore, scope: Scope) -> set[str]:
    """Every source id with a status row in ``scope``."""
    ids: set[str] = set()
    cursor: str | None = None
    while True:
        page = status_store.list_page(scope, limit=DEFAULT_LIMITS.status_page, cursor=cursor)
        ids.update(i.source_id for i in page.items if i.scope == scope)
        if page.cursor is None:
            return ids
        cursor = page.cursor


def _version(records: Sequence[Record]) -> frozenset[tuple[str, int]]:
    return frozenset((r.id, r.generation) for r in records)


@folds_keywords(runtime=("clock",))
def rollback_generation(
    *,
    store: ChunkStore,
    scope: Scope,
    to: int,
    status_store: IngestionStatusStore | None = None,
    runtime: Runtime | None = None,
) -> RollbackResult:
    """Restore snapshot ``to`` of ``scope``: content only (grants and tombstones stay), and,
    with ``status_store``, the ingestion status of the sources whose rows it changed (dated by
    ``runtime``'s clock; ``clock=`` still works for one release, deprecated). ``runtime.abort``
    is checked before anything is written."""
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    clock = rt.clock
    check_abort(rt.abort)
    scope = require_scope(scope)
    if isinstance(to, bool) or not isinstance(to, int) or to < 0:
        raise ValidationError("to must be a non-negative integer", field="to")
    require_transactions(store, "rollback_generation")
    seen = _from_history(store, scope, to) if status_store is not None else None
    changed: dict[str, list[Record]] = {}
    with store.unit_of_work(scope) as uow:
        pointer = uow.generations.current()
        if to > pointer:
            raise ValidationError(
                f"cannot roll forward: generation {to} is above the current {pointer}", field="to"
            )
        floor = uow.generations.floor()
        if to < floor:
            raise ValidationError(
                f"generation {to} was compacted away; the oldest restorable is {floor}",
                field="to",
                limit="compact_keep",
            )
        candidates: set[str] = set()
        if status_store is not None:
            if seen is not None:
                candidates = set(seen[1])
            if seen is None or seen[0] != pointer:  # no history, or a write came in between
                candidates |= _status_ids(status_store, scope)
        before = {s: _version(uow.records.list_by_source(s)) for s in sorted(candidates)}
        discarded = uow.records.discard_above(to)
        restored = uow.records.restore_above(to)
        uow.generations.reset(to)
        for source_id, version in before.items():
            now = list(uow.records.list_by_source(source_id))
            if _version(now) != version:
                changed[source_id] = now
        uow.commit()
    if status_store is not None:
        clk = clock or SYSTEM_CLOCK
        for source_id, now in changed.items():
            chunks = sum(1 for r in now if r.kind == "chunk")
            if not chunks:
                status_store.delete(scope, source_id)
                continue
            status_store.put(
                IngestionStatus(
                    scope=scope,
                    source_id=source_id,
                    state="indexed",
                    chunks_total=chunks,
                    chunks_indexed=chunks,
                    updated_at=clk.now(),
                    freshness="stale",
                )
            )
    return RollbackResult(generation=to, discarded=discarded, restored=restored)


def compact(
    *,
    store: ChunkStore,
    scope: Scope,
    keep: int = DEFAULT_LIMITS.compact_keep,
    runtime: Runtime | None = None,
) -> CompactResult:
    """Purge retired rows no rollback within ``keep`` generations needs (``runtime.abort`` is
    checked before anything is written)."""
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    check_abort(rt.abort)
    scope = require_scope(scope)
    check_limit("compact_keep", keep)
    require_transactions(store, "compact")
    with store.unit_of_work(scope) as uow:
        through = uow.generations.current() - keep - 1
        if through <= uow.generations.floor():
            return CompactResult(purged=0, floor=uow.generations.floor())
        purged = uow.records.purge_retired(through)
        uow.generations.raise_floor(through)
        uow.commit()
    return CompactResult(purged=purged, floor=through)


def publish_generation(*, store: ChunkStore, scope: Scope, runtime: Runtime | None = None) -> int:
    """Make writes staged with ``advance_generation=False`` visible at once; returns the pointer
    (``runtime.abort`` is checked first)."""
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    check_abort(rt.abort)
    scope = require_scope(scope)
    require_transactions(store, "publish_generation")
    with store.unit_of_work(scope) as uow:
        staged = uow.generations.counter()
        if staged > uow.generations.current():
            uow.generations.publish(staged)
            uow.commit()
        return uow.generations.current()
