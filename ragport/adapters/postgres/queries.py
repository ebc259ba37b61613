"""The read statements of the PostgreSQL store: the vector leg and its drift guard, the BM25
lexical leg, the denial report, and the small per-scope reads. Pure SQL builders. The vector
leg reads ``record_vectors`` (HNSW) and checks each candidate's ``records`` row by ``row_key``.

``s`` is the quoted schema; the legs take the WHERE built by ``predicate.predicate`` and read
the ``sc`` CTE of ``predicate.predicate_ctes``. Dimensions and limits are integers
written into the text (a cached generic plan must still see which partial HNSW index applies);
everything else is a bind parameter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ragport.adapters.postgres.extension import PgVector
from ragport.adapters.postgres.predicate import (
    RSCOPE,
    SCOPE,
    VISIBLE,
    pointer_cte,
    predicate,
    predicate_ctes,
)
from ragport.adapters.postgres.rows import R_COLUMNS, RECORD_COLUMNS

__all__ = [
    "EXACT_SHARE",
    "HNSW_SETTINGS",
    "allowed_leg",
    "bm25_ctes",
    "bm25_top",
    "denied_sql",
    "embedders_sql",
    "foreign_rows_sql",
    "foreign_sql",
    "forgotten_sql",
    "lexical_sql",
    "plain_vector_sql",
    "stats_at",
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


def embedders_sql(s: str) -> str:
    """Distinct (embedder_id, dimensions) of the rows visible at the pointer."""
    return (
        pointer_cte(s) + f"SELECT DISTINCT r.embedder_id, r.dimensions "
        f"FROM {s}.records r, sc WHERE {RSCOPE} AND {VISIBLE}"
    )


def forgotten_sql(s: str) -> str:
    """Ids of the scope's ``forgotten`` tombstones."""
    return f"SELECT id FROM {s}.tombstones WHERE {SCOPE} AND reason = 'forgotten'"


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


def _nearest(s: str, vec: PgVector, dims: int, order: str, where: str, tables: str = "") -> str:
    """The row keys (and ``distance``) of the nearest vectors to ``:q`` whose record passes
    ``where``, in ``order``.

    ``where`` (on ``records r``, and on ``tables`` when it joins them) is checked per candidate
    by a correlated scalar subquery inside the HNSW scan's own filter, not by a join: the
    planner then has no cheaper-looking exact plan than the index walk, and pgvector's
    iterative scan keeps producing candidates until ``LIMIT`` rows passed the predicate.
    """
    return (
        f"SELECT v.row_key, {_distance(vec, dims)} AS distance "
        f"FROM {s}.record_vectors v WHERE v.tenant_id = :t AND v.resource_id = :r "
        f"AND v.corpus_id = :c AND v.dimensions = {dims} "
        f"AND (SELECT true FROM {s}.records r{tables} WHERE {where} "
        f"AND r.row_key = v.row_key) {order}"
    )


def _distance(vec: PgVector, dims: int) -> str:
    """The cosine distance of a row's vector to ``:q``, in the form the HNSW index of
    ``dims`` serves (its expression and operator class; ``indexes.VectorIndexes.create``)."""
    return f"(v.embedding::{vec.type(dims)} {vec.cosine_distance} :q)"


def _unranged(where: str) -> str:
    """``where`` with visibility's generation bound as a filter, not an index condition (as
    the lexical leg writes it, ``bm25_ctes``): the bound holds for nearly every row of the
    scope, yet the planner, which cannot tell (the pointer is a subquery), ANDed a btree
    range scan of ``records_generation`` over the whole scope to the filter's GIN rows
    (bench/explain/filter.txt at 20,000 rows: 4.1 of 5.3 ms, 20,010 rows read to keep 190).
    The scope needs no rewrite here: the join derives it from ``record_vectors``' scope, and
    alone it selects the whole scope, which no bitmap AND takes."""
    return where.replace("r.generation <= ", "r.generation + 0 <= ")


def vector_leg(
    s: str, dims: int, limit: int, where: str, *, vec: PgVector, joined: bool = False
) -> tuple[str, str]:
    """``(leg, order)``: the nearest ``limit`` rows of ``dims`` dimensions to ``:q`` that pass
    ``where`` (``RECORD_COLUMNS`` and ``distance``), and its ORDER BY ... LIMIT clause.

    The vectors are in ``record_vectors`` (HNSW there). By default each candidate of the HNSW
    walk is looked up in ``records`` once, by a LATERAL subquery that checks ``where`` and
    returns the columns: ``OFFSET 0`` keeps the planner from flattening it into a join, so
    ``records`` can never be the outer side, the walk is the only ordered path, and pgvector's
    iterative scan keeps producing candidates until ``LIMIT`` rows passed (one ``records``
    probe per candidate; the scalar-subquery filter this replaced probed each hit twice).
    ``joined=True`` (a metadata filter) writes a plain join instead, so the planner may also
    start from the records the filter's GIN index finds and rank them exactly. ``vec`` names
    pgvector's type and operator (``extension.PgVector``)."""
    order = f"ORDER BY {_distance(vec, dims)} LIMIT {int(limit)}"
    # ties at the cut by id in code-point order (as the hits are sorted, whatever the
    # database's collation): an incremental sort over the walk
    ranked = f'ORDER BY {_distance(vec, dims)}, r.id COLLATE "C" LIMIT {int(limit)}'
    scope = (
        "WHERE v.tenant_id = :t AND v.resource_id = :r "
        f"AND v.corpus_id = :c AND v.dimensions = {dims}"
    )
    if joined:
        leg = (
            f"SELECT {R_COLUMNS}, {_distance(vec, dims)} AS distance "
            f"FROM {s}.record_vectors v JOIN {s}.records r ON r.tenant_id = v.tenant_id "
            "AND r.resource_id = v.resource_id AND r.corpus_id = v.corpus_id "
            f"AND r.row_key = v.row_key {scope} AND {_unranged(where)} {ranked}"
        )
        return leg, order
    leg = (
        f"SELECT {R_COLUMNS}, {_distance(vec, dims)} AS distance "
        f"FROM {s}.record_vectors v CROSS JOIN LATERAL (SELECT {RECORD_COLUMNS} "
        f"FROM {s}.records r WHERE {where} AND r.row_key = v.row_key OFFSET 0) r "
        f"{scope} {ranked}"
    )
    return leg, order


EXACT_SHARE = 2
"""``allowed_leg`` ranks exactly only when the caller's granted sources times this are at
most the scope's grants (at most half of the scope granted): past that the walk is
near-exact and cheaper."""


