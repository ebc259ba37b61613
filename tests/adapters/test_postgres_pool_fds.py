"""A write's checkout asks the socket whether the server hung up (``pool.closed_by_server``).
In a process holding more than 1,023 open files the connection's descriptor is above what
``select.select`` accepts: the check must still answer for it, not take every live connection
for a dead one (which opened a new connection on every write and discarded the pool's others)."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import event

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres._driver import make_engine
from ragport.adapters.postgres.pool import closed_by_server

SCOPE = ragport.Scope("tenant-1", "kb", "docs")
EMBEDDER = HashEmbedder(dimensions=16)
HIGH = 1100


@pytest.fixture
def many_files() -> Iterator[None]:
    """1,100 more open descriptors, so every connection opened after is above 1,023."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HIGH + 200:
        pytest.skip(f"this process may open only {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HIGH + 200), hard))
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(HIGH)]
    try:
        yield
    finally:
        for fd in fds:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_check_answers_for_a_descriptor_above_1023(pg_url: str, many_files: None) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn, psycopg.connect(pg_url) as admin:
        assert conn.fileno() > 1023
        assert not closed_by_server(conn)
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        admin.commit()
        deadline = time.monotonic() + 5
        while not closed_by_server(conn) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert closed_by_server(conn)


def test_writes_keep_their_pooled_connection(pg_url: str, pg_schema: str, many_files: None) -> None:
    engine = make_engine(pg_url)
    try:
        store = PostgresStore(engine, schema=pg_schema, create=True)

        def write(source: str) -> None:
            chunks = [ragport.Chunk.of(source, i, t) for i, t in enumerate(["alpha", "beta"])]
            ragport.application.replace_source(
                source_id=source, chunks=chunks, embedder=EMBEDDER, store=store, scope=SCOPE
            )

        write("warm")
        opened: list[int] = []
        event.listen(engine, "connect", lambda *_: opened.append(1))
        for i in range(5):
            write(f"s{i}")
            ragport.application.delete_source(source_id=f"s{i}", store=store, scope=SCOPE)
        assert opened == []
    finally:
        engine.dispose()
