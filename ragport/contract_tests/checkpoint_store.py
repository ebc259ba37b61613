"""``CheckpointStoreContract``: the promises of ``ragport.ports.sync.CheckpointStore`` as tests.

Subclass it and supply a ``checkpoint_store`` fixture that yields an *empty* store and cleans
up::

    class TestMyCheckpointStore(CheckpointStoreContract):
        @pytest.fixture
        def checkpoint_store(self):
            store = MyCheckpointStore(...)
            yield store
            store.drop_everything()

Override a test only by wrapping it in ``pytest.mark.xfail(reason=...)``.
"""

from __future__ import annotations

import threading

import pytest

from ragport.contract_tests._base import ContractSuite, required_fixture
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope
from ragport.ports.store import ChunkStore
from ragport.ports.sync import Checkpoint, CheckpointStore, SupportsCheckpointsInUnitOfWork

JoinedCheckpoints = tuple[CheckpointStore, ChunkStore]
"""``joined_checkpoints``: the checkpoint store and the chunk store whose units of work it joins."""

__all__ = ["CheckpointInUnitOfWorkContract", "CheckpointStoreContract"]

SCOPE = Scope("contract-tenant", "contract-resource", "contract-corpus")
OTHER_CORPUS = Scope("contract-tenant", "contract-resource", "contract-corpus-2")
PREFIX_CORPUS = Scope("contract-tenant", "contract-resource", "contract-corpus-")
OTHER_TENANT = Scope("contract-tenant-2", "contract-resource", "contract-corpus")
ALL_SCOPES = (SCOPE, OTHER_CORPUS, PREFIX_CORPUS, OTHER_TENANT)
CONNECTOR = "contract-connector"
CONNECTORS = (CONNECTOR, "contract-connector-2", "contract-connecto")


def _assert_empty(store: CheckpointStore) -> None:
    """Every (connector id, scope) the suite writes to reads ``(None, 0)``."""
    for connector in CONNECTORS:
        for scope in ALL_SCOPES:
            assert store.get(connector, scope) == Checkpoint(None, 0), (connector, scope)


