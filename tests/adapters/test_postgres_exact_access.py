"""``VectorIndexSettings.exact_access_rows``: an access-checked vector read whose caller is
allowed at most that many rows ranks them all (``queries.allowed_leg``); above it, the HNSW
walk. The grant contracts run again with a cap of 1 (so nearly every read takes the walk
branch of the same statement), and on a graph searched too narrowly to be exact, the capped
read still answers the exact top-k of the allowed rows where the walk does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from ragport.adapters.postgres import PostgresStore, VectorIndexSettings
from ragport.contract_tests._support import granted, make_batch
from ragport.contract_tests.chunk_store import (
    ChunkStoreDenialReportContract,
    ChunkStoreForgettingContract,
    ChunkStoreGrantContract,
    ChunkStoreGuardedQueryContract,
    ChunkStoreLineageContract,
)
from ragport.domain.model import Authorization, Grant, Scope


class TestGrantsPastTheCap(
    ChunkStoreGrantContract,
    ChunkStoreDenialReportContract,
    ChunkStoreGuardedQueryContract,
    ChunkStoreLineageContract,
    ChunkStoreForgettingContract,
):
    """The access contracts with ``exact_access_rows=1``: the walk branch of the statement."""

    @pytest.fixture
    def store(self, pg_engine: Any, pg_schema: str) -> Iterator[PostgresStore]:
        settings = VectorIndexSettings(exact_access_rows=1)
        yield PostgresStore(pg_engine, schema=pg_schema, create=True, vector_index=settings)


SCOPE = Scope("t", "r", "exact")
DIMS = 32
SOURCES = 200  # 5 chunks each: 1,000 rows, one group in ten allowed (100 rows)


def _load(store: PostgresStore) -> np.ndarray:
    vectors = np.random.default_rng(45).standard_normal((SOURCES, 5, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=2, keepdims=True)
    with store.unit_of_work(SCOPE) as uow:
        staged = uow.generations.stage()
        for i in range(SOURCES):
            texts = [f"s{i} {j}" for j in range(5)]
            batch = make_batch(
                SCOPE, f"s{i:03d}", texts, generation=staged, dimensions=DIMS, vectors=vectors[i]
            )
            uow.records.add(batch.records, batch.vectors)
        uow.generations.publish(staged)
        uow.grants.set(
            granted(SCOPE, [Grant(f"s{i:03d}", group_ids=(f"g{i % 10}",)) for i in range(SOURCES)])
        )
        uow.commit()
    return vectors


def _recall(store: PostgresStore, vectors: np.ndarray, queries: np.ndarray) -> float:
    caller = Authorization("u", "t", group_ids=("g3",))
    allowed = {
        f"s{i:03d}#{j + 1:04d}": vectors[i, j] for i in range(3, SOURCES, 10) for j in range(5)
    }
    keys = list(allowed)
    matrix = np.stack([allowed[k] for k in keys])
    found = 0
    for q in queries:
        exact = {keys[i] for i in np.argsort(-(matrix @ q))[:10]}
        hits = store.query(SCOPE, q, limit=10, authorization=caller)
        found += len(exact & {h.record.id for h in hits})
    return found / (10 * len(queries))


def test_a_small_allowed_set_is_ranked_exactly_where_the_walk_is_not(
    pg_engine: Any, pg_schema: str
) -> None:
    """ef_search 1 (each walk as narrow as the store allows): with the cap at 0 the grants
    thin the walk out and it misses neighbours; at the default cap the same store answers
    the exact top-10 of the 100 allowed rows. If this fails, check ``queries.allowed_leg``
    and that ``VectorLeg`` uses it under the cap."""
    queries = np.random.default_rng(7).standard_normal((20, DIMS)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    walked = PostgresStore(
        pg_engine, schema=pg_schema, create=True,
        vector_index=VectorIndexSettings(ef_search=1, m=2, ef_construction=4, exact_access_rows=0),
    )  # fmt: skip
    vectors = _load(walked)
    exact = PostgresStore(
        pg_engine, schema=pg_schema, vector_index=VectorIndexSettings(ef_search=1)
    )
    assert _recall(walked, vectors, queries) < 1.0
    assert _recall(exact, vectors, queries) == 1.0


@pytest.mark.parametrize("cap", [5000, 0], ids=["exact", "walk"])
def test_ties_at_the_cut_are_broken_by_id(pg_engine: Any, pg_schema: str, cap: int) -> None:
    """Rows at the same distance as the last one kept are cut by id, as the hits are sorted:
    the same query answers the same rows whatever order they were written in (30 equal
    vectors written in reverse id order; plain, filtered and access-checked reads). If
    this fails, check the ``ORDER BY distance, r.id`` of ``vector_leg`` and ``allowed_leg``."""
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True,
        vector_index=VectorIndexSettings(exact_access_rows=cap),
    )  # fmt: skip
    same = np.ones((1, DIMS), dtype=np.float32) / np.sqrt(DIMS)
    with store.unit_of_work(SCOPE) as uow:
        staged = uow.generations.stage()
        for i in reversed(range(30)):
            batch = make_batch(
                SCOPE, f"t{i:02d}", ["x"], generation=staged, dimensions=DIMS,
                vectors=same, metadata={"k": 1},
            )  # fmt: skip
            uow.records.add(batch.records, batch.vectors)
        uow.generations.publish(staged)
        uow.grants.set(granted(SCOPE, [Grant(f"t{i:02d}", group_ids=("g",)) for i in range(30)]))
        uow.commit()
    want = [f"t{i:02d}#0001" for i in range(5)]
    caller = Authorization("u", "t", group_ids=("g",))
    for kw in ({}, {"metadata_filter": {"k": 1}}, {"authorization": caller}):
        hits = store.query(SCOPE, same[0], limit=5, **kw)
        assert [h.record.id for h in hits] == want, kw
