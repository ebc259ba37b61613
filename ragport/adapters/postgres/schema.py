"""Versioned, idempotent migrations for the ragport schema.

Every table lives in the schema the host names. Every primary key and unique constraint
starts with ``tenant_id`` so the tables can be distributed by tenant (Citus or native
partitioning); ``schema_migrations`` is the one tenant-free bookkeeping table (a reference
table under Citus). Migrations run only on request (``upgrade`` / ``PostgresStore(create=True)``
/ ``ragport db upgrade`` / a host's ``migrate``), in the caller's transaction, serialized by an
advisory lock. ``plan`` builds every pending statement from the catalog before any runs, so
``pending_sql`` prints exactly what ``upgrade`` executes. pgvector's objects are named in the
schema its extension lives in (``extension.PgVector``).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence

import attrs
from sqlalchemy import Connection, text

from ragport.adapters.postgres.embedders import migration_sql as sole_embedder_sql
from ragport.adapters.postgres.extension import PgVector, extension_plan
from ragport.adapters.postgres.indexes import HNSW_EF_CONSTRUCTION, HNSW_M, merge_function_sql
from ragport.adapters.postgres.queries import impact_function, length_buckets
from ragport.adapters.postgres.vector_writes import vector_writes_sql
from ragport.domain.errors import CapabilityError, ValidationError

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "Migration",
    "lock_sql",
    "plan",
    "quote_schema",
    "upgrade",
    "validate_schema_name",
]

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_TEXT_SEARCH_CONFIG = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def validate_schema_name(name: object, *, field: str = "schema") -> str:
    """Accept lower-case identifiers only: no quoting games, no SQL metacharacters."""
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name) or name.startswith("pg_"):
        raise ValidationError(
            f"{field} must match [a-z_][a-z0-9_]{{0,62}} and not start with pg_", field=field
        )
    return name


def validate_text_search_config(name: object) -> str:
    if not isinstance(name, str) or not _TEXT_SEARCH_CONFIG.fullmatch(name):
        raise ValidationError(
            "text_search_config must be a plain identifier", field="text_search_config"
        )
    return name


def quote_schema(name: str) -> str:
    return '"' + validate_schema_name(name) + '"'


def _v1(s: str, ts_config: str, vec: PgVector) -> Sequence[str]:
    """The tables of records, scopes, grants, tombstones and ingestion status (the ``vector``
    extension is installed before, by ``extension.extension_plan``)."""
    scope = "tenant_id text NOT NULL, resource_id text NOT NULL, corpus_id text NOT NULL"
    return (
        f"CREATE SCHEMA IF NOT EXISTS {s}",
        f"""CREATE TABLE IF NOT EXISTS {s}.scopes (
            {scope},
            counter bigint NOT NULL DEFAULT 0,
            pointer bigint NOT NULL DEFAULT 0,
            floor bigint NOT NULL DEFAULT 0,
            CONSTRAINT scopes_pkey PRIMARY KEY (tenant_id, resource_id, corpus_id),
            CONSTRAINT scopes_order CHECK (0 <= floor AND floor <= pointer AND pointer <= counter)
        )""",
        f"""CREATE TABLE IF NOT EXISTS {s}.records (
            {scope},
            id text NOT NULL,
            generation bigint NOT NULL,
            source_id text NOT NULL,
            kind text NOT NULL CHECK (kind IN ('chunk', 'derived')),
            text text NOT NULL,
            metadata jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            embedding {vec.type()} NOT NULL,
            embedder_id text,
            dimensions integer NOT NULL CHECK (dimensions > 0),
            retired_generation bigint,
            content_hash text,
            lineage text[] NOT NULL DEFAULT '{{}}',
            roots text[] NOT NULL DEFAULT '{{}}',
            chunk_index integer,
            start_offset integer,
            end_offset integer,
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('{ts_config}'::regconfig, text)) STORED,
            CONSTRAINT records_pkey PRIMARY KEY (tenant_id, resource_id, corpus_id, id, generation),
            CONSTRAINT records_retired_after_written
                CHECK (retired_generation IS NULL OR retired_generation > generation)
        )""",
        # Exact scans read vectors inline instead of from TOAST (3-4x faster, measured).
        f"ALTER TABLE {s}.records ALTER COLUMN embedding SET STORAGE PLAIN",
        f"""CREATE UNIQUE INDEX IF NOT EXISTS records_live_id
            ON {s}.records (tenant_id, resource_id, corpus_id, id)
            WHERE retired_generation IS NULL""",
        f"""CREATE INDEX IF NOT EXISTS records_source
            ON {s}.records (tenant_id, resource_id, corpus_id, source_id)""",
        f"""CREATE INDEX IF NOT EXISTS records_generation
            ON {s}.records (tenant_id, resource_id, corpus_id, generation)""",
        f"""CREATE INDEX IF NOT EXISTS records_embedders
            ON {s}.records (tenant_id, resource_id, corpus_id, embedder_id, dimensions)""",
        f"CREATE INDEX IF NOT EXISTS records_lineage ON {s}.records USING gin (lineage)",
        f"CREATE INDEX IF NOT EXISTS records_tsv ON {s}.records USING gin (tsv)",
        f"""CREATE TABLE IF NOT EXISTS {s}.grants (
            {scope},
            source_id text NOT NULL,
            principal_ids text[] NOT NULL DEFAULT '{{}}',
            group_ids text[] NOT NULL DEFAULT '{{}}',
            access_version integer NOT NULL DEFAULT 1,
            CONSTRAINT grants_pkey PRIMARY KEY (tenant_id, resource_id, corpus_id, source_id)
        )""",
        f"""CREATE TABLE IF NOT EXISTS {s}.tombstones (
            {scope},
            id text NOT NULL,
            reason text NOT NULL CHECK (reason IN ('forgotten', 'corrected')),
            created_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT tombstones_pkey PRIMARY KEY (tenant_id, resource_id, corpus_id, id)
        )""",
        f"""CREATE TABLE IF NOT EXISTS {s}.ingestion_status (
            {scope},
            source_id text NOT NULL,
            state text NOT NULL CHECK (state IN ('pending', 'indexed', 'failed', 'partial')),
            bytes bigint NOT NULL DEFAULT 0,
            chunks_total integer NOT NULL DEFAULT 0,
            chunks_indexed integer NOT NULL DEFAULT 0,
            error text,
            updated_at timestamptz,
            freshness text CHECK (freshness IN ('current', 'stale', 'unavailable')),
            CONSTRAINT ingestion_status_pkey
                PRIMARY KEY (tenant_id, resource_id, corpus_id, source_id)
        )""",
    )


_PARTITIONED = (
    "scopes",
    "records",
    "grants",
    "tombstones",
    "ingestion_status",
    "record_vectors",
    "live_ids",
    # Created by migrations 2, 3 and 8 in the layout of records: a new partitioned schema
    # keeps each tenant's checkpoints and BM25 statistics in the tenant's partition. (A
    # schema partitioned before this keeps them as plain tables: the rows are the same.)
    "sync_checkpoints",
    "lexical_stats",
    "lexical_terms",
    "lexical_batches",
    "lexical_term_totals",
    "lexical_stat_totals",
)
MAX_PARTITIONS = 1024


def validate_partitions(partitions: object) -> int | None:
    if partitions is None:
        return None
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise ValidationError("partitions must be an integer", field="partitions")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ValidationError(f"partitions must be 1..{MAX_PARTITIONS}", field="partitions")
    return partitions


def _partitioned(s: str, statements: Sequence[str], partitions: int | None) -> list[str]:
    """``statements`` with the tenant tables created ``PARTITION BY HASH (tenant_id)`` and
    their ``partitions`` partitions right after each (so later ALTERs and indexes recurse)."""
    if partitions is None:
        return list(statements)
    out: list[str] = []
    for statement in statements:
        table = next(
            (
                t
                for t in _PARTITIONED
                if statement.startswith(f"CREATE TABLE IF NOT EXISTS {s}.{t} (")
            ),
            None,
        )
        if table is None:
            out.append(statement)
            continue
        out.append(statement + " PARTITION BY HASH (tenant_id)")
        out.extend(
            f"CREATE TABLE IF NOT EXISTS {s}.{table}_p{i} PARTITION OF {s}.{table} "
            f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
            for i in range(partitions)
        )
    return out


def partition_count(conn: Connection, schema: str) -> int | None:
    """How many hash partitions ``records`` has (``None`` when it is a plain table)."""
    row = conn.execute(
        text(
            "SELECT (SELECT count(*) FROM pg_inherits WHERE inhparent = p.partrelid) "
            "FROM pg_partitioned_table p WHERE p.partrelid = to_regclass(:name)"
        ),
        {"name": f"{quote_schema(schema)}.records"},
    ).one_or_none()
    return None if row is None else int(row[0])


def _v2(s: str, ts_config: str) -> Sequence[str]:
    return (
        f"""CREATE TABLE IF NOT EXISTS {s}.sync_checkpoints (
            connector_id text NOT NULL,
            tenant_id text NOT NULL, resource_id text NOT NULL, corpus_id text NOT NULL,
            cursor text NOT NULL,
            version bigint NOT NULL CHECK (version > 0),
            updated_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT sync_checkpoints_pkey
                PRIMARY KEY (tenant_id, resource_id, corpus_id, connector_id)
        )""",
    )


def _v3(s: str) -> Sequence[str]:
    """BM25 statistics kept at write time, as per-generation deltas (see ``statements.stats``).

    ``lexical_stats`` holds, per (scope, generation), the change in row count and in total
    document length (distinct lexemes) of the rows visible from that generation on;
    ``lexical_terms`` the change in document frequency per lexeme. Summing the deltas at or
    below a pointer gives the statistics of that snapshot over every row it shows (forgotten
    rows were subtracted at query time until migration 5). Backfilled from the rows already stored.
    """
    scope = "tenant_id text NOT NULL, resource_id text NOT NULL, corpus_id text NOT NULL"
    return (
        f"""CREATE TABLE IF NOT EXISTS {s}.lexical_stats (
            {scope},
            generation bigint NOT NULL,
            docs bigint NOT NULL DEFAULT 0,
            length bigint NOT NULL DEFAULT 0,
            CONSTRAINT lexical_stats_pkey
                PRIMARY KEY (tenant_id, resource_id, corpus_id, generation)
        )""",
        f"""CREATE TABLE IF NOT EXISTS {s}.lexical_terms (
            {scope},
            lexeme text NOT NULL,
            generation bigint NOT NULL,
            docs bigint NOT NULL DEFAULT 0,
            CONSTRAINT lexical_terms_pkey
                PRIMARY KEY (tenant_id, resource_id, corpus_id, lexeme, generation)
        )""",
        # The lexical leg subtracts forgotten rows found through these (id, source, lineage).
        f"CREATE INDEX IF NOT EXISTS records_roots ON {s}.records USING gin (roots)",
        f"""INSERT INTO {s}.lexical_stats (tenant_id, resource_id, corpus_id, generation,
                docs, length)
            SELECT r.tenant_id, r.resource_id, r.corpus_id, v.g, sum(v.d), sum(v.d * length(r.tsv))
            FROM {s}.records r CROSS JOIN LATERAL
                (VALUES (r.generation, 1), (r.retired_generation, -1)) AS v(g, d)
            WHERE v.g IS NOT NULL GROUP BY r.tenant_id, r.resource_id, r.corpus_id, v.g
            ON CONFLICT DO NOTHING""",
        f"""INSERT INTO {s}.lexical_terms (tenant_id, resource_id, corpus_id, lexeme,
                generation, docs)
            SELECT r.tenant_id, r.resource_id, r.corpus_id, l.lexeme, v.g, sum(v.d)
            FROM {s}.records r CROSS JOIN LATERAL
                (VALUES (r.generation, 1), (r.retired_generation, -1)) AS v(g, d)
            CROSS JOIN LATERAL unnest(tsvector_to_array(r.tsv)) AS l(lexeme)
            WHERE v.g IS NOT NULL
            GROUP BY r.tenant_id, r.resource_id, r.corpus_id, l.lexeme, v.g
            ON CONFLICT DO NOTHING""",
    )


def _v4(s: str, schema: str, vec: PgVector) -> Sequence[str]:
    """Vectors in a table of their own, so that changing a row never rewrites its vector.

    ``records`` gets a surrogate ``row_key`` (from the ``record_keys`` sequence, unique per
    scope); ``record_vectors`` holds (scope, row_key, dimensions, embedding) and the
    per-dimension HNSW indexes (same names, ``records_hnsw_<d>``). Retiring, restoring,
    re-keying and lineage rewrites update the narrow ``records`` row only; the vector row is
    written once and deleted with its record. Backfilled from the rows already stored; the
    HNSW indexes that existed are rebuilt on the new table. Created partitioned like
    ``records`` (``upgrade`` passes the statements through ``_partitioned``).
    """
    scope = "tenant_id text NOT NULL, resource_id text NOT NULL, corpus_id text NOT NULL"
    rebuild = (
        "DO $$ DECLARE d integer; BEGIN "
        "FOR d IN SELECT CAST(substring(indexname FROM 14) AS integer) FROM pg_indexes "
        f"WHERE schemaname = '{schema}' AND tablename = 'records' "
        "AND indexname ~ '^records_hnsw_[0-9]+$' LOOP "
        f"EXECUTE format('DROP INDEX {s}.%I', 'records_hnsw_' || d); "
        f"EXECUTE format('CREATE INDEX %I ON {s}.record_vectors USING hnsw "
        f"((embedding::{vec.type()}(%s)) {vec.cosine_ops}) "
        f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) WHERE dimensions = %s', "
        "'records_hnsw_' || d, d, d); END LOOP; END $$"
    )
    return (
        f"CREATE SEQUENCE IF NOT EXISTS {s}.record_keys",
        # One rewrite of the existing rows, each getting its key (a volatile default).
        f"ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS row_key bigint NOT NULL "
        f"DEFAULT nextval('{s}.record_keys')",
        f"""CREATE TABLE IF NOT EXISTS {s}.record_vectors (
            {scope},
            row_key bigint NOT NULL,
            dimensions integer NOT NULL CHECK (dimensions > 0),
            embedding {vec.type()} NOT NULL,
            CONSTRAINT record_vectors_pkey PRIMARY KEY (tenant_id, resource_id, corpus_id, row_key)
        )""",
        # Exact scans read vectors inline instead of from TOAST (3-4x faster, measured).
        f"ALTER TABLE {s}.record_vectors ALTER COLUMN embedding SET STORAGE PLAIN",
        f"""INSERT INTO {s}.record_vectors (tenant_id, resource_id, corpus_id, row_key,
                dimensions, embedding)
            SELECT tenant_id, resource_id, corpus_id, row_key, dimensions, embedding
            FROM {s}.records ON CONFLICT DO NOTHING""",
        "SET LOCAL maintenance_work_mem = '1GB'",
        rebuild,
        f"ALTER TABLE {s}.records DROP COLUMN IF EXISTS embedding",
        f"""CREATE UNIQUE INDEX IF NOT EXISTS records_row_key
            ON {s}.records (tenant_id, resource_id, corpus_id, row_key)""",
    )


def _v5(s: str) -> Sequence[str]:
    """Forgotten rows out of the BM25 statistics at write time, and deltas as plain inserts.

    Until now the lexical leg subtracted the visible forgotten rows at query time, a cost
    that grew with the scope's tombstones; from here on a ``forgotten`` tombstone takes the
    rows it names out of the statistics when it is written (``statements.tombstones_insert``)
    and the other writes skip them. This backfill takes out, as if deleted, every stored row
    a ``forgotten`` tombstone names now. The deltas get a ``seq`` in their primary key, so a
    write appends its rows instead of upserting them (readers sum them anyway; compaction
    folds them). Touches only ``lexical_stats``, ``lexical_terms`` and reads ``records`` and
    ``tombstones``, so it applies whatever migration 4 changed.
    """
    named = (
        f"EXISTS (SELECT 1 FROM {s}.tombstones z WHERE z.tenant_id = r.tenant_id "
        "AND z.resource_id = r.resource_id AND z.corpus_id = r.corpus_id "
        "AND z.reason = 'forgotten' "
        "AND z.id = ANY(ARRAY[r.id, r.source_id] || r.lineage || r.roots))"
    )
    out: list[str] = []
    for table, key in (("lexical_stats", "generation"), ("lexical_terms", "lexeme, generation")):
        out += [
            f"ALTER TABLE {s}.{table} ADD COLUMN IF NOT EXISTS seq bigint "
            "GENERATED BY DEFAULT AS IDENTITY",
            f"ALTER TABLE {s}.{table} DROP CONSTRAINT IF EXISTS {table}_pkey",
            f"ALTER TABLE {s}.{table} ADD CONSTRAINT {table}_pkey "
            f"PRIMARY KEY (tenant_id, resource_id, corpus_id, {key}, seq)",
        ]
    return (
        *out,
        f"""INSERT INTO {s}.lexical_stats (tenant_id, resource_id, corpus_id, generation,
                docs, length)
            SELECT r.tenant_id, r.resource_id, r.corpus_id, v.g, sum(v.d), sum(v.d * length(r.tsv))
            FROM {s}.records r CROSS JOIN LATERAL
                (VALUES (r.retired_generation, 1), (r.generation, -1)) AS v(g, d)
            WHERE v.g IS NOT NULL AND {named}
            GROUP BY r.tenant_id, r.resource_id, r.corpus_id, v.g""",
        f"""INSERT INTO {s}.lexical_terms (tenant_id, resource_id, corpus_id, lexeme,
                generation, docs)
            SELECT r.tenant_id, r.resource_id, r.corpus_id, l.lexeme, v.g, sum(v.d)
            FROM {s}.records r CROSS JOIN LATERAL
                (VALUES (r.retired_generation, 1), (r.generation, -1)) AS v(g, d)
            CROSS JOIN LATERAL unnest(tsvector_to_array(r.tsv)) AS l(lexeme)
            WHERE v.g IS NOT NULL AND {named}
            GROUP BY r.tenant_id, r.resource_id, r.corpus_id, l.lexeme, v.g""",
    )


def _v6(s: str) -> Sequence[str]:
    """A GIN index (``jsonb_path_ops``) on ``records.metadata``: it serves the containment
    test that metadata equality filters compile to (``filters.compile_filter``), so a
    selective filter is read from the index and ranked exactly instead of thinning an HNSW
    walk. On a partitioned schema the index is created on every partition."""
    return (
        f"CREATE INDEX IF NOT EXISTS records_metadata ON {s}.records "
        "USING gin (metadata jsonb_path_ops)",
    )


def _v7(s: str, tsv: str) -> Sequence[str]:
    """``records.tsv_impact``: the row's lexemes keyed by their term-frequency bucket and the
    row's length bucket (``queries.impact_function``), generated from the same text search
    configuration as ``tsv`` (``tsv``, its generation expression from the catalog), with a
    GIN index. It lets the lexical leg read a common lexeme's rows by impact bucket instead
    of in full (``queries.bm25_ctes``). Adding the column rewrites ``records`` once."""
    return (
        impact_function(s),
        f"ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS tsv_impact tsvector "
        f"GENERATED ALWAYS AS ({s}.bm25_impact({tsv})) STORED",
        f"CREATE INDEX IF NOT EXISTS records_tsv_impact ON {s}.records USING gin (tsv_impact)",
    )


def _v8(s: str) -> Sequence[str]:
    """BM25 statistics by write batch: a source deleted whole leaves them in one row.

    Each ``records.add`` of rows of one generation is a batch (``lexical_batches``, keyed by
    its first row key): its rows carry ``records.stats_batch`` and its deltas in
    ``lexical_stats``/``lexical_terms`` carry ``batch``. A batch's deltas count at a pointer
    until the batch is retired there, and a statement that retires every row of an intact
    batch retires the batch (one row) instead of writing a delta per lexeme. Any other change
    to a batch's rows writes row deltas as before and marks the batch ``broken`` (it is never
    retired whole). Existing rows and deltas have no batch and count as before; adding the
    nullable columns rewrites nothing (``statements.with_stats``, ``queries.stats_at``).
    """
    scope = "tenant_id text NOT NULL, resource_id text NOT NULL, corpus_id text NOT NULL"
    return (
        f"ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS stats_batch bigint",
        f"ALTER TABLE {s}.lexical_stats ADD COLUMN IF NOT EXISTS batch bigint",
        f"ALTER TABLE {s}.lexical_terms ADD COLUMN IF NOT EXISTS batch bigint",
        f"""CREATE TABLE IF NOT EXISTS {s}.lexical_batches (
            {scope},
            batch bigint NOT NULL,
            generation bigint NOT NULL,
            rows bigint NOT NULL CHECK (rows >= 0),
            retired_generation bigint,
            broken boolean NOT NULL DEFAULT false,
            CONSTRAINT lexical_batches_pkey PRIMARY KEY (tenant_id, resource_id, corpus_id, batch),
            CONSTRAINT lexical_batches_retired_after_written
                CHECK (retired_generation IS NULL OR retired_generation > generation)
        )""",
        # The readers ask for the retired batches at or below a pointer.
        f"""CREATE INDEX IF NOT EXISTS lexical_batches_retired
            ON {s}.lexical_batches (tenant_id, resource_id, corpus_id, retired_generation)
            WHERE retired_generation IS NOT NULL""",
    )


RECORDS_FILLFACTOR = 50
"""Percent of each ``records`` page filled by inserts (migration 9): the rest holds the new
versions of its rows when they are retired or restored (HOT updates)."""


def _v9(s: str) -> Sequence[str]:
    """Retirement as a heap-only (HOT) update, one live row per id kept in ``live_ids``.

    A PostgreSQL update is heap-only (no entry in any index, the WAL record only the changed
    bytes) when no column an index names, predicates included, changes and the new version
    fits on the page. The partial unique index ``records_live_id`` (``WHERE
    retired_generation IS NULL``) was the only index naming ``retired_generation``: it is
    replaced by the table ``live_ids``, one row per live (scope, id) under a primary key,
    which the statements that add, retire, restore, delete or re-key rows keep in the same
    statement (``statements``), so the database still refuses a second live row of an id.
    ``records`` (each partition) gets fillfactor ``RECORDS_FILLFACTOR``: pages written from
    now on keep room for a second version of each row (the heap of ``records`` about
    doubles; vectors are elsewhere). Existing rows are not rewritten: their pages are full,
    so their retirements stay ordinary updates until the table is rewritten."""
    scope = "tenant_id text NOT NULL, resource_id text NOT NULL, corpus_id text NOT NULL"
    fill = (
        "DO $$ DECLARE rel regclass; BEGIN "
        "FOR rel IN SELECT c.oid::regclass FROM pg_class c "
        f"WHERE c.oid = to_regclass('{s}.records') AND c.relkind = 'r' "
        "UNION ALL SELECT i.inhrelid::regclass FROM pg_inherits i "
        f"WHERE i.inhparent = to_regclass('{s}.records') LOOP "
        f"EXECUTE format('ALTER TABLE %s SET (fillfactor = {RECORDS_FILLFACTOR})', rel); "
        "END LOOP; END $$"
    )
    return (
        f"""CREATE TABLE IF NOT EXISTS {s}.live_ids (
            {scope},
            id text NOT NULL,
            CONSTRAINT live_ids_pkey PRIMARY KEY (tenant_id, resource_id, corpus_id, id)
                DEFERRABLE INITIALLY IMMEDIATE
        )""",
        f"""INSERT INTO {s}.live_ids (tenant_id, resource_id, corpus_id, id)
            SELECT tenant_id, resource_id, corpus_id, id FROM {s}.records
            WHERE retired_generation IS NULL""",
        f"DROP INDEX IF EXISTS {s}.records_live_id",
        fill,
    )


TOTALS_FILLFACTOR = 70
"""Percent of each ``lexical_term_totals`` page filled by inserts: every write updates its
lexemes' rows, and the room left lets those updates stay heap-only (HOT)."""


