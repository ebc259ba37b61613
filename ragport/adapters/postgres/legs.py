"""The two search legs on one connection: the SQL of ``queries`` / ``predicate`` run and read.

They serve ``PostgresBackend``'s search pushdowns (``ragport.ports.pushdowns``):
``guarded_search`` (``VectorLeg`` with its drift guard, one statement), ``search_vectors`` and
``search_lexical``. Each leg answers its admitted hits, best first, and, when asked (``report``), the
access sources of the top rows its grant predicate screened out (``screened``): the engine
decides those with the grant rule (``ragport.engine.reads.denials``), so no access rule is
written here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ragport.adapters.postgres import queries, reads
from ragport.adapters.postgres.extension import PgVector
from ragport.adapters.postgres.indexes import MAX_EF_SEARCH
from ragport.adapters.postgres.predicate import granted, predicate, scope_params
from ragport.adapters.postgres.rows import record
from ragport.domain.filters import Filter
from ragport.domain.model import Authorization, Scope
from ragport.ports.embedder import Vector
from ragport.ports.store import EmbedderKey, ScoredRecord

__all__ = ["VectorLeg", "foreign_rows", "lexical_leg", "query_vector"]

Hits = tuple[ScoredRecord, ...]


def query_vector(vector: Vector) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The query vector as a contiguous float32 row."""
    return np.ascontiguousarray(np.asarray(vector, dtype=np.float32).reshape(-1))


def foreign_rows(conn: Any, s: str, scope: Scope, guard: tuple[str, int]) -> frozenset[EmbedderKey]:
    """The (embedder id, dimensions) of the scope's visible rows other than ``guard``."""
    sql = queries.foreign_rows_sql(s)
    rows = reads.fetch(conn, sql, scope_params(scope, e=guard[0], ed=int(guard[1])))
    return frozenset((row.embedder_id, row.dimensions) for row in rows)


def _screened(
    conn: Any, s: str, params: dict[str, Any], flt: Filter | None, top: Callable[[str], str]
) -> tuple[str, ...]:
    """One extra statement: the access sources of the leg's top rows ranked without the grant
    predicate (``queries.denied_sql``), each once."""
    where = predicate(s, params, None, flt)
    rows = reads.fetch(conn, queries.denied_sql(s, top(where)), params, prepare=False)
    return tuple(dict.fromkeys(str(row.source_id) for row in rows))


class VectorLeg:
    """The vector leg (and its drift guard) of one query, as a function of one connection.

    ``guard`` (an embedder key) makes it the guarded statement: the scope's sole-embedder
    claim or two index probes say whether a foreign row may exist, and only then is the
    exact ``foreign_rows`` read. ``search`` is ``(ef_search, exact_rows)``: ``ef_search`` the
    width of a plain query (doubled per grant or filter predicate, at most
    ``MAX_EF_SEARCH``); ``exact_rows``: a read with grants and no metadata filter, whose
    caller is allowed at most that many rows and at most half the scope's grants, ranks them
    all exactly instead (``queries.allowed_leg``; 0: always the walk). A filtered read keeps
    the walk or the exact ranking of the filter's GIN rows, whichever the planner prefers:
    as selective as the filter, which ranking every allowed row would ignore (a filter
    matching 10 of 5,000 allowed rows: 10x the walk's time). ``vec`` names pgvector's objects
    (``Connections.pgvector``; called only when the leg reads anything)."""

    def __init__(
        self,
        s: str,
        scope: Scope,
        vector: Vector,
        *,
        vec: Callable[[], PgVector],
        search: tuple[int, int],
        limit: int,
        authorization: Authorization | None,
        flt: Filter | None,
        guard: tuple[str, int] | None = None,
        report: bool = False,
    ) -> None:
        ef_search, exact_rows = search
        q = query_vector(vector)
        self.s, self.scope, self.guard, self.limit = s, scope, guard, int(limit)
        self.report = report and authorization is not None
        self.empty = limit <= 0 or q.size == 0
        if self.empty:
            return
        dims = int(q.shape[0])
        self.params = params = scope_params(scope, q=q)
        if guard is not None:
            params.update(e=guard[0], ed=int(guard[1]))
        self.flt = flt
        if authorization is None and flt is None:
            self.sql, order = queries.plain_vector_sql(s, dims, limit, guard is not None, vec=vec())
        else:
            # The pointer and the tombstones enter as scalar subqueries (InitPlans), not joins.
            where = predicate(s, params, authorization, flt, scalar=True)
            leg, order = queries.vector_leg(
                s, dims, limit, where, vec=vec(), joined=flt is not None
            )
            if authorization is not None and flt is None:  # a small allowed share: exact
                grants = granted(authorization, overlap=True)
                leg = queries.allowed_leg(
                    s, dims, limit, where, grants, exact_rows, leg, vec=vec()
                )  # fmt: skip
            self.sql = queries.vector_sql(s, leg, guarded=guard is not None)
        self.top = queries.vector_top(s, dims, order, vec=vec())
        # ``ef_search`` (default 200) for a plain query; filters and grants thin the graph
        # walk out: search wider then, twice per predicate (measured at 100k rows: recall@10
        # with grants alone 0.954 at ef_search 400; with grants and a 0.5% filter 0.90 at 40,
        # 0.941 at 400, so both together get 800), and let the iterative scan return rows
        # slightly out of distance order (relaxed_order: 0.944 -> 0.960 with grants and the
        # 0.5% filter at 800, same latency; the rows are sorted here anyway). Session-level
        # settings, sent only when they change.
        self.predicates = (authorization is not None) + (flt is not None)
        ef = max(min(MAX_EF_SEARCH, ef_search << self.predicates), min(1000, int(limit)))
        self.settings = (str(ef), "relaxed_order" if self.predicates else "strict_order")

    def __call__(self, conn: Any) -> tuple[frozenset[EmbedderKey], Hits, tuple[str, ...]]:
        """``(foreign embedders, hits, screened)`` read on ``conn``."""
        found = self._read(conn, exact=True)
        assert found is not None
        return found

    def alone(self, conn: Any) -> tuple[frozenset[EmbedderKey], Hits, tuple[str, ...]] | None:
        """``self(conn)`` when its one statement answers it all (no report, and the guard
        needs no exact read: its own snapshot is the whole read); else ``None`` (read it
        again, in one snapshot with the statements it needs)."""
        return None if self.report else self._read(conn, exact=False)

    def _read(
        self, conn: Any, *, exact: bool
    ) -> tuple[frozenset[EmbedderKey], Hits, tuple[str, ...]] | None:
        if self.empty:
            if self.guard is None:
                return frozenset(), (), ()
            return foreign_rows(conn, self.s, self.scope, self.guard), (), ()
        info = conn.connection.info
        if info.get("ragport_hnsw") != self.settings:
            ef, scan = self.settings
            reads.fetch(conn, queries.HNSW_SETTINGS, {"ef": ef, "scan": scan})
            info["ragport_hnsw"] = self.settings
        # A statement with grants or a filter is planned for its own values (how selective
        # they are decides the plan); the plain one may settle on a cached generic plan.
        rows = reads.fetch(conn, self.sql, self.params, prepare=False if self.predicates else None)
        screened = (
            _screened(conn, self.s, dict(self.params), self.flt, self.top) if self.report else ()
        )
        foreign: frozenset[EmbedderKey] = frozenset()
        if self.guard is not None and rows and rows[0].ok is False:
            if not exact:
                return None
            foreign = foreign_rows(conn, self.s, self.scope, self.guard)
        scored = []
        for row in rows:
            if row.id is None:  # the guard's row when the leg found nothing
                continue
            distance = float(row.distance)
            score = 1.0 - distance if math.isfinite(distance) else 0.0
            scored.append(ScoredRecord(record(self.scope, row), score))
        scored.sort(key=lambda x: (-x.score, x.record.id))
        return foreign, tuple(scored), screened


