"""GIN indexes of ``records`` without pending lists (migration 10).

With ``fastupdate`` on, a GIN index appends new entries to a pending list that every scan
reads in full until a vacuum merges it: right after a write, the lexical leg's scans of
``records_tsv_impact`` and ``records_tsv`` read megabytes of backlog (702 ms against 23 ms at
10,000 rows, see ``schema._v10``). Checked through ``pgstatginindex`` (contrib pgstattuple):
every GIN index of ``records`` and of each partition has ``fastupdate=off`` and no pending
page after writes, on a fresh schema and on one written at version 9 and upgraded; the same
check fails on an index left with the default.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

import ragport
from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres import schema as migrations
from tests.adapters.test_postgres_bm25 import EMB
from tests.adapters.test_postgres_lexical_stats import _check_statistics

SCOPE = ragport.Scope("tenant-1", "kb", "gin")


def _gin_indexes(conn: Any, schema: str) -> dict[str, list[str] | None]:
    """Every GIN index of ``records`` and its partitions, with its reloptions."""
    rows = conn.execute(
        text(
            "SELECT c.oid::regclass::text AS name, c.reloptions AS options FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
            "WHERE a.amname = 'gin' AND c.relkind = 'i' AND i.indrelid IN ("
            "SELECT to_regclass(:t) UNION ALL SELECT inhrelid FROM pg_inherits "
            "WHERE inhparent = to_regclass(:t)) ORDER BY 1"
        ),
        {"t": f'"{schema}".records'},
    ).all()
    return {r.name: r.options for r in rows}


def _pending_pages(conn: Any, index: str) -> int:
    return int(
        conn.execute(
            text("SELECT pending_pages FROM pgstatginindex(CAST(:ix AS regclass))"), {"ix": index}
        ).scalar_one()
    )


@pytest.fixture
def pgstattuple(pg_engine) -> None:
    try:
        with pg_engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS pgstattuple"))
    except DBAPIError as exc:  # a server without contrib, or without the right to install it
        pytest.skip(f"pgstattuple (contrib) cannot be installed here: {type(exc.orig).__name__}")


def _write(store: PostgresStore, source: str, n: int) -> None:
    chunks = [
        ragport.Chunk.of(source, i, f"apple brook cedar {source} {i} " + "delta " * (i % 7))
        for i in range(n)
    ]
    ragport.replace_source(source_id=source, chunks=chunks, embedder=EMB, store=store, scope=SCOPE)


@pytest.mark.parametrize("partitions", [None, 2], ids=["plain", "partitioned"])
def test_gin_indexes_keep_no_pending_list_after_writes(
    pg_engine, pg_schema, pgstattuple, partitions: int | None
) -> None:
    """A fresh schema's GIN indexes (records_tsv, records_tsv_impact, metadata, lineage,
    roots; each partition's on a partitioned schema) are fastupdate=off, and after writes
    none has a pending page. An index reset to the default keeps a pending list after the
    same writes (the check can fail).

    If this fails, check schema.py _v10 (and that every GIN index is in its loop).
    """
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True, text_search_config="simple",
        partitions=partitions,
    )  # fmt: skip
    with pg_engine.connect() as conn:
        indexes = _gin_indexes(conn, pg_schema)
    assert len(indexes) == 5 * (partitions or 1), sorted(indexes)
    assert all(options == ["fastupdate=off"] for options in indexes.values()), indexes
    for n, source in enumerate(("a", "b", "c")):
        _write(store, source, 60 + 20 * n)
    with pg_engine.connect() as conn:
        assert {ix: _pending_pages(conn, ix) for ix in indexes} == dict.fromkeys(indexes, 0)
    defaults = [ix for ix in indexes if "tsv_impact" in ix]  # one per partition
    with pg_engine.begin() as conn:
        for ix in defaults:
            conn.execute(text(f"ALTER INDEX {ix} RESET (fastupdate)"))
    for source in ("d", "e"):
        _write(store, source, 80)
    with pg_engine.connect() as conn:  # the default keeps a backlog (in SCOPE's partition)
        assert sum(_pending_pages(conn, ix) for ix in defaults) > 0
    _check_statistics(store, SCOPE, f'"{pg_schema}"')


@pytest.mark.parametrize("partitions", [None, 2], ids=["plain", "partitioned"])
def test_upgrade_from_version_9_merges_the_pending_lists(
    pg_engine, pg_schema, pgstattuple, partitions: int | None
) -> None:
    """A schema at version 9 whose GIN indexes hold pending lists upgrades in place: every
    GIN index becomes fastupdate=off with no pending page, the rows and their ranking kept.

    If this fails, check schema.py _v10 (the gin_clean_pending_list call).
    """
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True, text_search_config="simple",
        partitions=partitions,
    )  # fmt: skip
    with pg_engine.begin() as conn:  # back to version 9's shape: the default, no row 10
        indexes = _gin_indexes(conn, pg_schema)
        for ix in indexes:
            conn.execute(text(f"ALTER INDEX {ix} RESET (fastupdate)"))
        conn.execute(text(f'DELETE FROM "{pg_schema}".schema_migrations WHERE version = 10'))
        assert migrations.current_version(conn, pg_schema) == 9
    _write_at_9(pg_engine, pg_schema)  # as version 9 wrote: into the pending lists
    with pg_engine.connect() as conn:
        backlog = {ix: _pending_pages(conn, ix) for ix in indexes}
    assert any(backlog.values()), backlog
    store = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    with pytest.raises(ragport.StoreError):
        store.current_generation(SCOPE)  # refused until upgraded
    assert store.upgrade() == [10]
    with pg_engine.connect() as conn:
        after = _gin_indexes(conn, pg_schema)
        pending = {ix: _pending_pages(conn, ix) for ix in after}
    assert after == {ix: ["fastupdate=off"] for ix in indexes}
    assert pending == dict.fromkeys(indexes, 0)
    assert len(store.get_by_source(SCOPE, "a")) == 120
    found = store.lexical_query(SCOPE, "delta cedar", limit=3, mode="fts")
    assert len(found) == 3 and all(r.record.source_id == "a" for r in found)
    _check_statistics(store, SCOPE, f'"{pg_schema}"')


def _write_at_9(pg_engine, pg_schema) -> None:
    """Write 120 chunks while the schema is at version 9 (a store of this build refuses to
    write to it, so the version row is put back for the write and taken away after)."""
    with pg_engine.begin() as conn:
        conn.execute(
            text(
                f'INSERT INTO "{pg_schema}".schema_migrations (version, description) '
                "VALUES (10, 'for the write')"
            )
        )
    store = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    _write(store, "a", 120)
    with pg_engine.begin() as conn:
        conn.execute(text(f'DELETE FROM "{pg_schema}".schema_migrations WHERE version = 10'))