def _fillfactor(s: str, table: str, percent: int) -> str:
    """Set ``table``'s fillfactor, on each partition when it is partitioned (a partitioned
    table takes no storage parameters)."""
    return (
        "DO $$ DECLARE rel regclass; BEGIN "
        "FOR rel IN SELECT c.oid::regclass FROM pg_class c "
        f"WHERE c.oid = to_regclass('{s}.{table}') AND c.relkind = 'r' "
        "UNION ALL SELECT i.inhrelid::regclass FROM pg_inherits i "
        f"WHERE i.inhparent = to_regclass('{s}.{table}') LOOP "
        f"EXECUTE format('ALTER TABLE %s SET (fillfactor = {int(percent)})', rel); "
        "END LOOP; END $$"
    )


def _v14(s: str) -> Sequence[str]:
    """BM25 statistics as running totals, so a read costs the same however many writes came
    before it.

    ``lexical_term_totals`` holds, per (scope, lexeme), and ``lexical_stat_totals``, per
    scope, the sum of every statistics delta (``lexical_terms``, ``lexical_stats``) that is
    not of a batch retired whole (at any generation): the statistics at the scope's highest
    generation. Every statement that writes deltas adds them to the totals, and one that
    retires a batch whole subtracts the batch's rows (``statements.with_stats``). A reader at
    pointer P subtracts the deltas above P (staged writes, and a rollback's until the pointer
    passes them) and adds back the batches retired above P (``queries.stats_at``): with
    nothing above the pointer, one row per query lexeme. The deltas stay, for those
    corrections and for rollback. Backfilled from the deltas."""
    scope = "tenant_id text NOT NULL, resource_id text NOT NULL, corpus_id text NOT NULL"
    key = "tenant_id, resource_id, corpus_id"
    live = (
        f"(x.batch IS NULL OR NOT EXISTS (SELECT 1 FROM {s}.lexical_batches b "
        "WHERE b.tenant_id = x.tenant_id AND b.resource_id = x.resource_id "
        "AND b.corpus_id = x.corpus_id AND b.batch = x.batch "
        "AND b.retired_generation IS NOT NULL))"
    )
    return (
        f"""CREATE TABLE IF NOT EXISTS {s}.lexical_term_totals (
            {scope},
            lexeme text NOT NULL,
            docs bigint NOT NULL,
            CONSTRAINT lexical_term_totals_pkey PRIMARY KEY ({key}, lexeme)
        )""",
        _fillfactor(s, "lexical_term_totals", TOTALS_FILLFACTOR),
        f"""CREATE TABLE IF NOT EXISTS {s}.lexical_stat_totals (
            {scope},
            docs bigint NOT NULL,
            length bigint NOT NULL,
            CONSTRAINT lexical_stat_totals_pkey PRIMARY KEY ({key})
        )""",
        f"""INSERT INTO {s}.lexical_term_totals ({key}, lexeme, docs)
            SELECT x.tenant_id, x.resource_id, x.corpus_id, x.lexeme, sum(x.docs)
            FROM {s}.lexical_terms x WHERE {live}
            GROUP BY x.tenant_id, x.resource_id, x.corpus_id, x.lexeme
            HAVING sum(x.docs) <> 0 ON CONFLICT DO NOTHING""",
        f"""INSERT INTO {s}.lexical_stat_totals ({key}, docs, length)
            SELECT x.tenant_id, x.resource_id, x.corpus_id, sum(x.docs), sum(x.length)
            FROM {s}.lexical_stats x WHERE {live}
            GROUP BY x.tenant_id, x.resource_id, x.corpus_id ON CONFLICT DO NOTHING""",
    )


