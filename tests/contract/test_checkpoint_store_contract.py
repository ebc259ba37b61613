"""Both checkpoint stores against the shipped CheckpointStoreContract, and a broken one caught."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStore
from ragport.contract_tests import CheckpointInUnitOfWorkContract, CheckpointStoreContract
from ragport.contract_tests.checkpoint_store import CONNECTOR, OTHER_CORPUS, SCOPE
from ragport.ports.sync import Checkpoint

FAILURE = (AssertionError, pytest.fail.Exception)


class TestInMemoryCheckpointStore(CheckpointStoreContract):
    @pytest.fixture
    def checkpoint_store(self) -> Iterator[InMemoryCheckpointStore]:
        yield InMemoryCheckpointStore()


class TestPostgresCheckpointStore(CheckpointStoreContract):
    @pytest.fixture
    def checkpoint_store(self, pg_engine, pg_schema):
        from ragport.adapters.postgres import PostgresCheckpointStore

        yield PostgresCheckpointStore(pg_engine, schema=pg_schema, create=True)


class TestInMemoryCheckpointsInUnitOfWork(CheckpointInUnitOfWorkContract):
    @pytest.fixture
    def joined_checkpoints(self):
        yield InMemoryCheckpointStore(), InMemoryStore()


class TestPostgresCheckpointsInUnitOfWork(CheckpointInUnitOfWorkContract):
    @pytest.fixture
    def joined_checkpoints(self, pg_engine, pg_schema):
        from ragport.adapters.postgres import PostgresCheckpointStore, PostgresStore

        store = PostgresStore(pg_engine, schema=pg_schema, create=True)
        yield PostgresCheckpointStore(pg_engine, schema=pg_schema), store


def test_postgres_checkpoints_do_not_join_another_schema(pg_engine, pg_schema):
    """A checkpoint store of another schema on the same server does not join the unit of
    work (its table is not the one the unit of work writes).

    If this fails, check PostgresCheckpointStore.joins: it compares schema and server.
    """
    from sqlalchemy import text

    from ragport.adapters.postgres import PostgresCheckpointStore, PostgresStore

    other = pg_schema + "_other"
    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    try:
        foreign = PostgresCheckpointStore(pg_engine, schema=other, create=True)
        mine = PostgresCheckpointStore(pg_engine, schema=pg_schema)
        with store.unit_of_work(SCOPE) as uow:
            assert mine.joins(uow) is True
            assert foreign.joins(uow) is False
        assert InMemoryCheckpointStore().joins(object()) is False
    finally:
        with pg_engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{other}" CASCADE'))


def test_in_memory_checkpoints_join_one_store_only():
    """Units of work of a second InMemoryStore hold another writer lock: not joined, so two
    stores sharing a checkpoint store never both pass a "check now, write at commit" CAS.

    If this fails, check InMemoryCheckpointStore.joins: it binds to the first store it joins.
    """
    first, second = InMemoryStore(), InMemoryStore()
    checkpoints = InMemoryCheckpointStore()
    with first.unit_of_work(SCOPE) as uow:
        assert checkpoints.joins(uow) is True
    with second.unit_of_work(SCOPE) as uow:
        assert checkpoints.joins(uow) is False
    bound = InMemoryCheckpointStore(store=second)
    with first.unit_of_work(SCOPE) as uow:
        assert bound.joins(uow) is False


class DetachedStore(InMemoryCheckpointStore):
    """Claims to join but compare-and-sets at once, outside the unit of work."""

    def compare_and_set_in(self, uow, connector_id, scope, expected_version, cursor):
        return self.compare_and_set(connector_id, scope, expected_version, cursor)


def test_the_joined_contract_catches_a_detached_store():
    """A store whose joined CAS ignores the unit of work fails the rollback test.

    If this fails, CheckpointInUnitOfWorkContract no longer checks that a rolled-back unit
    of work leaves the checkpoint unchanged.
    """
    suite = CheckpointInUnitOfWorkContract()
    with pytest.raises(FAILURE):
        suite.test_a_joined_cas_lands_only_when_the_unit_of_work_commits(
            (DetachedStore(), InMemoryStore())
        )
    suite.test_a_joined_cas_lands_only_when_the_unit_of_work_commits(
        (InMemoryCheckpointStore(), InMemoryStore())
    )


class UnconditionalStore:
    """Stores whatever it is given (no version check), keyed by corpus only, racy."""

    def __init__(self) -> None:
        self.items: dict[object, Checkpoint] = {}

    def get(self, connector_id, scope):
        return self.items.get(scope.corpus_id.rstrip("-2"), Checkpoint(None, 0))

    def compare_and_set(self, connector_id, scope, expected_version, cursor):
        current = self.get(connector_id, scope)
        threading.Event().wait(0.01)  # read, then write: the race the contract must catch
        self.items[scope.corpus_id.rstrip("-2")] = Checkpoint(cursor, current.version + 1)
        return True

    def delete(self, connector_id, scope):
        return self.items.pop(scope.corpus_id.rstrip("-2"), None) is not None


@pytest.mark.parametrize(
    "test",
    [
        "test_a_wrong_expected_version_changes_nothing",
        "test_scopes_and_connectors_are_exact",
        "test_concurrent_writers_exactly_one_wins",
        "test_concurrent_first_writers_exactly_one_wins",
        "test_bad_arguments_are_refused_before_writing",
    ],
)
def test_the_contract_catches_an_unconditional_store(test):
    """An adapter without a version check, exact keys, atomicity or validation fails.

    If this fails, a CheckpointStoreContract test no longer checks what its docstring says.
    """
    suite = CheckpointStoreContract()
    method = getattr(suite, test)
    args = {
        "test_a_wrong_expected_version_changes_nothing": (1,),
        "test_bad_arguments_are_refused_before_writing": (CONNECTOR, SCOPE, -1, "c", "x"),
    }.get(test, ())
    with pytest.raises(FAILURE):
        method(UnconditionalStore(), *args)


def test_the_broken_store_is_wrong_where_the_fixture_says():
    """Sanity check of the fake above: it conflates a corpus with its '-2' sibling.

    If this fails, the broken store no longer breaks exact scoping.
    """
    store = UnconditionalStore()
    store.compare_and_set(CONNECTOR, SCOPE, 0, "a")
    assert store.get(CONNECTOR, OTHER_CORPUS).cursor == "a"
