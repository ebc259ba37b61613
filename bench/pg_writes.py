"""Write figures of ``bench_postgres.py``: statement counts, deletion, replacement."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
from pg_corpus import (
    N_CENTROIDS,
    SCOPE,
    SEED,
    Corpus,
    PrecomputedEmbedder,
    random_texts,
    raw_connection,
)
from sqlalchemy import event

from ragport import Chunk, delete_source, replace_source
from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres import reads as pg_reads

DELETE_ROWS = 1_000
DELETE_RUNS = 5


class StatementCounter:
    """Counts SQL statements on a SQLAlchemy engine and COPY calls on psycopg cursors."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.statements: list[str] = []
        self.copies = 0

    def _on_execute(self, conn, cursor, statement, parameters, context, executemany) -> None:
        self.statements.append(" ".join(statement.split())[:80])

    @contextlib.contextmanager
    def counting(self) -> Iterator[StatementCounter]:
        original = psycopg.Cursor.copy

        def copy(cursor: Any, *args: Any, **kwargs: Any) -> Any:
            self.copies += 1
            return original(cursor, *args, **kwargs)

        fetch = pg_reads.fetch

        def counted_fetch(conn: Any, sql: str, params: Any, **kwargs: Any) -> Any:
            self.statements.append(" ".join(sql.split())[:80])  # reads straight on psycopg
            return fetch(conn, sql, params, **kwargs)

        self.statements, self.copies = [], 0
        event.listen(self.engine, "before_cursor_execute", self._on_execute)
        psycopg.Cursor.copy = copy  # type: ignore[method-assign]
        pg_reads.fetch = counted_fetch
        try:
            yield self
        finally:
            pg_reads.fetch = fetch
            psycopg.Cursor.copy = original  # type: ignore[method-assign]
            event.remove(self.engine, "before_cursor_execute", self._on_execute)


# -- 4. deletion --------------------------------------------------------------------------------
def bench_delete(
    url: str, store: PostgresStore, corpus: Corpus, embedder: PrecomputedEmbedder
) -> dict[str, Any]:
    rng = np.random.default_rng(SEED + 3)

    def big_source(name: str) -> list[Chunk]:
        clusters = rng.choice(N_CENTROIDS, size=DELETE_ROWS, p=corpus.popularity)
        vectors = corpus.sample(clusters, rng)
        texts = [f"{name} {t}" for t in random_texts(rng, DELETE_ROWS)]
        embedder.add(texts, vectors)
        return [Chunk.of(name, i, t, metadata={"tag": "t00"}) for i, t in enumerate(texts)]

    counter = StatementCounter(store.engine)
    times, raw_times, counts = [], [], []
    for run in range(DELETE_RUNS):
        name = f"del-{run}"
        replace_source(
            source_id=name, chunks=big_source(name), embedder=embedder, store=store, scope=SCOPE
        )
        with counter.counting():
            t0 = time.perf_counter()
            result = delete_source(source_id=name, store=store, scope=SCOPE)
            times.append(time.perf_counter() - t0)
        assert result.deleted == DELETE_ROWS, result
        counts.append((len(counter.statements), counter.copies))
    statements = list(counter.statements)
    with raw_connection(url) as conn:
        for run in range(DELETE_RUNS):
            name = f"rawdel-{run}"
            replace_source(
                source_id=name, chunks=big_source(name), embedder=embedder, store=store, scope=SCOPE
            )
            with conn.transaction():
                t0 = time.perf_counter()
                # The rows and their vectors (migration 4), in one statement.
                cur = conn.execute(
                    f'WITH d AS (DELETE FROM "{store.schema}".records WHERE tenant_id = %(t)s '
                    "AND resource_id = %(r)s AND corpus_id = %(c)s AND source_id = %(s)s "
                    f'RETURNING row_key) DELETE FROM "{store.schema}".record_vectors v '
                    "WHERE v.tenant_id = %(t)s AND v.resource_id = %(r)s AND v.corpus_id = %(c)s "
                    "AND v.row_key IN (SELECT row_key FROM d)",
                    {"t": SCOPE.tenant_id, "r": SCOPE.resource_id, "c": SCOPE.corpus_id, "s": name},
                )
            raw_times.append(time.perf_counter() - t0)
            assert cur.rowcount == DELETE_ROWS
    return {
        "median_ms": statistics.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "max_ms": max(times) * 1e3,
        "statements": counts[0][0],
        "copies": counts[0][1],
        "counts_stable": len(set(counts)) == 1,
        "statement_list": statements,
        "raw_median_ms": statistics.median(raw_times) * 1e3,
    }


REPLACE_RUNS = 10


def bench_replace(
    store: PostgresStore, corpus: Corpus, embedder: PrecomputedEmbedder
) -> dict[str, Any]:
    """``replace_source`` of an existing 100-chunk source against the first write of one.

    Each run writes a new source (timed: the first write), then replaces it with 100 other
    chunks (timed: the old rows retired, the new ones inserted). Both write 100 new vectors,
    so both pay the same HNSW inserts; what the replacement adds is the retirement."""
    rng = np.random.default_rng(SEED + 4)

    def chunks(name: str, run: int) -> list[Chunk]:
        clusters = rng.choice(N_CENTROIDS, size=100, p=corpus.popularity)
        texts = [f"{name} v{run} {t}" for t in random_texts(rng, 100)]
        embedder.add(texts, corpus.sample(clusters, rng))
        return [Chunk.of(name, i, t, metadata={"tag": "t00"}) for i, t in enumerate(texts)]

    first, again = [], []
    for run in range(REPLACE_RUNS):
        name = f"rep-{run}"
        for times, version in ((first, 0), (again, 1)):
            batch = chunks(name, version)
            t0 = time.perf_counter()
            replace_source(
                source_id=name, chunks=batch, embedder=embedder, store=store, scope=SCOPE
            )
            times.append(time.perf_counter() - t0)
        delete_source(source_id=name, store=store, scope=SCOPE)  # the corpus as it was
    return {
        "first_ms": statistics.median(first) * 1e3,
        "replace_ms": statistics.median(again) * 1e3,
        "ratio": statistics.median(again) / statistics.median(first),
    }
