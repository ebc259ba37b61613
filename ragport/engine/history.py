"""``generation_history`` derived from stored rows, written once (``SupportsGenerationHistory``).

A row written at ``g`` counts as written there, a row retired at ``g`` as retired there;
rows the forgotten predicate withholds (``is_forgotten``: a ``forgotten`` tombstone on the
row's id, source, a lineage id or a root, the test every read makes) are left out, so a
derived record resting on forgotten content is listed no more than it is read.
``BackendStore`` and ``InMemoryStore`` both answer with it; PostgreSQL's pushdown is
``adapters/postgres/history.py`` (``predicate.not_forgotten``, the same test in SQL).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ragport.domain.model import Record, is_forgotten
from ragport.ports.history import GenerationChange

__all__ = ["history_of"]


def history_of(
    rows: Iterable[Record],
    *,
    pointer: int,
    floor: int,
    forgotten: frozenset[str],
    limit: int,
    max_ids: int,
) -> Sequence[GenerationChange]:
    """One change per generation in ``(max(floor, pointer - limit), pointer]``, newest first
    (arguments already checked with ``check_history_args``)."""
    low = max(floor, pointer - limit)
    written: dict[int, list[str]] = {}
    retired: dict[int, list[str]] = {}
    for r in rows:
        if is_forgotten(r, forgotten):
            continue
        if low < r.generation <= pointer:
            written.setdefault(r.generation, []).append(r.source_id)
        gone = r.retired_generation
        if gone is not None and low < gone <= pointer:
            retired.setdefault(gone, []).append(r.source_id)
    out = []
    for g in range(pointer, low, -1):
        w, d = sorted(set(written.get(g, ()))), sorted(set(retired.get(g, ())))
        out.append(
            GenerationChange(
                generation=g,
                written=tuple(w[:max_ids]),
                retired=tuple(d[:max_ids]),
                sources_written=len(w),
                sources_retired=len(d),
                records_written=len(written.get(g, ())),
                records_retired=len(retired.get(g, ())),
            )
        )
    return out
