"""The base every ChunkStore mixin derives from: the ``store`` fixture and the shared checks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragport.contract_tests._base import ContractSuite, required_fixture
from ragport.contract_tests._support import WrittenSources, recording
from ragport.contract_tests.chunk_store._helpers import _assert_store_empty
from ragport.ports.store import ChunkStore

__all__ = ["_ChunkStoreContractBase", "written_by"]

_WRITTEN: dict[type, WrittenSources] = {}


def written_by(suite: type) -> WrittenSources:
    """What the tests of the test class ``suite`` wrote so far (one log per class)."""
    return _WRITTEN.setdefault(suite, WrittenSources())


class _ChunkStoreContractBase(ContractSuite):
    """The required fixture, the write log and the checks every ChunkStore mixin carries."""

    store = required_fixture(
        "ChunkStoreContract",
        "store",
        "yield an empty ChunkStore (no records, grants, tombstones or generations in any "
        "scope) and remove whatever the test wrote afterwards",
    )

    @pytest.fixture(autouse=True)
    def _record_what_the_test_writes(self) -> Iterator[WrittenSources]:
        """The builders of ``_support`` record into this class's log while the test runs."""
        with recording(written_by(type(self))) as log:
            yield log

    def test_store_fixture_yields_an_empty_store(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.current_generation``, ``ChunkStore.query``,
        ``ChunkStore.get_by_source``, ``ChunkStore.list_embedders``,
        ``ChunkStore.list_invalidated_ids``, ``TombstoneRepository.list``, ``GrantRepository.get``,
        ``GenerationRepository.counter``: a fresh store has pointer and counter 0 and no records,
        embedders, grants or tombstones in any scope.

        Checked: every scope of the suite's constants and every (scope, source) the tests of
        this class recorded so far. If this fails, check that the `store` fixture yields a new
        or emptied store.
        """
        _assert_store_empty(store, written_by(type(self)))