class CheckpointStoreContract(ContractSuite):
    """Versioned cursors per (connector id, exact scope) that only a compare-and-set moves."""

    checkpoint_store = required_fixture(
        "CheckpointStoreContract",
        "checkpoint_store",
        "yield an empty CheckpointStore and remove whatever the test wrote afterwards",
    )

    def test_fixture_yields_an_empty_store(self, checkpoint_store: CheckpointStore) -> None:
        """Checks ``CheckpointStore.get``, ``CheckpointStore.compare_and_set``,
        ``CheckpointStore.delete``: the adapter defines every member, and a fresh store reads
        ``(None, 0)`` for every connector id and scope the suite uses.

        If this fails, check that the `checkpoint_store` fixture yields a new or emptied store.
        """
        assert isinstance(checkpoint_store, CheckpointStore)
        _assert_empty(checkpoint_store)

    def test_first_compare_and_set_expects_version_zero(
        self, checkpoint_store: CheckpointStore
    ) -> None:
        """Checks ``CheckpointStore.compare_and_set``, ``CheckpointStore.get``: with nothing stored,
        a compare-and-set at version 0 returns True and stores the cursor at version 1; ``get``
        reads it back as a ``Checkpoint`` that unpacks to ``(cursor, version)``.

        If this fails, check that an absent checkpoint counts as version 0 and the first write
        creates it at version 1.
        """
        assert checkpoint_store.compare_and_set(CONNECTOR, SCOPE, 0, "cursor-1") is True
        got = checkpoint_store.get(CONNECTOR, SCOPE)
        assert got == Checkpoint("cursor-1", 1)
        cursor, version = got
        assert (cursor, version) == ("cursor-1", 1)

    def test_each_success_moves_the_version_by_one(self, checkpoint_store: CheckpointStore) -> None:
        """Checks ``CheckpointStore.compare_and_set``: three successive calls, each expecting the
        last version, succeed and leave version 3 with the last cursor.

        If this fails, check that a successful compare_and_set sets version = expected + 1.
        """
        for version in range(3):
            assert checkpoint_store.compare_and_set(CONNECTOR, SCOPE, version, f"c{version}")
        assert checkpoint_store.get(CONNECTOR, SCOPE) == Checkpoint("c2", 3)

    @pytest.mark.parametrize("expected", [0, 1, 3, 99])
    def test_a_wrong_expected_version_changes_nothing(
        self, checkpoint_store: CheckpointStore, expected: int
    ) -> None:
        """Checks ``CheckpointStore.compare_and_set``: a stale or future expected version returns
        False and leaves cursor and version as they were.

        If this fails, check the version condition of compare_and_set (an UPDATE ... WHERE
        version = expected, not an unconditional upsert).
        """
        assert checkpoint_store.compare_and_set(CONNECTOR, SCOPE, 0, "first")
        assert checkpoint_store.compare_and_set(CONNECTOR, SCOPE, 1, "second")
        assert checkpoint_store.compare_and_set(CONNECTOR, SCOPE, expected, "lost") is False
        assert checkpoint_store.get(CONNECTOR, SCOPE) == Checkpoint("second", 2)

    def test_cursor_is_stored_verbatim(self, checkpoint_store: CheckpointStore) -> None:
        """Checks ``CheckpointStore.compare_and_set``, ``CheckpointStore.get``: an empty cursor,
        Unicode, JSON punctuation with trailing blanks and a 1 MiB cursor come back exactly as
        stored.

        If this fails, check the cursor column type (unbounded text) and any trimming or
        normalisation on the way in or out.
        """
        values = ["", "é ✓ 日本 \U0001f600", '{"a": [1, "b\\n"]}\t ', "x" * (1 << 20)]
        for version, value in enumerate(values):
            assert checkpoint_store.compare_and_set(CONNECTOR, SCOPE, version, value)
            assert checkpoint_store.get(CONNECTOR, SCOPE) == Checkpoint(value, version + 1)

    def test_scopes_and_connectors_are_exact(self, checkpoint_store: CheckpointStore) -> None:
        """Checks ``CheckpointStore.get``, ``CheckpointStore.compare_and_set``: checkpoints of other
        corpora, tenants, a prefix corpus and other connector ids are separate, each with its own
        cursor and version.

        If this fails, check that get and compare_and_set key on the connector id and all three
        scope parts, with no prefix match.
        """
        for i, connector in enumerate(CONNECTORS):
            for j, scope in enumerate(ALL_SCOPES):
                for version in range(i + j + 1):
                    assert checkpoint_store.compare_and_set(connector, scope, version, f"{i}/{j}")
        for i, connector in enumerate(CONNECTORS):
            for j, scope in enumerate(ALL_SCOPES):
                assert checkpoint_store.get(connector, scope) == Checkpoint(f"{i}/{j}", i + j + 1)

    def test_concurrent_writers_exactly_one_wins(self, checkpoint_store: CheckpointStore) -> None:
        """Checks ``CheckpointStore.compare_and_set``: of eight threads that compare-and-set from
        the same expected version at once, exactly one returns True, and its cursor is stored.

        If this fails, check that the version test and the write are one atomic step (a
        conditional UPDATE, INSERT ... ON CONFLICT DO NOTHING, or a lock), not read-then-write.
        """
        assert checkpoint_store.compare_and_set(CONNECTOR, SCOPE, 0, "start")
        barrier = threading.Barrier(8)
        results: dict[int, bool] = {}

        def race(n: int) -> None:
            barrier.wait(10)
            results[n] = checkpoint_store.compare_and_set(CONNECTOR, SCOPE, 1, f"worker-{n}")

        threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(results) == 8
        winners = [n for n, won in results.items() if won]
        assert len(winners) == 1, winners
        assert checkpoint_store.get(CONNECTOR, SCOPE) == Checkpoint(f"worker-{winners[0]}", 2)

    def test_concurrent_first_writers_exactly_one_wins(
        self, checkpoint_store: CheckpointStore
    ) -> None:
        """Checks ``CheckpointStore.compare_and_set``: of eight threads that compare-and-set from
        version 0 on an absent checkpoint, exactly one creates it.

        If this fails, check that creating the checkpoint is atomic too (a unique key on
        (connector id, scope) and INSERT ... ON CONFLICT DO NOTHING, or a lock).
        """
        barrier = threading.Barrier(8)
        results: dict[int, bool] = {}

        def race(n: int) -> None:
            barrier.wait(10)
            results[n] = checkpoint_store.compare_and_set(CONNECTOR, SCOPE, 0, f"worker-{n}")

        threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        winners = [n for n, won in results.items() if won]
        assert len(results) == 8 and len(winners) == 1, results
        assert checkpoint_store.get(CONNECTOR, SCOPE).version == 1

    def test_delete_forgets_the_checkpoint(self, checkpoint_store: CheckpointStore) -> None:
        """Checks ``CheckpointStore.delete``: it returns True, then False; the checkpoint then reads
        ``(None, 0)``, another scope keeps its own, and a compare-and-set at version 0 works again.

        If this fails, check delete (one row, exact key) and that version restarts at 0.
        """
        assert checkpoint_store.compare_and_set(CONNECTOR, SCOPE, 0, "a")
        assert checkpoint_store.compare_and_set(CONNECTOR, OTHER_CORPUS, 0, "b")
        assert checkpoint_store.delete(CONNECTOR, SCOPE) is True
        assert checkpoint_store.delete(CONNECTOR, SCOPE) is False
        assert checkpoint_store.get(CONNECTOR, SCOPE) == Checkpoint(None, 0)
        assert checkpoint_store.get(CONNECTOR, OTHER_CORPUS) == Checkpoint("b", 1)
        assert checkpoint_store.compare_and_set(CONNECTOR, SCOPE, 0, "again")

    @pytest.mark.parametrize(
        ("connector_id", "scope", "expected", "cursor", "field"),
        [
            ("", SCOPE, 0, "c", "connector_id"),
            (None, SCOPE, 0, "c", "connector_id"),
            ("x" * 513, SCOPE, 0, "c", "connector_id"),
            ("a\nb", SCOPE, 0, "c", "connector_id"),
            (CONNECTOR, "scope", 0, "c", "scope"),
            (CONNECTOR, SCOPE, -1, "c", "expected_version"),
            (CONNECTOR, SCOPE, True, "c", "expected_version"),
            (CONNECTOR, SCOPE, 0, None, "cursor"),
            (CONNECTOR, SCOPE, 0, "nul\x00", "cursor"),
        ],
        ids=["empty-id", "none-id", "long-id", "newline-id", "bad-scope", "negative", "bool",
             "none-cursor", "nul-cursor"],
    )  # fmt: skip
    def test_bad_arguments_are_refused_before_writing(
        self,
        checkpoint_store: CheckpointStore,
        connector_id: object,
        scope: object,
        expected: object,
        cursor: object,
        field: str,
    ) -> None:
        """Checks ``CheckpointStore.compare_and_set``: a bad connector id (empty, None, over 512
        characters, with a newline), a scope that is not a ``Scope``, a negative or bool version, or
        a None or NUL-holding cursor is a ``ValidationError`` naming the field, and nothing is
        stored.

        If this fails, check the argument validation at the top of compare_and_set.
        """
        with pytest.raises(ValidationError) as caught:
            checkpoint_store.compare_and_set(connector_id, scope, expected, cursor)  # type: ignore[arg-type]
        assert caught.value.field == field
        assert checkpoint_store.get(CONNECTOR, SCOPE) == Checkpoint(None, 0)

    def test_isolation_canary(self, checkpoint_store: CheckpointStore) -> None:
        """Checks ``CheckpointStore.get``: collected after every other contract test, the fixture
        still yields a store that reads ``(None, 0)`` everywhere the suite writes.

        Every test above writes only to the suite's connector ids and scopes. If this fails,
        check that the `checkpoint_store` fixture does not share state between tests (a
        module-level store, a table not truncated, a class attribute).
        """
        _assert_empty(checkpoint_store)


