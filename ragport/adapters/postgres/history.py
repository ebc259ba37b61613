"""``PostgresStore.generation_history``: what each recent generation wrote and retired.

One statement (one snapshot): the scope's pointer and floor, then every row written or
retired at a generation in ``(max(floor, pointer - limit), pointer]``, grouped by generation
and kind, with the distinct source ids in code-point order (capped at ``max_ids``, counted in
full). Rows the forgotten predicate withholds (``predicate.not_forgotten``: id, source,
lineage or roots, as every read) are left out. Every table reference names the
scope by equality. Where a row records its retirement is read only here
(``r.retired_generation``), so a change to that layout changes this one statement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ragport.adapters.postgres import reads
from ragport.adapters.postgres.predicate import RSCOPE, SCOPE, not_forgotten, scope_params
from ragport.domain.errors import ScopeError
from ragport.domain.model import Scope
from ragport.ports.history import GenerationChange, check_history_args

__all__ = ["generation_history", "generation_history_sql"]


def generation_history_sql(s: str) -> str:
    """Rows ``(pointer, low, g, kind, records, sources, ids)``: one per generation and kind
    (``w`` written, ``r`` retired) with rows, or a single row with ``g`` null when none."""
    alive = not_forgotten(s)
    return (
        f"WITH sc AS (SELECT coalesce(max(pointer), 0) AS pointer, coalesce(max(floor), 0) AS floor "
        f"FROM {s}.scopes WHERE {SCOPE}), "
        "lo AS (SELECT pointer, greatest(floor, pointer - CAST(:limit AS bigint)) AS low FROM sc), "
        f"ev AS (SELECT r.generation AS g, 'w' AS kind, r.source_id FROM {s}.records r, lo "
        f"WHERE {RSCOPE} AND r.generation > lo.low AND r.generation <= lo.pointer AND {alive} "
        f"UNION ALL SELECT r.retired_generation, 'r', r.source_id FROM {s}.records r, lo "
        f"WHERE {RSCOPE} AND r.retired_generation > lo.low "
        f"AND r.retired_generation <= lo.pointer AND {alive}), "
        "agg AS (SELECT g, kind, count(*) AS records, count(DISTINCT source_id) AS sources, "
        '(array_agg(DISTINCT source_id COLLATE "C" ORDER BY source_id COLLATE "C"))'
        "[1:CAST(:max_ids AS int)] AS ids FROM ev GROUP BY g, kind) "
        "SELECT lo.pointer, lo.low, agg.g, agg.kind, agg.records, agg.sources, agg.ids "
        "FROM lo LEFT JOIN agg ON true"
    )


def generation_history(
    read: Callable[[str, Callable[[Any], Any]], Any],
    s: str,
    scope: Scope,
    *,
    limit: int,
    max_ids: int,
) -> Sequence[GenerationChange]:
    """Run ``generation_history_sql`` through the store's ``_read`` and build the changes."""
    limit, max_ids = check_history_args(limit, max_ids)
    if not isinstance(scope, Scope):
        raise ScopeError("scope must be a Scope", field="scope")
    sql = generation_history_sql(s)
    params = scope_params(scope, limit=limit, max_ids=max_ids)
    rows = read("read generation history", lambda conn: reads.fetch(conn, sql, params))
    if not rows:
        return []
    pointer, low = int(rows[0].pointer), int(rows[0].low)
    found: dict[tuple[int, str], Any] = {(int(r.g), r.kind): r for r in rows if r.g is not None}

    def part(g: int, kind: str) -> tuple[tuple[str, ...], int, int]:
        row = found.get((g, kind))
        if row is None:
            return (), 0, 0
        return tuple(str(i) for i in (row.ids or ())), int(row.sources), int(row.records)

    out = []
    for g in range(pointer, low, -1):
        written, sources_written, records_written = part(g, "w")
        retired, sources_retired, records_retired = part(g, "r")
        out.append(
            GenerationChange(
                generation=g,
                written=written,
                retired=retired,
                sources_written=sources_written,
                sources_retired=sources_retired,
                records_written=records_written,
                records_retired=records_retired,
            )
        )
    return out
