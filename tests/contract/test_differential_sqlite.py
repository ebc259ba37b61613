"""The differential contract on the SQLite example store (examples/sqlite_store): its
``search_vectors`` pushdown against the engine's generic path on the same file, and a
deliberately wrong one (the grant mask left out) that the differential must catch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from ragport_sqlite import SqliteBackend

from ragport.contract_tests import DifferentialContract
from ragport.contract_tests.differential import check_same_answers
from ragport.engine import BackendStore
from ragport.ports.pushdowns import Admission, LegAnswer
from ragport.ports.store import ChunkStore


class TestSqliteBackendPushdowns(DifferentialContract):
    """BackendStore(SqliteBackend) with and without its pushdown, on one file."""

    differential_examples = 30

    @pytest.fixture
    def store_pair(self, tmp_path: Path) -> Iterator[tuple[ChunkStore, ChunkStore]]:
        backend = SqliteBackend(tmp_path / "store.db")
        yield BackendStore(backend), BackendStore(backend, pushdown=False)


class SearchIgnoresGrants(SqliteBackend):
    """The example's vector pushdown without the caller's grant mask."""

    def search_vectors(
        self, view: Any, vector: Any, *, admission: Admission, limit: int
    ) -> LegAnswer:
        admission = attrs.evolve(admission, authorization=None)
        return super().search_vectors(view, vector, admission=admission, limit=limit)


def test_a_wrong_pushdown_fails_the_differential(tmp_path: Path) -> None:
    """``BackendStore(SearchIgnoresGrants)`` answers otherwise than its generic path, and the
    differential says so at this file's budget (the correct backend passes above)."""
    backend = SearchIgnoresGrants(tmp_path / "store.db")
    subject, reference = BackendStore(backend), BackendStore(backend, pushdown=False)
    with pytest.raises(AssertionError, match=r"answered differently|state differs"):
        check_same_answers(
            subject,
            reference,
            examples=TestSqliteBackendPushdowns.differential_examples,
            shrink=False,
        )
