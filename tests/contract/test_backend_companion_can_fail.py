"""The companion tests of ``StorageBackendContract`` fail against a companion that does not
read the block's snapshot: ``PostgresBackend`` wrapped so that its readers' companion is a
read of its own (a fresh snapshot, begun at its first statement), and PostgreSQL's own
companion with the snapshot import dropped. The same wrapper lending PostgreSQL's real
companion passes, so the failure comes from the defect; and PostgreSQL's companion lends a
reader in these tests (a suite that only ever saw ``None`` would check nothing)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from ragport.adapters.postgres import PostgresBackend, PostgresStore, WriteSettings, backend
from ragport.contract_tests import StorageBackendContract
from ragport.domain.model import Grant, Scope, Tombstone
from ragport.ports.backend import BackendReader, BackendWriter, GenerationState
from ragport.ports.embedder import Vector
from ragport.ports.store import ScoredRecord
from tests.adapters.test_postgres_concurrent_hybrid import count_companions

Companion = AbstractContextManager[BackendReader | None]
FAILED = (AssertionError, pytest.fail.Exception)
SNAPSHOT_TESTS = (
    StorageBackendContract.test_backend_companion_reads_the_blocks_snapshot,
    StorageBackendContract.test_backend_companion_reads_while_the_block_reads,
)


class _Lending:
    """The block's reader, its five members passed through, with ``companion()`` from
    ``offer`` (given the block's reader)."""

    def __init__(self, reader: Any, offer: Callable[[Any], Companion | None]) -> None:
        self._reader, self._offer = reader, offer

    def state(self) -> GenerationState:
        return self._reader.state()  # type: ignore[no-any-return]

    def rows(self, **narrow: Any) -> Any:
        return self._reader.rows(**narrow)

    def nearest(self, vector: Vector) -> Iterator[ScoredRecord]:
        return iter(self._reader.nearest(vector))

    def grants(self, source_ids: Sequence[str] | None = None) -> Mapping[str, Grant]:
        return self._reader.grants(source_ids)  # type: ignore[no-any-return]

    def tombstones(self) -> Sequence[Tombstone]:
        return self._reader.tombstones()  # type: ignore[no-any-return]

    def companion(self) -> Companion | None:
        return self._offer(self._reader)


class Wrapped:
    """``PostgresBackend`` whose read blocks lend the companion ``offer`` makes."""

    provider = "postgres-wrapped"

    def __init__(
        self, inner: PostgresBackend, offer: Callable[[PostgresBackend, Any], Companion | None]
    ) -> None:
        self._inner, self._offer = inner, offer

    @contextmanager
    def read(self, scope: Scope) -> Iterator[BackendReader]:
        with self._inner.read(scope) as reader:
            yield _Lending(reader, lambda block: self._offer(self._inner, block))

    def write(self, scope: Scope) -> AbstractContextManager[BackendWriter]:
        return self._inner.write(scope)


def _fresh(inner: PostgresBackend, block: Any) -> Companion:
    """The broken companion: a read block of its own, so a snapshot of its own."""
    return inner.read(block.scope)


def _real(inner: PostgresBackend, block: Any) -> Companion | None:
    """The control: PostgreSQL's own companion of the block."""
    return block.companion()  # type: ignore[no-any-return]


@pytest.fixture
def postgres(pg_engine: Any, pg_schema: str) -> PostgresBackend:
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True, writes=WriteSettings(maintenance_delay=None)
    )
    return PostgresBackend.of(store)


@pytest.fixture
def lent(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per PostgreSQL companion entered: whether it lent a second reader."""
    return count_companions(monkeypatch)


@pytest.mark.parametrize("test", SNAPSHOT_TESTS, ids=lambda t: t.__name__)
def test_a_companion_in_a_fresh_snapshot_fails_the_snapshot_tests(
    postgres: PostgresBackend, test: Callable[..., None]
) -> None:
    """A companion that reads a snapshot of its own sees the writes committed after the
    block's first read. If this fails, the companion tests no longer write between the
    block's first read and the companion's, or no longer compare what the two see."""
    with pytest.raises(FAILED):
        test(StorageBackendContract(), Wrapped(postgres, _fresh))


@pytest.mark.parametrize("test", SNAPSHOT_TESTS, ids=lambda t: t.__name__)
def test_the_same_wrapper_with_the_real_companion_passes(
    postgres: PostgresBackend, lent: list[bool], test: Callable[..., None]
) -> None:
    """The control: the wrapper alone passes, with PostgreSQL's companion lending a second
    reader (not ``None``, which would leave nothing to check)."""
    test(StorageBackendContract(), Wrapped(postgres, _real))
    assert lent == [True]


def test_a_companion_that_does_not_import_the_snapshot_fails(
    postgres: PostgresBackend, lent: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's companion with ``SET TRANSACTION SNAPSHOT`` dropped (its second
    connection begins a snapshot of its own) fails the snapshot test."""
    enter = backend._Companion.__enter__

    def without_import(self: Any) -> Any:
        second = enter(self)
        assert second is not None
        second._conn.snapshot = None
        return second

    monkeypatch.setattr(backend._Companion, "__enter__", without_import)
    with pytest.raises(FAILED):
        StorageBackendContract().test_backend_companion_reads_the_blocks_snapshot(postgres)
    assert lent == [True]


def test_the_contract_tests_skip_a_reader_without_a_companion(postgres: PostgresBackend) -> None:
    """A reader that offers none: the companion tests skip (the legs then read in turn)."""
    no_offer = Wrapped(postgres, lambda inner, block: None)
    with pytest.raises(pytest.skip.Exception):
        StorageBackendContract().test_backend_companion_may_lend_none_and_is_released(no_offer)


class _Raises:
    """A lent reader whose every read fails."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the companion's {name} failed")


@contextmanager
def _failing(inner: PostgresBackend, block: Any) -> Iterator[BackendReader | None]:
    yield _Raises()


@pytest.mark.parametrize("test", SNAPSHOT_TESTS, ids=lambda t: t.__name__)
def test_a_failing_companion_fails_the_test_at_once_and_leaves_nothing_open(
    postgres: PostgresBackend, pg_engine: Any, test: Callable[..., None]
) -> None:
    """A companion whose reads fail: the test raises that error (its threads do not wait
    for each other until the barrier's timeout) and the block's connection goes back."""
    checked_out = pg_engine.pool.checkedout()
    with pytest.raises(RuntimeError, match="companion's state failed"):
        test(StorageBackendContract(), Wrapped(postgres, _failing))
    assert pg_engine.pool.checkedout() == checked_out
