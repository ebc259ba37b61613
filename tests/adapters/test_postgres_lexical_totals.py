"""BM25 statistics as running totals (migration 14): what a reader reads stays exact.

The lexical leg reads ``lexical_term_totals``/``lexical_stat_totals`` and corrects them with
the deltas past its pointer (``queries.stats_at``). ``_check_statistics`` compares both the
deltas and that read, at every readable pointer, with a recomputation from the rows. Here:
the migration backfills the totals of a schema written before it (staged writes and batches
retired whole included), readers at a pointer below a committed staged write read the old
statistics, and a write path that leaves a batch retired whole in the totals is caught.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
from sqlalchemy import text

import ragport
import tests.adapters.test_postgres_lexical_stats as lexical_stats_tests
from ragport.adapters.memory import InMemoryStore
from ragport.adapters.postgres import PostgresStore, background, queries, statements
from ragport.adapters.postgres.queries import stats_at
from ragport.adapters.postgres.settings import WriteSettings
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
    # A schema at 13 has no batch waiting for a fold (15 comes after 14): fold them here.
    _fold(store, s, scope)
    with pg_engine.begin() as conn:
        for table in ("lexical_term_totals", "lexical_stat_totals"):
            conn.execute(text(f"DROP TABLE {s}.{table}"))
        # 17 adds a column to lexical_stat_totals: it runs again after 14 recreates the table.
        conn.execute(text(f"DELETE FROM {s}.schema_migrations WHERE version IN (14, 17)"))
        assert migrations.current_version(conn, pg_schema) == 13
    old = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    assert old.upgrade() == [14, 17]
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


def _unfolded(store: PostgresStore, s: str, scope: ragport.Scope) -> int:
    """How many batches of ``scope`` are retired whole and not folded yet (migration 15)."""
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    f"SELECT count(*) FROM {s}.lexical_batches WHERE tenant_id = :t "
                    "AND resource_id = :r AND corpus_id = :c AND fold_docs IS NOT NULL"
                ),
                {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
            ).scalar_one()
        )


def _fold(store: PostgresStore, s: str, scope: ragport.Scope) -> int:
    """``background.fold_retired`` now, as the maintenance thread runs it."""
    with store.engine.connect() as conn:
        return background.fold_retired(conn, s, scope.tenant_id)


@pytest.fixture
def unhurried(pg_engine, pg_schema) -> PostgresStore:
    """A store whose maintenance thread waits a minute: the test folds when it wants."""
    return PostgresStore(
        pg_engine,
        schema=pg_schema,
        create=True,
        text_search_config="simple",
        writes=WriteSettings(maintenance_delay=60),
    )


_SOURCES = {
    "s0": ("apple brook", "brook cedar", "cedar delta apple"),
    "s1": ("apple echo", "cedar fox"),
    "s2": ("golf apple", "apple apple hotel cedar"),
    "s3": ("india cedar", "juliet"),
}
_V2 = {"s1": ("apple kilo", "lima cedar cedar"), "s2": ("apple mike",)}
_V3 = {"s1": ("november apple",), "s2": ("oscar cedar apple", "papa")}


def _replay(store: Any, scope: ragport.Scope) -> None:
    """Four sources, two of them replaced twice (two levels of replaced versions), then two
    deleted: every replacement and delete retires a batch whole."""
    for version in (_SOURCES, _V2, _V3):
        for source, texts in version.items():
            _write(store, scope, source, *texts)
    for source in ("s0", "s2"):
        ragport.application.delete_source(source_id=source, store=store, scope=scope)


def _scores(store: Any, scope: ragport.Scope) -> list[tuple[str, float]]:
    found = store.lexical_query(scope, " ".join(QUERY), limit=10)
    return [(item.record.id, item.score) for item in found]


def test_scores_are_the_same_before_and_after_the_fold_and_as_in_memory(
    unhurried: PostgresStore, pg_schema: str
) -> None:
    """Batches retired whole stay in the totals until folded, and readers subtract what they
    stored: the statistics at every pointer and the BM25 scores are the same before the fold,
    after it, and in the in-memory store given the same writes. If this fails, check
    ``queries.stats_at`` (its last part), ``statements.retire`` and ``fold_retired``."""
    scope, s = _scope(), f'"{pg_schema}"'
    _replay(unhurried, scope)
    assert _unfolded(unhurried, s, scope) >= 6  # 2 + 2 replaced, 2 deleted
    _check(unhurried, scope, s)
    before = _scores(unhurried, scope)
    assert _fold(unhurried, s, scope) >= 6
    assert _unfolded(unhurried, s, scope) == 0
    _check(unhurried, scope, s)
    assert _scores(unhurried, scope) == before  # exactly
    # A scope given only what is live at the end (nothing retired) scores exactly the same.
    fresh = _scope()
    for source in ("s1", "s3"):
        _write(unhurried, fresh, source, *{**_SOURCES, **_V2, **_V3}[source])
    assert _scores(unhurried, fresh) == before
    # The in-memory store ranks the same (its generic BM25 has other k1 and idf: see
    # tests/contract/test_differential_postgres.py, so its scores differ).
    memory = InMemoryStore()
    _replay(memory, scope)
    assert [i for i, _ in _scores(memory, scope)] == [i for i, _ in before]


def test_compaction_and_purge_fold_first(unhurried: PostgresStore, pg_schema: str) -> None:
    """Compaction drops retired batches and a purge erases its lexemes' totals: each folds
    the batches not folded yet first, in its own transaction, so readers stay exact."""
    scope, s = _scope(), f'"{pg_schema}"'
    _replay(unhurried, scope)
    assert _unfolded(unhurried, s, scope)
    ragport.application.compact(store=unhurried, scope=scope, keep=0)
    assert _unfolded(unhurried, s, scope) == 0
    _check(unhurried, scope, s)
    _write(unhurried, scope, "s3", "quebec cedar")
    assert _unfolded(unhurried, s, scope) == 1
    with unhurried.unit_of_work(scope) as uow:
        uow.records.purge_source("s3")
        uow.commit()
    assert _unfolded(unhurried, s, scope) == 0
    _check(unhurried, scope, s)


def test_a_fold_under_a_concurrent_writer_and_reader_changes_no_read(
    unhurried: PostgresStore, pg_schema: str
) -> None:
    """Deletes and folds on one thread while another writes another scope and reads this one
    in REPEATABLE READ snapshots: every snapshot's statistics (``stats_at`` at its pointer)
    equal a recomputation from the rows it sees, and the end state checks out."""
    scope, s = _scope(), f'"{pg_schema}"'
    other = _scope()
    for i in range(12):
        _write(unhurried, scope, f"d{i}", f"apple w{i} cedar", f"brook w{i}")
    errors: list[BaseException] = []
    stop = threading.Event()
    checked = [0]

    def read_and_write() -> None:
        n = 0
        try:
            while not stop.is_set():
                _write(unhurried, other, f"o{n % 3}", f"apple x{n}", "cedar")
                _snapshot_check(unhurried, s, scope)
                checked[0] += 1
                n += 1
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=read_and_write)
    thread.start()
    try:
        for i in range(12):
            ragport.application.delete_source(source_id=f"d{i}", store=unhurried, scope=scope)
            if i % 3 == 2:
                _fold(unhurried, s, scope)
                _fold(unhurried, s, other)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert checked[0] > 0
    _fold(unhurried, s, scope)
    _check(unhurried, scope, s)
    _check(unhurried, other, s)


def _snapshot_check(store: PostgresStore, s: str, scope: ragport.Scope) -> None:
    """In one REPEATABLE READ snapshot: N, the total length and df of ``QUERY``'s lexemes as
    ``stats_at`` reads them at the scope's pointer equal those of the visible rows."""
    params = {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id}
    where = "tenant_id = :t AND resource_id = :r AND corpus_id = :c"
    with store.engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn:
        pointer = conn.execute(text(f"SELECT pointer FROM {s}.scopes WHERE {where}"), params)
        p = pointer.scalar_one()
        bind = {**params, "p": p}
        visible = (
            f"{where} AND generation <= :p AND (retired_generation IS NULL "
            "OR retired_generation > :p)"
        )
        expected = conn.execute(
            text(
                f"SELECT count(*), coalesce(sum(length(tsv)), 0) FROM {s}.records WHERE {visible}"
            ),
            bind,
        ).one()
        sized = stats_at(s, "lexical_stats", ("docs", "length"), ":p")
        read = conn.execute(
            text(f"SELECT coalesce(sum(docs), 0), coalesce(sum(length), 0) FROM ({sized}) x"), bind
        ).one()
        assert tuple(read) == tuple(expected), ("N and length", p)
        for lexeme in QUERY:
            want = conn.execute(
                text(
                    f"SELECT count(*) FROM {s}.records WHERE {visible} "
                    "AND tsv @@ CAST(:l AS tsquery)"
                ),
                {**bind, "l": lexeme},
            ).scalar_one()
            df = stats_at(s, "lexical_terms", ("docs",), ":p", "CAST(:l AS text)")
            got = conn.execute(
                text(f"SELECT coalesce(sum(docs), 0) FROM ({df}) x"), {**bind, "l": lexeme}
            ).scalar_one()
            assert got == want, ("df", lexeme, p)
        conn.rollback()