def _v15(s: str) -> Sequence[str]:
    """A batch retired whole leaves the running totals later: the retirement stores what the
    batch counted in its ``lexical_batches`` row (``fold_docs``, ``fold_length``, and per
    lexeme ``fold_lexemes``/``fold_counts``) instead of one totals upsert per lexeme; readers
    subtract those amounts while they are there (``queries.stats_at``), and a fold
    (``statements.fold_retired``) takes them out of the totals and clears them in one
    statement. Existing retired batches were taken out at retirement: nothing to fold."""
    return (
        f"ALTER TABLE {s}.lexical_batches ADD COLUMN IF NOT EXISTS fold_docs bigint",
        f"ALTER TABLE {s}.lexical_batches ADD COLUMN IF NOT EXISTS fold_length bigint",
        f"ALTER TABLE {s}.lexical_batches ADD COLUMN IF NOT EXISTS fold_lexemes text[]",
        f"ALTER TABLE {s}.lexical_batches ADD COLUMN IF NOT EXISTS fold_counts bigint[]",
        # Readers and the fold find the batches still to fold in this (usually empty) index.
        f"""CREATE INDEX IF NOT EXISTS lexical_batches_unfolded
            ON {s}.lexical_batches (tenant_id, resource_id, corpus_id)
            WHERE fold_docs IS NOT NULL""",
    )


