"""The write statements of the PostgreSQL unit of work. Pure SQL builders.

``s`` is the quoted schema, the only identifier interpolated; ``where`` fragments are fixed
SQL of this package. Every statement names the full scope (``:t``, ``:r``, ``:c``).

Vectors live in ``record_vectors`` under the record's ``row_key`` (migration 4): they are
written once, by ``copy_vectors``, and deleted in the same statement as their record
(``delete_records``). Every other write (retire, restore, re-key, lineage) updates the narrow
``records`` row only, so no statement here creates a new version of a vector.
"""

from __future__ import annotations

import re
from functools import cache

from ragport.adapters.postgres.predicate import RSCOPE, SCOPE
from ragport.adapters.postgres.queries import length_buckets
from ragport.adapters.postgres.rows import COPY_COLUMNS, RECORD_COLUMNS, VECTOR_COPY_COLUMNS

__all__ = [
    "BSCOPE",
    "DISCARD_ABOVE",
    "FOLD_LOCKED",
    "NAMED_BY",
    "PURGE_RETIRED",
    "PURGE_SOURCE",
    "WHOLE",
    "added_stats",
    "allocate_keys",
    "copy_records",
    "copy_vectors",
    "delete_records",
    "delete_source",
    "dependents_sql",
    "fold_lock",
    "fold_retired",
    "fold_stats",
    "grants_revoke",
    "grants_upsert",
    "lineage_rows_sql",
    "lineage_stats",
    "lineage_update",
    "live_delete",
    "live_insert",
    "lock_scope",
    "named_by_nf",
    "numbered",
    "rekey_stats",
    "rekey_update",
    "restore_above_sql",
    "retire",
    "save_generations",
    "tombstones_insert",
    "tombstones_sql",
    "with_stats",
    "withheld",
]


_BIND = re.compile(r"(?<![:\w]):(\w+)")  # a ``:name`` bind, not a ``::`` cast


@cache
def numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with its ``:name`` binds as PostgreSQL's own ``$1``, ``$2``, ... (one number per
    name), and the names in number order: for ``psycopg.RawCursor``, which sends a
    query as it is, its parameters a sequence in that order. Memoised (the statements of this
    module are a few fixed texts per schema): psycopg caches its parse of a ``%(name)s``
    query only up to 4,096 bytes and parses a longer one on every call (the 5.4 KB ``retire``:
    ~0.27 ms a call under cProfile)."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    query = _BIND.sub(number, sql)
    return query, tuple(names)


# -- scopes and generations ----------------------------------------------------------------------


def lock_scope(s: str, *, generic: bool = False) -> str:
    """Create the scope's row if it is missing (counter, pointer and floor at 0), lock it and
    read it, in one statement: writers of one scope are serialized. The upsert's row lock is
    held to the end of the transaction (a first writer racing another waits on its insert,
    then locks the row it committed); readers never wait. It reads the sole-embedder claim
    (``embedders.py``) and the engine's claim (migration 13). With ``generic`` it also sets
    ``plan_cache_mode`` to ``force_generic_plan`` for the rest of the transaction (``SET
    LOCAL``: its ``COMMIT`` ends it), for a transaction whose other statement must run
    with its generic plan (``delete_source``): one statement fewer than
    ``reads.GENERIC_LOCAL``'s two."""
    generic_mode = (
        ", set_config('plan_cache_mode', 'force_generic_plan', true) AS generic" if generic else ""
    )
    return (
        f"INSERT INTO {s}.scopes AS x (tenant_id, resource_id, corpus_id) VALUES (:t, :r, :c) "
        "ON CONFLICT (tenant_id, resource_id, corpus_id) DO UPDATE SET counter = x.counter "
        "RETURNING x.counter, x.pointer, x.floor, x.sole_embedder, x.sole_dimensions, "
        f"x.embedder_claim{generic_mode}"
    )


def save_generations(s: str, *, claim: bool = False) -> str:
    """Store ``:n`` (counter), ``:p`` (pointer) and ``:f`` (floor); with ``claim``, the
    engine's embedder claim ``:claim`` too."""
    extra = ", embedder_claim = :claim" if claim else ""
    return f"UPDATE {s}.scopes SET counter = :n, pointer = :p, floor = :f{extra} WHERE {SCOPE}"


# -- records -----------------------------------------------------------------------------------


def allocate_keys(s: str) -> str:
    """``:n`` fresh row keys, one per row (a sequence: unique across the schema)."""
    return f"SELECT nextval('{s}.record_keys') AS k FROM generate_series(1, :n)"


def copy_records(s: str) -> str:
    """The binary COPY of ``rows.COPY_COLUMNS``."""
    return f"COPY {s}.records ({', '.join(COPY_COLUMNS)}) FROM STDIN WITH (FORMAT BINARY)"


def copy_vectors(s: str) -> str:
    """The binary COPY of ``rows.VECTOR_COPY_COLUMNS``."""
    return (
        f"COPY {s}.record_vectors ({', '.join(VECTOR_COPY_COLUMNS)}) "
        "FROM STDIN WITH (FORMAT BINARY)"
    )


def delete_records(s: str, where: str) -> str:
    """Physically remove the scope's rows matching ``where`` (one of the fragments below),
    their vectors and their share of the lexical statistics; answers how many rows went."""
    return with_stats(
        s,
        f"DELETE FROM {s}.records WHERE {SCOPE} AND {where} "
        "RETURNING retired_generation AS plus, generation AS minus, tsv, row_key, "
        f"stats_batch AS batch, {NAMED_BY}",
        # A data-modifying CTE runs whether or not the final SELECT reads it.
        f", vx AS (DELETE FROM {s}.record_vectors v WHERE v.tenant_id = :t "
        "AND v.resource_id = :r AND v.corpus_id = :c "
        "AND v.row_key IN (SELECT chg.row_key FROM chg)) SELECT count(*) FROM chg",
        after=live_delete(s, "SELECT chg.id FROM chg WHERE chg.plus IS NULL"),
    )