def _forgetful(
    s: str, table: str, columns: tuple[str, ...], pointer: str, lexeme: str | None = None
) -> str:
    """A broken reader: ``stats_at`` without its last part (the batches not folded yet)."""
    return queries.stats_at(s, table, columns, pointer, lexeme).rsplit(" UNION ALL ", 1)[0]


def test_the_check_catches_a_reader_that_forgets_the_unfolded_batches(
    unhurried: PostgresStore, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checks above can fail: a reader that does not subtract the batches retired whole
    but not folded yet reads them as if they were live."""
    scope, s = _scope(), f'"{pg_schema}"'
    _replay(unhurried, scope)
    monkeypatch.setattr(lexical_stats_tests, "stats_at", _forgetful)
    with pytest.raises(AssertionError, match="totals"):
        _check_statistics(unhurried, scope, s)
    monkeypatch.setattr(sys.modules[__name__], "stats_at", _forgetful)
    with pytest.raises(AssertionError, match="N and length"):
        _snapshot_check(unhurried, s, scope)


def test_the_check_catches_a_fold_that_subtracts_twice(
    unhurried: PostgresStore, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken fold that takes each batch out of the totals twice (or, below, not at all)
    fails ``_check_statistics`` once it ran."""
    original = statements.fold_retired
    for broken in ("-2 * sum(", "0 * sum("):
        monkeypatch.setattr(
            statements,
            "fold_retired",
            lambda s, b=broken, **kw: original(s, **kw).replace("-sum(", b),
        )
        scope, s = _scope(), f'"{pg_schema}"'
        _replay(unhurried, scope)
        _check_statistics(unhurried, scope, s)  # right before the fold
        assert _fold(unhurried, s, scope)
        with pytest.raises(AssertionError, match="totals"):
            _check_statistics(unhurried, scope, s)


# Batches sharing some lexemes and each missing others: in "C" order "42" comes first,
# "yankee" and "zulu" last and "éclair" after them; "app" is a prefix of "apple".
_OVERLAPS = {
    "s0": ("apple zulu", "app 42"),
    "s1": ("apple brook", "zulu éclair apple"),
    "s2": ("cedar", "aardvark app apple"),
    "s3": ("brook cedar", "yankee apple"),
}
_WIDE = "apple app zulu cedar éclair aardvark 42 yankee brook absent"


def _overlapping(store: PostgresStore, scope: ragport.Scope, s: str) -> None:
    """Writes ``_OVERLAPS`` and deletes three of its sources: three unfolded batches."""
    for source, texts in _OVERLAPS.items():
        _write(store, scope, source, *texts)
    for source in ("s0", "s1", "s2"):
        ragport.application.delete_source(source_id=source, store=store, scope=scope)
    assert _unfolded(store, s, scope) == 3


def test_unfolded_batches_with_overlapping_lexemes_read_exactly(
    unhurried: PostgresStore, pg_schema: str
) -> None:
    """Each query lexeme is looked up in every unfolded batch (``queries._unfolded``): held by
    some batches and not others, before a batch's first lexeme or past its last, a prefix
    of another. The df of every lexeme at every pointer and the scores of a query naming
    them all are exact before the fold and unchanged after it."""
    scope, s = _scope(), f'"{pg_schema}"'
    _overlapping(unhurried, scope, s)
    _check(unhurried, scope, s)
    before = unhurried.lexical_query(scope, _WIDE, limit=10)
    assert before
    assert _fold(unhurried, s, scope) == 3
    _check(unhurried, scope, s)
    after = unhurried.lexical_query(scope, _WIDE, limit=10)
    assert [(i.record.id, i.score) for i in after] == [(i.record.id, i.score) for i in before]


def test_the_check_catches_a_lookup_that_takes_a_neighbour(
    unhurried: PostgresStore, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken lookup that subtracts the count of the lexeme before a missing one (no
    equality check after the bisection) fails ``_check_statistics``."""
    scope, s = _scope(), f'"{pg_schema}"'
    _overlapping(unhurried, scope, s)
    original = queries._unfolded
    monkeypatch.setattr(
        queries,
        "_unfolded",
        lambda *a: original(*a).replace("WHERE b.fold_lexemes[k.i] = ", "WHERE 'x' <> "),
    )
    with pytest.raises(AssertionError, match="totals"):
        _check_statistics(unhurried, scope, s)
