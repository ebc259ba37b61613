"""The read statements of the PostgreSQL store: the vector leg and its drift guard, the BM25
lexical leg, the denial report, and the small per-scope reads. Pure SQL builders. The vector
leg reads ``record_vectors`` (HNSW) and checks each candidate's ``records`` row by ``row_key``.

``s`` is the quoted schema; the legs take the WHERE built by ``predicate.predicate`` and read
the ``sc`` CTE of ``predicate.predicate_ctes``. Dimensions and limits are integers
written into the text (a cached generic plan must still see which partial HNSW index applies);
everything else is a bind parameter.
"""

from __future__ import annotations

from collections.abc import Callable

from ragport.adapters.postgres.predicate import (
    RSCOPE,
    SCOPE,
    VISIBLE,
    pointer_cte,
    predicate_ctes,
)
from ragport.adapters.postgres.rows import R_COLUMNS, RECORD_COLUMNS

__all__ = [
    "HNSW_SETTINGS",
    "bm25_ctes",
    "bm25_top",
    "current_generation_sql",
    "denied_sql",
    "embedders_sql",
    "foreign_rows_sql",
    "foreign_sql",
    "forgotten_sql",
    "grants_sql",
    "lexical_sql",
    "source_sql",
    "tsquery",
    "vector_leg",
    "vector_sql",
    "vector_top",
]

HNSW_SETTINGS = (
    "SELECT set_config('hnsw.ef_search', :ef, false) AS ef, "
    "set_config('hnsw.iterative_scan', :scan, false) AS scan"
)
"""Session-level HNSW settings (``:ef``, ``:scan``) for the vector legs that follow."""


# -- small reads -----------------------------------------------------------------------------


def current_generation_sql(s: str) -> str:
    """The scope's pointer (no row for a scope never written)."""
    return f"SELECT pointer FROM {s}.scopes WHERE {SCOPE}"


def source_sql(s: str) -> str:
    """``RECORD_COLUMNS`` of ``:src``'s rows visible at the pointer, by id in code-point order."""
    return (
        pointer_cte(s) + f"SELECT {RECORD_COLUMNS} FROM {s}.records r, sc "
        f'WHERE {RSCOPE} AND r.source_id = :src AND {VISIBLE} ORDER BY r.id COLLATE "C"'
    )


def embedders_sql(s: str) -> str:
    """Distinct (embedder_id, dimensions) of the rows visible at the pointer."""
    return (
        pointer_cte(s) + f"SELECT DISTINCT r.embedder_id, r.dimensions "
        f"FROM {s}.records r, sc WHERE {RSCOPE} AND {VISIBLE}"
    )


def forgotten_sql(s: str) -> str:
    """Ids of the scope's ``forgotten`` tombstones."""
    return f"SELECT id FROM {s}.tombstones WHERE {SCOPE} AND reason = 'forgotten'"


def grants_sql(s: str) -> str:
    """The grants of the sources ``:ids``."""
    return (
        f"SELECT source_id, principal_ids, group_ids, access_version FROM {s}.grants "
        f"WHERE {SCOPE} AND source_id = ANY(:ids)"
    )


# -- the vector leg and its drift guard --------------------------------------------------------


def foreign_sql(s: str) -> str:
    """Distinct (embedder_id, dimensions) of visible rows other than (:e, :ed); needs ``sc``.

    Written as ranges so the (scope, embedder_id, dimensions) index answers it: on a
    consistent scope no heap row is visited at all.
    """
    return (
        "SELECT DISTINCT y.embedder_id, y.dimensions FROM ("
        f"SELECT r.embedder_id, r.dimensions FROM {s}.records r, sc "
        f"WHERE {RSCOPE} AND {VISIBLE} AND (r.embedder_id IS NULL "
        "OR r.embedder_id < :e OR r.embedder_id > :e "
        "OR (r.embedder_id = :e AND (r.dimensions < :ed OR r.dimensions > :ed))) "
        "LIMIT 64) y"
    )


def foreign_rows_sql(s: str) -> str:
    """``foreign_sql`` as a statement of its own."""
    return pointer_cte(s) + f"SELECT * FROM ({foreign_sql(s)}) x"


