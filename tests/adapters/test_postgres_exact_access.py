"""``VectorIndexSettings.exact_access_rows``: an access-checked vector read without a
metadata filter, whose caller is granted at most half the scope's grants and allowed at most
that many rows, ranks them all (``queries.allowed_leg``); otherwise the HNSW walk. The grant
contracts run again with a cap of 1 (so nearly every read takes the walk branch of the same
statement); on a graph searched too narrowly to be exact, the capped read still answers the
exact top-k of the allowed rows where the walk does not; and which branch a read took is
read from EXPLAIN ANALYZE of its own statement (``_branch``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from ragport.adapters.postgres import PostgresStore, VectorIndexSettings, reads
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
SOURCES = 200  # 5 chunks each: 1,000 rows in 20 groups; a caller in 2 (100 rows, 10%)
PEER = Authorization("u", "t", group_ids=("g3", "g13"))  # bench_peers' workload 7: 2 of 20


def _load(store: PostgresStore) -> np.ndarray:
    vectors = np.random.default_rng(45).standard_normal((SOURCES, 5, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=2, keepdims=True)
    with store.unit_of_work(SCOPE) as uow:
        staged = uow.generations.stage()
        for i in range(SOURCES):
            texts = [f"s{i} {j}" for j in range(5)]
            batch = make_batch(
                SCOPE, f"s{i:03d}", texts, generation=staged, dimensions=DIMS,
                vectors=vectors[i], metadata={"tag": "a"},
            )  # fmt: skip
            uow.records.add(batch.records, batch.vectors)
        uow.generations.publish(staged)
        uow.grants.set(
            granted(SCOPE, [Grant(f"s{i:03d}", group_ids=(f"g{i % 20}",)) for i in range(SOURCES)])
        )
        uow.commit()
    return vectors


@contextmanager
def vector_plans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The EXPLAIN ANALYZE plans of the vector statements the store sends inside the block,
    each run just before its statement (same connection and binds)."""
    plans: list[dict[str, Any]] = []
    real = reads.fetch

    def fetch(conn: Any, sql: str, params: Any, **kw: Any) -> list[Any]:
        if "q" in params and "record_vectors" in sql:
            explained = real(conn, "EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params, prepare=False)
            plan = explained[0][0]
            plans.append((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
        return real(conn, sql, params, **kw)

    monkeypatch.setattr(reads, "fetch", fetch)
    try:
        yield plans
    finally:
        monkeypatch.setattr(reads, "fetch", real)


def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from nodes(child)


def _scans_vectors(node: dict[str, Any]) -> bool:
    return any(n.get("Relation Name") == "record_vectors" for n in nodes(node))


def _ran(node: dict[str, Any]) -> bool:
    """Whether a scan of ``record_vectors`` under ``node`` was executed."""
    return any(
        n.get("Relation Name") == "record_vectors" and n.get("Actual Loops", 0) > 0
        for n in nodes(node)
    )


def _branch(store: PostgresStore, monkeypatch: pytest.MonkeyPatch, **query: Any) -> str:
    """Which branch ``store.query(SCOPE, ...)`` took, from EXPLAIN ANALYZE of its own vector
    statement (run just before it, same connection and binds): ``exact`` (the first arm of
    ``allowed_leg``'s UNION ALL read vectors), ``walk`` (the second arm did), or ``walk
    alone`` (no ``allowed_leg`` in the statement: no grants were read to decide)."""
    with vector_plans(monkeypatch) as plans:
        store.query(SCOPE, query.pop("vector"), limit=10, **query)
    (plan,) = plans
    if not any(n.get("Subplan Name") == "CTE seen" for n in nodes(plan)):
        return "walk alone"
    unions = [
        [c for c in n["Plans"] if c.get("Parent Relationship") == "Member"]
        for n in nodes(plan)
        if n["Node Type"] == "Append"
    ]
    ((exact, walk),) = [arms for arms in unions if any(map(_scans_vectors, arms))]
    assert _ran(exact) != _ran(walk), plan
    return "exact" if _ran(exact) else "walk"


def _recall(store: PostgresStore, vectors: np.ndarray, queries: np.ndarray) -> float:
    allowed = {
        f"s{i:03d}#{j + 1:04d}": vectors[i, j] for i in range(3, SOURCES, 10) for j in range(5)
    }
    keys = list(allowed)
    matrix = np.stack([allowed[k] for k in keys])
    found = 0
    for q in queries:
        exact = {keys[i] for i in np.argsort(-(matrix @ q))[:10]}
        hits = store.query(SCOPE, q, limit=10, authorization=PEER)
        found += len(exact & {h.record.id for h in hits})
    return found / (10 * len(queries))


def test_a_small_allowed_set_is_ranked_exactly_where_the_walk_is_not(
    pg_engine: Any, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ef_search 1 (each walk as narrow as the store allows): with the cap at 0 the grants
    thin the walk out and it misses neighbours; at the default cap the same store answers
    the exact top-10 of the 100 allowed rows (a caller in 2 of 20 groups, as in
    ``bench/bench_peers.py``'s workload 7), by the exact branch. If this fails, check ``queries.allowed_leg``
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
    assert _branch(exact, monkeypatch, vector=queries[0], authorization=PEER) == "exact"
    assert _branch(walked, monkeypatch, vector=queries[0], authorization=PEER) == "walk alone"


@pytest.mark.parametrize(
    ("groups", "branch"),
    [
        (("all",), "walk"),  # everything granted: the walk is near-exact and cheaper
        (("g3", "g13"), "exact"),  # 10% of the sources (bench_peers' workload 7)
        (tuple(f"g{i}" for i in range(10)), "exact"),  # half of them: the boundary
        (tuple(f"g{i}" for i in range(11)), "walk"),  # 55%
    ],
    ids=["all", "10%", "50%", "55%"],
)
def test_only_a_small_allowed_share_of_the_scope_is_ranked_exactly(
    pg_engine: Any, pg_schema: str, monkeypatch: pytest.MonkeyPatch,
    groups: tuple[str, ...], branch: str,
) -> None:  # fmt: skip
    """Under the cap, the exact branch runs only when the caller is granted at most half of
    the scope's grants (``queries.EXACT_SHARE``): a caller allowed most of a small corpus
    takes the walk, which the grant predicate hardly thins (reading and ranking every
    allowed vector cost 2.5x the walk with all 5,000 rows of a scope granted). If this
    fails, check the share test in ``queries.allowed_leg`` (``seen`` / ``grants_ok``)."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    vectors = _load(store)
    with store.unit_of_work(SCOPE) as uow:
        uow.grants.set(
            granted(
                SCOPE,
                [Grant(f"s{i:03d}", group_ids=(f"g{i % 20}", "all")) for i in range(SOURCES)],
            )
        )
        uow.commit()
    caller = Authorization("u", "t", group_ids=groups)
    assert _branch(store, monkeypatch, vector=vectors[0, 0], authorization=caller) == branch


@pytest.mark.parametrize("filtered", [{"tag": "a"}, {"tag": "none"}], ids=["all", "none"])
def test_a_filtered_access_checked_read_keeps_the_walk(
    pg_engine: Any, pg_schema: str, monkeypatch: pytest.MonkeyPatch, filtered: dict[str, str]
) -> None:
    """An access-checked read with a metadata filter never ranks the allowed rows exactly,
    even a small allowed share: the filter's GIN rows (or the walk) are as selective as the
    filter, where ranking every allowed row before checking the filter ignored it (10x the
    walk's time for a filter matching 10 of 5,000 allowed rows). No grant is read to decide
    (no ``allowed_leg`` in the statement). If this fails, check ``VectorLeg``."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    vectors = _load(store)
    query = {"vector": vectors[0, 0], "authorization": PEER, "metadata_filter": filtered}
    assert _branch(store, monkeypatch, **query) == "walk alone"


@pytest.mark.parametrize(("cap", "branch"), [(5000, "exact"), (0, "walk alone")])
def test_ties_at_the_cut_are_broken_by_id(
    pg_engine: Any, pg_schema: str, monkeypatch: pytest.MonkeyPatch, cap: int, branch: str
) -> None:
    """Rows at the same distance as the last one kept are cut by id in code-point order, as
    the hits are sorted: the same query answers the same rows whatever order they were
    written in (32 equal vectors written in reverse id order; plain, filtered and
    access-checked reads, the last by the exact branch at the default cap: the caller is
    granted half the scope, 32 far sources being granted to another group). If this fails,
    check the ``ORDER BY distance, r.id COLLATE "C"`` of ``vector_leg`` and ``allowed_leg``.

    ``B#0001`` sorts before ``a#0001`` by code point, after it in a linguistic collation
    (en_US); the embedded test server's databases are C.UTF-8, whose order is the code
    point's, so here the pair cannot show a collation-ordered cut, only keep the expected
    order written down."""
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True,
        vector_index=VectorIndexSettings(exact_access_rows=cap),
    )  # fmt: skip
    same = np.ones((1, DIMS), dtype=np.float32) / np.sqrt(DIMS)
    near = ["B", "a", *(f"t{i:02d}" for i in range(30))]
    far = [f"o{i:02d}" for i in range(32)]
    with store.unit_of_work(SCOPE) as uow:
        staged = uow.generations.stage()
        for source_id, vector, k in [(s, same, 1) for s in reversed(near)] + [
            (s, -same, 2) for s in far
        ]:
            batch = make_batch(
                SCOPE, source_id, ["x"], generation=staged, dimensions=DIMS,
                vectors=vector, metadata={"k": k},
            )  # fmt: skip
            uow.records.add(batch.records, batch.vectors)
        uow.generations.publish(staged)
        grants = [Grant(s, group_ids=("g",)) for s in near]
        uow.grants.set(granted(SCOPE, grants + [Grant(s, group_ids=("h",)) for s in far]))
        uow.commit()
    want = ["B#0001", "a#0001", "t00#0001", "t01#0001", "t02#0001"]
    caller = Authorization("u", "t", group_ids=("g",))
    for kw in ({}, {"metadata_filter": {"k": 1}}, {"authorization": caller}):
        hits = store.query(SCOPE, same[0], limit=5, **kw)
        assert [h.record.id for h in hits] == want, kw
    assert _branch(store, monkeypatch, vector=same[0], authorization=caller) == branch


@pytest.mark.parametrize(("cap", "branch"), [(SOURCES, "exact"), (SOURCES - 1, "walk")])
def test_the_scope_s_grant_count_is_compared_with_the_cap(
    pg_engine: Any, pg_schema: str, monkeypatch: pytest.MonkeyPatch, cap: int, branch: str
) -> None:
    """The branch rule's first test: the scope's grants (200 here, the caller's 10% of them
    allowing 100 rows) counted against the cap, at most ``cap`` ranks exactly and one more
    takes the walk. The count is an index-only scan of the scope's grant keys past the first
    ``cap`` (``queries._share``), so an off-by-one there moves the boundary. If this fails,
    check ``share`` in ``queries._share``."""
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True,
        vector_index=VectorIndexSettings(exact_access_rows=cap),
    )  # fmt: skip
    vectors = _load(store)
    assert _branch(store, monkeypatch, vector=vectors[0, 0], authorization=PEER) == branch