def source_lexemes(s: str) -> str:
    """The distinct lexemes of every stored row of ``:src`` (before ``purge_source``)."""
    return (
        "SELECT DISTINCT l.lexeme FROM "
        f"{s}.records r CROSS JOIN LATERAL unnest(tsvector_to_array(r.tsv)) AS l(lexeme) "
        f"WHERE {RSCOPE} AND r.source_id = :src"
    )


# A lexeme as a one-term tsquery, matched exactly: a quoted tsquery lexeme is taken as is,
# with backslashes and quotes escaped (doubled).
_LEXEME_QUERY = (
    r"CAST('''' || replace(replace(x.lexeme, '\', '\\'), '''', '''''') || '''' AS tsquery)"
)


def erase_unused_lexemes(s: str) -> str:
    """After a purge: drop the statistics rows of the lexemes ``:lx`` that no stored row of
    the scope holds any more. Their deltas net to zero at every pointer (every deleted row
    subtracted its share, or was withheld and subtracted when its tombstone came), so the
    statistics do not change (their running totals, zero, go too); no word of the purged text
    stays on disk. The ``records`` GIN index answers each lexeme."""
    unused = (
        "x.lexeme = ANY(CAST(:lx AS text[])) "
        f"AND NOT EXISTS (SELECT 1 FROM {s}.records r WHERE {RSCOPE} AND r.tsv @@ {_LEXEME_QUERY})"
    )
    return (
        f"WITH tz AS (DELETE FROM {s}.lexical_term_totals x WHERE {XSCOPE} AND {unused}) "
        f"DELETE FROM {s}.lexical_terms x WHERE {XSCOPE} AND {unused}"
    )


PURGE_SOURCE = "source_id = :src"
"""Every row of ``:src``, all generations."""
DISCARD_ABOVE = "generation > :g"
"""The rows written above ``:g`` (a rollback)."""
PURGE_RETIRED = "retired_generation <= :g"
"""The rows retired at or below ``:g`` (compaction)."""


def retire(s: str, where: str) -> str:
    """Retire the live rows matching ``where`` written below ``:g`` and remove those written
    at ``:g`` (an earlier staged write; their vectors with them), with the lexical statistics
    of both, in one statement; answers how many retired rows were visible at pointer ``:p``.

    A statistics batch (migration 8) all of whose rows this retires, intact (never changed
    row by row), is retired whole: one ``lexical_batches`` row instead of a delta per lexeme
    of its rows. That row also holds what the batch counted (migration 15), which readers
    subtract once ``fold_docs`` is set until ``fold_retired`` takes it out of the running
    totals, so the retirement writes no totals row for it. A batch written with its amounts
    (``STORED``) only gets ``fold_docs``; one written before has them counted from its rows
    here (``_fold_amounts``). The other rows write row deltas
    (``with_stats``). The two sets of rows are disjoint (``generation = :g`` and ``< :g``),
    so one snapshot serves both."""
    return _retirement(s, where)


def _retirement(
    s: str, where: str, *, g: str = ":g", p: str = ":p", first: str = "", answer: str = ""
) -> str:
    """``retire`` with the generation ``g`` and the pointer ``p`` (SQL expressions), the CTEs
    ``first`` before all others, and ``answer`` (a SELECT; by default the count of retired
    rows visible at ``p``)."""
    gone = (
        f"gone AS (DELETE FROM {s}.records WHERE {SCOPE} AND {where} AND generation = {g} "
        "RETURNING retired_generation AS plus, generation AS minus, tsv, row_key, "
        f"stats_batch AS batch, {NAMED_BY}), "
        f"vx AS (DELETE FROM {s}.record_vectors v WHERE v.tenant_id = :t "
        "AND v.resource_id = :r AND v.corpus_id = :c "
        "AND v.row_key IN (SELECT gone.row_key FROM gone)), "
    )
    retired = (
        f"up AS (UPDATE {s}.records SET retired_generation = {g} "
        f"WHERE {SCOPE} AND {where} AND retired_generation IS NULL AND generation < {g} "
        "RETURNING CAST(NULL AS bigint) AS plus, retired_generation AS minus, tsv, generation, "
        f"stats_batch AS batch, {NAMED_BY}), "
    )
    whole = (
        "bc AS (SELECT up.batch, count(*) AS n FROM up WHERE up.batch IS NOT NULL "
        "GROUP BY up.batch), "
        f"whole AS MATERIALIZED (SELECT b.batch, {STORED} AS stored "
        f"FROM {s}.lexical_batches b JOIN bc ON b.batch = bc.batch "
        f"WHERE {BSCOPE} AND {_among('SELECT bc.batch FROM bc')} AND {WHOLE}), ",
        # Only a batch written before its amounts were stored (``STORED``) has them counted.
        _fold_amounts(
            "SELECT up.batch, up.tsv FROM up "
            "WHERE up.batch IN (SELECT whole.batch FROM whole WHERE NOT whole.stored)"
        ),
        f"bw AS (UPDATE {s}.lexical_batches b SET retired_generation = {g}, "
        "fold_docs = b.rows, fold_length = coalesce(fw.length, b.fold_length), "
        "fold_lexemes = coalesce(fl.lexemes, b.fold_lexemes, '{}'), "
        "fold_counts = coalesce(fl.counts, b.fold_counts, '{}') "
        "FROM whole LEFT JOIN fw ON fw.batch = whole.batch "
        "LEFT JOIN fl ON fl.batch = whole.batch "
        f"WHERE {BSCOPE} AND b.batch = whole.batch "
        f"AND {_among('SELECT whole.batch FROM whole')}), ",
    )
    live = live_delete(
        s, "SELECT up.id FROM up UNION ALL SELECT gone.id FROM gone WHERE gone.plus IS NULL"
    )
    return with_stats(
        s,
        f"SELECT plus, minus, tsv, batch, {NAMED_BY} FROM gone "
        f"UNION ALL SELECT plus, minus, tsv, batch, {NAMED_BY} FROM up "
        "WHERE up.batch IS NULL OR up.batch NOT IN (SELECT whole.batch FROM whole)",
        answer or f"SELECT count(*) FILTER (WHERE generation <= {p}) FROM up",
        ctes=first + gone + retired + "".join(whole) + live,
    )


