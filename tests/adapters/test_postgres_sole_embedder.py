"""The drift guard answered from the scope's row (``embedders.py``, migration 12).

``scopes.sole_embedder`` / ``sole_dimensions`` claim that every row of the scope, at every
generation, carries one (embedder id, dimensions); a guarded vector query then reads no
``records_embedders`` probe. These tests hold the claim to the rows: set while they agree,
cleared by a foreign add (alone, mixed into one add, or staged and never published), back
after the foreign rows are purged, kept out of a failed add's savepoint, right under two
writers, and filled in by the migration. A store whose adds never clear the claim is shown
to fail the same checks.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import attrs
import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore, embedders, queries, reads
from ragport.adapters.postgres import schema as migrations
from ragport.adapters.postgres.backend import transaction_of
from ragport.adapters.postgres.predicate import SCOPE, scope_params
from ragport.contract_tests._support import (
    CONTRACT_DIMENSIONS,
    CONTRACT_EMBEDDER_ID,
    hash_vector,
    make_batch,
    publish_sources,
)

DIMS = CONTRACT_DIMENSIONS
OURS = (CONTRACT_EMBEDDER_ID, DIMS)


def _scope() -> ragport.Scope:
    return ragport.Scope("tenant-1", "kb", "c" + uuid.uuid4().hex[:12])


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")


def _claim(store: PostgresStore, scope: ragport.Scope) -> tuple[Any, Any] | None:
    with store.engine.connect() as conn:
        row = conn.execute(
            text(
                f'SELECT sole_embedder, sole_dimensions FROM "{store.schema}".scopes WHERE {SCOPE}'
            ),
            scope_params(scope),
        ).one_or_none()
    return None if row is None else (row[0], row[1])


def _foreign(store: PostgresStore, scope: ragport.Scope) -> frozenset[Any]:
    answer = store.guarded_query(
        scope, hash_vector("alpha"), embedder_id=OURS[0], dimensions=OURS[1], limit=10
    )
    assert answer.foreign_embedders == store.foreign_embedders(scope, *OURS)  # the exact read
    return answer.foreign_embedders


def _probes_run(store: PostgresStore, scope: ragport.Scope) -> int:
    """How many times the guarded statement ran a ``records_embedders`` probe (EXPLAIN)."""
    sql, _ = queries.plain_vector_sql(f'"{store.schema}"', DIMS, 10, True, vec=store._db.pgvector())
    params = scope_params(scope, e=OURS[0], ed=OURS[1], q=hash_vector("alpha"))
    with store._db.raw_read("explain") as raw:
        plan = reads.fetch(raw, "EXPLAIN (ANALYZE, COSTS OFF, FORMAT JSON) " + sql, params)
    runs = 0

    def walk(node: dict[str, Any]) -> None:
        nonlocal runs
        if node.get("Index Name") == "records_embedders":
            runs += int(node.get("Actual Loops", 0))
        for child in node.get("Plans", ()):
            walk(child)

    walk(plan[0][0][0]["Plan"])
    return runs


def check_claim_follows_the_rows(store: PostgresStore) -> None:
    """Consistent rows claim; a foreign add clears; a purge of the foreign rows restores;
    a second foreign add (another dimension) clears again. The guard names what is foreign
    at each step."""
    scope = _scope()
    publish_sources(store, scope, {"a": ["alpha one", "alpha two"]})
    publish_sources(store, scope, {"b": ["beta"]})
    assert _claim(store, scope) == OURS
    assert _foreign(store, scope) == frozenset()
    publish_sources(store, scope, {"x": ["xi"]}, embedder_id="other:8")
    assert _foreign(store, scope) == frozenset({("other:8", DIMS)})
    assert _claim(store, scope) == (None, None)
    publish_sources(store, scope, {"x": None})  # retired, still stored: no claim yet
    assert _foreign(store, scope) == frozenset()
    assert _claim(store, scope) == (None, None)
    with store.unit_of_work(scope) as uow:
        uow.records.purge_retired(uow.generations.current())
        uow.commit()
    assert _claim(store, scope) == OURS
    publish_sources(store, scope, {"y": ["upsilon"]}, dimensions=DIMS + 1)
    assert _foreign(store, scope) == frozenset({(OURS[0], DIMS + 1)})
    assert _claim(store, scope) == (None, None)


def test_the_claim_follows_the_rows_through_two_drifts(store: PostgresStore) -> None:
    check_claim_follows_the_rows(store)


def test_a_store_whose_adds_never_clear_the_claim_fails_the_check(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: with adds that keep a stale claim, the guard misses drift."""
    real = embedders.sole_after_add

    def stale(conn: Any, s: str, scope: ragport.Scope, claim: Any, added: Any) -> Any:
        return claim if claim is not None else real(conn, s, scope, claim, added)

    monkeypatch.setattr(embedders, "sole_after_add", stale)
    with pytest.raises(AssertionError):
        check_claim_follows_the_rows(store)


def test_a_claimed_scope_reads_no_probe_and_an_unclaimed_one_does(store: PostgresStore) -> None:
    scope = _scope()
    publish_sources(store, scope, {"a": ["alpha"]})
    assert _probes_run(store, scope) == 0
    publish_sources(store, scope, {"z": ["zeta"]}, embedder_id=None)  # a legacy row
    assert _probes_run(store, scope) == 2
    assert _foreign(store, scope) == frozenset({(None, DIMS)})


