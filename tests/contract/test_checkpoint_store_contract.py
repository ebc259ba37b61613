"""Both checkpoint stores against the shipped CheckpointStoreContract, and a broken one caught."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from ragport.adapters.memory import InMemoryCheckpointStore
from ragport.contract_tests import CheckpointStoreContract
from ragport.contract_tests.checkpoint_store import CONNECTOR, OTHER_CORPUS, SCOPE
from ragport.ports.sync import Checkpoint


class TestInMemoryCheckpointStore(CheckpointStoreContract):
    @pytest.fixture
    def checkpoint_store(self) -> Iterator[InMemoryCheckpointStore]:
        yield InMemoryCheckpointStore()


class TestPostgresCheckpointStore(CheckpointStoreContract):
    @pytest.fixture
    def checkpoint_store(self, pg_engine, pg_schema):
        from ragport.adapters.postgres import PostgresCheckpointStore

        yield PostgresCheckpointStore(pg_engine, schema=pg_schema, create=True)


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


FAILURE = (AssertionError, pytest.fail.Exception)


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
