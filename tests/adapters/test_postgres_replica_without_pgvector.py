"""A read replica that has not replayed pgvector's CREATE EXTENSION yet is behind, not broken.

A replica cloned just before `ragport db upgrade` (or lagging behind it) has no `vector` type
for a moment. Reads then fall back to the primary (``replica_fallback="primary"``) or raise
``ReplicaLagError`` (``"raise"``), never a CapabilityError telling the operator to install
an extension the primary has. Stood in for here by a database of the same server without
pgvector (the embedded server has no second server this cheap).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore
from ragport.application import replace_source, retrieve_context
from ragport.domain.errors import ReplicaLagError
from ragport.domain.model import Chunk, Scope

SCOPE = Scope("t", "r", "c")


@pytest.fixture
def bare_database(pg_url: str) -> Iterator[str]:
    name = "noext_" + uuid.uuid4().hex[:12]
    admin = create_engine(
        make_url(pg_url).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.parametrize("fallback", ["primary", "raise"])
def test_a_replica_without_the_vector_type_is_treated_as_behind(
    pg_url: str, pg_schema: str, bare_database: str, fallback: str
) -> None:
    """With fallback "primary" the hit comes from the primary; with "raise" a ReplicaLagError.

    If this fails, check the CapabilityError branch of _read_on in
    ragport/adapters/postgres/connections.py."""
    PostgresStore(pg_url, schema=pg_schema, create=True).engine.dispose()
    store = PostgresStore(
        pg_url,
        schema=pg_schema,
        read_url=bare_database,
        replica_fallback=fallback,  # type: ignore[arg-type]
    )
    try:
        embedder = HashEmbedder()
        replace_source(
            source_id="a", chunks=[Chunk.of("a", 0, "brake inspection interval")],
            embedder=embedder, store=store, scope=SCOPE,
        )  # fmt: skip
        if fallback == "primary":
            result = retrieve_context(
                "brake inspection", embedder=embedder, store=store, scope=SCOPE
            )
            assert [h.source_id for h in result.hits] == ["a"]
        else:
            with pytest.raises(ReplicaLagError) as caught:
                retrieve_context("brake inspection", embedder=embedder, store=store, scope=SCOPE)
            assert "pgvector" in str(caught.value) and caught.value.__cause__ is None
    finally:
        store.engine.dispose()
