"""Forgetting many ids in a corpus written since the last ANALYZE.

The planner then believes the new corpus holds about one row. Written as a join, the
statement that adds tombstones (``statements.tombstones_insert``) let it compare every
forgotten id with every row of the corpus through the lineage and roots arrays: 100,000 ids
against 10,000 rows took 9 minutes in ``bench/bench_tombstones.py``. The lineage and roots
probes are now per id, through the GIN indexes, whatever the statistics say. This test
counts the comparisons (EXPLAIN ANALYZE's rows removed by join filters), not the time.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore, statements
from ragport.adapters.postgres.predicate import scope_params
from ragport.contract_tests._support import publish_sources

IDS = 2_000
ROWS = 400


_REMOVED = (
    "Rows Removed by Join Filter",
    "Rows Removed by Filter",
    "Rows Removed by Index Recheck",
)


def _removed(node: dict[str, Any]) -> int:
    """Rows a node's filters discarded, over all its loops, in the whole subtree: a per-id
    scan of the corpus (a join, a sequential or a btree scan) shows up here."""
    loops = int(node.get("Actual Loops", 1))
    own = sum(int(float(node.get(key, 0)) * loops) for key in _REMOVED)
    return own + sum(_removed(child) for child in node.get("Plans", ()))


def test_forgetting_many_ids_in_a_corpus_the_planner_has_not_seen_is_probed_per_id(
    pg_engine, pg_schema
):
    """With autovacuum off and statistics taken before the corpus existed (its tenant had
    rows), the statement's filters discard far fewer than ids x rows rows. If this fails,
    check that the lineage and roots probes of ``tombstones_insert`` are still LATERAL, per
    id and served by the GIN indexes. (A tenant the statistics have never seen can still
    get a per-id btree scan of its rows: docs/operations.md, "Limits".)"""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")
    s = f'"{pg_schema}"'
    with pg_engine.begin() as conn:
        conn.execute(text(f"ALTER TABLE {s}.records SET (autovacuum_enabled = false)"))
    seen = ragport.Scope("tenant-1", "kb", "seen-" + uuid.uuid4().hex[:6])
    publish_sources(store, seen, {f"s{i}": [f"alpha {i} beta"] * 4 for i in range(50)})
    with pg_engine.begin() as conn:
        conn.execute(text(f"ANALYZE {s}.records"))
    fresh = ragport.Scope("tenant-1", "kb", "fresh-" + uuid.uuid4().hex[:6])
    publish_sources(store, fresh, {f"f{i}": [f"gamma {i} delta"] * 4 for i in range(ROWS // 4)})
    ids = [f"gone-{i:06d}" for i in range(IDS)]
    with pg_engine.connect() as conn:
        plan = conn.execute(
            text("EXPLAIN (ANALYZE, FORMAT JSON) " + statements.tombstones_insert(s)),
            scope_params(fresh, ids=ids, reasons=["forgotten"] * IDS),
        ).scalar_one()
        conn.rollback()
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    removed = _removed(root)
    assert removed < IDS * ROWS // 20, f"{removed:,} id-row pairs compared ({IDS:,} x {ROWS:,})"
