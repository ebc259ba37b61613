"""Retirement as a heap-only (HOT) update (migration 9), one live row per id in ``live_ids``.

Retiring rows (delete, replace, retire ids) and restoring them (rollback) change only
``records.retired_generation``; since no index of ``records`` names that column and its pages
keep free space (fillfactor), each such update is HOT: a new version on the same page and no
entry in any index of ``records``. Checked with the transaction's own statistics
(``pg_stat_xact_user_tables``), on a fresh schema and on one written by migration 8 and
upgraded, plain and partitioned; the check is shown to fail when an index names the column.
The database still refuses a second live row of an id: ``live_ids`` holds each live (scope,
id) under a primary key, kept by the same statements.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres import schema as migrations
from ragport.adapters.postgres.extension import pgvector
from tests.adapters.test_postgres_bm25 import EMB
from tests.adapters.test_postgres_lexical_stats import _check_scores, _check_statistics

SCOPE = ragport.Scope("tenant-1", "kb", "hot")


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")


def _chunks(source: str, n: int, word: str = "apple") -> list[ragport.Chunk]:
    return [ragport.Chunk.of(source, i, f"{word} brook cedar {i}") for i in range(n)]


def _updates(conn: Any, s: str) -> tuple[int, int]:
    """(updates, HOT updates) of ``records`` (and its partitions) in this transaction."""
    row = conn.execute(
        text(
            "SELECT coalesce(sum(n_tup_upd), 0) AS upd, coalesce(sum(n_tup_hot_upd), 0) AS hot "
            "FROM pg_stat_xact_user_tables WHERE relid = to_regclass(:t) OR relid IN "
            "(SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass(:t))"
        ),
        {"t": f"{s}.records"},
    ).one()
    return int(row.upd), int(row.hot)


def _retire_and_restore(store: PostgresStore, source: str) -> tuple[int, int, int, int, int]:
    """Retire ``source`` (one unit of work, published), then restore it (a second one, as
    ``rollback_generation`` does): (rows retired, updates and HOT updates of the retirement,
    updates and HOT updates of the restore).

    The counts are read before and after each write inside its transaction (the view may
    still hold counts of earlier transactions on the connection that are not flushed yet)."""
    s = f'"{store.schema}"'
    with store.unit_of_work(SCOPE) as uow:
        g = uow.generations.stage()
        upd0, hot0 = _updates(uow.writer.conn, s)  # type: ignore[attr-defined]
        retired = uow.records.retire_source(source, generation=g)
        upd1, hot1 = _updates(uow.writer.conn, s)  # type: ignore[attr-defined]
        uow.generations.publish(g)
        uow.commit()
    with store.unit_of_work(SCOPE) as uow:
        upd2, hot2 = _updates(uow.writer.conn, s)  # type: ignore[attr-defined]
        assert uow.records.restore_above(g - 1) == retired
        upd3, hot3 = _updates(uow.writer.conn, s)  # type: ignore[attr-defined]
        uow.generations.reset(g - 1)
        uow.commit()
    return retired, upd1 - upd0, hot1 - hot0, upd3 - upd2, hot3 - hot2


def _index_definitions(conn: Any, schema: str) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            text(
                "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = :n AND c.relname ~ '^records(_p[0-9]+)?$'"
            ),
            {"n": schema},
        )
    ]


def _fillfactors(conn: Any, s: str) -> list[str | None]:
    """The reloptions of ``records``' heap tables (the table, or each partition)."""
    return [
        row[0]
        for row in conn.execute(
            text(
                "SELECT array_to_string(c.reloptions, ',') FROM pg_class c "
                "WHERE (c.oid = to_regclass(:t) OR c.oid IN (SELECT inhrelid FROM pg_inherits "
                "WHERE inhparent = to_regclass(:t))) AND c.relkind = 'r'"
            ),
            {"t": f"{s}.records"},
        )
    ]


def test_no_index_of_records_names_retired_generation(store, pg_engine, pg_schema) -> None:
    """No index of records names retired_generation, in a key or a predicate, and the table
    keeps free space on its pages: the two conditions of a HOT retirement. If this fails,
    check schema.py _v9 and any later migration that indexes records (a partial index
    ``WHERE retired_generation IS NULL`` makes every retirement write every index again)."""
    with pg_engine.connect() as conn:
        definitions = _index_definitions(conn, pg_schema)
        fills = _fillfactors(conn, f'"{pg_schema}"')
    assert definitions, "records has indexes"
    assert [d for d in definitions if "retired_generation" in d] == []
    assert fills == [f"fillfactor={migrations.RECORDS_FILLFACTOR}"]


