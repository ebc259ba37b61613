"""Retrieval with many forgotten ids: 100,000 tombstones in a scope against 10.

Two scopes hold the same 10,000 chunks (100 sources of 100, ``HashEmbedder(64)``, Zipf-ish
words). Both forget the same 10 real ids (5 chunk ids, 5 source ids); the second also
forgets 99,990 ids of records that no longer exist (what years of ``forget`` leave behind).
Queries alternate between the two scopes, 3 rounds of 40 queries, through
``retrieve_context`` (top_k 5, 20 candidates), vector-only and hybrid; the figure is the p50
of each scope and their ratio (target: 100,000 within 1.1x of 10). Every answer is checked:
no hit of a forgotten id or source, and both scopes give the same hits.

Run: .venv/bin/python bench/bench_tombstones.py [--store memory|postgres|both] [--rows N]
[--vector-only] [--no-merge] [--rounds R]
(PostgreSQL: an embedded server in a temporary directory, stopped at the end. The queries
start right after the load, so the bm25 figure shows the GIN pending lists: merged by the
writer by default, left to autovacuum with ``--no-merge``.)
Compare ratios measured in one run: the machine is shared and noisy. The ratios (and, as
details, each p50) go to ``bench/results/tombstones.json`` (``results/quick/`` below 10,000
rows).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _results import figure, note_postgres, target, write_result

from ragport import Chunk, RetrievalRequest, Scope
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application import index_chunks, retrieve_context
from ragport.domain import Tombstone
from ragport.ports.store import ChunkStore

WORDS = [f"w{i:03d}" for i in range(400)]
PER_SOURCE = 100
REAL = 10
MANY = 100_000
QUERIES = 40
ROUNDS = 3


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def corpus(rows: int) -> list[Chunk]:
    rng = np.random.default_rng(5)
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    return [
        Chunk.of(
            f"src-{i // PER_SOURCE:04d}",
            i % PER_SOURCE,
            " ".join(rng.choice(WORDS, size=40, p=p)) + f" item{i}",
        )
        for i in range(rows)
    ]


def forgotten(chunks: list[Chunk], many: bool) -> list[Tombstone]:
    real = [c.id for c in chunks[1 : 1 + REAL // 2]] + [
        f"src-{s:04d}" for s in range(3, 3 + REAL // 2)
    ]
    ghosts = [f"gone-{i:06d}#0001" for i in range(MANY - REAL)] if many else []
    return [Tombstone(i) for i in real + ghosts]


def load(store: ChunkStore, chunks: list[Chunk], embedder: HashEmbedder) -> tuple[Scope, Scope]:
    tag = uuid.uuid4().hex[:6]
    few, many = (
        Scope("bench", "tombstones", f"few-{tag}"),
        Scope("bench", "tombstones", f"many-{tag}"),
    )
    for scope, lots in ((few, False), (many, True)):
        t0 = time.perf_counter()
        for start in range(0, len(chunks), 2_000):
            index_chunks(
                chunks=chunks[start : start + 2_000],
                embedder=embedder,
                store=store,
                scope=scope,
                batch_size=128,
            )
        stones = forgotten(chunks, lots)
        with store.unit_of_work(scope) as uow:
            uow.tombstones.add(stones)
            uow.commit()
        log(f"{scope.corpus_id}: {len(chunks):,} rows, {len(stones):,} tombstones "
            f"in {time.perf_counter() - t0:.0f} s")  # fmt: skip
    return few, many


def measure(
    store: ChunkStore,
    embedder: HashEmbedder,
    chunks: list[Chunk],
    few: Scope,
    many: Scope,
    lexical: str,
    rounds: int = ROUNDS,
) -> dict[str, Any]:
    rng = np.random.default_rng(9)
    queries = [" ".join(rng.choice(WORDS[:200], size=4)) for _ in range(QUERIES)]
    withheld = {t.id for t in forgotten(chunks, False)}
    times: dict[Scope, list[float]] = {few: [], many: []}
    same = 0
    request = RetrievalRequest(top_k=5, query_candidates=20, lexical=lexical)
    for _ in range(rounds):
        for q in queries:
            answers = {}
            for scope in (few, many) if rng.random() < 0.5 else (many, few):
                t0 = time.perf_counter()
                result = retrieve_context(
                    q, embedder=embedder, store=store, scope=scope, request=request
                )
                times[scope].append(time.perf_counter() - t0)
                for hit in result.hits:
                    assert hit.id not in withheld and hit.source_id not in withheld
                answers[scope] = [h.id for h in result.hits]
            same += answers[few] == answers[many]
    p50 = {s: statistics.median(v) * 1e3 for s, v in times.items()}
    return {"few": p50[few], "many": p50[many], "ratio": p50[many] / p50[few], "same": same}


def run(
    store: ChunkStore,
    name: str,
    rows: int,
    lexical: str,
    hybrid: bool = True,
    rounds: int = ROUNDS,
) -> dict[str, dict[str, Any]]:
    """Measure each mode on ``store``; return ``{mode: measure(...)}``."""
    embedder = HashEmbedder(64)
    chunks = corpus(rows)
    few, many = load(store, chunks, embedder)
    measured: dict[str, dict[str, Any]] = {}
    for mode in ("off", lexical) if hybrid else ("off",):
        r = measured[mode] = measure(store, embedder, chunks, few, many, mode, rounds)
        print(
            f"{name}, lexical={mode!r}, {rows:,} rows: retrieve_context p50 with {REAL} "
            f"forgotten ids {r['few']:.2f} ms, with {MANY:,} {r['many']:.2f} ms: ratio "
            f"{r['ratio']:.2f}x (target <= 1.1x); same hits in {r['same']}/{QUERIES * rounds}",
            flush=True,
        )
    return measured


STORE_TEXT = {"memory": "in memory", "postgres": "PostgreSQL"}


def write_json(measured: dict[str, dict[str, dict[str, Any]]], rows: int, rounds: int) -> None:
    """One ratio per store and mode (target <= 1.1x); the p50s and hit checks as details."""
    figures: dict[str, dict[str, Any]] = {}
    targets = []
    for name, modes in measured.items():
        for mode, r in modes.items():
            leg = "vector-only" if mode == "off" else f"hybrid ({mode})"
            key = f"{name}_{'vector' if mode == 'off' else mode}_ratio"
            figures[key] = figure(
                f"{STORE_TEXT[name]}, {leg}: p50 with {MANY:,} forgotten ids / with {REAL}",
                "x",
                r["ratio"],
            )
            targets.append(target(key, "<=", 1.1))
    bm25 = measured.get("postgres", {}).get("bm25")
    if bm25 is not None:  # the figure the GIN pending-list merge is for
        figures["postgres_bm25_p50_ms"] = figure(
            f"PostgreSQL hybrid (bm25) p50 right after indexing, {REAL} forgotten ids",
            "ms",
            bm25["few"],
        )
    write_result(
        "tombstones",
        figures=figures,
        targets=targets,
        quick=rows < 10_000 or rounds < ROUNDS,
        details={"rows": rows, "queries": QUERIES * rounds, "measured": measured},
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", choices=("memory", "postgres", "both"), default="both")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--vector-only", action="store_true", help="skip the hybrid queries")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of {QUERIES} queries")
    parser.add_argument(
        "--no-merge",
        action="store_true",
        help="PostgreSQL: leave the GIN pending lists to autovacuum (merge_pending_lists=False)",
    )
    args = parser.parse_args(argv)
    measured: dict[str, dict[str, dict[str, Any]]] = {}
    if args.store in ("memory", "both"):
        measured["memory"] = run(
            InMemoryStore(), "memory", args.rows, "bm25", not args.vector_only, args.rounds
        )
    if args.store in ("postgres", "both"):
        from ragport.adapters.postgres import PostgresStore, WriteSettings, embedded_server

        with (
            tempfile.TemporaryDirectory(prefix="ragport-bench-tomb-") as tmp,
            embedded_server(Path(tmp) / "data", keep_running=False) as url,
        ):
            note_postgres(url)
            store = PostgresStore(
                url,
                schema="bench_tombstones",
                create=True,
                writes=WriteSettings(merge_pending_lists=not args.no_merge),
            )
            try:
                measured["postgres"] = run(
                    store, "postgres", args.rows, "bm25", not args.vector_only, args.rounds
                )
            finally:
                store.engine.dispose()
    write_json(measured, args.rows, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
