"""A store on a pool of one connection (``pool_size=1, max_overflow=0``): every read and
write works, the first vector query included (pgvector's schema is looked up on the
connection the read already holds, never on a second one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore

SCOPE = ragport.Scope("tenant-1", "kb", "docs")
EMB = HashEmbedder(dimensions=16)


@pytest.fixture
def url(pg_url: str, pg_schema: str) -> str:
    PostgresStore(pg_url, schema=pg_schema, create=True).engine.dispose()
    return pg_url.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
def one(url: str, pg_schema: str) -> Iterator[PostgresStore]:
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        yield PostgresStore(engine, schema=pg_schema)
    finally:
        engine.dispose()


def _write(store: PostgresStore) -> None:
    ragport.application.replace_source(
        source_id="doc",
        chunks=[ragport.Chunk.of("doc", 0, "alpha beta gamma")],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )


def test_the_first_vector_query_on_a_pool_of_one(
    one: PostgresStore, url: str, pg_schema: str
) -> None:
    writer = PostgresStore(url, schema=pg_schema)
    try:
        _write(writer)
    finally:
        writer.engine.dispose()
    hits = one.query(SCOPE, EMB.embed(["alpha"])[0], limit=3)
    assert [h.record.source_id for h in hits] == ["doc"]


def test_retrieve_context_on_a_pool_of_one(one: PostgresStore) -> None:
    _write(one)
    for lexical in ("off", "auto"):
        result = ragport.application.retrieve_context(
            "alpha",
            embedder=EMB,
            store=one,
            scope=SCOPE,
            request=ragport.RetrievalRequest(lexical=lexical),
        )
        assert [h.source_id for h in result.hits] == ["doc"], lexical


def test_the_nearest_stream_on_a_pool_of_one(one: PostgresStore) -> None:
    """``nearest`` (the engine's generic vector walk) names pgvector's objects while its read
    block holds the one connection."""
    _write(one)
    with one._backend.read(SCOPE) as reader:
        assert reader.state() is not None  # the block holds its connection from here on
        found = [s.record.source_id for s in reader.nearest(EMB.embed(["alpha"])[0])]
    assert found == ["doc"]