@cache  # a fixed text per schema, sent on every delete: built once
def delete_source(s: str) -> str:
    """The whole delete of ``:src`` after ``lock_scope`` in one statement (the
    ``delete_source`` pushdown): its generation ``g`` taken from the locked scope row as
    ``generations.staged`` takes it (the counter when above the pointer, else the counter
    plus one), its rows retired at ``g`` (``retire``), its grant revoked (``grants_revoke``)
    and ``g`` published (counter and pointer both ``g``, as ``generations.published`` and
    ``save_generations`` leave them). Answers ``retired`` (the rows visible at the old
    pointer, as ``retire``) and ``g``; ``g`` is NULL, and nothing is written, when a derived
    row of any generation names ``:src`` in its lineage (its pinned ones must retire too:
    the engine decides that, step by step).

    ``lock_scope`` must run as a statement of its own first: this statement's snapshot must
    be taken after the lock is held (a lock in one of its CTEs would leave it reading rows
    as they were before a writer it waited for committed)."""
    derived = (
        f"EXISTS (SELECT 1 FROM {s}.records d WHERE d.tenant_id = :t AND d.resource_id = :r "
        "AND d.corpus_id = :c AND d.kind = 'derived' AND d.lineage && ARRAY[CAST(:src AS text)])"
    )
    step = (
        f"sg AS MATERIALIZED (SELECT CASE WHEN {derived} THEN NULL "
        "WHEN x.counter > x.pointer THEN x.counter ELSE x.counter + 1 END AS g, "
        f"x.pointer AS p FROM {s}.scopes x WHERE {XSCOPE}), "
        f"gr AS (UPDATE {s}.grants SET principal_ids = '{{}}', group_ids = '{{}}', "
        f"access_version = 1 WHERE {SCOPE} AND source_id = :src "
        "AND (cardinality(principal_ids) > 0 OR cardinality(group_ids) > 0) "
        "AND (SELECT sg.g FROM sg) IS NOT NULL), "
        f"pb AS (UPDATE {s}.scopes x SET counter = sg.g, pointer = sg.g FROM sg "
        f"WHERE {XSCOPE} AND sg.g IS NOT NULL), "
    )
    return _retirement(
        s,
        "source_id = :src",
        g="(SELECT sg.g FROM sg)",
        p="(SELECT sg.p FROM sg)",
        first=step,
        answer="SELECT (SELECT count(*) FILTER (WHERE up.generation <= sg.p) FROM up) "
        "AS retired, sg.g FROM sg",
    )


def _fold_amounts(rows: str) -> str:
    """CTEs ``fw`` (batch, docs, length) and ``fl`` (batch, lexemes, counts: sorted by lexeme
    under "C", which readers search by bisection: ``queries._unfolded``) of the rows ``rows``
    (a SELECT of ``batch`` and ``tsv``): what each batch counts in the statistics (a row per
    document, and per lexeme the rows holding it)."""
    return (
        f"fr AS MATERIALIZED ({rows}), "
        "fw AS (SELECT fr.batch, count(*) AS docs, sum(length(fr.tsv)) AS length FROM fr "
        "GROUP BY fr.batch), "
        'fl AS (SELECT y.batch, array_agg(y.lexeme ORDER BY y.lexeme COLLATE "C") AS lexemes, '
        'array_agg(y.n ORDER BY y.lexeme COLLATE "C") AS counts FROM (SELECT fr.batch, '
        "l.lexeme, count(*) AS n FROM fr CROSS JOIN LATERAL unnest(tsvector_to_array(fr.tsv)) AS "
        "l(lexeme) GROUP BY fr.batch, l.lexeme) y GROUP BY y.batch), "
    )


FOLD_LOCKED = "ragport.fold_locked"
"""The transaction-local setting ``fold_lock`` sets once it holds the scope's lock, which
``fold_retired(guarded=True)`` requires."""


def fold_lock(s: str) -> str:
    """The scope's lock for a fold, skipped (no row) when a writer holds it. Once held, the
    transaction commits without waiting for the WAL flush (a fold lost to a crash leaves the
    batches unfolded, which readers subtract, and the next fold takes them) and
    ``FOLD_LOCKED`` is set: the outer SELECT sees the locked row alone, so a skipped lock sets
    nothing."""
    return (
        f"SELECT set_config('{FOLD_LOCKED}', 'on', true) AS held, "
        "set_config('synchronous_commit', 'off', true) AS sync "
        f"FROM (SELECT 1 FROM {s}.scopes WHERE {SCOPE} FOR UPDATE SKIP LOCKED) AS x"
    )