def allowed_leg(
    s: str, dims: int, limit: int, where: str, grants: str, cap: int, leg: str, *, vec: PgVector
) -> str:
    """``leg`` (the HNSW walk of an access-checked read), or, when the scope has at most
    ``cap`` grants, the caller is granted at most half of them (``EXACT_SHARE``) and those
    allow at most ``cap`` visible rows, the exact nearest ``limit`` of those rows, same
    columns. The caller's ``VectorLeg`` passes no metadata filter here: a filtered read keeps
    the walk (or the exact ranking of the filter's own GIN rows the planner may prefer).

    ``grants`` is the condition on a ``grants g`` row of the scope naming the caller
    (``predicate.granted``). The scope's grant keys are counted first, at most ``cap + 1``
    by an index-only scan (``_share``): past ``cap`` the walk runs with no grant read or
    tested, so the decision costs a bounded key scan in a large scope.
    The share rule: the walk misses neighbours when the grant predicate thins it out (a
    small allowed share of the scope: recall@10 0.946 for a user in 2 of 20 groups); when
    the caller may read most of the scope, the walk is near-exact already and cheaper than
    reading and ranking every allowed vector (all 5,000 rows of a scope granted to one group:
    2.5x the walk's time). ``seen`` holds every grant of the scope under the cap, so the
    share costs no extra read. The caller's rows are read by their sources (one
    ``records_source`` probe each) and derived records by their roots (``records_roots``,
    any root granted), at most ``cap + 1``.
    Under the cap their vectors are read by one primary-key scan of the key list and all
    ranked (no graph walk: recall 1); each row, in distance order, still passes the whole
    ``where`` (visibility, tombstones, every root of a derived record granted) before it
    is returned, ties by id in code-point order (``COLLATE "C"``, as the hits are sorted; an
    incremental sort: only the rows read past the limit). The LATERAL ... OFFSET 0 source
    probes and the key list keep the reads to index scans (a hash join read every row of the
    scope: 45 ms, not 6, at 20,000 rows); the two kinds are disjoint (UNION ALL), so the row
    count stops at ``cap + 1``.
    ``cap`` 0: the walk alone.
    """
    if cap <= 0:
        return leg
    cap = int(cap)
    visible = VISIBLE.replace("sc.pointer", "(SELECT pointer FROM sc)")
    rows = f"SELECT r.row_key FROM {s}.records r WHERE {RSCOPE} AND {visible} AND "
    few = (
        f"SELECT y.row_key FROM (SELECT z.row_key FROM src CROSS JOIN LATERAL ({rows}"
        f"r.kind = 'chunk' AND r.source_id = src.source_id OFFSET 0) z UNION ALL {rows}"
        "r.kind = 'derived' AND r.roots && ARRAY(SELECT source_id FROM src)) y "
        f"WHERE (SELECT ok FROM share) LIMIT {cap + 1}"
    )
    nearest = (
        f"SELECT v.row_key, {_distance(vec, dims)} AS distance FROM {s}.record_vectors v "
        "WHERE v.tenant_id = :t AND v.resource_id = :r AND v.corpus_id = :c "
        f"AND v.row_key = ANY(ARRAY(SELECT row_key FROM few)) AND v.dimensions = {dims} "
        "AND (SELECT ok FROM small) ORDER BY 2"
    )
    return (
        f"SELECT u.* FROM (WITH {_share(s, cap, grants)}"
        f"few AS MATERIALIZED ({few}), small AS MATERIALIZED (SELECT (SELECT ok FROM share) "
        f"AND (SELECT count(*) FROM few) <= {cap} AS ok) "
        f"(SELECT {R_COLUMNS}, x.distance FROM ({nearest}) x CROSS JOIN LATERAL "
        f"(SELECT {RECORD_COLUMNS} FROM {s}.records r WHERE {where} "
        f'AND r.row_key = x.row_key OFFSET 0) r ORDER BY x.distance, r.id COLLATE "C" '
        f"LIMIT {int(limit)}) UNION ALL (SELECT h.* FROM ({leg}) h "
        "WHERE NOT (SELECT ok FROM small))) u"
    )


def _share(s: str, cap: int, grants: str) -> str:
    """``allowed_leg``'s grant CTEs: ``seen`` (at most ``cap + 1`` grants of the scope, each
    with ``ok``: it names the caller, ``grants``), ``src`` (the caller's sources) and
    ``share`` (``ok``: the scope has at most ``cap`` grants, at most half of them the
    caller's). ``share`` counts first, by an index-only scan of ``grants_pkey`` (the scope's
    keys in key order, past the first ``cap``), and reads ``seen`` only under the cap: in a
    larger scope no grant is tested or materialised. Reading ``seen`` first (with ``ok`` per
    grant, then three aggregates over it) cost 1.3 ms for the first 5,001 of 20,000 grants
    where the key scan costs 0.35 (``bench/explain_peers.py``'s 200,000-chunk corpus)."""
    scope = "g.tenant_id = :t AND g.resource_id = :r AND g.corpus_id = :c"
    keys = "g.tenant_id, g.resource_id, g.corpus_id, g.source_id"
    return (
        f"seen AS MATERIALIZED (SELECT g.source_id, ({grants}) AS ok FROM {s}.grants g "
        f"WHERE {scope} LIMIT {cap + 1}), src AS (SELECT source_id FROM seen WHERE ok), "
        f"share AS MATERIALIZED (SELECT NOT EXISTS (SELECT 1 FROM {s}.grants g WHERE {scope} "
        f"ORDER BY {keys} OFFSET {cap}) AND (SELECT {EXACT_SHARE} * count(*) FILTER (WHERE ok) "
        "<= count(*) FROM seen) AS ok), "
    )


def vector_sql(s: str, leg: str, *, guarded: bool) -> str:
    """The vector statement: ``leg`` after ``predicate_ctes``, with the drift guard if asked.

    The guarded statement's first column, ``ok``, is false when a row of the scope may be
    foreign to (:e, :ed); the exact check (``foreign_rows_sql``) then runs as a second
    statement. When the scope's row claims (:e, :ed) as its sole embedder (``embedders``,
    migration 12), ``ok`` is true with nothing more read. Otherwise two index probes read
    the first and the last (embedder_id, dimensions) of every row of the scope, in index
    order (NULL ids sort last, so a legacy row without one is the last): both equal to
    (:e, :ed), no row, visible or not, can be foreign. (PostgreSQL runs a subquery of the
    CASE only when the CASE reaches it.) A guarded statement answers one row with a NULL
    id when the leg found nothing.
    """
    if not guarded:
        return predicate_ctes(s) + leg
    probe = (
        "(SELECT r.embedder_id IS NOT DISTINCT FROM :e AND r.dimensions = :ed "
        f"FROM {s}.records r WHERE {RSCOPE} "
        "ORDER BY r.embedder_id {o}, r.dimensions {o} LIMIT 1)"
    )
    return (
        "WITH sc AS (SELECT coalesce(max(x.pointer), 0) AS pointer, "
        "bool_or(x.sole_embedder = :e AND x.sole_dimensions = :ed) AS sole "
        f"FROM {s}.scopes x WHERE {SCOPE}) "
        "SELECT ek.ok, v.* FROM (SELECT CASE WHEN (SELECT sole FROM sc) THEN true "
        f"ELSE {probe.format(o='ASC')} AND {probe.format(o='DESC')} END AS ok) ek "
        f"LEFT JOIN LATERAL ({leg}) v ON true"
    )


@functools.lru_cache(maxsize=256)
def plain_vector_sql(
    s: str, dims: int, limit: int, guarded: bool, *, vec: PgVector
) -> tuple[str, str]:
    """``(statement, order)`` of a vector query without grants or a filter (built once)."""
    leg, order = vector_leg(s, dims, limit, predicate(s, {}, None, None, scalar=True), vec=vec)
    return vector_sql(s, leg, guarded=guarded), order