def _v16(s: str) -> Sequence[str]:
    """``records.tsv`` stored in the row (``STORAGE MAIN``): a row's text, metadata, ``tsv``
    and ``tsv_impact`` pass the TOAST threshold together (about 2 kB), and ``tsv``, the
    largest and incompressible (positions), was the column moved out of line, so every row
    the lexical leg scores read it back through the TOAST index (about 3 buffers a row).
    Now ``tsv_impact``, which only its GIN index reads, goes out of line instead; ``tsv``
    leaves the row only when the row cannot fit otherwise. Catalog only (recursing to the
    partitions): rows written before keep their layout until rewritten."""
    return (f"ALTER TABLE {s}.records ALTER COLUMN tsv SET STORAGE MAIN",)


def _v17(s: str) -> Sequence[str]:
    """``lexical_stat_totals.dl_buckets``: the length buckets of ``tsv_impact`` (bit ``j``
    for the length letter ``chr(97 + j)``) of every row counted in the scope's statistics
    since it was set, only ever ORed in by the writes (``statements._totals``), so a superset
    of the buckets its rows hold. The lexical leg looks up the impact keys of those buckets
    only (``queries._held_lengths``): at the peer benchmark's row lengths 4 or 5 of 22.
    Existing rows are backfilled from every row of ``records`` in the scope (the default, all
    buckets, holds until then and for a row the writes did not create)."""
    scope = (
        "r.tenant_id = o.tenant_id AND r.resource_id = o.resource_id AND r.corpus_id = o.corpus_id"
    )
    return (
        f"ALTER TABLE {s}.lexical_stat_totals ADD COLUMN IF NOT EXISTS dl_buckets integer "
        "NOT NULL DEFAULT -1",
        f"UPDATE {s}.lexical_stat_totals o SET dl_buckets = (SELECT {length_buckets('r.tsv')} "
        f"FROM {s}.records r WHERE {scope})",
    )