def fold_retired(s: str, *, guarded: bool = False) -> str:
    """Take the batches retired whole and not folded yet (``retire``) out of the scope's
    running totals and clear what they stored, in one statement; answers how many.

    The caller holds the scope's lock (``lock_scope``, or ``fold_lock`` in an earlier
    statement of the transaction, so this statement's snapshot is taken after it): no writer
    changes the totals or the batches meanwhile. With ``guarded`` it folds nothing unless
    ``fold_lock`` got the lock (so both can go in one pipeline). Readers subtract a batch's
    stored amounts until this commits and the totals hold them no more after, so at every
    snapshot they read the same statistics."""
    scope = "tenant_id, resource_id, corpus_id"
    held = f" AND current_setting('{FOLD_LOCKED}', true) = 'on'" if guarded else ""
    return (
        "WITH fb AS MATERIALIZED (SELECT b.batch, b.fold_docs, b.fold_length, "
        f"b.fold_lexemes, b.fold_counts FROM {s}.lexical_batches b "
        f"WHERE {BSCOPE} AND b.fold_docs IS NOT NULL{held}), "
        f"cl AS (UPDATE {s}.lexical_batches b SET fold_docs = NULL, fold_length = NULL, "
        "fold_lexemes = NULL, fold_counts = NULL "
        f"WHERE {BSCOPE} AND {_among('SELECT fb.batch FROM fb')}), "
        f"sx AS (INSERT INTO {s}.lexical_stat_totals AS o ({scope}, docs, length) "
        "SELECT :t, :r, :c, -sum(fb.fold_docs), -sum(fb.fold_length) FROM fb "
        f"HAVING count(*) > 0 ON CONFLICT ({scope}) DO UPDATE SET docs = o.docs + "
        "EXCLUDED.docs, length = o.length + EXCLUDED.length), "
        f"tx AS (INSERT INTO {s}.lexical_term_totals AS o ({scope}, lexeme, docs) "
        "SELECT :t, :r, :c, u.lexeme, -sum(u.n) FROM fb CROSS JOIN LATERAL "
        "unnest(fb.fold_lexemes, fb.fold_counts) AS u(lexeme, n) "
        "GROUP BY u.lexeme ORDER BY u.lexeme "
        f"ON CONFLICT ({scope}, lexeme) DO UPDATE SET docs = o.docs + EXCLUDED.docs) "
        "SELECT count(*) FROM fb"
    )


def _derived(s: str, columns: str, rest: str) -> str:
    return f"SELECT {columns} FROM {s}.records WHERE {SCOPE} AND kind = 'derived' AND {rest}"


def dependents_sql(s: str) -> str:
    """Derived rows of every generation whose lineage names any of ``:ids``."""
    return _derived(
        s, RECORD_COLUMNS, 'lineage && CAST(:ids AS text[]) ORDER BY id COLLATE "C", generation'
    )


def rekey_update(s: str) -> str:
    """Move the live rows of ids ``:old`` to ids ``:new`` (pairwise) and source ``:to``."""
    return (
        f"WITH lu AS (UPDATE {s}.live_ids l SET id = m.new_id "
        "FROM unnest(CAST(:old AS text[]), CAST(:new AS text[])) AS m(old_id, new_id) "
        "WHERE l.tenant_id = :t AND l.resource_id = :r AND l.corpus_id = :c "
        "AND l.id = m.old_id) "
        f"UPDATE {s}.records r SET id = m.new_id, source_id = :to "
        "FROM unnest(CAST(:old AS text[]), CAST(:new AS text[])) AS m(old_id, new_id) "
        f"WHERE {RSCOPE} AND r.id = m.old_id AND r.retired_generation IS NULL"
    )


def lineage_rows_sql(s: str) -> str:
    """Derived rows of every generation whose lineage or roots name ``:f``."""
    return _derived(
        s,
        "id, generation, lineage, roots",
        "(lineage && ARRAY[CAST(:f AS text)] OR roots && ARRAY[CAST(:f AS text)])",
    )


def lineage_update(s: str) -> str:
    """Set ``:lineage`` and ``:roots`` of the row (``:id``, ``:g``)."""
    return (
        f"UPDATE {s}.records SET lineage = :lineage, roots = :roots "
        f"WHERE {SCOPE} AND id = :id AND generation = :g"
    )


# -- grants and tombstones -----------------------------------------------------------------------


def grants_upsert(s: str) -> str:
    """Replace the grant of ``:src`` with ``:p`` (principals), ``:g`` (groups), ``:v``."""
    return (
        f"INSERT INTO {s}.grants (tenant_id, resource_id, corpus_id, source_id, "
        "principal_ids, group_ids, access_version) VALUES (:t, :r, :c, :src, :p, :g, :v) "
        "ON CONFLICT (tenant_id, resource_id, corpus_id, source_id) DO UPDATE SET "
        "principal_ids = EXCLUDED.principal_ids, group_ids = EXCLUDED.group_ids, "
        "access_version = EXCLUDED.access_version"
    )


def grants_revoke(s: str) -> str:
    """Replace the grants of ``:ids`` that name a principal or a group by empty ones (what
    ``grants_upsert`` writes for ``Grant(source_id)``); a missing or empty grant stays."""
    return (
        f"UPDATE {s}.grants SET principal_ids = '{{}}', group_ids = '{{}}', access_version = 1 "
        f"WHERE {SCOPE} AND source_id = ANY(CAST(:ids AS text[])) "
        "AND (cardinality(principal_ids) > 0 OR cardinality(group_ids) > 0)"
    )