def test_a_mixed_add_and_a_staged_foreign_add_clear_the_claim(store: PostgresStore) -> None:
    scope = _scope()
    publish_sources(store, scope, {"a": ["alpha"]})
    with store.unit_of_work(scope) as uow:
        generation = uow.generations.stage()
        batch = make_batch(scope, "m", ["mu one"], generation=generation)
        uow.records.add(batch.records, batch.vectors)
        uow.commit()  # staged, not published, the same embedder
    assert _claim(store, scope) == OURS  # kept
    with store.unit_of_work(scope) as uow:
        generation = uow.generations.stage()
        foreign = make_batch(scope, "n", ["nu one"], generation=generation, dimensions=DIMS + 2)
        uow.records.add(foreign.records, foreign.vectors)
        uow.commit()  # staged, not published: invisible, yet the claim must go
    assert _claim(store, scope) == (None, None)
    assert _probes_run(store, scope) == 2
    assert _foreign(store, scope) == frozenset()  # staged rows are not visible: nothing named
    # One add of rows of two embedders at once.
    second = _scope()
    publish_sources(store, second, {"a": ["alpha"]})
    mixed = make_batch(second, "p", ["pi one", "pi two"], generation=0)
    records = (mixed.records[0], attrs.evolve(mixed.records[1], embedder_id="other:8"))
    with store.unit_of_work(second) as uow:
        generation = uow.generations.stage()
        records = tuple(attrs.evolve(r, generation=generation) for r in records)
        uow.records.add(records, mixed.vectors)
        uow.generations.publish(generation)
        uow.commit()
    assert _claim(store, second) == (None, None)
    assert _foreign(store, second) == frozenset({("other:8", DIMS)})


def test_a_failed_add_leaves_the_claim_as_it_was(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is written inside the add's savepoint: an add that fails after clearing it
    leaves both the scope's row and the transaction's copy claiming (the engine's unit of
    work is rollback-only after the failure, so nothing of it lands)."""
    scope = _scope()
    publish_sources(store, scope, {"a": ["alpha"]})
    real = embedders.sole_after_add

    def clear_then_fail(*args: Any) -> Any:
        real(*args)
        raise ragport.StoreError("failure after the claim was written")

    with store.unit_of_work(scope) as uow:
        generation = uow.generations.stage()
        foreign = make_batch(scope, "f", ["phi"], generation=generation, embedder_id="other:8")
        monkeypatch.setattr(embedders, "sole_after_add", clear_then_fail)
        with pytest.raises(ragport.StoreError):
            uow.records.add(foreign.records, foreign.vectors)
        monkeypatch.setattr(embedders, "sole_after_add", real)
        tx = transaction_of(uow)
        assert tx is not None and tx.sole == OURS
        with pytest.raises(ragport.ValidationError):
            uow.commit()
    assert _claim(store, scope) == OURS
    assert sorted(r.id for r in store.get_by_source(scope, "f")) == []
    assert _foreign(store, scope) == frozenset()


def test_two_writers_of_two_embedders_leave_no_claim(store: PostgresStore) -> None:
    """Two threads add to one scope at once, each its own embedder, 8 times each: the scope
    lock orders them, and the claim ends cleared with both embedders named."""
    scope = _scope()
    publish_sources(store, scope, {"seed": ["seed"]})
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def writer(name: str, embedder_id: str) -> None:
        try:
            start.wait()
            for i in range(8):
                publish_sources(
                    store, scope, {f"{name}{i}": [f"{name} {i}"]}, embedder_id=embedder_id
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=writer, args=("p", OURS[0])),
        threading.Thread(target=writer, args=("q", "other:8")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _claim(store, scope) == (None, None)
    assert _foreign(store, scope) == frozenset({("other:8", DIMS)})


def test_migration_12_claims_the_scopes_whose_rows_agree(pg_engine, pg_schema) -> None:
    """A version-11 schema (the columns dropped, the migration unrecorded) upgrades to claims
    for its consistent scopes only: not for a mixed one, nor for a scope without rows."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")
    consistent, mixed, empty = _scope(), _scope(), _scope()
    publish_sources(store, consistent, {"a": ["alpha"], "b": ["beta"]})
    publish_sources(store, mixed, {"a": ["alpha"]})
    publish_sources(store, mixed, {"z": ["zeta"]}, embedder_id=None)
    publish_sources(store, empty, {"a": ["alpha"]})
    with store.unit_of_work(empty) as uow:
        generation = uow.generations.stage()
        uow.records.retire_source("a", generation=generation)
        uow.generations.publish(generation)
        uow.records.purge_retired(generation)
        uow.commit()
    s = f'"{pg_schema}"'
    with pg_engine.begin() as conn:
        conn.execute(
            text(f"ALTER TABLE {s}.scopes DROP COLUMN sole_embedder, DROP COLUMN sole_dimensions")
        )
        conn.execute(text(f"DELETE FROM {s}.schema_migrations WHERE version = 12"))
        assert migrations.current_version(conn, pg_schema) == 11
    old = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    with pytest.raises(ragport.StoreError):
        old.current_generation(consistent)  # refused until upgraded
    assert old.upgrade() == [12]
    assert _claim(old, consistent) == OURS
    assert _claim(old, mixed) == (None, None)
    assert _claim(old, empty) == (None, None)
    assert _foreign(old, mixed) == frozenset({(None, DIMS)})
    assert _foreign(old, consistent) == frozenset()
    publish_sources(old, empty, {"c": ["gamma"]})  # its first add after the upgrade claims
    assert _claim(old, empty) == OURS