def _tsv_expression(conn: Connection, s: str) -> str:
    """The generation expression of ``records.tsv`` (``to_tsvector('<config>'::regconfig,
    text)``), as the catalog holds it."""
    expression = conn.execute(
        text(
            "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a "
            "ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
            "WHERE d.adrelid = CAST(:rel AS regclass) AND a.attname = 'tsv'"
        ),
        {"rel": f"{s}.records"},
    ).scalar()
    if not isinstance(expression, str) or not expression.startswith("to_tsvector("):
        raise ValidationError(
            "records.tsv is not the generated tsvector this schema expects; restore it from "
            "a backup or recreate the schema",
            field="schema",
        )
    return expression


MIGRATIONS: dict[int, str] = {
    1: "records, scopes, grants, tombstones, ingestion status",
    2: "sync checkpoints (compare-and-set cursor per connector and scope)",
    3: "BM25 statistics per scope and generation (lexical_stats, lexical_terms)",
    4: "vectors in record_vectors, keyed by records.row_key (writes never rewrite vectors)",
    5: "BM25 statistics without forgotten rows, kept at forget time; deltas appended",
    6: "GIN jsonb_path_ops index on records.metadata (indexed equality filters)",
    7: "records.tsv_impact: lexemes by impact bucket, GIN indexed (pruned lexical leg)",
    8: "BM25 statistics by write batch (lexical_batches): a source deleted whole, one row",
    9: "retirement as a HOT update: live ids in live_ids, records fillfactor 50",
    10: "merge_pending_lists(tenant): writers merge GIN pending lists (SECURITY DEFINER)",
    11: "vector_writes: vectors committed ahead of their records until the records commit",
    12: "scopes.sole_embedder/sole_dimensions: the drift guard read from the scope's row",
    13: "scopes.embedder_claim: the engine's embedder claim (GenerationState.embedders)",
    14: "BM25 statistics as running totals (lexical_term_totals, lexical_stat_totals)",
    15: "BM25 statistics: a batch retired whole leaves the running totals by a later fold",
    16: "records.tsv stored in the row (STORAGE MAIN): the lexical leg reads no TOAST",
    17: "lexical_stat_totals.dl_buckets: the lexical leg looks up the scope's length buckets",
}
LATEST_VERSION = max(MIGRATIONS)


