"""The statements of ``TombstoneRepository.get`` and ``readmit`` (beside ``statements``'
``tombstones_insert``, whose statistics ``tombstones_readmit`` reverses)."""

from __future__ import annotations

from ragport.adapters.postgres.predicate import RSCOPE, SCOPE
from ragport.adapters.postgres.statements import named_by_nf, with_stats, withheld

__all__ = ["tombstones_get_sql", "tombstones_readmit"]


def tombstones_get_sql(s: str) -> str:
    """The tombstones of ids ``:ids`` (one primary-key probe per id)."""
    return f"SELECT id, reason FROM {s}.tombstones WHERE {SCOPE} AND id = ANY(CAST(:ids AS text[]))"


def tombstones_readmit(s: str) -> str:
    """Turn the ``forgotten`` tombstones of ``:ids`` into ``corrected`` ones; answers each id
    changed. The reverse of ``tombstones_insert`` for the statistics: the rows those ids
    named that no other ``forgotten`` tombstone names count again (the statement's snapshot
    still sees the old reasons, so "other" excludes ``:ids`` explicitly)."""
    ctes = (
        f"nf AS (SELECT id FROM {s}.tombstones WHERE {SCOPE} AND reason = 'forgotten' "
        "AND id = ANY(CAST(:ids AS text[]))), "
        f"up AS (UPDATE {s}.tombstones SET reason = 'corrected' WHERE {SCOPE} "
        "AND reason = 'forgotten' AND id = ANY(CAST(:ids AS text[])) RETURNING id), "
    )
    return with_stats(
        s,
        "SELECT r.generation AS plus, r.retired_generation AS minus, r.tsv, "
        f"r.stats_batch AS batch FROM ({named_by_nf(s)}) x JOIN {s}.records r ON {RSCOPE} "
        f"AND r.id = x.id AND r.generation = x.generation "
        f"WHERE NOT {withheld(s, 'r.', besides=':ids')}",
        "SELECT up.id FROM up",
        ctes=ctes,
        guard=False,
    )