def _nearest(s: str, dims: int, order: str, where: str, tables: str = "") -> str:
    """The row keys (and ``distance``) of the nearest vectors to ``:q`` whose record passes
    ``where``, in ``order``.

    ``where`` (on ``records r``, and on ``tables`` when it joins them) is checked per candidate
    by a correlated scalar subquery inside the HNSW scan's own filter, not by a join: the
    planner then has no cheaper-looking exact plan than the index walk, and pgvector's
    iterative scan keeps producing candidates until ``LIMIT`` rows passed the predicate.
    """
    return (
        f"SELECT v.row_key, (v.embedding::vector({dims}) <=> :q) AS distance "
        f"FROM {s}.record_vectors v WHERE v.tenant_id = :t AND v.resource_id = :r "
        f"AND v.corpus_id = :c AND v.dimensions = {dims} "
        f"AND (SELECT true FROM {s}.records r{tables} WHERE {where} "
        f"AND r.row_key = v.row_key) {order}"
    )


def vector_leg(
    s: str, dims: int, limit: int, where: str, *, joined: bool = False
) -> tuple[str, str]:
    """``(leg, order)``: the nearest ``limit`` rows of ``dims`` dimensions to ``:q`` that pass
    ``where`` (``RECORD_COLUMNS`` and ``distance``), and its ORDER BY ... LIMIT clause.

    The vectors are in ``record_vectors`` (HNSW there). By default the HNSW walk checks each
    candidate's record (``_nearest``) and the chosen keys are joined back for the columns.
    ``joined=True`` (a metadata filter) writes a plain join instead, so the planner may also
    start from the records the filter's GIN index finds and rank them exactly."""
    order = f"ORDER BY v.embedding::vector({dims}) <=> :q LIMIT {int(limit)}"
    if joined:
        leg = (
            f"SELECT {R_COLUMNS}, (v.embedding::vector({dims}) <=> :q) AS distance "
            f"FROM {s}.record_vectors v JOIN {s}.records r ON r.tenant_id = v.tenant_id "
            "AND r.resource_id = v.resource_id AND r.corpus_id = v.corpus_id "
            "AND r.row_key = v.row_key WHERE v.tenant_id = :t AND v.resource_id = :r "
            f"AND v.corpus_id = :c AND v.dimensions = {dims} AND {where} {order}"
        )
        return leg, order
    leg = (
        f"SELECT {R_COLUMNS}, x.distance FROM ({_nearest(s, dims, order, where)}) x "
        f"JOIN {s}.records r ON {RSCOPE} AND r.row_key = x.row_key"
    )
    return leg, order


def vector_sql(s: str, leg: str, *, guarded: bool) -> str:
    """The vector statement: ``leg`` after ``predicate_ctes``, with the drift guard if asked.

    The drift guard rides along as two index probes: the first and the last (embedder_id,
    dimensions) of every row of the scope, in index order (NULL ids sort last, so a legacy
    row without one is the last), compared with (:e, :ed) as ``first_ok`` and ``last_ok``.
    Both true: no row of the scope, visible or not, can be foreign. Otherwise the exact check
    (``foreign_rows_sql``) runs as a second statement. A guarded statement answers one row
    with a NULL id when the leg found nothing.
    """
    if not guarded:
        return predicate_ctes(s) + leg
    probe = (
        "(SELECT r.embedder_id IS NOT DISTINCT FROM :e AND r.dimensions = :ed "
        f"FROM {s}.records r WHERE {RSCOPE} "
        "ORDER BY r.embedder_id {o}, r.dimensions {o} LIMIT 1)"
    )
    return (
        predicate_ctes(s) + f", ek AS (SELECT {probe.format(o='ASC')} AS first_ok, "
        f"{probe.format(o='DESC')} AS last_ok) "
        f"SELECT ek.first_ok, ek.last_ok, v.* FROM ek LEFT JOIN LATERAL ({leg}) v ON true"
    )


def vector_top(s: str, dims: int, order: str) -> Callable[[str], str]:
    """The vector leg's ``top`` for ``denied_sql``."""
    return lambda where: (
        ", top AS (SELECT r.source_id, r.kind, r.roots "
        f"FROM ({_nearest(s, dims, order, where, ', sc')}) x "
        f"JOIN {s}.records r ON {RSCOPE} AND r.row_key = x.row_key)"
    )


# -- the BM25 lexical leg ------------------------------------------------------------------------


def tsquery(ts_config: str) -> str:
    """``websearch_to_tsquery`` of ``:query`` with its plain terms OR-ed, not AND-ed (kept as
    it is when it holds an exclusion, ``-word``). ``ts_config`` is a validated name."""
    web = f"websearch_to_tsquery('{ts_config}'::regconfig, :query)"
    return (
        f"(CASE WHEN strpos(CAST({web} AS text), '!') > 0 THEN {web} "
        f"ELSE CAST(replace(CAST({web} AS text), ' & ', ' | ') AS tsquery) END)"
    )


