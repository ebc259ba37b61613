"""BM25 statistics by write batch (migration 8): a source deleted whole retires its batches.

Each ``records.add`` of live rows of one generation is a batch. Retiring every row of an
intact batch retires the batch (one ``lexical_batches`` row) and writes no delta per lexeme;
any other change to a batch's rows writes row deltas and marks it ``broken``. After every
step the statistics summed at every readable pointer equal a recomputation from the rows
(``_check_statistics``, its own SQL) and the lexical leg's scores equal the Python reference
(``_check_scores``, the store's reader). Broken variants of the write path and of the reader
show that both checks fail when batches are handled wrongly.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore, queries, statements
from ragport.domain.model import Tombstone
from tests.adapters.test_postgres_bm25 import EMB
from tests.adapters.test_postgres_lexical_stats import _check_scores, _check_statistics

QUERY = ["apple", "cedar"]


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")


def _scope() -> ragport.Scope:
    return ragport.Scope("tenant-1", "kb", "c" + uuid.uuid4().hex[:12])


def _write(store: PostgresStore, scope: ragport.Scope, source: str, *texts: str) -> None:
    chunks = [ragport.Chunk.of(source, i, words) for i, words in enumerate(texts)]
    ragport.application.replace_source(
        source_id=source, chunks=chunks, embedder=EMB, store=store, scope=scope
    )


def _count(store: PostgresStore, s: str, table: str, scope: ragport.Scope) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    f"SELECT count(*) FROM {s}.{table} "
                    "WHERE tenant_id = :t AND resource_id = :r AND corpus_id = :c"
                ),
                {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
            ).scalar_one()
        )


def _batches(store: PostgresStore, s: str, scope: ragport.Scope, source: str) -> list[tuple]:
    """(rows, retired_generation, broken) of the batches holding ``source``'s rows."""
    with store.engine.connect() as conn:
        return [
            tuple(row)
            for row in conn.execute(
                text(
                    f"SELECT b.rows, b.retired_generation, b.broken FROM {s}.lexical_batches b "
                    "WHERE b.tenant_id = :t AND b.resource_id = :r AND b.corpus_id = :c "
                    f"AND b.batch IN (SELECT stats_batch FROM {s}.records WHERE tenant_id = :t "
                    "AND resource_id = :r AND corpus_id = :c AND source_id = :src) "
                    "ORDER BY b.batch"
                ),
                {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id, "src": source},
            ).all()
        ]


def _check(store: PostgresStore, scope: ragport.Scope, s: str) -> None:
    _check_statistics(store, scope, s)
    for k in (1, 3):
        _check_scores(store, scope, s, QUERY, k)


def _retire_one(store: PostgresStore, scope: ragport.Scope, record_id: str) -> None:
    with store.unit_of_work(scope) as uow:
        g = uow.generations.stage()
        uow.records.retire_ids([record_id], generation=g)
        uow.generations.publish(g)
        uow.commit()


def test_a_source_deleted_whole_retires_its_batch_without_lexeme_deltas(
    store: PostgresStore, pg_schema: str
) -> None:
    """delete_source of an intact source writes one ``lexical_batches`` update and no row of
    ``lexical_terms`` or ``lexical_stats``; statistics and scores stay right at every
    pointer. If this fails, check ``statements.retire`` (``whole``) and ``queries.stats_at``."""
    scope, s = _scope(), f'"{pg_schema}"'
    _write(store, scope, "s0", "apple brook", "brook cedar", "cedar delta apple")
    _write(store, scope, "s1", "apple echo", "cedar cedar fox")
    assert _batches(store, s, scope, "s0") == [(3, None, False)]
    terms, stats = (
        _count(store, s, "lexical_terms", scope),
        _count(store, s, "lexical_stats", scope),
    )
    result = ragport.application.delete_source(source_id="s0", store=store, scope=scope)
    assert result.deleted == 3
    assert _count(store, s, "lexical_terms", scope) == terms, "no lexeme delta was written"
    assert _count(store, s, "lexical_stats", scope) == stats
    assert _batches(store, s, scope, "s0") == [(3, store.current_generation(scope), False)]
    _check(store, scope, s)
    # A replacement of the other source retires its old batch whole too.
    _write(store, scope, "s1", "apple apple golf")
    assert _count(store, s, "lexical_terms", scope) == terms + 2, "only the new row's deltas"
    _check(store, scope, s)