def test_retiring_and_restoring_rows_writes_no_index_entry(store) -> None:
    """Retiring a source's rows and restoring them are HOT updates, one per row each way:
    no index of records gets an entry. If this fails, check that no index names
    retired_generation (test above) and the fillfactor of records (schema.py _v9)."""
    ragport.application.replace_source(
        source_id="a", chunks=_chunks("a", 40), embedder=EMB, store=store, scope=SCOPE
    )
    retired, upd, hot, back, hot_back = _retire_and_restore(store, "a")
    assert retired == 40
    # The last row of a page can miss the room for its new version by a few bytes (the
    # fillfactor bounds what inserts leave free, not what each version needs); a restore
    # needs a third version on the page, which fits once the page is pruned of the first.
    assert upd == back == 40
    assert hot >= 36 and hot_back >= 32, "(nearly) every retirement and restore is HOT"


def test_the_hot_check_fails_when_an_index_names_retired_generation(store, pg_engine) -> None:
    """The check above can fail: with the partial unique index that migration 9 dropped put
    back, no retirement is HOT. If this fails, check ``_updates`` (it must count the
    transaction's updates of records and its partitions)."""
    ragport.application.replace_source(
        source_id="a", chunks=_chunks("a", 10), embedder=EMB, store=store, scope=SCOPE
    )
    s = f'"{store.schema}"'
    with pg_engine.begin() as conn:
        conn.execute(
            text(
                f"CREATE UNIQUE INDEX records_live_id ON {s}.records "
                "(tenant_id, resource_id, corpus_id, id) WHERE retired_generation IS NULL"
            )
        )
    retired, upd, hot, back, hot_back = _retire_and_restore(store, "a")
    assert (retired, upd, back) == (10, 10, 10)
    assert hot == hot_back == 0


