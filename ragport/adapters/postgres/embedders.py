"""The scope's sole embedder: the drift guard of a vector query, answered from the scope's row.

Migration 12 gives ``scopes`` two columns, ``sole_embedder`` and ``sole_dimensions``. When
both are set, every ``records`` row of the scope, at every generation, visible or not, was
embedded by that (embedder id, dimensions): a vector query under that embedder cannot meet a
foreign row, and its drift guard reads nothing more than the scope's row it reads anyway.
When they are NULL nothing is claimed, and the guard probes ``records_embedders`` for the
first and the last key of the scope (``probe_sql``), as it did before migration 12.

Only the unit of work writes them, under the scope's row lock (``statements.lock_scope``),
so writers of one scope keep them in step with the rows they add:

- an add whose rows all carry the sole key changes nothing;
- an add with another key clears them (``sole_after_add``), in the add's own savepoint;
- while they are NULL, an add or a delete re-reads the first and last key of the scope and
  sets them when both are the same key (``refresh``): two index probes, so a scope whose
  rows of a former embedder were purged returns to the cheap guard.

No statement changes a stored row's ``embedder_id`` or ``dimensions``, and deleting rows
cannot make a claim false, so those are the only writes to watch.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy import Connection, text

from ragport.adapters.postgres.predicate import RSCOPE, SCOPE, scope_params
from ragport.domain.model import Scope

__all__ = [
    "EmbedderKey",
    "claim_of",
    "claim_value",
    "key_of",
    "migration_sql",
    "probe_sql",
    "refresh",
    "sole_after_add",
]

EmbedderKey = tuple[str, int]


def probe_sql(s: str, order: str) -> str:
    """The first (``order`` ASC) or last (DESC) (embedder_id, dimensions) of the scope's rows,
    any generation, in the order of the ``records_embedders`` index (NULL ids last): one
    index-only probe."""
    return (
        f"SELECT r.embedder_id, r.dimensions FROM {s}.records r WHERE {RSCOPE} "
        f"ORDER BY r.embedder_id {order}, r.dimensions {order} LIMIT 1"
    )


def migration_sql(s: str) -> tuple[str, ...]:
    """Migration 12: the columns, then each existing scope's claim where its rows agree."""
    first, last = (
        probe_sql(s, o).replace(RSCOPE, "r.tenant_id = x.tenant_id AND r.resource_id = "
                                "x.resource_id AND r.corpus_id = x.corpus_id")
        for o in ("ASC", "DESC")
    )  # fmt: skip
    return (
        f"ALTER TABLE {s}.scopes ADD COLUMN IF NOT EXISTS sole_embedder text, "
        "ADD COLUMN IF NOT EXISTS sole_dimensions integer",
        f"UPDATE {s}.scopes x SET (sole_embedder, sole_dimensions) = (SELECT f.embedder_id, "
        f"f.dimensions FROM ({first}) f, ({last}) l WHERE f.embedder_id = l.embedder_id "
        "AND f.dimensions = l.dimensions)",
    )


def key_of(row: Any) -> EmbedderKey | None:
    """The claim of a scope row read by ``statements.lock_scope`` (None: no claim)."""
    if row.sole_embedder is None or row.sole_dimensions is None:
        return None
    return (str(row.sole_embedder), int(row.sole_dimensions))


def _store(conn: Connection, s: str, scope: Scope, key: EmbedderKey | None) -> None:
    conn.execute(
        text(f"UPDATE {s}.scopes SET sole_embedder = :se, sole_dimensions = :sd WHERE {SCOPE}"),
        scope_params(scope, se=None if key is None else key[0], sd=None if key is None else key[1]),
    )


def refresh(conn: Connection, s: str, scope: Scope) -> EmbedderKey | None:
    """Read the scope's first and last key; claim it when they agree; return the claim."""
    p = scope_params(scope)
    first = conn.execute(text(probe_sql(s, "ASC")), p).first()
    last = conn.execute(text(probe_sql(s, "DESC")), p).first()
    if first is None or last is None or first.embedder_id is None:
        return None
    key = (str(first.embedder_id), int(first.dimensions))
    if (last.embedder_id, last.dimensions) != key:
        return None
    _store(conn, s, scope, key)
    return key


def sole_after_add(
    conn: Connection,
    s: str,
    scope: Scope,
    claim: EmbedderKey | None,
    added: set[tuple[str | None, int | None]],
) -> EmbedderKey | None:
    """The claim after rows of keys ``added`` were written (call inside the add's savepoint):
    kept when they all carry it, cleared when one does not, re-read when there was none."""
    if claim is not None:
        if added == {claim}:
            return claim
        _store(conn, s, scope, None)
        return None
    return refresh(conn, s, scope)


# -- the engine's claim (migration 13) ---------------------------------------------------------
# ``scopes.embedder_claim``: ``GenerationState.embedders`` as the engine stored it through
# ``PostgresBackend.set_state``, a JSON array of ``[embedder_id, dimensions]`` pairs (NULL:
# unknown). It must hold at least the key of every stored row (the engine's add extends it);
# removing rows never makes it false.


def claim_value(claim: frozenset[tuple[str | None, int | None]] | None) -> Any:
    """The JSON bind of a claim (``None``: NULL)."""
    if claim is None:
        return None
    return Jsonb(sorted(([k, d] for k, d in claim), key=lambda p: (str(p[0]), p[1] or 0)))


def claim_of(value: Any) -> frozenset[tuple[str | None, int | None]] | None:
    """A claim read back (``None`` for NULL)."""
    if value is None:
        return None
    return frozenset((k, d) for k, d in value)