def lexical_leg(
    s: str,
    scope: Scope,
    text: str,
    *,
    ts_config: str,
    limit: int,
    authorization: Authorization | None,
    flt: Filter | None,
    report: bool = False,
) -> Callable[[Any], tuple[Hits, tuple[str, ...]]]:
    """The BM25 leg of one query (``search_lexical``, the scoring described here) as a
    function of one connection answering ``(hits, screened)``: full-text search over the
    generated tsvector, ranked by BM25 computed in SQL.

    The query is parsed by ``websearch_to_tsquery`` (quoted phrases, ``or``, ``-word``);
    its plain terms are then OR-ed instead of AND-ed, so a question matches documents that
    share some of its words. A query with an exclusion (``-word``) keeps websearch's AND
    semantics, where the exclusion is meaningful. Candidates are the rows matching that
    tsquery that pass the shared WHERE (scope, visibility, tombstones, grants, filter).

    Each candidate ``d`` scores, over the distinct non-excluded lexemes ``t`` of the tsquery
    that occur in ``d``::

        idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
        idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))    k1 = 1.2, b = 0.75

    (Lucene's always-positive idf; the in-memory store's ``Bm25Index`` follows rank_bm25's
    BM25Okapi with k1 = 1.5, so scores differ between the stores, rankings mostly not.)
    ``tf`` is the number of positions of ``t`` in the row's tsvector (PostgreSQL keeps at
    most 256 per lexeme); ``dl`` is the row's number of distinct lexemes (``length(tsv)``),
    not its token count: summing positions means unnesting every visible row's tsvector,
    4x the cost of the whole statistics pass (measured at 10k rows). ``N``, ``avgdl`` and
    ``df`` are exact, over the rows visible in the scope at its pointer generation minus
    forgotten (tombstoned) ones, read in the same statement: one snapshot. Grants and the
    metadata filter only thin the candidates and never change the statistics, so a score
    reveals nothing about which sources a caller may not read.

    Cost: the statistics are sums of write-time deltas (forgotten rows were taken out
    when their tombstone was written); candidates are the rows holding the query's
    rarer lexemes, plus, for common ones, the rows in impact buckets (``tsv_impact``,
    tf and row length) whose score bound can still reach the top-k, each checked
    against the tombstones by one index probe. See docs/operations.md. The SQL is
    ``queries.bm25_ctes``.
    """
    if limit <= 0 or not text.strip():
        return lambda conn: ((), ())
    params = scope_params(scope, k=int(limit), query=text)
    where = predicate(s, params, authorization, flt)
    sql = queries.lexical_sql(s, ts_config, where)
    report = report and authorization is not None

    def run(conn: Any) -> tuple[Hits, tuple[str, ...]]:
        # Prepared, generic plan: the statement reads the query's terms and statistics in
        # CTEs, which no plan can see into, so a cached plan is as good as a fresh one
        # and saves the planning (measured: 5-25 ms of a 20-70 ms statement at 100k).
        rows = reads.fetch_generic(conn, sql, params)
        screened = (
            _screened(conn, s, dict(params), flt, queries.bm25_top(s, ts_config)) if report else ()
        )
        return tuple(ScoredRecord(record(scope, row), float(row.rank)) for row in rows), screened

    return run
