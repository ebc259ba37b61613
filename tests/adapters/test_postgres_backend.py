"""``PostgresBackend`` keeps the tables PostgreSQL's own SQL reads: the same operations written
through the engine over the narrow port and through ``PostgresStore`` leave two schemas that
``PostgresStore``'s BM25 leg (its write-time statistics, ``live_ids``, the sole-embedder claim)
answers identically."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, WriteSettings
from ragport.adapters.postgres.backend import PostgresBackend
from ragport.application import (
    compact,
    delete_source,
    replace_source,
    repoint_source,
    rollback_generation,
)
from ragport.domain.model import Tombstone
from ragport.engine import BackendStore
from ragport.ports.store import ChunkStore

SCOPE = ragport.Scope("tenant-b", "kb", "docs")
EMB = HashEmbedder(dimensions=16)
INLINE = WriteSettings(maintenance_delay=None)
DOCS = {
    "harbour": ["the harbour dues of 1901", "ships and dues in the harbour"],
    "ledger": ["ledger of the harbour master", "a ledger of ships"],
    "letter": ["a letter about ships", "the letter names the harbour twice: harbour"],
}
QUERIES = ["harbour dues", "ledger ships", "letter", "harbour ships ledger letter"]


def _chunks(source: str, texts: list[str]) -> list[ragport.Chunk]:
    return [ragport.Chunk.of(source, i, t) for i, t in enumerate(texts)]


def _operate(store: ChunkStore) -> None:
    """Writes, replaces, a delete, a forget, a re-point, a rollback and a compaction."""
    for source, texts in DOCS.items():
        replace_source(
            source_id=source, chunks=_chunks(source, texts), embedder=EMB, store=store, scope=SCOPE
        )
    replace_source(
        source_id="harbour",
        chunks=_chunks("harbour", ["harbour dues rose", "harbour harbour harbour"]),
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    before_delete = store.current_generation(SCOPE)
    delete_source(source_id="letter", store=store, scope=SCOPE)
    rollback_generation(store=store, scope=SCOPE, to=before_delete)
    repoint_source(scope=SCOPE, store=store, from_id="ledger", to_id="ledger-2")
    with store.unit_of_work(SCOPE) as uow:
        uow.tombstones.add([Tombstone("letter", "forgotten")])
        uow.commit()
    compact(store=store, scope=SCOPE, keep=0)


def _answers(store: PostgresStore) -> list[list[tuple[str, float]]]:
    return [
        [(h.record.id, round(h.score, 6)) for h in store.lexical_query(SCOPE, q, limit=10)]
        for q in QUERIES
    ]


@pytest.fixture
def stores(pg_engine: Any, pg_schema: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    other = pg_schema + "_narrow"
    yield (
        PostgresStore(pg_engine, schema=pg_schema, create=True, writes=INLINE),
        PostgresStore(pg_engine, schema=other, create=True, writes=INLINE),
    )
    with pg_engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{other}" CASCADE'))


def test_the_narrow_port_keeps_the_statistics_postgres_reads(stores) -> None:
    """If this fails, check the statistics each writing member of ``backend.py`` keeps (the
    ``with_stats`` deltas of ``update``, ``delete`` and ``put_tombstones``)."""
    direct, narrow = stores
    _operate(direct)
    _operate(BackendStore(PostgresBackend.of(narrow), pushdown=False))
    expected = _answers(direct)
    assert any(expected), "the queries must find something"
    assert _answers(narrow) == expected
    key = (EMB.id, EMB.dimensions)
    assert narrow.foreign_embedders(SCOPE, *key) == direct.foreign_embedders(SCOPE, *key)
    assert narrow.list_invalidated_ids(SCOPE) == {"letter"}


def test_a_read_sees_one_snapshot_and_nearest_streams_best_first(stores) -> None:
    """``nearest`` is every stored row of the vector's dimensions, best first, retired rows
    included; ``rows`` every generation. If this fails, check ``_Reader.nearest``."""
    _, narrow = stores
    store = BackendStore(PostgresBackend.of(narrow), pushdown=False)
    _operate(store)
    vector = EMB.embed(["harbour dues"])[0]
    with PostgresBackend.of(narrow).read(SCOPE) as reader:
        scored = list(reader.nearest(vector))
        stored = list(reader.rows())
    assert len(scored) == len(stored) > 0
    order = [(-round(s.score, 5), s.record.id, s.record.generation) for s in scored]
    assert order == sorted(order)
