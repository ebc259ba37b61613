"""Derived records pinned to the versions they were made from.

``index_derived(..., pinned=True)`` marks a derived record (a summary, a cached answer) as
resting on the versions of its lineage current when it was written. When any of them is
replaced or deleted, the write that does so retires the pinned record in the same unit of
work and at the same generation: a summary of revision 1 is never served beside revision 2,
and a rollback to the earlier generation brings both back together. Retirement follows
pinned records transitively (a pinned summary of a pinned summary goes too), up to
``Limits.lineage_depth`` levels; a record that is not pinned keeps today's rule (visible
until its lineage is forgotten).

The mark is the metadata key ``ragport.pinned`` (``True``), reserved: a caller's metadata
may not set it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragport.domain.errors import LineageChangedError, ValidationError
from ragport.domain.limits import Limits
from ragport.ports.unit_of_work import UnitOfWork

__all__ = ["PINNED_KEY", "pinned_metadata", "require_unchanged", "retire_pinned_dependents"]

PINNED_KEY = "ragport.pinned"


def pinned_metadata(metadata: Mapping[str, Any], pinned: bool) -> Mapping[str, Any]:
    """``metadata`` with the pin mark when ``pinned``; the mark itself is refused as input."""
    if not isinstance(pinned, bool):
        raise ValidationError("pinned must be True or False", field="pinned")
    if PINNED_KEY in metadata:
        raise ValidationError(f"metadata key {PINNED_KEY!r} is reserved", field="metadata")
    return {**metadata, PINNED_KEY: True} if pinned else metadata


def retire_pinned_dependents(
    uow: UnitOfWork, source_ids: Sequence[str], *, generation: int, limits: Limits
) -> int:
    """Retire at ``generation`` the live pinned records resting on any of ``source_ids``,
    transitively through pinned records; returns how many visible records were retired.

    One ``find_dependents`` read per level (an indexed read), so a write whose sources have
    no derived records pays one read. Deeper than ``limits.lineage_depth`` is a
    ``ValidationError`` (the caller's unit of work then writes nothing)."""
    retired = 0
    seen = set(source_ids)
    frontier = list(dict.fromkeys(source_ids))
    for _ in range(limits.lineage_depth + 1):
        if not frontier:
            return retired
        dependents = uow.records.find_dependents(frontier)
        ids = list(
            dict.fromkeys(
                r.id
                for r in dependents
                if r.retired_generation is None
                and r.metadata.get(PINNED_KEY) is True
                and r.id not in seen
            )
        )
        if ids:
            retired += uow.records.retire_ids(ids, generation=generation)
        seen.update(ids)
        frontier = ids
    if frontier:
        raise ValidationError(
            f"pinned lineage deeper than {limits.lineage_depth}: nothing was written",
            field="source_id",
            limit="lineage_depth",
        )
    return retired


def require_unchanged(uow: UnitOfWork, lineage: Sequence[str], as_of: int) -> None:
    """Refuse (``LineageChangedError``) unless every id of ``lineage`` is live in ``uow`` and
    was last written at or below generation ``as_of``."""
    if isinstance(as_of, bool) or not isinstance(as_of, int) or as_of < 0:
        raise ValidationError("as_of must be a generation (an int >= 0)", field="as_of")
    changed = tuple(
        i
        for i in lineage
        if not (rows := uow.records.list_by_source(i)) or any(r.generation > as_of for r in rows)
    )
    if changed:
        raise LineageChangedError(
            f"{len(changed)} lineage source(s) changed after generation {as_of}: "
            "recompute the derived record from their current versions",
            source_ids=changed,
        )