def applied_versions(conn: Connection, schema: str) -> frozenset[int]:
    """The migrations recorded in ``schema_migrations`` (empty when there is no schema)."""
    exists = conn.execute(
        text("SELECT to_regclass(:name)"), {"name": f"{quote_schema(schema)}.schema_migrations"}
    ).scalar()
    if exists is None:
        return frozenset()
    s = quote_schema(schema)
    rows = conn.execute(text(f"SELECT version FROM {s}.schema_migrations")).scalars()
    return frozenset(int(v) for v in rows)


def current_version(conn: Connection, schema: str) -> int:
    """The applied version: the highest migration with every migration up to it applied (0
    when the schema or its bookkeeping table does not exist). A schema that has a later
    migration but misses an earlier one (upgraded while a migration was not yet released)
    reports the version before the gap, so the store asks for ``ragport db upgrade``."""
    return contiguous_version(applied_versions(conn, schema))


def contiguous_version(applied: frozenset[int]) -> int:
    """The highest migration with every migration up to it in ``applied`` (see
    ``current_version``)."""
    version = 0
    for target in sorted(MIGRATIONS):
        if target not in applied:
            break
        version = target
    return version


@attrs.frozen
class Migration:
    """One pending migration: its version and the statements that apply it, the last of
    which records it in ``schema_migrations``."""

    version: int
    statements: tuple[str, ...]


