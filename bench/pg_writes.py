"""Write figures of ``bench_postgres.py``: statement counts, deletion, replacement; its JSON."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
from _results import figure, ratio, target, write_result
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

from ragport import Chunk
from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres import reads as pg_reads
from ragport.application import delete_source, replace_source

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
        "times_ms": [t * 1e3 for t in times],
        "raw_times_ms": [t * 1e3 for t in raw_times],
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


def write_json(measured: dict[str, Any], quick: bool) -> None:
    """The headline figures and issue 17's targets (bench/history/RESULTS-2026-12.md)."""
    n = f"{measured['rows'] // 1000}k rows"
    ingest, replace, delete = measured["ingest"], measured["replace"], measured["delete"]
    figures = {
        "ingest_rps": figure(f"ingest via replace_source, {n}", "rows/s", ingest["rp_rps"]),
        "copy_rps": figure("raw binary COPY of the same rows", "rows/s", ingest["copy_rps"]),
        "ingest_ratio": figure("ingest / raw COPY", "%", 100 * ingest["ratio"]),
        "ingest_batched_rps": figure(
            "ingest via replace_source, merge_pending_lists=1000", "rows/s", ingest["batched_rps"]
        ),
        "ingest_batched_ratio": figure(
            "ingest, merge per 1,000 rows / raw COPY", "%", 100 * ingest["batched_ratio"]
        ),
        "replace_ratio": figure(
            "replace_source of an existing source / a first write", "x", replace["ratio"]
        ),
        "delete_ms": figure(
            f"delete_source of {DELETE_ROWS:,} rows", "ms", samples=delete["times_ms"]
        ),
        "raw_delete_ms": figure(
            f"raw DELETE of {DELETE_ROWS:,} rows", "ms", samples=delete["raw_times_ms"]
        ),
        "delete_ratio": ratio(
            "delete_source / raw DELETE",
            delete["median_ms"],
            delete["raw_median_ms"],
            ("delete_ms", "raw_delete_ms"),
        ),
    }
    figures["ingest_ratio"]["ratio_of"] = ["ingest_rps", "copy_rps"]
    figures["ingest_batched_ratio"]["ratio_of"] = ["ingest_batched_rps", "copy_rps"]
    # Issue 28's goals (issue 16's were ingest >= 70% and retrieve <= 1.5x).
    targets = [
        target("ingest_ratio", ">=", 90),
        target("replace_ratio", "<=", 1.3),
        target("delete_ratio", "<=", 10),
    ]
    if measured["reads"] is not None:
        retrieve, recall = measured["reads"]
        figures.update(
            retrieve_p50_ms=figure(
                "retrieve_context p50 (vector, top 10 of 20)", "ms", retrieve["rp_p50"]
            ),
            raw_p50_ms=figure("equivalent raw SQL p50", "ms", retrieve["raw_p50"]),
            retrieve_ratio=ratio(
                "retrieve / equivalent raw SQL, p50",
                retrieve["rp_p50"],
                retrieve["raw_p50"],
                ("retrieve_p50_ms", "raw_p50_ms"),
            ),
            hybrid_p50_ms=figure(
                "hybrid retrieve_context(lexical='bm25') p50", "ms", retrieve["hybrid_p50"]
            ),
            hybrid_p95_ms=figure(
                "hybrid retrieve_context(lexical='bm25') p95", "ms", retrieve["hybrid_p95"]
            ),
        )
        targets += [
            target("retrieve_ratio", "<=", 1.1),
            target("hybrid_p50_ms", "<=", 50),
            target("hybrid_p95_ms", "<=", 100),
        ]
        for case in recall:
            key = "recall_" + case["case"].replace(" + ", "_").replace(" ", "_").lower()
            figures[key] = figure(
                f"recall@10 of store.query, {case['case']} ({case['qualifying_pct']:.2f}% qualify)",
                "",
                case["recall"]["store"],
            )
            targets.append(target(key, ">=", 0.95))
    write_result(
        "postgres" if not measured.get("writes_only") else "postgres_writes",
        quick=quick,
        figures=figures,
        targets=targets,
    )
