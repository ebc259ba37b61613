"""DerivedErasureHandler against the shipped DerivedArtifactHandlerContract, on both stores.

Each fixture seeds ``SOURCE_ID`` with chunk rows and ``SOURCE_ID-summary`` (the second id of
``PROPAGATED_IDS``) with two versions of a derived record resting on it, so the first
``on_propagate`` has rows of both ids to erase and the later calls prove idempotence;
``handler_serves`` reports the records the store still serves per id.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

import pytest

from ragport import Chunk, Scope
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application import DerivedErasureHandler, index_derived, replace_source
from ragport.contract_tests import DerivedArtifactHandlerContract
from ragport.contract_tests.derived import PROPAGATED_IDS, SOURCE_ID, Served
from ragport.ports.derived import DerivedArtifactHandler
from ragport.ports.store import ChunkStore

EMB = HashEmbedder(32)


def _seed(store: ChunkStore, scope: Scope) -> None:
    replace_source(
        source_id=SOURCE_ID,
        chunks=[Chunk.of(SOURCE_ID, i, f"contract erasure chunk {i}") for i in range(3)],
        embedder=EMB,
        store=store,
        scope=scope,
    )
    for version in (1, 2):
        index_derived(
            record_id=PROPAGATED_IDS[1],
            text=f"summary version {version}",
            lineage=[SOURCE_ID],
            embedder=EMB,
            store=store,
            scope=scope,
        )


def _served_by(store: ChunkStore) -> Served:
    def served(scope: Scope, source_id: str) -> Collection[str]:
        return {record.id for record in store.get_by_source(scope, source_id)}

    return served


class TestDerivedErasureHandlerInMemory(DerivedArtifactHandlerContract):
    @pytest.fixture
    def chunk_store(self) -> ChunkStore:
        return InMemoryStore()

    @pytest.fixture
    def handler(
        self, handler_scope: Scope, chunk_store: ChunkStore
    ) -> Iterator[DerivedArtifactHandler]:
        _seed(chunk_store, handler_scope)
        yield DerivedErasureHandler(store=chunk_store, scope=handler_scope)

    @pytest.fixture
    def handler_serves(self, chunk_store: ChunkStore) -> Served:
        return _served_by(chunk_store)


class TestDerivedErasureHandlerPostgres(DerivedArtifactHandlerContract):
    @pytest.fixture
    def chunk_store(self, pg_engine, pg_schema) -> ChunkStore:
        from ragport.adapters.postgres import PostgresStore

        return PostgresStore(pg_engine, schema=pg_schema, create=True)

    @pytest.fixture
    def handler(
        self, handler_scope: Scope, chunk_store: ChunkStore
    ) -> Iterator[DerivedArtifactHandler]:
        _seed(chunk_store, handler_scope)
        yield DerivedErasureHandler(store=chunk_store, scope=handler_scope)

    @pytest.fixture
    def handler_serves(self, chunk_store: ChunkStore) -> Served:
        return _served_by(chunk_store)
