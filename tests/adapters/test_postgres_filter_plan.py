"""The plan of a vector read with a metadata filter (``queries.vector_leg(joined=True)``).

A selective filter is answered from the filter's GIN rows, ranked exactly, and reads nothing
else of ``records``: visibility's generation bound is a filter there, never a btree range
over the whole scope ANDed to the GIN rows (``records_generation``: at 200,000 rows it read
every row of the scope to keep 2,000). The plans are read from EXPLAIN ANALYZE of the
store's own statement (``_plan``), on a corpus the planner has statistics of.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from ragport.adapters.postgres import PostgresStore
from ragport.contract_tests._support import make_batch
from ragport.domain.model import Scope
from tests.adapters.test_postgres_exact_access import nodes, vector_plans

SCOPE = Scope("t", "r", "filtered")
DIMS = 16
SOURCES = 400  # 10 chunks each: 4,000 rows; tag t00..t99 by source (1% each)
CHUNKS = 10


def _load(store: PostgresStore, schema: str) -> np.ndarray:
    """The corpus, written in 20 generations (as a batched ingest writes it), analyzed."""
    drawn = np.random.default_rng(48).standard_normal((SOURCES, CHUNKS, DIMS))
    vectors: np.ndarray = (drawn / np.linalg.norm(drawn, axis=2, keepdims=True)).astype(np.float32)
    for first in range(0, SOURCES, 20):
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for i in range(first, first + 20):
                meta = {"tag": f"t{i % 100:02d}", "half": i % 2 == 0}
                texts = [f"s{i} {j}" for j in range(CHUNKS)]
                batch = make_batch(
                    SCOPE, f"s{i:03d}", texts, generation=staged, dimensions=DIMS,
                    vectors=vectors[i], metadata=meta,
                )  # fmt: skip
                uow.records.add(batch.records, batch.vectors)
            uow.generations.publish(staged)
            uow.commit()
    store.finish_maintenance()
    with store.engine.begin() as conn:
        conn.execute(text(f'ANALYZE "{schema}".records, "{schema}".record_vectors'))
    return vectors


def _plan(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch, vector: np.ndarray, flt: Any
) -> tuple[list[str], dict[str, Any]]:
    """The ids ``store.query`` answers and the EXPLAIN ANALYZE plan of its vector statement
    (run just before it, same connection and binds)."""
    with vector_plans(monkeypatch) as plans:
        hits = store.query(SCOPE, vector, limit=10, metadata_filter=flt)
    (plan,) = plans
    return [h.record.id for h in hits], plan


def _indexes(plan: dict[str, Any]) -> set[str]:
    """The indexes the plan's executed nodes read."""
    return {n["Index Name"] for n in nodes(plan) if "Index Name" in n and n.get("Actual Loops", 0)}


def _exact(vectors: np.ndarray, q: np.ndarray, sources: range) -> list[str]:
    keys = [(i, j) for i in sources for j in range(CHUNKS)]
    distance = [1.0 - float(vectors[i, j] @ q) for i, j in keys]
    order = sorted(range(len(keys)), key=lambda k: (distance[k], keys[k]))
    return [f"s{keys[k][0]:03d}#{keys[k][1] + 1:04d}" for k in order[:10]]


@pytest.fixture
def corpus(pg_engine: Any, pg_schema: str) -> tuple[PostgresStore, np.ndarray]:
    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    return store, _load(store, pg_schema)


def test_a_selective_filter_reads_its_gin_rows_and_no_generation_range(
    corpus: tuple[PostgresStore, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1% equality filter: the plan reads the filter's rows from ``records_metadata`` and
    their vectors by primary key, ranks them exactly (the exact top-10 of the 40 rows), and
    never scans ``records_generation`` (a range over the whole scope, ANDed to the GIN rows,
    before the generation bound was written as a filter). If this fails, check
    ``queries._unranged`` and that ``vector_leg(joined=True)`` applies it."""
    store, vectors = corpus
    q = vectors[7, 3]
    ids, plan = _plan(store, monkeypatch, q, {"tag": "t07"})
    assert ids == _exact(vectors, q, range(7, SOURCES, 100))
    used = _indexes(plan)
    assert "records_metadata" in used, used
    assert "records_generation" not in used, used