def vector_top(s: str, dims: int, order: str, *, vec: PgVector) -> Callable[[str], str]:
    """The vector leg's ``top`` for ``denied_sql``."""
    return lambda where: (
        ", top AS (SELECT r.source_id, r.kind, r.roots "
        f"FROM ({_nearest(s, vec, dims, order, where, ', sc')}) x "
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


IMPACT_TF = (1, 2, 3, 4, 5, 6, 7, 9, 11, 14, 18, 23, 31)
"""Lower bounds of the term-frequency buckets of ``records.tsv_impact`` (migration 7); the
last bucket is open."""
IMPACT_DL = (1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 182, 256, 363, 512, 725, 1024,
             1449, 2048)  # fmt: skip
"""Lower bounds of the document-length buckets (distinct lexemes) of ``records.tsv_impact``."""
IMPACT_MAX_LEXEME = 2000
"""Lexemes longer than this many bytes are left out of ``tsv_impact`` (a key is two bytes
longer than its lexeme, and a lexeme may hold 2,047): the lexical leg reads them in full."""
RARE_ROWS = 1000
"""Query lexemes are read in full, rarest first, while their document frequencies add up to
at most ``max(RARE_ROWS, RARE_PER_K * k)``; the others through their impact buckets."""
RARE_PER_K = 10
PROBE_ROWS = 200
"""The first round reads at most ``max(PROBE_ROWS, PROBE_PER_K * k, N * PROBE_SHARE)`` rows
(N the scope's rows) from the common lexemes' best impact buckets, to learn a k-th score; the
second reads what can still beat it. Measured on the bench corpus: 200 rows minimise the rows
read per query at 100,000 rows, 800 at 1,000,000."""
PROBE_PER_K = 5
PROBE_SHARE = 0.0008
SHARE_SLACK = 1e-9
"""Round two also reads buckets whose bound falls short of a lexeme's share by this much, so
float rounding of the bounds can only make it read more."""
LEVELS = 4
"""Round two's levels of the strongest common lexeme's bound (see ``bm25_ctes``): each is one
more GIN scan pairing e1's keys with e2's, run on every query that reaches round two, which
at 20,000 rows usually reads nothing. 8 -> 4, same ranks (``bench_pg_lexical.py --baseline``,
ABBA, 400 queries, k 20): lexical statement p50 16.6 / 18.8 ms at 20,000 rows, 39.3 / 44.0 ms
at 100,000 (p95 94.0 / 91.8); 2 levels was faster still at p50 but lost at p95 at 100,000
(93 / 60 ms): coarser levels read more rows where round two has work."""
PRESENCE_SLOTS = 6
"""Round two's presence bound: a row holding only common lexemes scores below the sum of their
``ub`` (tf / (tf + K) < 1), so it can reach theta only if that sum does. The
``PRESENCE_SLOTS`` strongest common lexemes are looked up (each weaker one counted as held):
MaxScore's scan (``eq``) also needs ``tsv`` to match the OR of the minimal sets of them
whose bound reaches theta, which the GIN index on ``tsv`` ANDs with the bucket keys' scan
before the heap (a per-row check before scoring, tried too, added plan nodes to every query
for little). ABBA on one connection, same ranks: the peer
benchmark's corpus (``explain_peers.py``), 20,000 rows, 200 six-word queries, k 20, lexical
statement p95 157 -> 117 ms, p50 40 -> 39 ms (load 8 on 2 cores); ``bench_pg_lexical.py
100000 --load copy --baseline``: p50 80.9 -> 80.0 ms, p95 177.7 -> 178.8 ms (its queries
rarely reach MaxScore). Six slots: 64 subsets; eight (256) cost more to build than they
saved at the median."""
BANDS = (0.97, 0.94, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5, 0.4, 0.3, 0.0)
"""The first round's bands, as shares of the best bucket bound: higher bands are read first.
Fine near the top: with the commonest words (df 87-95% of a million rows) three bands (0.7,
0.4, 0) made round one score 800 arbitrary rows of the 344,000 in its first band, its theta
fell short of the true k-th score, and round two read 215,000 rows (2.7 s); ten bands bring
round one's theta within 1% of it."""


TSV = (
    "(SELECT y.v, CAST(length(y.v) AS float8) AS dl "
    "FROM (SELECT ts_delete(r.tsv, ''::text) AS v OFFSET 0) y)"
)
"""A row's ``tsv`` detoasted once, as ``v``, with its length (distinct lexemes), ``dl``; for a
LATERAL join on ``records r``. A ``tsv`` stored out of line or compressed (rows written
before migration 16, or too large to keep in the row) is detoasted again by each reference
to ``r.tsv`` in an expression: the match check, the score's ``ts_filter`` and its length
(once per query lexeme the row holds) read it five times a row. ``ts_delete`` of a lexeme
no tsvector holds (the empty one: ``to_tsvector`` never makes it) returns its argument as
the function received it: detoasted, in memory, once; and a ``tsv`` kept in the row
(migration 16's layout) as it is, not copied. ``OFFSET 0`` keeps the subquery from being
flattened back into those references. Measured at 20,000 rows (``bench/explain/``,
``bench/explain_peers.py``), out of line: the rare lexemes' 871 candidate rows read 8,641
buffers, not 18,003, and the lexical statement's median fell 7% (same answers). In the row:
the copy ``r.tsv || ''::tsvector`` made before (``tsvector_concat``, a new tsvector per
scored row) cost 8% of the statement's backend CPU (7.12 -> 6.53 ms a query, the peer
benchmark's 200 queries, same answers)."""

RSCOPE_FILTER = (
    'r.tenant_id = :t AND r.resource_id COLLATE "C" = :r AND r.corpus_id COLLATE "C" = :c'
)
"""``RSCOPE`` in a form no btree serves past ``tenant_id`` (kept plain: it prunes partitions);
the lexical leg's candidates come from GIN."""


def impact_function(s: str) -> str:
    """``CREATE FUNCTION {s}.bm25_impact(tsvector)``: one key per lexeme of a tsvector, its
    term-frequency bucket (``A``...) and the row's length bucket (``a``...) before the lexeme
    (``tsv_impact`` of migration 7). Lexemes over ``IMPACT_MAX_LEXEME`` bytes are left out."""
    tf = "{" + ",".join(map(str, IMPACT_TF)) + "}"
    dl = "{" + ",".join(map(str, IMPACT_DL)) + "}"
    return (
        f"CREATE OR REPLACE FUNCTION {s}.bm25_impact(v tsvector) RETURNS tsvector "
        "LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ "
        "SELECT array_to_tsvector(ARRAY(SELECT "
        f"chr(64 + width_bucket(cardinality(u.positions), '{tf}'::int[])) "
        f"|| chr(96 + width_bucket(length(v), '{dl}'::int[])) || u.lexeme FROM unnest(v) u "
        f"WHERE octet_length(u.lexeme) <= {IMPACT_MAX_LEXEME} "
        "AND cardinality(u.positions) > 0)) $$"
    )


def length_buckets(tsv: str) -> str:
    """An aggregate: the length buckets of ``impact_function`` of the tsvectors ``tsv`` (SQL),
    bit ``j`` for the bucket of letter ``chr(97 + j)``; 0 for none (empty ones have no key)."""
    dl = "{" + ",".join(map(str, IMPACT_DL)) + "}"
    return (
        f"coalesce(bit_or(1 << (width_bucket(length({tsv}), '{dl}'::int[]) - 1)) "
        f"FILTER (WHERE length({tsv}) > 0), 0)"
    )


def _buckets() -> str:
    """``VALUES`` of every (code, highest tf or NULL when open, lowest length, length bucket's
    bit) bucket of ``impact_function``: the tf bucket's letter, then the length bucket's."""
    rows = []
    for i, _low in enumerate(IMPACT_TF):
        high = "NULL" if i + 1 == len(IMPACT_TF) else str(IMPACT_TF[i + 1] - 1)
        for j, dl in enumerate(IMPACT_DL):
            rows.append(f"('{chr(65 + i)}{chr(97 + j)}', {high}, {dl}, {j})")
    return "(VALUES " + ", ".join(rows) + ") AS bk(code, tf, dl, li)"


def _held_lengths(s: str) -> str:
    """The scope's ``dl_buckets`` (migration 17; all buckets when it has no row): a superset
    of the length buckets of its rows, so ``bk`` names no key no row can hold."""
    return (
        f"coalesce((SELECT x.dl_buckets FROM {s}.lexical_stat_totals x WHERE x.tenant_id = :t "
        "AND x.resource_id = :r AND x.corpus_id = :c), -1)"
    )


_TOP = 9223372036854775807
"""The highest bigint: ``generation > pointer AND generation <= _TOP`` is the open range as
a closed one, which the planner estimates at 0.5% of the rows, not a third (the pointer is
unknown when it plans), so it reads the range from the index: with a batch per source,
``lexical_stats`` has a row per source, and a sequential scan read all of them per query."""


def stats_at(
    s: str,
    table: str,
    columns: tuple[str, ...],
    pointer: str,
    lexeme: str | None = None,
    unfolded: str | None = None,
) -> str:
    """Signed rows (``columns``) whose sum is the statistics of ``table`` (``lexical_terms``
    or ``lexical_stats``, ``x``) at ``pointer`` (SQL), of the one lexeme ``lexeme`` (SQL of a
    text, naming no ``x`` column; ``None``: of every lexeme). ``unfolded``: the name of a
    CTE of ``unfolded_batches`` (the batches not folded yet) instead of that query inline.

    The running totals (migration 14: ``lexical_term_totals``, ``lexical_stat_totals``) hold
    every delta not of a batch retired whole and folded; the deltas written above ``pointer``
    (staged writes, a rollback's) are subtracted, and the deltas at or below it of the
    batches retired whole above it added back: each part an index range past the pointer, so
    with nothing above it a lexeme's statistics are one row, however many writes made them.
    A batch retired whole but not folded yet (migration 15) is still in the totals: what it
    counted, stored in its row, is subtracted (whatever the pointer: the parts above then
    treat it as any batch retired whole); ``_unfolded``. Its ``x`` has the totals' columns."""
    totals = "lexical_term_totals" if table == "lexical_terms" else "lexical_stat_totals"
    scope = "x.tenant_id = :t AND x.resource_id = :r AND x.corpus_id = :c"
    bscope = "b.tenant_id = :t AND b.resource_id = :r AND b.corpus_id = :c"
    where = "" if lexeme is None else f" AND x.lexeme = {lexeme}"
    cols = ", ".join(f"x.{c}" for c in columns)
    negated = ", ".join(f"-x.{c}" for c in columns)
    return (
        f"SELECT {cols} FROM {s}.{totals} x WHERE {scope}{where} "
        f"UNION ALL SELECT {negated} FROM {s}.{table} x WHERE {scope}{where} "
        f"AND x.generation > {pointer} AND x.generation <= {_TOP} "
        f"AND NOT EXISTS (SELECT 1 FROM {s}.lexical_batches b "
        f"WHERE {bscope} AND b.batch = x.batch AND b.retired_generation IS NOT NULL) "
        f"UNION ALL SELECT {cols} FROM {s}.lexical_batches b CROSS JOIN LATERAL "
        f"(SELECT {cols} FROM {s}.{table} x WHERE {scope}{where} AND x.batch = b.batch "
        f"AND x.generation >= b.generation AND x.generation <= {pointer} OFFSET 0) x "
        f"WHERE {bscope} AND b.retired_generation > {pointer} "
        f"UNION ALL SELECT {negated} FROM {unfolded or f'({unfolded_batches(s)})'} b "
        f"CROSS JOIN LATERAL {_unfolded(table, lexeme)}"
    )


def unfolded_batches(s: str) -> str:
    """The scope's batches not folded yet (``stats_at``'s ``unfolded``), their arrays read
    once: ``||`` returns them detoasted, and a MATERIALIZED CTE keeps them so. Looked up in
    the row, each batch's compressed arrays were decompressed per query lexeme (6-lexeme
    queries over 400 unfolded batches: the df lookups 17.7 ms from the rows, 5.3 from this)."""
    return (
        "SELECT b.fold_docs, b.fold_length, b.fold_lexemes || CAST('{}' AS text[]) "
        "AS fold_lexemes, b.fold_counts || CAST('{}' AS bigint[]) AS fold_counts "
        f"FROM {s}.lexical_batches b WHERE b.tenant_id = :t AND b.resource_id = :r "
        "AND b.corpus_id = :c AND b.fold_docs IS NOT NULL"
    )


def _unfolded(table: str, lexeme: str | None) -> str:
    """``x``: what the batch ``b`` (retired whole, not folded) counted in ``table``, of
    ``lexeme`` alone when given.

    ``fold_lexemes`` is sorted under "C" (``statements._fold_amounts``), so ``width_bucket``
    finds the lexeme's place by binary search (the last element <= it): one lookup per batch,
    where unnesting read every lexeme of every unfolded batch per query lexeme (a backlog
    of 400 deleted sources made a lexical query 3.8x slower until the fold)."""
    if table != "lexical_terms":
        return "(VALUES (b.fold_docs, b.fold_length)) AS x(docs, length)"
    if lexeme is None:
        return "unnest(b.fold_lexemes, b.fold_counts) AS x(lexeme, docs)"
    return (
        f'(SELECT b.fold_counts[k.i] AS docs FROM (SELECT width_bucket({lexeme} COLLATE "C", '
        f"b.fold_lexemes) AS i) k WHERE b.fold_lexemes[k.i] = {lexeme}) x"
    )


_K1, _B = 1.2, 0.75
"""BM25's k1 and b."""
_POINTER = "(SELECT pointer FROM sc)"
# In the tsquery's text form: a negated operand (a lexeme or a parenthesised phrase), skipped,
# or a quoted lexeme ('' and \\ escaped), kept. (querytree cannot do this: it turns any OR
# with a negated branch, 'a' | !'b', into T.)
_QUOTED = r"'(?:[^'\\]|''|\\.)*'"
_OPERANDS = rf"(!\s*(?:{_QUOTED}|\((?:{_QUOTED}|[^()'])*\)))|'((?:[^'\\]|''|\\.)*)'"
_ORDER = 'ORDER BY s.rank DESC, s.id COLLATE "C" LIMIT :k'
# One row's score: its tf per query lexeme from its tsvector (the positions of the lexemes of
# p.lex, kept by setweight + ts_filter), idf by the lexeme's place in p.lex. It reads ``d``,
# the row's tsvector detoasted once (``TSV``), never ``r.tsv``.
_SCORE = (
    "(SELECT coalesce(sum(p.idf[array_position(p.lex, u.lexeme)] * cardinality(u.positions) "
    f"* {_K1 + 1} / (cardinality(u.positions) + {_K1} * ({1 - _B} + {_B} * d.dl "
    "/ p.avgdl))), 0) FROM unnest(ts_filter(setweight(d.v, 'A', p.lex), '{a}')) u)"
)


def _rare() -> str:
    """The df budget of the rare lexemes (``RARE_ROWS``; the constants are read when the SQL
    is built: tests patch them)."""
    return f"greatest({int(RARE_ROWS)}, {int(RARE_PER_K)} * :k)"


def _probe() -> str:
    """Round one's probe size (``PROBE_ROWS``)."""
    return (
        f"greatest({int(PROBE_ROWS)}, {int(PROBE_PER_K)} * :k, "
        f"CAST((SELECT st.n FROM st) * {float(PROBE_SHARE)!r} AS bigint))"
    )


def _slack() -> str:
    """``SHARE_SLACK`` as SQL."""
    return f"({float(SHARE_SLACK)!r})"


def _operand(column: str) -> str:
    """``column`` as a tsquery operand: quoted, with ' and \\ doubled."""
    return "'''' || replace(replace(" + column + r", '\', '\\'), '''', '''''') || ''''"


def _tsquery_of(rows: str, column: str = "c.lexeme") -> str:
    """The OR of ``column`` over ``rows``, as a tsquery (NULL for none)."""
    return (
        f"(SELECT CAST(nullif(array_to_string(ARRAY(SELECT {_operand(column)} FROM {rows}), "
        "' | '), '') AS tsquery))"
    )


def _tsqueries(rows: str, column: str = "c.lexeme") -> str:
    """``column`` over ``rows``, each as a one-operand tsquery: the index condition ``@@
    ANY(...)`` is one GIN search per operand, where an OR of them all would be evaluated in
    full for every row the index returns."""
    return f"ARRAY(SELECT CAST({_operand(column)} AS tsquery) FROM {rows})"


def _rows(s: str, where: str, condition: str, extra: str = "", rank: str = _SCORE) -> str:
    """(row_key, id, generation, rank) of the rows matching ``:query`` that pass ``where``
    and ``condition``; ``condition`` reads ``r.tsv`` only where an index serves it, and the
    row's tsvector as ``d.v`` elsewhere (``TSV``). ``rank``: the score (``_SCORE``), or
    another expression of ``d`` (``_bound``)."""
    return (
        f"SELECT r.row_key, r.id, r.generation, {rank} AS rank "
        f"FROM {s}.records r CROSS JOIN LATERAL {TSV} d, sc, q, p, tc{extra} "
        f"WHERE {where} AND {condition} "
        # the function, not the operator: the index conditions are ``condition``'s
        "AND ts_match_vq(d.v, q.query)"
    )


def bm25_ctes(s: str, ts_config: str, where: str) -> str:
    """CTEs after ``predicate_ctes()``, the last, ``ranked``, the top ``:k`` candidates.

    ``ranked`` has (id, generation, rank): rows matching the tsquery that pass ``where``,
    by the BM25 of ``legs.lexical_leg``'s docstring, from the statistics of
    ``_bm25_statistics``. Candidates, exactly (no row that can reach the top-k is skipped):

    - Rare lexemes (rarest first, while their df add up to ``RARE_ROWS``) are read in full
      through the GIN index on ``tsv``; the others are common.
    - Every row's ``tsv_impact`` holds, per lexeme, a key naming its tf bucket and the row's
      length bucket, so ``bk`` knows, for each common lexeme and bucket, an upper bound of
      the lexeme's share of the score of any row in that bucket (``idf * (k1 + 1) * tf /
      (tf + k1 * (1 - b + b * dl / avgdl))`` at the bucket's highest tf and lowest length;
      ``idf * (k1 + 1)`` for the open tf bucket).
    - Round one (``_round_one``) scores the rare rows and a probe of the best buckets, and
      learns ``theta``, the k-th score so far; round two reads every other row that can
      still reach it: two common lexemes' buckets paired (``_conjunction``) or MaxScore over
      the buckets (``_maxscore``), either with the presence bound (``_presence``). Either way a row
      read by neither round scores below ``theta``, and it holds no rare lexeme.
    - The matching rows without any query lexeme (``a or -b``, score 0) are read only when
      the two rounds found fewer than ``:k`` rows (``_ranked``).
    """
    # The scope (past the tenant) and visibility's generation bound as filters, not index
    # conditions: the planner cannot estimate the GIN conditions' arrays and would AND a
    # btree range over the whole scope (records_generation) to every one of them. (Equality
    # under "C" is equality under the database's deterministic collation.)
    where = where.replace(RSCOPE, RSCOPE_FILTER).replace("r.generation <= ", "r.generation + 0 <= ")
    return (
        _bm25_statistics(s, ts_config)
        + _round_one(s, where)
        + _conjunction()
        + _maxscore()
        + _presence()
        + _pairs()
        + _slots(
            "sl", "w c WHERE c.lexeme IN (SELECT e.lexeme FROM ce e)", "(SELECT th.theta FROM th)"
        )
        + _ranked(s, where)
    )


def _bm25_statistics(s: str, ts_config: str) -> str:
    """``q`` (the tsquery), ``ql`` (its lexemes minus the excluded ones, read from its text
    form: a negated phrase with nested parentheses, which websearch syntax cannot produce,
    would count as included), ``ub`` (``unfolded_batches``), ``st``, ``w``, ``p``, ``cw``
    and ``tc``.

    Statistics come from the write-time running totals and the deltas past the pointer
    (``stats_at``); forgotten rows were taken out of them when their tombstone was written
    (``statements.tombstones_insert``), so no tombstone is read for them: ``st`` is N and
    avgdl, ``w`` df, idf and ``ub``, an upper bound of one lexeme's share of a score
    (``idf * (k1 + 1)``, as tf / (tf + K) < 1). ``cw`` says which lexemes are common,
    ``tc`` holds the rare ones (``rq``) and the OR of all (``aq``)."""
    return (
        f", q AS (SELECT {tsquery(ts_config)} AS query), "
        "ql AS (SELECT coalesce(array_agg(DISTINCT "
        r"replace(replace(m[2], '''''', ''''), '\\', '\')), '{}') AS lexemes "
        "FROM q, regexp_matches(CAST(q.query AS text), '"
        + _OPERANDS.replace("'", "''")
        + "', 'g') m WHERE m[1] IS NULL), "
        f"ub AS MATERIALIZED ({unfolded_batches(s)}), "
        "sa AS (SELECT coalesce(sum(x.docs), 0) AS n, coalesce(sum(x.length), 0) AS len "
        f"FROM ({stats_at(s, 'lexical_stats', ('docs', 'length'), _POINTER, None, 'ub')}) x), "
        "st AS (SELECT CAST(sa.n AS float8) AS n, "
        "CAST(sa.len AS float8) / nullif(sa.n, 0) AS avgdl FROM sa), "
        f"w AS (SELECT y.lexeme, y.df, y.idf, y.idf * {_K1 + 1} AS ub FROM (SELECT l.lexeme, "
        "d.df, ln(1 + (st.n - d.df + 0.5) / (d.df + 0.5)) AS idf "
        "FROM ql CROSS JOIN LATERAL unnest(ql.lexemes) AS l(lexeme) CROSS JOIN st "
        "CROSS JOIN LATERAL (SELECT CAST(coalesce((SELECT sum(x.docs) FROM ("
        + stats_at(s, "lexical_terms", ("docs",), _POINTER, "l.lexeme", "ub")
        + ") x), 0) AS float8) AS df OFFSET 0) d) y), "
        "p AS (SELECT ARRAY(SELECT w.lexeme FROM w ORDER BY w.lexeme) AS lex, "
        "ARRAY(SELECT w.idf FROM w ORDER BY w.lexeme) AS idf, st.avgdl FROM st), "
        "cw AS (SELECT w.lexeme, w.df, w.ub, octet_length(w.lexeme) <= "
        f"{IMPACT_MAX_LEXEME} AND sum(w.df) OVER (ORDER BY w.df, w.lexeme) > {_rare()} "
        "AS common FROM w), "
        f"tc AS (SELECT {_tsqueries('cw c WHERE NOT c.common')} AS rq, "
        f"{_tsquery_of('cw c')} AS aq), "
    )


def _band(i: int) -> str:
    """Band ``i`` of the keys: bound in [BANDS[i], BANDS[i - 1]) of the best, so no band
    re-reads a row of a band before it for the same lexeme."""
    above = f" AND c.bound < {BANDS[i - 1]} * bu.u" if i else ""
    return f"c.bound >= {BANDS[i]} * bu.u{above}"


def _round_one(s: str, where: str) -> str:
    """Round one: ``kr`` (the rare rows), ``t0``, ``ce``, ``bk``, ``bu``, ``ba``, ``ka``,
    ``ta`` (its top ``:k``) and ``th`` (its ``theta``).

    ``ka``: the rare rows and, when they are fewer than ``:k``, up to ``PROBE_ROWS`` rows
    (``:k`` otherwise) from the best buckets (``BANDS``, best first) of the common lexemes
    the rare rows' k-th score leaves essential, scored exactly; ``theta`` is the k-th score
    of the round (0 when fewer)."""
    # Every band's keys in one pass over ``bk`` (each key falls in one band).
    band_keys = ", ".join(f"{_keys(_band(i))} AS b{i}" for i in range(len(BANDS)))
    # One scan for every band, best first: a VALUES row per band, each the outer row of one
    # rescan of the records scan (one plan subtree, not one per band; OFFSET 0 keeps the
    # band the outer side, so the bands are read in order).
    each = ", ".join(f"({i}, ba.b{i})" for i in range(len(BANDS)))
    bands = (
        f"SELECT z.* FROM ba CROSS JOIN LATERAL (VALUES {each}) bb(i, keys) CROSS JOIN LATERAL "
        f"({_rows(s, where, 'r.tsv_impact @@ ANY(bb.keys)')} OFFSET 0) z"
    )
    return (
        _slots("sr", "w c", "0")
        + _rare_rows(s, where)
        + "t0 AS (SELECT CASE WHEN count(*) < :k THEN 0 ELSE min(y.rank) END AS theta "
        "FROM (SELECT kr.rank FROM kr ORDER BY kr.rank DESC LIMIT :k) y), "
        # The common lexemes: running sum of ub, smallest first (MaxScore), and rank by ub.
        "ce AS (SELECT c.lexeme, c.ub, c.df, sum(c.ub) OVER (ORDER BY c.ub, c.lexeme) AS cum, "
        "row_number() OVER (ORDER BY c.ub DESC, c.lexeme) AS rn FROM cw c WHERE c.common), "
        # Every (common lexeme, bucket) key with the bound of its share of a score.
        "bk AS (SELECT c.lexeme, bk.code || c.lexeme AS key, c.ub * CASE WHEN bk.tf IS NULL "
        f"THEN 1 ELSE bk.tf / (bk.tf + {_K1} * ({1 - _B} + {_B} * bk.dl / st.avgdl)) END AS bound "
        f"FROM ce c CROSS JOIN st CROSS JOIN {_buckets()} "
        f"WHERE ({_held_lengths(s)} >> bk.li) & 1 = 1), "
        "bu AS (SELECT max(c.bound) AS u FROM bk c JOIN ce e ON e.lexeme = c.lexeme, t0 "
        "WHERE e.cum >= t0.theta), "
        f"ba AS (SELECT {band_keys} FROM bk c JOIN ce e ON e.lexeme = c.lexeme, bu, t0 "
        "WHERE e.cum >= t0.theta), "
        # With :k rows holding a rare lexeme, their k-th score is a fair start already.
        f"ka AS (SELECT * FROM kr UNION ALL (SELECT y.* FROM ({bands}) y "
        f"LIMIT CASE WHEN (SELECT count(*) FROM kr) < :k THEN {_probe()} "
        f"ELSE least({_probe()}, :k) END)), "
        f"ta AS (SELECT * FROM (SELECT DISTINCT ON (x.row_key) x.* FROM ka x) s {_ORDER}), "
        "th AS (SELECT CASE WHEN count(*) < :k THEN 0 ELSE min(ta.rank) END AS theta FROM ta), "
    )


def _rare_rows(s: str, where: str) -> str:
    """``kr``: the rows holding a rare lexeme, only the best ``:k`` of them scored exactly, the
    others only when they can reach the k-th of those.

    ``k0``: every such row with its bound (``_bound`` over ``sr``, the slots of all query
    lexemes), not its score; ``k1``: the ``:k`` rows of ``k0`` with the best bounds, scored;
    then every other row whose bound reaches their k-th score, scored. A row left out scores
    below ``:k`` rows of ``kr``: ``kr``'s top ``:k`` (round one's rows, ``t0``) is that of
    every rare row, and ``kr`` holds ``:k`` rows when they are ``:k`` or more (``ka``). A
    scored row is read again by its key (``k0`` keeps no tsvector: a few rows are read
    twice, where every rare row's tsvector would be kept in memory)."""
    score = (
        f"SELECT r.row_key, r.id, r.generation, {_SCORE} AS rank FROM {s}.records r "
        f"CROSS JOIN LATERAL {TSV} d, p, "
    )
    key = f"{RSCOPE} AND r.row_key = x.row_key"
    return (
        f"k0 AS MATERIALIZED ({_rows(s, where, 'r.tsv @@ ANY(tc.rq)', ', sr', _bound('sr'))}), "
        f"k1 AS ({score}(SELECT * FROM k0 ORDER BY k0.rank DESC LIMIT :k) x WHERE {key}), "
        f"kr AS (SELECT * FROM k1 UNION ALL {score}k0 x, (SELECT CASE WHEN count(*) < :k "
        f"THEN 0 ELSE min(k1.rank) END - {_slack()} AS t FROM k1) m WHERE {key} "
        "AND x.rank >= m.t AND x.row_key NOT IN (SELECT k1.row_key FROM k1)), "
    )


def _rest() -> str:
    """The ``ub`` sum of the common lexemes weaker than the ``PRESENCE_SLOTS`` strongest: the
    presence bound counts them as held, so it says nothing when theta is at most that."""
    return f"(SELECT coalesce(sum(c.ub), 0) FROM ce c WHERE c.rn > {PRESENCE_SLOTS})"


def _keys(condition: str) -> str:
    """An aggregate: the keys ``c.key`` of the rows passing ``condition``, each a one-operand
    tsquery (``_tsqueries``; empty for none)."""
    return (
        f"coalesce(array_agg(CAST({_operand('c.key')} AS tsquery)) FILTER (WHERE {condition}), "
        "'{}')"
    )


def _key_or(condition: str) -> str:
    """An aggregate: the OR of the keys ``c.key`` of the rows passing ``condition``, as one
    tsquery (``_tsquery_of``; NULL for none)."""
    return (
        f"CAST(nullif(array_to_string(array_agg({_operand('c.key')}) FILTER (WHERE {condition}), "
        "' | '), '') AS tsquery)"
    )


def _level(j: int) -> str:
    """The bound at the top of e1's level ``j`` of [tt.lo, tt.t): below ``tt.lo``, t minus
    e2's ub, no row of e1 can reach t."""
    return f"(tt.lo + (tt.t - tt.lo) * {j + 1} / {LEVELS})"


def _conjunction() -> str:
    """Round two's keys when two common lexemes carry the rest (``tt.conj``): ``tt``, ``b1``,
    ``b2`` (and ``cj``, ``_pairs``, after the presence bound).

    e1 and e2, the two with the largest ``ub``, must bound at least ``t`` (theta minus the
    other common lexemes' ``ub``) together: rows where e2 alone reaches ``t`` (``a``), e1
    alone (``b``), and for each of ``LEVELS`` levels of e1's bound between ``t`` minus e2's
    ``ub`` and ``t`` the rows with e1 in the level and e2 at ``t`` minus the level's top or
    more (``l_j``, ``r_j``: both sides in one GIN scan, so the index intersects them).

    Each of these scans also needs the presence bound (``_presence``, ``_HELD``), so the pairs
    are used only when it says something (``held``: theta above the ``ub`` of the common
    lexemes past its slots). Without it a small ``t`` (theta minus the ub of a third and
    fourth common word) let a whole posting list through: on the peer benchmark's corpus
    (20,000 rows, 100 six-word queries, k 20) one query read 4,487 rows in round two, all of
    them holding e1 or e2, where the rows able to reach theta hold two or three of its words;
    round two's mean 264 -> 190 rows a query (median 0 either way)."""
    return (
        "tt AS (SELECT x.*, greatest(x.t - x.u2, 0) AS lo, "
        "x.t > 0 AND x.u2 IS NOT NULL AND x.held AS conj "
        "FROM (SELECT th.theta - coalesce((SELECT sum(e.ub) FROM ce e WHERE e.rn > 2), 0) "
        f"- {_slack()} AS t, e1.ub AS u1, e1.df AS d1, e2.ub AS u2, e2.df AS d2, "
        f"th.theta - {_slack()} > {_rest()} AS held "
        "FROM th LEFT JOIN ce e1 ON e1.rn = 1 LEFT JOIN ce e2 ON e2.rn = 2) x), "
        "b1 AS (SELECT c.key, c.bound FROM bk c JOIN ce z ON z.lexeme = c.lexeme AND z.rn = 1), "
        "b2 AS (SELECT c.key, c.bound FROM bk c JOIN ce z ON z.lexeme = c.lexeme AND z.rn = 2), "
    )


WIDE_ROWS = 300
"""A pair scan ``a`` (``b``) whose keys include a tf-1 key of e2 (e1) of more than this many
rows reads most of the lexeme's rows: it checks the presence condition through the GIN index
on ``tsv`` (reading its lexemes' posting lists, about 1 ms at 20,000 rows) instead of on
each row it reads (about 3.5 us a row: heap, tsvector, match)."""


def _wide(df: str) -> str:
    """An aggregate over ``b1``/``b2`` (``_pairs``): whether the keys reaching ``tt.t``
    include a tf-1 key (most rows hold a lexeme once) of a lexeme of df ``df`` over
    ``WIDE_ROWS``."""
    return (
        f"coalesce(bool_or(left(c.key, 1) = 'A' AND {df} > {int(WIDE_ROWS)}) "
        "FILTER (WHERE c.bound >= tt.t), false)"
    )


def _pairs() -> str:
    """``cj``: the pairs' keys (``_conjunction``), built only when the presence condition
    (``pq.dnf``) can hold: every scan reading them also needs it, so without it they read
    nothing whatever the keys, and building them (every bucket key of e1 and e2, escaped
    and parsed as tsqueries) cost about 1.6 ms in EXPLAIN ANALYZE. On the peer benchmark's queries
    (20,000 rows, k 20) 92 of 200 had the pairs on and no presence condition."""
    # e1's keys (b, l_j) in one pass over b1, e2's (a, r_j) in one over b2.
    built = "tt.conj AND pq.dnf IS NOT NULL"
    e1 = ", ".join(
        [_keys("c.bound >= tt.t") + " AS b", _wide("tt.d1") + " AS wb"]
        + [
            _key_or(f"c.bound < {_level(j)} AND c.bound >= {_level(j - 1) if j else 'tt.lo'}")
            + f" AS l{j}"
            for j in range(LEVELS)
        ]
    )
    e2 = ", ".join(
        [_keys("c.bound >= tt.t") + " AS a", _wide("tt.d2") + " AS wa"]
        + [_key_or(f"c.bound >= tt.t - {_level(j)}") + f" AS r{j}" for j in range(LEVELS)]
    )
    # The wide keys of a and b in one array: one index scan of the presence condition.
    pair_keys = (
        "x1.*, x2.*, CASE WHEN x2.wa THEN x2.a ELSE '{}' END "
        "|| CASE WHEN x1.wb THEN x1.b ELSE '{}' END AS w "
        f"FROM (SELECT {e1} FROM b1 c, tt, pq WHERE {built}) x1, "
        f"(SELECT {e2} FROM b2 c, tt, pq WHERE {built}) x2"
    )
    return f"cj AS (SELECT {pair_keys}), "


def _maxscore() -> str:
    """Round two's keys otherwise (``es``, ``eq``): MaxScore over the buckets. Common lexemes
    by ``ub``, smallest first, whose running sum stays below ``theta`` are not read; ``theta``
    minus that sum is split evenly over the others, and every row holding one of them in a
    bucket whose bound reaches its share is read, if it also passes ``_presence``."""
    return (
        "es AS (SELECT (th.theta - coalesce((SELECT max(e.cum) FROM ce e "
        "WHERE e.cum < th.theta), 0)) / nullif((SELECT count(*) FROM ce e "
        "WHERE e.cum >= th.theta), 0) AS share FROM th), "
        "eq AS (SELECT "
        + _tsqueries(
            "bk c JOIN ce e ON e.lexeme = c.lexeme, th, es, tt WHERE NOT tt.conj "
            f"AND e.cum >= th.theta AND c.bound >= es.share - {_slack()}",
            "c.key",
        )
        + " AS keys), "
    )


def _presence() -> str:
    """Round two's presence bound (``pb``, ``pq``; ``PRESENCE_SLOTS``): a row MaxScore or the
    pairs (``_conjunction``) read must also hold a set of common lexemes whose ``ub`` add up
    to ``theta``.

    ``pb``: the bound of each subset of the ``PRESENCE_SLOTS`` strongest common lexemes (bit
    j: the lexeme of rank j + 1), plus the ub of every weaker one. ``pq.dnf``: the presence
    condition as a tsquery on ``tsv``, the OR of the minimal sets of the slotted lexemes
    whose bound reaches theta (NULL, no row, when no set does). When the empty set does, or
    neither MaxScore nor the pairs read anything, ``dnf`` is NULL and ``keys`` (otherwise
    empty) carries MaxScore's keys alone."""
    return (
        f"pb AS (SELECT ARRAY(SELECT coalesce(sum(c.ub) FILTER (WHERE "
        f"c.rn > {PRESENCE_SLOTS} OR (m.m >> (c.rn - 1)::int) & 1 = 1), 0) "
        f"FROM generate_series(0, {(1 << PRESENCE_SLOTS) - 1}) m(m) LEFT JOIN ce c ON true "
        "GROUP BY m.m ORDER BY m.m) AS bound), "
        "pq AS (SELECT CASE WHEN b.dnf THEN CAST(nullif(array_to_string(ARRAY("
        "SELECT '(' || array_to_string(ARRAY("
        f"SELECT {_operand('c.lexeme')} FROM ce c WHERE c.rn <= {PRESENCE_SLOTS} "
        "AND (m.m >> (c.rn - 1)::int) & 1 = 1), ' & ') || ')' "
        f"FROM generate_series(1, {(1 << PRESENCE_SLOTS) - 1}) m(m), pb "
        "WHERE pb.bound[m.m + 1] >= b.t AND NOT EXISTS (SELECT 1 FROM "
        f"generate_series(0, {PRESENCE_SLOTS - 1}) j(j) WHERE (m.m >> j.j) & 1 = 1 "
        "AND pb.bound[m.m - (1 << j.j) + 1] >= b.t)), ' | '), '') AS tsquery) END AS dnf, "
        "CASE WHEN b.dnf THEN '{}' ELSE b.keys END AS keys "
        "FROM (SELECT x.t, eq.keys, x.t > x.rest AND (cardinality(eq.keys) > 0 OR tt.conj) "
        f"AS dnf FROM eq, tt, (SELECT th.theta - {_slack()} AS t, {_rest()} AS rest FROM th) x) b), "
    )


# Round two's scans: MaxScore's (with the presence bound, or without when it has none), then
# the conjunction's. Each level is one GIN scan with two keys, the OR of e1's keys and the OR
# of e2's: GIN intersects them in the index (skipping through the longer posting lists), so
# only the rows holding both reach the heap. (Reading one side through the index and checking
# the other per row read 15,761 heap rows where 752 held both, at a million rows.)
_HELD = "d.v @@ (SELECT pq.dnf FROM pq)"
"""Round two's presence condition (``_presence``) on the conjunction's scans: checked on each
row their keys read (``d.v``, the row's tsvector in memory), not ANDed through the GIN index
on ``tsv``. Their keys are selective (a few to a few hundred rows), and the presence
condition is an OR of ANDs of common lexemes: its index scan read their posting lists,
about 1 ms at 20,000 rows, once per scan, where the planner chose it (``a`` and ``b``, and
MaxScore's with no keys). MaxScore's scan, whose keys can hold whole posting lists, keeps
the index condition, and runs only when it has keys; so do ``a`` and ``b`` when their keys
are wide (``WIDE_ROWS``)."""


CHECK_SLOTS = 6
"""The per-row bound (``_bound``) looks up this many query lexemes, strongest first; each
weaker one counts its ``ub``."""
TF_EXACT = 3
"""The per-row bound knows a lexeme's tf up to this many positions (``_tf_classes``). Each
slot's CASE has ``TF_EXACT + 2`` branches and the bound is in the plan four times: with
(``CHECK_SLOTS``, ``TF_EXACT``) = (8, 8) a query matching nothing took 1.1 ms of backend CPU
(0.65 before the bound), 0.85 with (6, 3); on the peer benchmark's 200 queries at 20,000
rows (6, 3) took 0.93x the backend CPU of (8, 8), same ranks."""


def _tf_classes(n: int) -> str:
    """``width_bucket`` bounds telling a one-lexeme ``ts_rank`` apart by tf: ``ts_rank`` of a
    one-lexeme tsquery on a tsvector without weights is 0 when the lexeme is absent, else
    ``0.1 * sum(1 / j^2 for j in 1..tf) / 1.6449`` (``calc_rank_or``; 0.0608 for tf 1,
    0.0760 for 2, 0.0827 for 3...), and a weighted position only raises it. The bounds are
    the midpoints (and half the tf-1 value): bucket 0 absent, bucket j tf j for j <= ``n``,
    bucket ``n + 1`` more (or weighted). The gaps (0.00075 between tf 8 and 9) are five
    orders of magnitude above ``ts_rank``'s float4 rounding."""
    ranks, h = [], 0.0
    for j in range(1, n + 2):
        h += 0.1 / (j * j)
        ranks.append(h / 1.64493406685)
    bounds = [ranks[0] / 2] + [(ranks[j] + ranks[j + 1]) / 2 for j in range(n)]
    return "'{" + ",".join(f"{b:.6f}" for b in bounds) + "}'::real[]"


def _slots(name: str, rows: str, theta: str) -> str:
    """``name``: the ``CHECK_SLOTS`` lexemes of ``rows`` (``w`` rows, ``c``) with the largest
    ``ub`` as one-operand tsqueries (``q``), their idf (``i``) and ``ub`` (``u``); ``rest``,
    the ``ub`` of the others; ``t``, ``theta`` (SQL) minus the slack."""
    n = int(CHECK_SLOTS)
    slot = f"FILTER (WHERE x.o <= {n})"
    return (
        f"{name} AS (SELECT coalesce(array_agg(CAST({_operand('x.lexeme')} AS tsquery) "
        f"ORDER BY x.o) {slot}, '{{}}') AS q, "
        f"coalesce(array_agg(x.idf ORDER BY x.o) {slot}, '{{}}') AS i, "
        f"coalesce(array_agg(x.ub ORDER BY x.o) {slot}, '{{}}') AS u, "
        f"coalesce(sum(x.ub) FILTER (WHERE x.o > {n}), 0) AS rest, {theta} - {_slack()} AS t "
        "FROM (SELECT c.lexeme, c.idf, c.ub, row_number() OVER (ORDER BY c.ub DESC, c.lexeme) "
        f"AS o FROM {rows}) x), "
    )


def _bound(z: str) -> str:
    """A row's upper bound over the slots ``z`` (``_slots``), read before the row is scored:
    each slotted lexeme the row (``d``) holds adds its exact share at its tf (``ts_rank``:
    ``_tf_classes``) and the row's length, idf * tf * (k1 + 1) / (tf + K), or its ``ub``
    when held more than ``TF_EXACT`` times; ``z.rest`` counts the others as held."""
    n = int(TF_EXACT)
    classes = _tf_classes(n)
    k = f"{_K1} * ({1 - _B} + {_B} * d.dl / p.avgdl)"
    terms = " + ".join(
        f"coalesce(CASE width_bucket(ts_rank(d.v, {z}.q[{j}]), {classes}) WHEN 0 THEN 0 "
        + " ".join(
            f"WHEN {tf} THEN {z}.i[{j}] * {tf} * {_K1 + 1} / ({tf} + {k})" for tf in range(1, n + 1)
        )
        + f" ELSE {z}.u[{j}] END, 0)"
        for j in range(1, int(CHECK_SLOTS) + 1)
    )
    return f"({z}.rest + {terms})"


def _second(s: str, where: str) -> list[str]:
    """Round two's scans (see the comment above) but the levels': those checking the presence
    condition through the index (MaxScore's, and ``a`` / ``b`` when wide: ``cj.w``), then
    those checking it per row (``a`` / ``b`` when narrow) or not at all (MaxScore's keys
    when it has no presence condition, ``pq.keys``). Each is one plan subtree, rescanned
    per VALUES row whose gate (``go``) holds (OFFSET 0 keeps the VALUES the outer side)."""
    index = (
        "(VALUES (cardinality(eq.keys) > 0, eq.keys), (cj.wa OR cj.wb, cj.w)) x(go, keys)",
        "r.tsv @@ (SELECT pq.dnf FROM pq) AND r.tsv_impact @@ ANY(x.keys)",
    )
    per_row = (
        "(VALUES (true, false, CAST((SELECT pq.keys FROM pq) AS tsquery[])), "
        "(NOT cj.wa, true, cj.a), (NOT cj.wb, true, cj.b)) x(go, held, keys)",
        f"r.tsv_impact @@ ANY(x.keys) AND (NOT x.held OR {_HELD})",
    )
    return [
        f"SELECT z.* FROM eq, cj CROSS JOIN LATERAL {rows} CROSS JOIN LATERAL "
        f"({_rows(s, where, f'{condition} AND {_reach()}', ', sl')} OFFSET 0) z WHERE x.go"
        for rows, condition in (index, per_row)
    ]


def _levels(s: str, where: str) -> str:
    """Round two's level scans (``_conjunction``): a VALUES row per level (``lv``, its two
    key ORs), each the outer row of one rescan of the records scan: one plan subtree for
    every level, not one per level (OFFSET 0 keeps the level the outer side)."""
    each = ", ".join(f"(cj.l{j}, cj.r{j})" for j in range(LEVELS))
    scan = _rows(
        s,
        where,
        f"{_HELD} AND r.tsv_impact @@ lv.l AND r.tsv_impact @@ lv.r AND {_reach()}",
        ", sl",
    )
    return (
        f"SELECT z.* FROM cj CROSS JOIN LATERAL (VALUES {each}) lv(l, r) "
        f"CROSS JOIN LATERAL ({scan} OFFSET 0) z"
    )


_FRESH = "NOT d.v @@ ANY(tc.rq) AND r.row_key NOT IN (SELECT ka.row_key FROM ka)"


def _reach() -> str:
    """Round two's per-row condition: the row was not read before (``_FRESH``) and its bound
    over the common lexemes (``sl``, ``_bound``) reaches theta."""
    return f"{_FRESH} AND {_bound('sl')} >= sl.t"


def _ranked(s: str, where: str) -> str:
    """``kb`` (round two's rows, none read in round one), ``kz`` (the rows holding no query
    lexeme, read only when the rounds found fewer than ``:k``) and ``ranked``."""
    return (
        "kb AS (SELECT DISTINCT ON (y.row_key) y.* FROM ("
        + " UNION ALL ".join(f"({scan})" for scan in [*_second(s, where), _levels(s, where)])
        + ") y), "
        "kz AS ("
        + _rows(
            s,
            where,
            "r.tsv @@ q.query AND NOT coalesce(d.v @@ tc.aq, false) "
            "AND (SELECT count(*) FROM ta) + (SELECT count(*) FROM kb) < :k",
        )
        + "), "
        "ranked AS (SELECT s.id, s.generation, s.rank FROM (SELECT * FROM ta UNION ALL "
        f"SELECT * FROM kb UNION ALL SELECT * FROM kz) s {_ORDER}) "
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