def test_each_source_of_a_batched_write_is_a_batch_deleted_whole(
    store: PostgresStore, pg_schema: str
) -> None:
    """``Rag.replace_sources`` writes its sources in one add, one statistics batch per source:
    deleting or replacing one of them retires its batch whole (no lexeme delta), the others'
    stay intact, and statistics and scores stay right at every pointer. If this fails, check
    ``unit_of_work._batches`` and ``with_stats`` (``batch``: the deltas by ``chg.batch``)."""
    scope, s = _scope(), f'"{pg_schema}"'
    rag = ragport.application.Rag(store=store, embedder=EMB, scope=scope)
    texts = {
        "s0": ("apple brook", "brook cedar", "cedar delta apple"),
        "s1": ("apple echo", "cedar cedar fox"),
        "s2": ("fox golf", "apple"),
    }
    result = rag.replace_sources(
        [
            ragport.application.SourceWrite(
                source_id=src, chunks=[ragport.Chunk.of(src, i, t) for i, t in enumerate(ts)]
            )
            for src, ts in texts.items()
        ]
    )
    assert not result.failures
    assert [_batches(store, s, scope, src) for src in texts] == [
        [(3, None, False)],
        [(2, None, False)],
        [(2, None, False)],
    ]
    _check(store, scope, s)
    terms = _count(store, s, "lexical_terms", scope)
    ragport.application.delete_source(source_id="s1", store=store, scope=scope)
    assert _count(store, s, "lexical_terms", scope) == terms, "no lexeme delta was written"
    assert _batches(store, s, scope, "s1") == [(2, store.current_generation(scope), False)]
    assert _batches(store, s, scope, "s0") == [(3, None, False)]
    _check(store, scope, s)
    _write(store, scope, "s2", "golf golf hotel")
    assert _count(store, s, "lexical_terms", scope) == terms + 2, "only the new row's deltas"
    _check(store, scope, s)


def test_a_batch_changed_row_by_row_is_never_retired_whole(
    store: PostgresStore, pg_schema: str
) -> None:
    """One row retired on its own marks the batch broken; deleting the rest then writes row
    deltas, and the statistics stay right. If this fails, check ``with_stats`` (``bk``)."""
    scope, s = _scope(), f'"{pg_schema}"'
    _write(store, scope, "s0", "apple brook", "brook cedar", "cedar delta apple")
    _write(store, scope, "s1", "apple echo", "cedar fox")
    _retire_one(store, scope, "s0#0001")
    assert _batches(store, s, scope, "s0") == [(3, None, True)]
    _check(store, scope, s)
    terms = _count(store, s, "lexical_terms", scope)
    ragport.application.delete_source(source_id="s0", store=store, scope=scope)
    assert _count(store, s, "lexical_terms", scope) > terms, "row deltas were written"
    assert _batches(store, s, scope, "s0") == [(3, None, True)]
    _check(store, scope, s)


