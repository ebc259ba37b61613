"""The contract tests added for issue 25 fail against deliberately broken adapters.

Each broken adapter below keeps one defect an adapter author hit in the trial of issue 25:
a lexical mode that retrieval refuses (``fts5``), a driver error that escapes untyped or
chained. Running the contract test against it must fail; against a control built the same
way without the defect it must pass, so the failure comes from the defect.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from ragport_sqlite import SqliteStore

from ragport.adapters.memory import InMemoryStore
from ragport.contract_tests.chunk_store import (
    ChunkStoreFailureContract,
    ChunkStoreLexicalContract,
)
from ragport.domain.errors import StoreError, raise_unchained
from ragport.domain.model import Capabilities
from ragport.ports.store import ChunkStore, HybridAnswer, ScoredRecord

# --------------------------------------------------------------------------- 1c: lexical modes


class DeclaresFts5(InMemoryStore):
    """BM25 under another name: what an SQLite FTS5 adapter declared in the trial."""

    @property
    def capabilities(self) -> Capabilities:
        return attrs.evolve(super().capabilities, lexical_modes=("fts5",))

    def lexical_query(self, scope: Any, text: str, *, mode: str = "fts5", **kw: Any) -> Any:
        return super().lexical_query(scope, text, mode=_engine_mode(mode), **kw)

    def hybrid_query(self, scope: Any, vector: Any, text: str, **kw: Any) -> HybridAnswer:
        kw["mode"] = _engine_mode(kw["mode"])
        return super().hybrid_query(scope, vector, text, **kw)


class HybridRefusesItsMode(DeclaresFts5):
    """Declares ``fts5`` and answers it from ``lexical_query``, but its ``hybrid_query``
    (what retrieval calls) knows only the engine's own name."""

    def hybrid_query(self, scope: Any, vector: Any, text: str, **kw: Any) -> HybridAnswer:
        return InMemoryStore.hybrid_query(self, scope, vector, text, **kw)


def _engine_mode(mode: str) -> str:
    return "bm25" if mode == "fts5" else mode


def test_any_declared_lexical_mode_works_through_retrieval_and_the_suite_catches_one_that_does_not() -> (
    None
):
    """A store declaring its own mode name (``fts5``) passes the lexical tests, retrieval
    included: retrieval takes any mode a store declares. One whose ``hybrid_query`` refuses the
    declared name passes the tests that call ``lexical_query`` and fails the retrieval one.

    If this fails, check ChunkStoreLexicalContract.test_every_declared_lexical_mode_works_
    through_retrieve_context and the lexical check of retrieve_context."""
    suite = ChunkStoreLexicalContract()
    suite.test_every_declared_lexical_mode_works_through_retrieve_context(DeclaresFts5())
    suite.test_lexical_query_finds_term_matches_with_the_store_predicate(HybridRefusesItsMode())
    suite.test_unknown_lexical_mode_is_a_capability_error(HybridRefusesItsMode())
    with pytest.raises(AssertionError, match="declares 'fts5' but retrieve_context refuses"):
        suite.test_every_declared_lexical_mode_works_through_retrieve_context(
            HybridRefusesItsMode()
        )
    suite.test_every_declared_lexical_mode_works_through_retrieve_context(InMemoryStore())


# --------------------------------------------------------------------------- 1d: driver errors

# Every ChunkStore member that reads or writes, plus the optional legs InMemoryStore defines.
_PORT_CALLS = frozenset(
    {
        "unit_of_work",
        "current_generation",
        "query",
        "get_by_source",
        "foreign_embedders",
        "list_embedders",
        "set_source_access",
        "check_source_access",
        "list_invalidated_ids",
        "get_source_access",
        "list_source_ids",
        "lexical_query",
        "hybrid_query",
        "guarded_query",
        "borrowed_query",
        "forgotten_among",
        "generation_history",
    }
)


class FailingStore(InMemoryStore):
    """An in-memory store whose every port call runs ``failure`` once ``broken`` is set."""

    def __init__(self, failure: Callable[[], object]) -> None:
        super().__init__()
        self.failure = failure
        self.broken = False

    def __getattribute__(self, name: str) -> Any:
        if name in _PORT_CALLS and object.__getattribute__(self, "broken"):
            failure = object.__getattribute__(self, "failure")
            return lambda *args, **kw: failure()
        return super().__getattribute__(name)


def _driver_error() -> None:
    raise RuntimeError("driver: INSERT failed for text 'walrus colonies'")


def _raw() -> None:
    _driver_error()


def _chained() -> None:
    try:
        _driver_error()
    except RuntimeError as exc:
        raise StoreError("insert failed") from exc


def _from_none() -> None:
    try:
        _driver_error()
    except RuntimeError:
        raise StoreError("insert failed") from None  # __context__ still holds the driver error


def _unchained() -> None:
    try:
        _driver_error()
    except RuntimeError:
        raise_unchained(StoreError("insert failed"))


def _answers_nothing() -> tuple[ScoredRecord, ...]:
    return ()  # fails open: "nothing found" instead of an error


def _break(store: ChunkStore) -> None:
    assert isinstance(store, FailingStore)
    store.broken = True


@pytest.mark.parametrize(
    ("failure", "named"),
    [
        (_raw, "raised RuntimeError, not StoreError"),
        (_chained, "chains a __cause__"),
        (_from_none, "chains a __context__"),
        (_answers_nothing, "answered although the backend is broken"),
    ],
    ids=["raw-runtime-error", "chained-store-error", "from-none", "fails-open"],
)
def test_failure_contract_catches_driver_errors_that_escape(
    failure: Callable[[], object], named: str
) -> None:
    """A store that lets a raw driver error out, chains it to its StoreError (``from exc``, or
    ``from None``, which keeps ``__context__``) or answers "nothing" fails the section.

    If this fails, check ChunkStoreFailureContract.test_a_broken_backend_is_an_unchained_
    store_error_everywhere and ``unchained_store_error``."""
    suite = ChunkStoreFailureContract()
    with pytest.raises(AssertionError, match=named):
        suite.test_a_broken_backend_is_an_unchained_store_error_everywhere(
            FailingStore(failure), _break
        )


def test_failure_contract_passes_a_store_that_raises_unchained_store_errors() -> None:
    """The control: the same wrapper raising ``raise_unchained(StoreError(...))`` passes, so
    the failures above come from their defects.

    If this fails, check that FailingStore breaks every call the section makes (a call it
    misses still answers) and ``unchained_store_error``."""
    suite = ChunkStoreFailureContract()
    suite.test_a_broken_backend_is_an_unchained_store_error_everywhere(
        FailingStore(_unchained), _break
    )


class TestSqliteExampleFailures(ChunkStoreFailureContract):
    """The SQLite example of docs/adapters.md, its database file overwritten with garbage."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqliteStore]:
        yield SqliteStore(tmp_path / "ragport.sqlite3")

    @pytest.fixture
    def break_store(self, tmp_path: Path) -> Callable[[ChunkStore], None]:
        def overwrite(store: ChunkStore) -> None:
            for name in os.listdir(tmp_path):
                (tmp_path / name).write_bytes(b"not a database " * 512)

        return overwrite