def _version_8(conn: Any, s: str, schema: str, partitions: int | None) -> None:
    """The schema as migrations 1-8 leave it, recorded as version 8."""
    for statement in [
        *migrations._partitioned(s, migrations._v1(s, "simple", pgvector(conn)), partitions),
        *migrations._v2(s, "simple"),
        *migrations._v3(s),
        *migrations._partitioned(s, migrations._v4(s, schema, pgvector(conn)), partitions),
        *migrations._v5(s),
        *migrations._v6(s),
    ]:
        conn.execute(text(statement))
    for statement in [*migrations._v7(s, migrations._tsv_expression(conn, s)), *migrations._v8(s)]:
        conn.execute(text(statement))
    conn.execute(
        text(
            f"CREATE TABLE {s}.schema_migrations (version integer PRIMARY KEY, "
            "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
    )
    conn.execute(
        text(
            f"INSERT INTO {s}.schema_migrations VALUES (1, 'v1'), (2, 'v2'), (3, 'v3'), "
            "(4, 'v4'), (5, 'v5'), (6, 'v6'), (7, 'v7'), (8, 'v8')"
        )
    )


@pytest.mark.parametrize("partitions", [None, 2], ids=["plain", "partitioned"])
def test_upgrade_from_version_8_keeps_data_and_makes_retirement_hot(
    pg_engine, pg_schema, partitions: int | None
) -> None:
    """A schema written at version 8 (with live, retired and to-be-deleted rows) upgrades in
    place: rows, vectors and statistics kept, live_ids filled with the live rows,
    records_live_id gone, fillfactor set on every heap of records; then writes keep the
    statistics and live_ids exact and rows written after the upgrade retire as HOT updates.
    If this fails, check schema.py _v9."""
    s = f'"{pg_schema}"'
    texts = [("apple brook", 1, None), ("brook cedar cedar", 1, 2), ("cedar delta", 2, None)]
    with pg_engine.begin() as conn:
        _version_8(conn, s, pg_schema, partitions)
        conn.execute(
            text(f"INSERT INTO {s}.scopes VALUES (:t, :r, :c, 2, 2, 0)"),
            {"t": SCOPE.tenant_id, "r": SCOPE.resource_id, "c": SCOPE.corpus_id},
        )
        for i, (words, gen, retired) in enumerate(texts):
            params = {
                "t": SCOPE.tenant_id, "r": SCOPE.resource_id, "c": SCOPE.corpus_id,
                "id": f"s{i}#0001", "g": gen, "src": f"s{i}", "x": words,
                "v": str(EMB.embed([words])[0].tolist()), "e": EMB.id, "rg": retired,
            }  # fmt: skip
            params["k"] = conn.execute(text(f"SELECT nextval('{s}.record_keys')")).scalar_one()
            conn.execute(
                text(
                    f"INSERT INTO {s}.records (tenant_id, resource_id, corpus_id, id, "
                    "generation, source_id, kind, text, embedder_id, dimensions, "
                    "retired_generation, row_key) VALUES (:t, :r, :c, :id, :g, :src, 'chunk', "
                    ":x, :e, 16, :rg, :k)"
                ),
                params,
            )
            conn.execute(
                text(
                    f"INSERT INTO {s}.record_vectors VALUES (:t, :r, :c, :k, 16, "
                    "CAST(:v AS vector))"
                ),
                params,
            )
        # The statistics of these rows, as version 8's writers kept them (the v3 backfill).
        for statement in migrations._v3(s)[-2:]:
            conn.execute(text(statement))
        assert migrations.current_version(conn, pg_schema) == 8
    store = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    with pytest.raises(ragport.StoreError):
        store.current_generation(SCOPE)  # refused until upgraded
    applied = store.upgrade()
    assert applied == [v for v in sorted(migrations.MIGRATIONS) if v > 8]
    assert store.upgrade() == []
    with pg_engine.connect() as conn:
        assert [d for d in _index_definitions(conn, pg_schema) if "retired_generation" in d] == []
        fills = _fillfactors(conn, s)
    assert fills == [f"fillfactor={migrations.RECORDS_FILLFACTOR}"] * (partitions or 1)
    assert _live_ids(store, s) == ["s0#0001", "s2#0001"]
    assert [r.id for r in store.get_by_source(SCOPE, "s0")] == ["s0#0001"]
    assert store.get_by_source(SCOPE, "s1") == []  # retired at 2 before the upgrade
    hits = store.query(SCOPE, EMB.embed(["cedar delta"])[0], limit=1)
    assert [h.record.id for h in hits] == ["s2#0001"]
    _check_statistics(store, SCOPE, s)

    ragport.application.delete_source(
        source_id="s2", store=store, scope=SCOPE
    )  # an old row retires
    ragport.application.replace_source(
        source_id="s3", chunks=_chunks("s3", 6, "fox"), embedder=EMB, store=store, scope=SCOPE
    )
    _check_statistics(store, SCOPE, s)
    retired, upd, hot, back, _ = _retire_and_restore(store, "s3")
    assert (retired, upd, back) == (6, 6, 6) and hot >= 5
    ragport.application.rollback_generation(store=store, scope=SCOPE, to=2)
    assert store.get_by_source(SCOPE, "s3") == []
    assert [r.id for r in store.get_by_source(SCOPE, "s2")] == ["s2#0001"]  # restored
    _check_statistics(store, SCOPE, s)
    _check_scores(store, SCOPE, s, ["cedar", "delta"], 2)
    assert _live_ids(store, s) == ["s0#0001", "s2#0001"]


def _live_ids(store: PostgresStore, s: str) -> list[str]:
    with store.engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    f"SELECT id FROM {s}.live_ids WHERE tenant_id = :t AND resource_id = :r "
                    'AND corpus_id = :c ORDER BY id COLLATE "C"'
                ),
                {"t": SCOPE.tenant_id, "r": SCOPE.resource_id, "c": SCOPE.corpus_id},
            ).scalars()
        )


def test_the_database_refuses_a_second_live_row_of_an_id(store, pg_engine) -> None:
    """Without the partial unique index, ``live_ids`` holds the live ids and its primary key
    refuses a second one (ragport's own writers go through it: the concurrent-writer test in
    ``test_postgres_bad_input`` shows a real violation surfacing typed; a writer of its own
    that inserts into ``records`` without ``live_ids`` is not stopped). If this fails, check
    ``statements.live_insert`` and its callers."""
    import psycopg

    ragport.application.replace_source(
        source_id="a", chunks=_chunks("a", 2), embedder=EMB, store=store, scope=SCOPE
    )
    s = f'"{store.schema}"'
    assert _live_ids(store, s) == ["a#0001", "a#0002"]
    with pytest.raises(Exception) as caught, pg_engine.begin() as conn:
        conn.execute(
            text(
                f"INSERT INTO {s}.live_ids (tenant_id, resource_id, corpus_id, id) "
                "VALUES (:t, :r, :c, 'a#0001')"
            ),
            {"t": SCOPE.tenant_id, "r": SCOPE.resource_id, "c": SCOPE.corpus_id},
        )
    assert isinstance(caught.value.orig, psycopg.errors.UniqueViolation)  # type: ignore[attr-defined]
