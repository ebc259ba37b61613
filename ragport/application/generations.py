"""Move a scope between content snapshots: publish staged writes, roll back, compact.

rollback_generation:
1. Validate ``to``; refuse stores without transactions and generations.
2. In one unit of work: refuse ``to`` above the pointer (rows above it are gone after a
   rollback, so there is no roll-forward) or below the compaction floor (those snapshots
   were purged); discard rows written above ``to``; restore rows retired above ``to``; set
   pointer and counter to ``to``; commit.

compact: purge rows retired more than ``keep`` generations ago (``retired_generation <
pointer - keep``), so rollback to any generation ``>= pointer - keep - 1`` still works, and
raise the floor to that generation.
"""

from __future__ import annotations

from ragport.application._support import require_scope, require_transactions
from ragport.application.results import CompactResult, RollbackResult
from ragport.domain.errors import ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.domain.model import Scope
from ragport.ports.store import ChunkStore

__all__ = ["compact", "publish_generation", "rollback_generation"]


def rollback_generation(*, store: ChunkStore, scope: Scope, to: int) -> RollbackResult:
    """Restore snapshot ``to`` of ``scope``: content only (grants and tombstones stay)."""
    scope = require_scope(scope)
    if isinstance(to, bool) or not isinstance(to, int) or to < 0:
        raise ValidationError("to must be a non-negative integer", field="to")
    require_transactions(store, "rollback_generation")
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
        discarded = uow.records.discard_above(to)
        restored = uow.records.restore_above(to)
        uow.generations.reset(to)
        uow.commit()
    return RollbackResult(generation=to, discarded=discarded, restored=restored)


def compact(
    *, store: ChunkStore, scope: Scope, keep: int = DEFAULT_LIMITS.compact_keep
) -> CompactResult:
    """Purge retired rows no rollback within ``keep`` generations needs."""
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


def publish_generation(*, store: ChunkStore, scope: Scope) -> int:
    """Make writes staged with ``advance_generation=False`` visible at once; returns the pointer."""
    scope = require_scope(scope)
    require_transactions(store, "publish_generation")
    with store.unit_of_work(scope) as uow:
        staged = uow.generations.counter()
        if staged > uow.generations.current():
            uow.generations.publish(staged)
            uow.commit()
        return uow.generations.current()