def bm25_ctes(s: str, ts_config: str, where: str) -> str:
    """CTEs after ``predicate_ctes()``, the last, ``ranked``, the top ``:k`` candidates.

    ``ranked`` has (id, generation, rank): rows matching the tsquery that pass ``where``,
    by the BM25 of ``PostgresStore.lexical_query``'s docstring. ``ql``: the tsquery's lexemes
    minus the excluded ones, read from its text form (a negated phrase with nested
    parentheses, which websearch syntax cannot produce, would count as included).

    Statistics come from the write-time deltas (``lexical_stats``, ``lexical_terms``) summed
    at the pointer; forgotten rows were taken out of them when their tombstone was written
    (``statements.tombstones_insert``), so no tombstone is read for them: ``st`` is N and
    avgdl, ``w`` df, idf and ``ub``, an upper bound of one lexeme's share of a score
    (``idf * (k1 + 1)``, as tf / (tf + K) < 1).

    Candidates are read through the GIN index, MaxScore-style. By df, rarest first, lexemes
    are rare until the ones before them hold ``2 * :k`` documents; the rest are common.
    ``t1``: the rows holding a rare lexeme, scored exactly, best ``:k``; ``theta`` its last
    score (0 when it has fewer). Common lexemes by ``ub``, smallest first, whose running sum
    of ``ub`` stays below ``theta`` cannot lift a row into the top-k on their own, so the
    second tier reads only the rows holding one of the others (``eq``; none when every
    common lexeme is that weak). The third tier, the matching rows without any query lexeme
    (``a or -b``, score 0), is read only when ``t1`` is short (a one-time filter).
    """
    k1, b = 1.2, 0.75
    # In the tsquery's text form: a negated operand (a lexeme or a parenthesised phrase),
    # skipped, or a quoted lexeme ('' and \\ escaped), kept. (querytree cannot do this: it
    # turns any OR with a negated branch, 'a' | !'b', into T.)
    quoted = r"'(?:[^'\\]|''|\\.)*'"
    operands = rf"(!\s*(?:{quoted}|\((?:{quoted}|[^()'])*\)))|'((?:[^'\\]|''|\\.)*)'"
    at_pointer = "generation <= (SELECT pointer FROM sc)"
    stat_scope = "x.tenant_id = :t AND x.resource_id = :r AND x.corpus_id = :c"
    # A lexeme as a tsquery operand: quoted, with ' and \ doubled.
    operand = r"'''' || replace(replace(c.lexeme, '\', '\\'), '''', '''''') || ''''"

    def tsquery_of(rows: str) -> str:
        """The OR of the lexemes ``c.lexeme`` of ``rows``, as a tsquery (NULL for none)."""
        return (
            f"(SELECT CAST(nullif(array_to_string(ARRAY(SELECT {operand} FROM {rows}), ' | '), "
            "'') AS tsquery))"
        )

    def tier(condition: str, extra: str = "") -> str:
        return (
            "SELECT c.id, c.generation, coalesce(sum(w.idf * h.tf * "
            f"{k1 + 1} / (h.tf + {k1} * ({1 - b} + {b} * c.dl / st.avgdl))), 0) AS rank "
            "FROM (SELECT r.id, r.generation, length(r.tsv) AS dl, "
            "ts_filter(setweight(r.tsv, 'A', ql.lexemes), '{a}') AS hit, "
            "r.tsv @@ q.query AS matched "
            f"FROM {s}.records r, sc, q, ql, tc{extra} WHERE {where} "
            f"AND {condition} OFFSET 0) c CROSS JOIN st "
            "LEFT JOIN LATERAL (SELECT u.lexeme, cardinality(u.positions) AS tf "
            "FROM unnest(c.hit) AS u(lexeme, positions, weights)) h ON true "
            "LEFT JOIN w ON w.lexeme = h.lexeme WHERE c.matched GROUP BY c.id, c.generation"
        )

    return (
        f", q AS (SELECT {tsquery(ts_config)} AS query), "
        "ql AS (SELECT coalesce(array_agg(DISTINCT "
        r"replace(replace(m[2], '''''', ''''), '\\', '\')), '{}') AS lexemes "
        "FROM q, regexp_matches(CAST(q.query AS text), '"
        + operands.replace("'", "''")
        + "', 'g') m WHERE m[1] IS NULL), "
        "sa AS (SELECT coalesce(sum(x.docs), 0) AS n, coalesce(sum(x.length), 0) AS len "
        f"FROM {s}.lexical_stats x WHERE {stat_scope} AND x.{at_pointer}), "
        "st AS (SELECT CAST(sa.n AS float8) AS n, "
        "CAST(sa.len AS float8) / nullif(sa.n, 0) AS avgdl FROM sa), "
        f"w AS (SELECT y.lexeme, y.df, y.idf, y.idf * {k1 + 1} AS ub FROM (SELECT l.lexeme, "
        "d.df, ln(1 + (st.n - d.df + 0.5) / (d.df + 0.5)) AS idf "
        "FROM ql CROSS JOIN LATERAL unnest(ql.lexemes) AS l(lexeme) CROSS JOIN st "
        "CROSS JOIN LATERAL (SELECT CAST(coalesce((SELECT sum(x.docs) "
        f"FROM {s}.lexical_terms x WHERE {stat_scope} AND x.lexeme = l.lexeme "
        f"AND x.{at_pointer}), 0) AS float8) AS df OFFSET 0) d) y), "
        "cw AS (SELECT w.lexeme, w.ub, coalesce(sum(w.df) OVER (ORDER BY w.df, w.lexeme "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) >= 2 * :k AS common FROM w), "
        f"tc AS (SELECT {tsquery_of('cw c WHERE NOT c.common')} AS rq, "
        f"{tsquery_of('cw c')} AS aq), "
        f"t1 AS (SELECT * FROM ({tier('r.tsv @@ tc.rq')}) s "
        'ORDER BY s.rank DESC, s.id COLLATE "C" LIMIT :k), '
        "th AS (SELECT CASE WHEN count(*) < :k THEN 0 ELSE min(t1.rank) END AS theta FROM t1), "
        "ce AS (SELECT c.lexeme, sum(c.ub) OVER (ORDER BY c.ub, c.lexeme) AS cum "
        "FROM cw c WHERE c.common), "
        f"eq AS (SELECT {tsquery_of('ce c, th WHERE c.cum >= th.theta')} AS query), "
        "ranked AS (SELECT s.* FROM (SELECT * FROM t1 UNION ALL "
        + tier("r.tsv @@ eq.query AND NOT coalesce(r.tsv @@ tc.rq, false)", ", eq")
        + " UNION ALL "
        + tier(
            "r.tsv @@ q.query AND NOT coalesce(r.tsv @@ tc.aq, false) "
            "AND (SELECT count(*) FROM t1) < :k"
        )
        + ') s ORDER BY s.rank DESC, s.id COLLATE "C" LIMIT :k) '
    )