def named_by_nf(s: str) -> str:
    """``(generation, id)`` of every row (every generation) that an id of the CTE ``nf``
    names by its id, source, lineage or roots."""
    # The rows the ids name, found per id through the indexes on (scope, id), source_id,
    # lineage and roots (never one big array compared with every row). The lineage and roots
    # probes run per id whatever the planner thinks of the scope: each is a LATERAL subquery
    # (OFFSET 0 keeps it one) in which resource and corpus are tested with IS NOT DISTINCT
    # FROM, which no index serves, so the GIN index is the one that narrows the rows (the
    # tenant stays an equality: partitions are pruned and Citus routes by it). Planned as a
    # join, a corpus loaded since the last ANALYZE looked like one row, and the plan compared
    # every id with every row of it (100,000 ids x 10,000 rows: 9 minutes; bench/RESULTS.md).
    by = f"SELECT n.generation, n.id FROM nf JOIN {s}.records n ON n.tenant_id = :t "
    by += "AND n.resource_id = :r AND n.corpus_id = :c AND "
    probe = (
        f"SELECT n.generation, n.id FROM nf CROSS JOIN LATERAL (SELECT generation, id "
        f"FROM {s}.records WHERE tenant_id = :t "
        "AND resource_id IS NOT DISTINCT FROM :r AND corpus_id IS NOT DISTINCT FROM :c AND "
    )
    return " UNION ".join(
        (
            by + "n.id = nf.id",
            by + "n.source_id = nf.id",
            probe + "lineage && ARRAY[nf.id] OFFSET 0) n",
            probe + "roots && ARRAY[nf.id] OFFSET 0) n",
        )
    )


def tombstones_insert(s: str) -> str:
    """Insert tombstones ``:ids`` with ``:reasons`` (pairwise); an existing ``corrected`` one
    becomes ``forgotten``, never the reverse. Answers ``inserted`` per new id.

    New ids are told from updated ones by the statement's own snapshot (``before``), not by
    ``xmax``: a partitioned table cannot return system columns. A tombstone that becomes
    ``forgotten`` takes the rows it names (every generation) out of the lexical statistics
    in the same statement, unless an earlier ``forgotten`` one already did (``with_stats``):
    readers never look at tombstones for statistics."""
    ctes = (
        f"before AS (SELECT id FROM {s}.tombstones WHERE {SCOPE} "
        "AND id = ANY(CAST(:ids AS text[]))), "
        f"written AS (INSERT INTO {s}.tombstones AS old "
        "(tenant_id, resource_id, corpus_id, id, reason) "
        "SELECT :t, :r, :c, x.id, x.reason "
        "FROM unnest(CAST(:ids AS text[]), CAST(:reasons AS text[])) AS x(id, reason) "
        "ON CONFLICT (tenant_id, resource_id, corpus_id, id) DO UPDATE "
        "SET reason = EXCLUDED.reason "
        "WHERE old.reason = 'corrected' AND EXCLUDED.reason = 'forgotten' "
        "RETURNING id, reason), "
        "nf AS (SELECT id FROM written WHERE reason = 'forgotten'), "
    )
    return with_stats(
        s,
        "SELECT r.retired_generation AS plus, r.generation AS minus, r.tsv, "
        f"r.stats_batch AS batch FROM ({named_by_nf(s)}) x JOIN {s}.records r ON {RSCOPE} "
        f"AND r.id = x.id AND r.generation = x.generation WHERE NOT {withheld(s, 'r.')}",
        "SELECT written.id NOT IN (SELECT id FROM before) AS inserted FROM written",
        ctes=ctes,
        guard=False,
    )


def tombstones_sql(s: str) -> str:
    """Every tombstone of the scope, by id in code-point order."""
    return f'SELECT id, reason FROM {s}.tombstones WHERE {SCOPE} ORDER BY id COLLATE "C"'


def restore_above_sql(s: str) -> str:
    """Bring back the rows retired above ``:g`` (a rollback)."""
    return with_stats(
        s,
        f"UPDATE {s}.records r SET retired_generation = NULL FROM (SELECT id, generation, "
        f"retired_generation FROM {s}.records WHERE {SCOPE} AND retired_generation > :g) o "
        f"WHERE {RSCOPE} AND r.id = o.id AND r.generation = o.generation "
        "RETURNING o.retired_generation AS plus, CAST(NULL AS bigint) AS minus, r.tsv, "
        "r.stats_batch AS batch, r.id, r.source_id, r.lineage, r.roots",
        "SELECT count(*) FROM chg",
        after=live_insert(s, "SELECT chg.id FROM chg"),
    )


# -- BM25 statistics -------------------------------------------------------------------------------

NAMED_BY = "id, source_id, lineage, roots"
"""The columns a ``forgotten`` tombstone can name a row by (``withheld``)."""


def withheld(
    s: str, row: str = "chg.", *, lineage: str = "", roots: str = "", besides: str = ""
) -> str:
    """Whether a ``forgotten`` tombstone of the scope names the row ``row`` (a column prefix)
    by its id, its source, its lineage or its roots (``lineage``/``roots``: other arrays to
    test instead of the row's own; ``besides``: a text[] bind whose ids do not count). One
    index probe per name."""
    names = (
        f"ARRAY[{row}id, {row}source_id] || {lineage or row + 'lineage'} "
        f"|| {roots or row + 'roots'}"
    )
    return (
        f"EXISTS (SELECT 1 FROM {s}.tombstones z WHERE z.tenant_id = :t "
        "AND z.resource_id = :r AND z.corpus_id = :c AND z.reason = 'forgotten' "
        + (f"AND NOT z.id = ANY(CAST({besides} AS text[])) " if besides else "")
        + f"AND z.id = ANY({names}))"
    )