def test_the_statistics_check_catches_a_retirement_that_ignores_broken_batches(
    store: PostgresStore, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken write path that retires a changed batch whole (the row already retired is
    subtracted twice) fails ``_check_statistics``: the check can fail."""
    monkeypatch.setattr(statements, "WHOLE", "b.retired_generation IS NULL")
    scope, s = _scope(), f'"{pg_schema}"'
    _write(store, scope, "s0", "apple brook", "brook cedar", "cedar delta apple")
    _write(store, scope, "s1", "apple echo", "cedar fox")
    _retire_one(store, scope, "s0#0001")
    ragport.application.delete_source(source_id="s0", store=store, scope=scope)
    with pytest.raises(AssertionError):
        _check_statistics(store, scope, s)


def _every_delta(
    s: str,
    table: str,
    columns: tuple[str, ...],
    pointer: str,
    lexeme: str | None = None,
    unfolded: str | None = None,
) -> str:
    """A broken ``queries.stats_at``: the deltas at or below the pointer, batches retired whole
    counted too."""
    where = "" if lexeme is None else f" AND x.lexeme = {lexeme}"
    return (
        f"SELECT {', '.join(columns)} FROM {s}.{table} x WHERE x.tenant_id = :t "
        f"AND x.resource_id = :r AND x.corpus_id = :c{where} AND x.generation <= {pointer}"
    )


def test_the_score_check_catches_a_reader_that_counts_retired_batches(
    store: PostgresStore, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken reader that still counts the deltas of a batch retired whole (df and N too
    high) fails ``_check_scores``: the check can fail."""
    scope, s = _scope(), f'"{pg_schema}"'
    _write(store, scope, "s0", "apple brook", "apple cedar", "cedar delta apple")
    _write(store, scope, "s1", "apple echo", "cedar fox", "golf hotel")
    ragport.application.delete_source(source_id="s0", store=store, scope=scope)
    _check(store, scope, s)
    monkeypatch.setattr(queries, "stats_at", _every_delta)
    with pytest.raises(AssertionError):
        _check_scores(store, scope, s, QUERY, 3)


def test_rollback_and_compaction_keep_batches_and_statistics_right(
    store: PostgresStore, pg_schema: str
) -> None:
    """A rollback brings back a source deleted whole (its batch, now broken, stays retired and
    row deltas count its rows again); compaction drops retired batches and folds broken
    ones, while an intact live batch keeps its deltas and is still retired whole after it.
    If this fails, check ``restore_above_sql``, ``fold_stats``, ``statements.retire`` and
    ``queries.stats_at``."""
    scope, s = _scope(), f'"{pg_schema}"'
    _write(store, scope, "s0", "apple brook", "brook cedar")
    _write(store, scope, "s1", "apple echo", "cedar fox")
    kept = store.current_generation(scope)
    ragport.application.delete_source(source_id="s0", store=store, scope=scope)
    _check(store, scope, s)
    ragport.application.rollback_generation(store=store, scope=scope, to=kept)
    assert [r.id for r in store.get_by_source(scope, "s0")] == ["s0#0001", "s0#0002"]
    assert _batches(store, s, scope, "s0")[0][2] is True, "restored row by row: broken"
    _check(store, scope, s)
    ragport.application.delete_source(source_id="s0", store=store, scope=scope)  # row deltas now
    _write(store, scope, "s2", "apple golf", "cedar hotel apple")
    _check(store, scope, s)
    ragport.application.compact(store=store, scope=scope, keep=0)
    _check(store, scope, s)
    with store.engine.connect() as conn:
        left = conn.execute(
            text(
                f"SELECT count(*) FILTER (WHERE retired_generation IS NOT NULL OR broken), "
                f"count(*) FROM {s}.lexical_batches WHERE tenant_id = :t AND resource_id = :r "
                "AND corpus_id = :c"
            ),
            {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
        ).one()
    assert tuple(left) == (0, 2), "only the intact live batches of s1 and s2 are left"
    terms = _count(store, s, "lexical_terms", scope)
    ragport.application.delete_source(source_id="s1", store=store, scope=scope)
    assert _count(store, s, "lexical_terms", scope) == terms, "s1 retired whole after compaction"
    _check(store, scope, s)
    ragport.application.compact(store=store, scope=scope, keep=0)
    _check(store, scope, s)


def test_forgetting_a_source_breaks_its_batch_and_keeps_statistics_right(
    store: PostgresStore, pg_schema: str
) -> None:
    """A forgotten tombstone takes a batch's rows out row by row (broken); a derived record
    naming that source is written in a batch of its own. If this fails, check
    ``tombstones_insert``."""
    scope, s = _scope(), f'"{pg_schema}"'
    _write(store, scope, "s0", "apple brook", "brook cedar")
    _write(store, scope, "s1", "apple echo", "cedar fox")
    ragport.application.index_derived(
        record_id="d0", text="apple summary", lineage=["s1"], embedder=EMB, store=store, scope=scope
    )
    with store.unit_of_work(scope) as uow:
        uow.tombstones.add([Tombstone("s0")])
        uow.commit()
    assert _batches(store, s, scope, "s0")[0][2] is True
    _check(store, scope, s)
    ragport.application.delete_source(source_id="s1", store=store, scope=scope)
    _check(store, scope, s)


def test_two_writers_in_one_scope_keep_batches_and_statistics_right(
    store: PostgresStore, pg_schema: str
) -> None:
    """Two threads replacing and deleting their own sources in one scope at once (the scope
    lock serializes them): the statistics equal a recomputation at every pointer after.
    If this fails, check that ``retire`` reads the batches in the statement's snapshot."""
    scope, s = _scope(), f'"{pg_schema}"'
    errors: list[BaseException] = []

    def writer(source: str) -> None:
        try:
            for i in range(6):
                _write(store, scope, source, f"apple {source} v{i}", f"cedar brook v{i}")
                if i % 2:
                    ragport.application.delete_source(source_id=source, store=store, scope=scope)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(src,)) for src in ("s0", "s1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    _check(store, scope, s)
    with store.engine.connect() as conn:
        whole = conn.execute(
            text(
                f"SELECT count(*) FROM {s}.lexical_batches WHERE tenant_id = :t "
                "AND resource_id = :r AND corpus_id = :c AND retired_generation IS NOT NULL "
                "AND NOT broken"
            ),
            {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
        ).scalar_one()
    assert whole >= 6, "each replacement and deletion retired the old batch whole"


def test_upgrade_from_version_7_keeps_rows_and_statistics(
    store: PostgresStore, pg_engine, pg_schema: str
) -> None:
    """A schema as migration 7 left it (no batch columns, no ``lexical_batches``, no
    ``live_ids``, the partial unique index on live ids, default fillfactor) upgrades in place
    through 8, 9 and 15 (which adds to the table 8 creates): its rows have no batch and are retired with row deltas, their ids are
    live in ``live_ids``; new writes get batches. If this fails, check ``schema._v8``/``_v9``."""
    from ragport.adapters.postgres import schema as migrations

    scope, s = _scope(), f'"{pg_schema}"'
    _write(store, scope, "s0", "apple brook", "brook cedar")
    _write(store, scope, "s1", "apple echo", "cedar fox")
    with pg_engine.begin() as conn:
        conn.execute(text(f"DROP TABLE {s}.lexical_batches"))
        conn.execute(text(f"DROP TABLE {s}.live_ids"))
        for table, column in (
            ("records", "stats_batch"),
            ("lexical_stats", "batch"),
            ("lexical_terms", "batch"),
        ):
            conn.execute(text(f"ALTER TABLE {s}.{table} DROP COLUMN {column}"))
        conn.execute(text(f"ALTER TABLE {s}.records RESET (fillfactor)"))
        conn.execute(
            text(
                f"CREATE UNIQUE INDEX records_live_id ON {s}.records "
                "(tenant_id, resource_id, corpus_id, id) WHERE retired_generation IS NULL"
            )
        )
        conn.execute(text(f"DELETE FROM {s}.schema_migrations WHERE version IN (8, 9, 15)"))
        assert migrations.current_version(conn, pg_schema) == 7
    old = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    assert old.upgrade() == [8, 9, 15]
    _check(old, scope, s)  # live_ids included
    assert _batches(old, s, scope, "s0") == []
    terms = _count(old, s, "lexical_terms", scope)
    ragport.application.delete_source(source_id="s0", store=old, scope=scope)
    assert _count(old, s, "lexical_terms", scope) > terms, "an old row: row deltas"
    _check(old, scope, s)
    _write(old, scope, "s2", "apple golf")
    assert _batches(old, s, scope, "s2") == [(1, None, False)]
    terms = _count(old, s, "lexical_terms", scope)
    ragport.application.delete_source(source_id="s2", store=old, scope=scope)
    assert _count(old, s, "lexical_terms", scope) == terms
    _check(old, scope, s)


_RECOUNT = (
    "WITH x AS (SELECT stats_batch, tsv FROM {s}.records WHERE tenant_id = :t "
    "AND resource_id = :r AND corpus_id = :c AND source_id = :src "
    "AND retired_generation IS NULL), "
    "l AS (SELECT x.stats_batch AS batch, u.lexeme, count(*) AS n FROM x "
    "CROSS JOIN LATERAL unnest(tsvector_to_array(x.tsv)) AS u(lexeme) GROUP BY 1, 2) "
    "SELECT b.fold_docs, b.fold_length, b.fold_lexemes, b.fold_counts, "
    "(SELECT sum(length(x.tsv)) FROM x WHERE x.stats_batch = b.batch), "
    '(SELECT array_agg(l.lexeme ORDER BY l.lexeme COLLATE "C") FROM l WHERE l.batch = b.batch), '
    '(SELECT array_agg(l.n ORDER BY l.lexeme COLLATE "C") FROM l WHERE l.batch = b.batch) '
    "FROM {s}.lexical_batches b WHERE b.tenant_id = :t AND b.resource_id = :r "
    "AND b.corpus_id = :c AND b.batch IN (SELECT stats_batch FROM x) ORDER BY b.batch"
)


def _amounts(store: PostgresStore, s: str, scope: ragport.Scope, source: str) -> list[tuple]:
    """Per batch of ``source``'s live rows: its stored (fold_docs, fold_length, fold_lexemes,
    fold_counts), then (length, lexemes, counts) recounted from the rows."""
    binds = {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id, "src": source}
    with store.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(text(_RECOUNT.format(s=s)), binds).all()]


def _unstore(store: PostgresStore, s: str, scope: ragport.Scope) -> None:
    """Make the scope's batches look written before their amounts were stored."""
    with store.engine.begin() as conn:
        conn.execute(
            text(
                f"UPDATE {s}.lexical_batches SET fold_length = NULL, fold_lexemes = NULL, "
                "fold_counts = NULL WHERE tenant_id = :t AND resource_id = :r AND corpus_id = :c"
            ),
            {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
        )


def test_a_batch_stores_what_it_counts_when_written(store: PostgresStore, pg_schema: str) -> None:
    """Each batch written stores its length, lexemes (sorted under "C") and counts, and no
    ``fold_docs`` (readers subtract nothing for it). If this fails, check
    ``statements._batches_insert``."""
    scope, s = _scope(), f'"{pg_schema}"'
    _write(store, scope, "s0", "apple brook", "brook cedar", "cedar delta apple Zulu")
    rag = ragport.application.Rag(store=store, embedder=EMB, scope=scope)
    result = rag.replace_sources(
        [
            ragport.application.SourceWrite(source_id=src, chunks=[ragport.Chunk.of(src, 0, t)])
            for src, t in (("s1", "fox fox golf"), ("s2", "golf hotel"))
        ]
    )
    assert not result.failures
    for source in ("s0", "s1", "s2"):
        [(docs, length, lexemes, counts, length2, lexemes2, counts2)] = _amounts(
            store, s, scope, source
        )
        assert docs is None
        assert (length, lexemes, counts) == (length2, lexemes2, counts2)
    _check(store, scope, s)


@pytest.mark.parametrize("stored", [True, False])
def test_a_batch_retired_whole_with_or_without_stored_amounts_keeps_statistics_right(
    store: PostgresStore, pg_schema: str, stored: bool
) -> None:
    """Deleting and replacing sources retires their batches whole, from their stored amounts
    or (a batch written before they were stored) counted from the rows: statistics and scores
    right at every pointer, through rollback and compaction. If this fails, check
    ``statements.retire`` (``whole.stored``, ``bw``)."""
    scope, s = _scope(), f'"{pg_schema}"'
    _write(store, scope, "s0", "apple brook", "brook cedar", "cedar delta apple")
    _write(store, scope, "s1", "apple echo", "cedar cedar fox")
    _write(store, scope, "s2", "golf apple")
    kept = store.current_generation(scope)
    if not stored:
        _unstore(store, s, scope)
    terms = _count(store, s, "lexical_terms", scope)
    ragport.application.delete_source(source_id="s0", store=store, scope=scope)
    assert _count(store, s, "lexical_terms", scope) == terms, "retired whole"
    _check(store, scope, s)
    _write(store, scope, "s1", "apple apple golf")
    _check(store, scope, s)
    ragport.application.rollback_generation(store=store, scope=scope, to=kept)
    _check(store, scope, s)
    ragport.application.delete_source(source_id="s2", store=store, scope=scope)
    _check(store, scope, s)
    ragport.application.compact(store=store, scope=scope, keep=0)
    _check(store, scope, s)
    ragport.application.delete_source(source_id="s1", store=store, scope=scope)
    _check(store, scope, s)


def test_the_statistics_check_catches_a_batch_that_stores_wrong_counts(
    store: PostgresStore, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken write path that stores each lexeme's count one too high makes the deletion of
    the batch subtract too much: ``_check_statistics`` fails (the check can fail)."""
    original = statements._batches_insert
    monkeypatch.setattr(
        statements,
        "_batches_insert",
        lambda s: original(s).replace("array_agg(td.d ORDER", "array_agg(td.d + 1 ORDER"),
    )
    scope, s = _scope(), f'"{pg_schema}"'
    _write(store, scope, "s0", "apple brook", "brook cedar", "cedar delta apple")
    _write(store, scope, "s1", "apple echo", "cedar fox")
    ragport.application.delete_source(source_id="s0", store=store, scope=scope)
    with pytest.raises(AssertionError):
        _check(store, scope, s)