def lexical_sql(s: str, ts_config: str, where: str) -> str:
    """The lexical statement: ``RECORD_COLUMNS`` and ``rank`` of the ranked rows, best first."""
    return (
        predicate_ctes(s)
        + bm25_ctes(s, ts_config, where)
        + f"SELECT {R_COLUMNS}, x.rank FROM ranked x JOIN {s}.records r "
        f"ON {RSCOPE} AND r.id = x.id AND r.generation = x.generation "
        'ORDER BY x.rank DESC, r.id COLLATE "C"'
    )


def bm25_top(s: str, ts_config: str) -> Callable[[str], str]:
    """The lexical leg's ``top`` for ``denied_sql``: ``bm25_ctes`` and the ranked rows."""
    return lambda where: (
        bm25_ctes(s, ts_config, where)
        + (
            f", top AS (SELECT r.source_id, r.kind, r.roots FROM ranked x JOIN {s}.records r "
            f"ON {RSCOPE} AND r.id = x.id AND r.generation = x.generation)"
        )
    )


# -- the denial report ---------------------------------------------------------------------------


def denied_sql(s: str, top: str) -> str:
    """The access sources of a leg's top rows, each with its grant (NULLs when it has none).

    ``top`` is the leg's ranking without the grant predicate, as CTEs after
    ``predicate_ctes()`` (``", name AS (...)"``), the last one named ``top`` with the columns
    ``source_id``, ``kind`` and ``roots`` (``vector_top`` or ``bm25_top`` of a WHERE).
    """
    return (
        predicate_ctes(s)
        + top
        + ", srcs AS (SELECT DISTINCT unnest(CASE WHEN kind = 'derived' THEN roots "
        "ELSE ARRAY[source_id] END) AS source_id FROM top) "
        "SELECT s.source_id, g.principal_ids, g.group_ids, g.access_version "
        f"FROM srcs s LEFT JOIN {s}.grants g ON g.tenant_id = :t "
        "AND g.resource_id = :r AND g.corpus_id = :c AND g.source_id = s.source_id"
    )