def any_forgotten(s: str) -> str:
    """Whether the scope has any ``forgotten`` tombstone (one probe, no row reference)."""
    return (
        f"EXISTS (SELECT 1 FROM {s}.tombstones z WHERE z.tenant_id = :t "
        "AND z.resource_id = :r AND z.corpus_id = :c AND z.reason = 'forgotten')"
    )


BSCOPE = "b.tenant_id = :t AND b.resource_id = :r AND b.corpus_id = :c"
"""The exact scope on the ``lexical_batches b`` alias."""
WHOLE = "NOT b.broken AND b.retired_generation IS NULL AND b.rows = bc.n"
"""A batch ``b`` that a retirement of ``bc.n`` of its rows retires whole: intact (no row of
it changed on its own), live, and every row of it among them."""


def _among(batches: str) -> str:
    """Whether ``lexical_batches b`` is one of ``batches`` (a SELECT of one bigint column),
    as an index condition: one primary-key probe per batch, however many batches the scope
    has (one per source of a batched write; a join on the CTE read every one of them)."""
    return f"b.batch = ANY(ARRAY({batches}))"


XSCOPE = "x.tenant_id = :t AND x.resource_id = :r AND x.corpus_id = :c"
"""The exact scope on the ``x`` alias of a statistics table."""


def live_insert(s: str, rows: str) -> str:
    """A CTE ``li``: the ids ``rows`` (a SELECT of ``id``) become live in ``live_ids`` (the
    primary key refuses an id that is live already; migration 9)."""
    return (
        f"li AS (INSERT INTO {s}.live_ids (tenant_id, resource_id, corpus_id, id) "
        f"SELECT :t, :r, :c, y.id FROM ({rows}) y), "
    )


def live_delete(s: str, rows: str) -> str:
    """A CTE ``ld``: the ids ``rows`` (a SELECT of ``id``) are no longer live. One primary-key
    probe per id (``_among``'s form): as ``l.id IN (rows)`` the planner, which cannot count
    the CTE's rows, joined them with every live id of the scope (9,840 at 10,000 chunks: 53 of
    the 62 ms of a retire of one source)."""
    return (
        f"ld AS (DELETE FROM {s}.live_ids l WHERE l.tenant_id = :t AND l.resource_id = :r "
        f"AND l.corpus_id = :c AND l.id = ANY(ARRAY({rows}))), "
    )


def with_stats(
    s: str,
    changed: str,
    final: str,
    *,
    ctes: str = "",
    after: str = "",
    guard: bool = True,
    batch: bool = False,
) -> str:
    """``changed`` (a data-modifying statement or a query) as the CTE ``chg``, its effect on the
    lexical statistics written in the same statement, then ``final`` (a SELECT over ``chg``).

    ``chg`` answers ``plus``, ``minus`` (generations, NULL for none), ``tsv`` and ``batch`` (the
    row's ``stats_batch``) per row: the row's statistics count from generation ``plus`` on and
    stop counting from ``minus`` on. A new row is (generation, retired_generation); a deleted
    one the reverse; a retirement (NULL, its new retired_generation); a restore (the old
    retired_generation, NULL).

    The statistics count no row a ``forgotten`` tombstone names (its share went when the
    tombstone was written, ``tombstones_insert``), so with ``guard`` ``chg`` also answers
    ``NAMED_BY`` and such rows are skipped. ``ctes`` come before ``chg`` and ``after`` right
    after it (each ``"name AS (...), "``; ``after`` may read ``chg``).

    The deltas are plain inserts, one row per (lexeme, generation) and statement, folded by
    compaction (``fold_stats``); readers read only those above their pointer
    (``queries.stats_at``). Their sums go into the running totals the readers start from
    (``_totals``: one upsert per lexeme); a batch the statement retires whole writes no
    deltas and leaves the totals later (``fold_retired``). With ``batch``
    (``added_stats``) each row's deltas are those of its batch (``chg.batch``; NULL: none)
    and a row per batch is written, intact unless a row of it was skipped. Otherwise they
    are row deltas and
    every batch with a row in ``chg`` is marked ``broken``: its rows' statistics are no
    longer exactly the batch's, so it is never retired whole (``retire``).
    """
    scope = "tenant_id, resource_id, corpus_id"
    # The per-row tombstone probe runs only when the scope has a forgotten tombstone at all
    # (an uncorrelated test, evaluated once), as in the readers' ``not_forgotten``.
    kept = f"NOT {any_forgotten(s)} OR NOT {withheld(s)}" if guard else "true"
    # With ``batch`` each delta carries its row's batch; otherwise none.
    tag = "c.batch" if batch else "CAST(NULL AS bigint)"
    if batch:
        batches = _batches_insert(s)
    else:
        batches = (
            # A broken batch is never retired whole: the amounts stored with it when it was
            # written (its lexemes, words of its rows) go, so no erased text stays behind.
            f"bk AS (UPDATE {s}.lexical_batches b SET broken = true, fold_length = CASE WHEN "
            "b.fold_docs IS NULL THEN NULL ELSE b.fold_length END, fold_lexemes = CASE WHEN "
            "b.fold_docs IS NULL THEN NULL ELSE b.fold_lexemes END, fold_counts = CASE WHEN "
            f"b.fold_docs IS NULL THEN NULL ELSE b.fold_counts END WHERE {BSCOPE} "
            f"AND NOT b.broken AND {_among('SELECT kc.batch FROM kc')}) "
        )
    return (
        f"WITH {ctes}chg AS ({changed}), {after}"
        f"kc AS (SELECT chg.plus, chg.minus, chg.tsv, chg.batch, ({kept}) AS kept FROM chg), "
        f"ev AS (SELECT v.g, v.d, c.tsv, {tag} AS b FROM kc c CROSS JOIN LATERAL "
        "(VALUES (c.plus, 1), (c.minus, -1)) AS v(g, d) WHERE c.kept AND v.g IS NOT NULL), "
        f"ss AS (INSERT INTO {s}.lexical_stats ({scope}, generation, docs, length, batch) "
        "SELECT :t, :r, :c, ev.g, sum(ev.d), sum(ev.d * length(ev.tsv)), ev.b FROM ev "
        "GROUP BY ev.g, ev.b), "
        "td AS (SELECT l.lexeme, ev.g, ev.b, sum(ev.d) AS d FROM ev "
        "CROSS JOIN LATERAL unnest(tsvector_to_array(ev.tsv)) AS l(lexeme) "
        "GROUP BY l.lexeme, ev.g, ev.b), "
        f"ts AS (INSERT INTO {s}.lexical_terms ({scope}, lexeme, generation, docs, batch) "
        "SELECT :t, :r, :c, td.lexeme, td.g, td.d, td.b FROM td "
        # In key order: the inserts walk the primary key's leaf pages once, left to right.
        "ORDER BY td.lexeme, td.g), "
        f"{_totals(s)}{batches}{final}"
    )