def lock_sql(schema: str) -> str:
    """The transaction-level advisory lock that serializes upgraders of ``schema``."""
    return f"SELECT pg_advisory_xact_lock({zlib.crc32(f'ragport:{schema}'.encode())})"


def plan(
    conn: Connection,
    schema: str,
    *,
    text_search_config: str = "english",
    partitions: int | None = None,
    extension_schema: str | None = None,
) -> list[Migration]:
    """The migrations ``schema`` lacks, in order, with every statement built from the catalog
    as it is now (nothing is written). Migration 1 starts by installing the ``vector``
    extension when it is missing (``extension_schema``: see ``extension.extension_plan``); a
    schema past migration 1 whose extension is gone is a ``CapabilityError``.

    A schema with another partition layout than ``partitions`` is a ``ValidationError``.
    """
    s = quote_schema(schema)
    ts = validate_text_search_config(text_search_config)
    partitions = validate_partitions(partitions)
    if extension_schema is not None:
        validate_schema_name(extension_schema, field="extension_schema")
    install, vec = extension_plan(conn, extension_schema)
    done = applied_versions(conn, schema)
    if install and 1 in done:
        raise CapabilityError(
            f"schema {schema!r} exists but the vector extension its tables use is not "
            "installed; restore the database from a backup",
            capability="vector",
        )
    if partitions is not None and done and partition_count(conn, schema) != partitions:
        raise ValidationError(
            f"schema {schema!r} exists with another layout; partitions are chosen when it is "
            "created",
            field="partitions",
        )
    # Later migrations create their tables in the layout ``records`` already has.
    layout = partitions if not done else partition_count(conn, schema)
    # 7 derives tsv_impact from the tsv expression migration 1 wrote (or will write).
    tsv = f"to_tsvector('{ts}'::regconfig, text)"
    steps: dict[int, Callable[[], Sequence[str]]] = {
        1: lambda: (*install, *_partitioned(s, _v1(s, ts, vec), partitions)),
        2: lambda: _partitioned(s, _v2(s, ts), layout),
        3: lambda: _partitioned(s, _v3(s), layout),
        4: lambda: _partitioned(s, _v4(s, schema, vec), layout),
        5: lambda: _v5(s),
        6: lambda: _v6(s),
        7: lambda: _v7(s, _tsv_expression(conn, s) if 1 in done else tsv),
        8: lambda: _partitioned(s, _v8(s), layout),
        9: lambda: _partitioned(s, _v9(s), layout),
        10: lambda: merge_function_sql(s),
        11: lambda: vector_writes_sql(s),
        12: lambda: sole_embedder_sql(s),
        13: lambda: (f"ALTER TABLE {s}.scopes ADD COLUMN IF NOT EXISTS embedder_claim jsonb",),
        14: lambda: _partitioned(s, _v14(s), layout),
        15: lambda: _v15(s),
        16: lambda: _v16(s),
        17: lambda: _v17(s),
    }
    pending = []
    # Every migration not recorded yet, in order: one that was released after a later one had
    # been applied still runs (each migration is self-contained).
    for target in sorted(MIGRATIONS):
        if target not in done:
            pending.append(Migration(target, (*steps[target](), *_record(s, target))))
    return pending


