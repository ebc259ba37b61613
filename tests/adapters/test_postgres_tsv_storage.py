"""``records.tsv`` stored in the row (migration 16, ``STORAGE MAIN``).

A record's text, metadata, ``tsv`` and ``tsv_impact`` pass the TOAST threshold together; the
lexical leg reads each scored row's ``tsv``, so it must be the column kept in the row, and
``tsv_impact`` (read only through its GIN index) the one moved out of line. Checked on the
stored rows themselves (``pg_column_toast_chunk_id``): a schema upgraded from 15 keeps its
old rows as they were, stores new ones the new way, and answers the same scores for both.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres import schema as migrations
from tests.adapters.test_postgres_lexical_stats import _check_scores
from tests.adapters.test_postgres_stat_batches import _write

# 150 distinct five-letter words: a row of them passes the TOAST threshold with its tsvectors.
WORDS = ["".join(w) for w in itertools.islice(itertools.product("bdgkm", "aeiou", "lnrst",
                                                                 "aeiou", "pvz"), 150)]  # fmt: skip


def _text(i: int) -> str:
    return " ".join(WORDS[i:] + WORDS[:i])


def _out_of_line(store: PostgresStore, s: str, scope: ragport.Scope, source: str) -> set[str]:
    """Which of ``tsv``, ``tsv_impact`` of ``source``'s live row are stored in TOAST."""
    with store.engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT pg_column_toast_chunk_id(tsv) IS NOT NULL AS tsv, "
                "pg_column_toast_chunk_id(tsv_impact) IS NOT NULL AS tsv_impact "
                f"FROM {s}.records WHERE tenant_id = :t AND resource_id = :r "
                "AND corpus_id = :c AND source_id = :source AND retired_generation IS NULL"
            ),
            {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id, "source": source},
        ).one()
    return {name for name in ("tsv", "tsv_impact") if getattr(row, name)}


def _storage(store: PostgresStore, s: str) -> set[str]:
    """``tsv``'s attstorage on ``records`` and on each of its partitions."""
    with store.engine.connect() as conn:
        return set(
            conn.execute(
                text(
                    "SELECT a.attstorage FROM pg_attribute a WHERE a.attname = 'tsv' "
                    "AND a.attrelid IN (SELECT CAST(:rel AS regclass) UNION ALL SELECT "
                    "i.inhrelid FROM pg_inherits i WHERE i.inhparent = CAST(:rel AS regclass))"
                ),
                {"rel": f"{s}.records"},
            ).scalars()
        )


@pytest.mark.parametrize("partitions", [None, 3], ids=["plain", "partitioned"])
def test_upgrade_from_version_15_stores_new_rows_tsv_in_the_row(
    pg_engine, pg_schema: str, partitions: int | None
) -> None:
    """At 15 a row past the TOAST threshold has its ``tsv`` out of line (so this check can
    fail); 16 changes only the catalog: that row stays as it was, a row written after it
    keeps ``tsv`` in the row and moves ``tsv_impact`` out, and the scores over both rows
    equal the reference. If this fails, check ``schema._v16``."""
    store = PostgresStore(
        pg_engine,
        schema=pg_schema,
        create=True,
        text_search_config="simple",
        partitions=partitions,
    )
    s = f'"{pg_schema}"'
    scope = ragport.Scope("tenant-1", "kb", "c" + uuid.uuid4().hex[:12])
    assert _storage(store, s) == {"m"}
    with pg_engine.begin() as conn:
        conn.execute(text(f"ALTER TABLE {s}.records ALTER COLUMN tsv SET STORAGE EXTENDED"))
        conn.execute(text(f"DELETE FROM {s}.schema_migrations WHERE version = 16"))
        assert migrations.current_version(conn, pg_schema) == 15
    _write(store, scope, "before", _text(0))
    assert _out_of_line(store, s, scope, "before") == {"tsv"}
    old = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    assert old.upgrade() == [16]
    assert _storage(old, s) == {"m"}
    _write(old, scope, "after", _text(7))
    assert _out_of_line(old, s, scope, "after") == {"tsv_impact"}
    assert _out_of_line(old, s, scope, "before") == {"tsv"}
    for k in (1, 2):
        _check_scores(old, scope, s, [WORDS[3], WORDS[40], "absent"], k)
