"""RagDeletionHandler against the shipped DerivedArtifactHandlerContract, on both stores.

Each fixture seeds ``SOURCE_ID`` with chunk rows and an ingestion status, so the first
``on_propagate`` has rows to remove and the later calls prove idempotence; ``handler_serves``
reports the rows the chunk store still serves per source, so the suite sees the effect.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

import pytest

from ragport import Chunk, Scope, WriteOptions
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.application import RagDeletionHandler, replace_source
from ragport.contract_tests import DerivedArtifactHandlerContract
from ragport.contract_tests.derived import SOURCE_ID, Served
from ragport.ports.derived import DerivedArtifactHandler
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

EMB = HashEmbedder(32)


def _seed(store: ChunkStore, status: IngestionStatusStore, scope: Scope) -> None:
    replace_source(
        source_id=SOURCE_ID,
        chunks=[Chunk.of(SOURCE_ID, i, f"contract handler chunk {i}") for i in range(3)],
        embedder=EMB,
        store=store,
        scope=scope,
        write_options=WriteOptions(status_store=status),
    )


def _served_by(store: ChunkStore) -> Served:
    """The record ids ``store`` serves for a source: what RagDeletionHandler must remove."""

    def served(scope: Scope, source_id: str) -> Collection[str]:
        return {record.id for record in store.get_by_source(scope, source_id)}

    return served


class TestRagDeletionHandlerInMemory(DerivedArtifactHandlerContract):
    @pytest.fixture
    def chunk_store(self) -> ChunkStore:
        return InMemoryStore()

    @pytest.fixture
    def handler(
        self, handler_scope: Scope, chunk_store: ChunkStore
    ) -> Iterator[DerivedArtifactHandler]:
        status = InMemoryStatusStore()
        _seed(chunk_store, status, handler_scope)
        yield RagDeletionHandler(store=chunk_store, scope=handler_scope, status_store=status)

    @pytest.fixture
    def handler_serves(self, chunk_store: ChunkStore) -> Served:
        return _served_by(chunk_store)


class TestRagDeletionHandlerPostgres(DerivedArtifactHandlerContract):
    @pytest.fixture
    def chunk_store(self, pg_engine, pg_schema) -> ChunkStore:
        from ragport.adapters.postgres import PostgresStore

        return PostgresStore(pg_engine, schema=pg_schema, create=True)

    @pytest.fixture
    def handler(
        self, handler_scope: Scope, chunk_store: ChunkStore, pg_engine, pg_schema
    ) -> Iterator[DerivedArtifactHandler]:
        from ragport.adapters.postgres import PostgresStatusStore

        status = PostgresStatusStore(pg_engine, schema=pg_schema, create=True)
        _seed(chunk_store, status, handler_scope)
        yield RagDeletionHandler(store=chunk_store, scope=handler_scope, status_store=status)

    @pytest.fixture
    def handler_serves(self, chunk_store: ChunkStore) -> Served:
        return _served_by(chunk_store)


def test_seeded_rows_are_removed_by_the_first_propagate_only() -> None:
    """The fixture's seed is what on_propagate removes: 3 rows, then 0. If this fails, check RagDeletionHandler.on_propagate / purge_source."""
    scope = Scope("contract-tenant", "contract-resource", "contract-derived")
    store, status = InMemoryStore(), InMemoryStatusStore()
    _seed(store, status, scope)
    handler = RagDeletionHandler(store=store, scope=scope, status_store=status)
    assert handler.on_propagate(SOURCE_ID, (SOURCE_ID,), scope) == 3
    assert handler.on_propagate(SOURCE_ID, (SOURCE_ID,), scope) == 0
    assert status.get(scope, SOURCE_ID) is None
    assert not store.get_by_source(scope, SOURCE_ID)


class _LeakyHandler:
    """Echoes its input in errors and answers with a bool: everything the contract forbids."""

    kind = "leaky"

    def on_propagate(self, source_id: str, ids, scope: Scope) -> int:
        if scope.corpus_id != "contract-derived" or "CANARY" in source_id:
            raise RuntimeError(f"cannot forget {source_id}")
        return True  # type: ignore[return-value]

    def on_repoint(self, from_id: str, to_id: str, scope: Scope) -> int:
        return -1


@pytest.mark.parametrize(
    "name",
    [
        "test_on_propagate_returns_a_non_negative_int",
        "test_on_repoint_returns_a_non_negative_int",
        "test_errors_never_contain_the_text_they_were_given",
    ],
)
def test_the_contract_catches_a_leaky_handler(name: str) -> None:
    """Each of these contract tests fails on a handler that breaks its promise. If this fails, check ragport/contract_tests/derived.py."""
    scope = Scope("contract-tenant", "contract-resource", "contract-derived")
    with pytest.raises(AssertionError):
        getattr(DerivedArtifactHandlerContract(), name)(_LeakyHandler(), scope)


class _DoNothing:
    """Counts nothing and removes nothing: it passed every test before handler_serves."""

    kind = "nothing"

    def on_propagate(self, source_id: str, ids: Sequence[str], scope: Scope) -> int:
        return 0

    def on_repoint(self, from_id: str, to_id: str, scope: Scope) -> int:
        return 0


class _ClaimsToMove(_DoNothing):
    """Reports moves it never made."""

    kind = "claims"

    def on_repoint(self, from_id: str, to_id: str, scope: Scope) -> int:
        return 3


@pytest.mark.parametrize(
    ("handler", "name"),
    [
        (_DoNothing(), "test_on_propagate_stops_serving_every_id_it_is_given"),
        (_ClaimsToMove(), "test_on_repoint_moves_as_many_artifacts_as_it_reports"),
    ],
    ids=["does-nothing", "claims-to-move"],
)
def test_the_contract_sees_what_a_handler_did(handler: DerivedArtifactHandler, name: str) -> None:
    """With handler_serves, a handler that removes nothing, or counts moves it did not make,
    fails. If this fails, check the effect tests of ragport/contract_tests/derived.py."""
    scope = Scope("contract-tenant", "contract-resource", "contract-derived")
    store = InMemoryStore()
    _seed(store, InMemoryStatusStore(), scope)
    with pytest.raises(AssertionError):
        getattr(DerivedArtifactHandlerContract(), name)(handler, scope, _served_by(store))


def test_the_suite_states_its_fixed_ids_and_how_it_counts() -> None:
    """The suite's docstrings give every fixed id's value and say that counts are per id
    (issue 44: a host could not tell which ids to seed, nor why its count fell short).
    If this fails, restore the "Fixed ids" and "Counting, per id" parts of
    ragport/contract_tests/derived.py and the two effect tests' docstrings."""
    from ragport.contract_tests import derived

    doc = derived.__doc__ or ""
    for value in (SOURCE_ID, *derived.PROPAGATED_IDS, derived.RENAMED_ID, derived.CANARY):
        assert f'"{value}"' in doc or f"``{value}" in doc, value
    assert "Fixed ids" in doc and "Counting, per id" in doc
    effect = {
        "test_on_propagate_stops_serving_every_id_it_is_given": "PROPAGATED_IDS",
        "test_on_repoint_moves_as_many_artifacts_as_it_reports": "RENAMED_ID",
    }
    for name, ids in effect.items():
        text = getattr(DerivedArtifactHandlerContract, name).__doc__ or ""
        assert ids in text and "handler_serves" in text, name
