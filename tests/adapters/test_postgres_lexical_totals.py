"""BM25 statistics as running totals (migration 14): what a reader reads stays exact.

The lexical leg reads ``lexical_term_totals``/``lexical_stat_totals`` and corrects them with
the deltas past its pointer (``queries.stats_at``). ``_check_statistics`` compares both the
deltas and that read, at every readable pointer, with a recomputation from the rows. Here:
the migration backfills the totals of a schema written before it (staged writes and batches
retired whole included), readers at a pointer below a committed staged write read the old
statistics, and a write path that leaves a batch retired whole in the totals is caught.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore, statements
from tests.adapters.test_postgres_lexical_stats import _check_scores, _check_statistics, _stage
from tests.adapters.test_postgres_stat_batches import QUERY, _scope, _write


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")


def _check(store: PostgresStore, scope: ragport.Scope, s: str) -> None:
    _check_statistics(store, scope, s)
    for k in (1, 3):
        _check_scores(store, scope, s, QUERY, k)


def _history(store: PostgresStore, scope: ragport.Scope) -> None:
    """Writes, a source deleted whole (its batch retired), one rewritten, and a staged write
    (a source retired and rewritten above the pointer, committed, not published)."""
    _write(store, scope, "s0", "apple brook", "brook cedar", "cedar delta apple")
    _write(store, scope, "s1", "apple echo", "cedar fox")
    _write(store, scope, "s2", "golf apple")
    ragport.application.delete_source(source_id="s0", store=store, scope=scope)
    _write(store, scope, "s1", "apple apple hotel")
    _stage(store, scope, "s2", ["cedar india", "apple"])
    _assert_staged(store, scope)


def _assert_staged(store: PostgresStore, scope: ragport.Scope) -> None:
    """``_stage`` swallows a ``RagportError`` (the random-history test stages where a write
    may be refused): here the staged write must have committed, above the pointer."""
    with store.unit_of_work(scope) as uow:
        assert uow.generations.counter() > uow.generations.current()


def test_upgrade_from_version_13_backfills_the_totals(
    store: PostgresStore, pg_engine, pg_schema: str
) -> None:
    """A schema as migration 13 left it (deltas only) upgrades through 14: the totals equal
    the deltas' sums, batches retired whole left out, so every reader reads what the deltas
    said. If this fails, check ``schema._v14``."""
    from ragport.adapters.postgres import schema as migrations

    scope, s = _scope(), f'"{pg_schema}"'
    _history(store, scope)
    with pg_engine.begin() as conn:
        for table in ("lexical_term_totals", "lexical_stat_totals"):
            conn.execute(text(f"DROP TABLE {s}.{table}"))
        conn.execute(text(f"DELETE FROM {s}.schema_migrations WHERE version = 14"))
        assert migrations.current_version(conn, pg_schema) == 13
    old = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    assert old.upgrade() == [14]
    _check(old, scope, s)
    _write(old, scope, "s2", "juliet apple")  # publishes the staged generation
    _check(old, scope, s)


def test_a_staged_write_is_in_the_totals_but_not_read_below_it(
    store: PostgresStore, pg_schema: str
) -> None:
    """Committed, unpublished writes change the totals; the readers at the pointer subtract
    them (and add back the batch the staged write retired whole), then count them once
    published or drop them with the rollback that discards them."""
    scope, s = _scope(), f'"{pg_schema}"'
    _history(store, scope)
    _check(store, scope, s)
    with store.unit_of_work(scope) as uow:
        staged = uow.generations.stage()
        assert staged > uow.generations.current()
        uow.generations.publish(staged)
        uow.commit()
    _check(store, scope, s)
    _stage(store, scope, "s1", ["kilo apple"])
    _assert_staged(store, scope)
    _check(store, scope, s)
    ragport.application.rollback_generation(
        store=store, scope=scope, to=store.current_generation(scope)
    )
    _check(store, scope, s)


def test_the_totals_check_catches_a_retirement_that_keeps_whole_batches(
    store: PostgresStore, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken write path that retires a batch whole without taking its rows out of the
    totals fails ``_check_statistics``: the check of what readers read can fail."""
    original = statements._totals
    monkeypatch.setattr(statements, "_totals", lambda s, whole="": original(s))
    scope, s = _scope(), f'"{pg_schema}"'
    _write(store, scope, "s0", "apple brook", "brook cedar")
    _write(store, scope, "s1", "apple echo")
    ragport.application.delete_source(source_id="s0", store=store, scope=scope)
    with pytest.raises(AssertionError, match="totals"):
        _check_statistics(store, scope, s)