def _record(s: str, version: int) -> tuple[str, str]:
    description = MIGRATIONS[version].replace("'", "''")
    return (
        f"""CREATE TABLE IF NOT EXISTS {s}.schema_migrations (
            version integer PRIMARY KEY, description text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now())""",
        f"INSERT INTO {s}.schema_migrations (version, description) "
        f"VALUES ({int(version)}, '{description}')",
    )


def upgrade(
    conn: Connection,
    schema: str,
    *,
    text_search_config: str = "english",
    partitions: int | None = None,
    extension_schema: str | None = None,
) -> list[int]:
    """Apply missing migrations inside the caller's transaction; return the versions applied.

    Idempotent: re-running applies nothing. Concurrent upgraders wait on an advisory lock.
    Never commits: the caller's commit publishes the migrations, its rollback discards them.
    ``partitions=N`` creates the tenant tables ``PARTITION BY HASH (tenant_id)`` with N
    partitions; it is chosen when the schema is created, and naming another layout for an
    existing schema is a ``ValidationError`` (move the data with dump and restore).
    ``extension_schema``: where to create the ``vector`` extension when it is missing (see
    ``extension.extension_plan``). Hosts call ``ragport.adapters.postgres.migrate``.
    """
    quote_schema(schema)
    conn.execute(text(lock_sql(schema)))
    pending = plan(
        conn,
        schema,
        text_search_config=text_search_config,
        partitions=partitions,
        extension_schema=extension_schema,
    )
    for migration in pending:
        for statement in migration.statements:
            conn.execute(text(statement))
    return [m.version for m in pending]