def _batches_insert(s: str) -> str:
    """The CTEs of ``with_stats`` (``batch``) that write a ``lexical_batches`` row per batch
    with what it counts (``STORED``): its length and, per lexeme, its rows holding it (its
    ``td`` deltas above zero: a batch's rows are written at one generation, and a retirement
    among them would be a delta below zero at a later one), sorted as ``_fold_amounts``
    sorts them. Its docs are its kept rows (``rows``)."""
    scope = "tenant_id, resource_id, corpus_id"
    return (
        'bl AS (SELECT td.b, array_agg(td.lexeme ORDER BY td.lexeme COLLATE "C") AS lexemes, '
        'array_agg(td.d ORDER BY td.lexeme COLLATE "C") AS counts FROM td '
        "WHERE td.b IS NOT NULL AND td.d > 0 GROUP BY td.b), "
        f"bi AS (INSERT INTO {s}.lexical_batches ({scope}, batch, generation, rows, broken, "
        "fold_length, fold_lexemes, fold_counts) "
        "SELECT :t, :r, :c, k.batch, k.g, k.n, k.broken, k.length, "
        "coalesce(bl.lexemes, '{}'), coalesce(bl.counts, '{}') FROM (SELECT kc.batch, "
        "min(kc.plus) AS g, count(*) FILTER (WHERE kc.kept) AS n, bool_or(NOT kc.kept) AS broken, "
        "coalesce(sum(length(kc.tsv)) FILTER (WHERE kc.kept), 0) AS length "
        "FROM kc WHERE kc.batch IS NOT NULL GROUP BY kc.batch) k "
        "LEFT JOIN bl ON bl.b = k.batch) "
    )


STORED = "b.fold_lexemes IS NOT NULL"
"""Not yet retired, a batch ``b`` whose ``fold_length``, ``fold_lexemes`` and ``fold_counts``
hold what it counts in the statistics, written with it (``_batches_insert``), so a
retirement of it whole (``retire``) only sets ``retired_generation`` and ``fold_docs``: it
reads no row's lexemes. Batches written before are NULL there and counted at retirement.
Readers read the ``fold_*`` amounts of a batch only once ``fold_docs`` is set
(``queries.unfolded_batches``); ``fold_retired`` clears all four."""


def _totals(s: str) -> str:
    """The CTEs of ``with_stats`` that add its deltas (``ev``, ``td``) to the running totals
    (migration 14), and the length buckets of the rows it writes to the scope's
    ``dl_buckets`` (migration 17: only ever ORed in). Upserts: writers of one scope hold its
    lock, and no other scope's row is touched."""
    scope = "tenant_id, resource_id, corpus_id"
    return (
        f"sx AS (INSERT INTO {s}.lexical_stat_totals AS o ({scope}, docs, length, dl_buckets) "
        "SELECT :t, :r, :c, sum(y.d), sum(y.d * length(y.tsv)), "
        f"(SELECT {length_buckets('kc.tsv')} FROM kc WHERE kc.plus IS NOT NULL) "
        "FROM (SELECT ev.d, ev.tsv FROM ev) y HAVING count(*) > 0 "
        f"ON CONFLICT ({scope}) DO UPDATE SET docs = o.docs + EXCLUDED.docs, "
        "length = o.length + EXCLUDED.length, dl_buckets = o.dl_buckets | EXCLUDED.dl_buckets), "
        f"tx AS (INSERT INTO {s}.lexical_term_totals AS o ({scope}, lexeme, docs) "
        "SELECT :t, :r, :c, y.lexeme, sum(y.d) "
        "FROM (SELECT td.lexeme, td.d FROM td) y "
        "GROUP BY y.lexeme HAVING sum(y.d) <> 0 ORDER BY y.lexeme "
        f"ON CONFLICT ({scope}, lexeme) DO UPDATE SET docs = o.docs + EXCLUDED.docs), "
    )