class CheckpointInUnitOfWorkContract(ContractSuite):
    """A checkpoint store that ``SupportsCheckpointsInUnitOfWork`` commits and rolls back with
    the chunk store's unit of work, so a sync page and its checkpoint are one step.

    Fixture ``joined_checkpoints``: yield ``(checkpoint_store, chunk_store)``, both empty, that
    share a transaction (e.g. one PostgreSQL database and schema), and clean up.
    """

    joined_checkpoints = required_fixture(
        "CheckpointInUnitOfWorkContract",
        "joined_checkpoints",
        "yield (checkpoint_store, chunk_store), both empty and sharing a unit of work",
    )

    def test_joins_its_store_and_nothing_else(self, joined_checkpoints: JoinedCheckpoints) -> None:
        """Checks ``SupportsCheckpointsInUnitOfWork.joins``: it is True for a unit of work of the
        paired chunk store and False for a foreign object.

        If this fails, check ``joins``: it must recognise the store's unit of work (same
        database and schema) and say False for anything else.
        """
        checkpoints, store = joined_checkpoints
        assert isinstance(checkpoints, SupportsCheckpointsInUnitOfWork)
        assert checkpoints.joins(object()) is False
        with store.unit_of_work(SCOPE) as uow:
            assert checkpoints.joins(uow) is True

    def test_a_joined_cas_lands_only_when_the_unit_of_work_commits(
        self, joined_checkpoints: JoinedCheckpoints
    ) -> None:
        """Checks ``SupportsCheckpointsInUnitOfWork.compare_and_set_in``: inside the unit of work
        the compare-and-set returns True; a rolled-back unit of work leaves ``(None, 0)``, a
        committed one leaves the cursor at version 1, and a stale version later returns False and
        changes nothing.

        If this fails, check that ``compare_and_set_in`` writes through the unit of work's
        transaction (its connection), not a connection or lock of its own.
        """
        checkpoints, store = joined_checkpoints
        assert isinstance(checkpoints, SupportsCheckpointsInUnitOfWork)
        with store.unit_of_work(SCOPE) as uow:
            assert checkpoints.compare_and_set_in(uow, CONNECTOR, SCOPE, 0, "rolled-back")
            # leaving without commit rolls back
        assert checkpoints.get(CONNECTOR, SCOPE) == Checkpoint(None, 0)
        with store.unit_of_work(SCOPE) as uow:
            assert checkpoints.compare_and_set_in(uow, CONNECTOR, SCOPE, 0, "kept")
            uow.commit()
        assert checkpoints.get(CONNECTOR, SCOPE) == Checkpoint("kept", 1)
        with store.unit_of_work(SCOPE) as uow:
            assert checkpoints.compare_and_set_in(uow, CONNECTOR, SCOPE, 0, "stale") is False
            uow.commit()
        assert checkpoints.get(CONNECTOR, SCOPE) == Checkpoint("kept", 1)

    def test_racing_units_of_work_exactly_one_wins(
        self, joined_checkpoints: JoinedCheckpoints
    ) -> None:
        """Checks ``SupportsCheckpointsInUnitOfWork.compare_and_set_in``: of two threads whose units
        of work compare-and-set from the same version, the first holding its unit open for a moment,
        exactly one returns True and the stored cursor is the winner's.

        If this fails, check that the second CAS waits for the first unit of work (a row lock
        or the scope's writer lock) and then sees the version it moved to.
        """
        checkpoints, store = joined_checkpoints
        assert isinstance(checkpoints, SupportsCheckpointsInUnitOfWork)
        assert checkpoints.compare_and_set(CONNECTOR, SCOPE, 0, "start")
        results: dict[int, bool] = {}
        first_in = threading.Event()

        def worker(n: int) -> None:
            if n == 1:
                assert first_in.wait(10)
            with store.unit_of_work(SCOPE) as uow:
                won = checkpoints.compare_and_set_in(uow, CONNECTOR, SCOPE, 1, f"worker-{n}")
                if n == 0:
                    first_in.set()
                    threading.Event().wait(0.3)  # the other worker races in meanwhile
                results[n] = won
                uow.commit()

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results == {0: True, 1: False}, results
        assert checkpoints.get(CONNECTOR, SCOPE) == Checkpoint("worker-0", 2)

    def test_isolation_canary(self, joined_checkpoints: JoinedCheckpoints) -> None:
        """Checks ``CheckpointStore.get``: collected last, the fixture still yields a checkpoint
        store that reads ``(None, 0)`` everywhere the suite writes.

        If this fails, check that ``joined_checkpoints`` does not share state between tests.
        """
        _assert_empty(joined_checkpoints[0])