def added_stats(s: str) -> str:
    """Count the rows just written, (``:ids``, ``:gens``) pairwise, into the statistics, each
    in its ``stats_batch``."""
    return with_stats(
        s,
        "SELECT r.generation AS plus, r.retired_generation AS minus, r.tsv, "
        "r.stats_batch AS batch, r.id, r.source_id, r.lineage, r.roots "
        f"FROM {s}.records r JOIN unnest(CAST(:ids AS text[]), CAST(:gens AS bigint[])) "
        f"AS x(id, generation) ON r.id = x.id AND r.generation = x.generation WHERE {RSCOPE}",
        "SELECT count(*) FROM chg",
        after=live_insert(s, "SELECT chg.id FROM chg WHERE chg.minus IS NULL"),
        batch=True,
    )


def _renamed_stats(s: str, rows: str, lineage: str = "", roots: str = "") -> str:
    """The statistics of the rows ``rows`` (a FROM list on ``records r`` and its WHERE) whose
    ``withheld`` changes when they are renamed (``r2.`` the new names, ``lineage``/``roots``
    the new arrays): a row no longer named by a tombstone counts again, a newly named one
    stops counting."""
    before = withheld(s, "r.")
    after = withheld(s, "r2.", lineage=lineage or "r.lineage", roots=roots or "r.roots")
    return with_stats(
        s,
        "SELECT CASE WHEN y.w1 THEN y.retired_generation ELSE y.generation END AS plus, "
        "CASE WHEN y.w1 THEN y.generation ELSE y.retired_generation END AS minus, y.tsv, "
        "y.stats_batch AS batch FROM (SELECT r.generation, r.retired_generation, r.tsv, "
        f"r.stats_batch, {before} AS w0, "
        f"{after} AS w1 FROM {rows}) y WHERE y.w0 <> y.w1",
        "SELECT count(*) FROM chg",
        guard=False,
    )


def rekey_stats(s: str) -> str:
    """Before ``rekey_update`` (same binds): the statistics of the moved rows whose
    tombstone status the new ids and source change."""
    return _renamed_stats(
        s,
        f"{s}.records r JOIN unnest(CAST(:old AS text[]), CAST(:new AS text[])) "
        "AS m(old_id, new_id) ON r.id = m.old_id "
        "CROSS JOIN LATERAL (SELECT m.new_id AS id, CAST(:to AS text) AS source_id) r2 "
        f"WHERE {RSCOPE} AND r.retired_generation IS NULL",
    )


def lineage_stats(s: str) -> str:
    """Before ``lineage_update`` of every row ``lineage_rows_sql`` (``:f``) finds, with
    ``:f`` replaced by ``:to`` in their lineage and roots: the statistics of the rows whose
    tombstone status that changes."""
    return _renamed_stats(
        s,
        f"{s}.records r CROSS JOIN LATERAL (SELECT r.id, r.source_id) r2 "
        f"WHERE {RSCOPE} AND r.kind = 'derived' "
        "AND (r.lineage && ARRAY[CAST(:f AS text)] OR r.roots && ARRAY[CAST(:f AS text)])",
        lineage="array_replace(r.lineage, CAST(:f AS text), CAST(:to AS text))",
        roots="array_replace(r.roots, CAST(:f AS text), CAST(:to AS text))",
    )


def fold_stats(s: str) -> list[str]:
    """Fold the deltas at or below ``:g`` into one row per lexeme at ``:g`` and drop zero rows
    (compaction: no pointer below ``:g`` can be read any more).

    A batch retired at or below ``:g`` counts nowhere any more: its deltas and its row go. A
    broken live batch counts like row deltas: folded, its row goes. An intact live batch (or
    one retired above ``:g``) keeps its deltas, so it can still be retired whole."""
    scope = "tenant_id, resource_id, corpus_id"
    folded = (
        f"(x.batch IS NULL OR x.batch IN (SELECT b.batch FROM {s}.lexical_batches b "
        f"WHERE {BSCOPE} AND (b.retired_generation <= :g "
        "OR (b.broken AND b.retired_generation IS NULL))))"
    )
    live = (
        f"(old.batch IS NULL OR old.batch NOT IN (SELECT b.batch FROM {s}.lexical_batches b "
        f"WHERE {BSCOPE} AND b.retired_generation <= :g))"
    )
    return [
        f"WITH old AS (DELETE FROM {s}.lexical_stats x WHERE {XSCOPE} AND x.generation <= :g "
        f"AND {folded} RETURNING x.docs, x.length, x.batch) "
        f"INSERT INTO {s}.lexical_stats ({scope}, generation, docs, length) "
        f"SELECT :t, :r, :c, :g, sum(old.docs), sum(old.length) FROM old WHERE {live} "
        "HAVING count(*) > 0",
        f"WITH old AS (DELETE FROM {s}.lexical_terms x WHERE {XSCOPE} AND x.generation <= :g "
        f"AND {folded} RETURNING x.lexeme, x.docs, x.batch) "
        f"INSERT INTO {s}.lexical_terms ({scope}, lexeme, generation, docs) "
        f"SELECT :t, :r, :c, old.lexeme, :g, sum(old.docs) FROM old WHERE {live} "
        "GROUP BY old.lexeme HAVING sum(old.docs) <> 0",
        f"DELETE FROM {s}.lexical_batches b WHERE {BSCOPE} AND b.generation <= :g "
        "AND (b.retired_generation <= :g OR (b.broken AND b.retired_generation IS NULL))",
    ]
