"""`ragport generations`: the store's generation history against the listing it replaced.

Loads ``--sources`` sources of ``--chunks`` chunks each (``HashEmbedder(256)``, one
``index_chunks`` call per 500 sources, so few generations), then replaces ``--edits`` sources
one by one (one generation each: written and retired) and deletes as many. Then, alternating
in one run, ``--repeat`` times each:

- history: ``store.generation_history(scope, limit=10)`` (what `ragport generations` reads now:
  written and retired sources of the last 10 generations);
- listing: ``list_sources(stores, scope, counts=True)`` grouped by generation (what it read
  before: every visible source's records, one ``get_by_source`` per source; it could not see
  retirements at all).

Prints the median and p95 of each and their ratio, on the in-memory store and (with
``--postgres``) an embedded PostgreSQL server in a temporary directory.

Run: .venv/bin/python bench/bench_generation_history.py [--sources N] [--chunks N]
     [--edits N] [--repeat N] [--postgres]

No target was set for this command; the times (min/median/max of the repeats) and the ratio
go to ``bench/results/generation_history.json`` (``results/quick/`` below 2,000 sources).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _results import figure, note_postgres, ratio, write_result

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.bootstrap import Stores, list_sources


def _load(stores: Stores, scope: ragport.Scope, args: argparse.Namespace) -> None:
    embedder = HashEmbedder(dimensions=256)
    ids = [f"docs/s{n:05d}.md" for n in range(args.sources)]
    for start in range(0, len(ids), 500):
        chunks = [
            c
            for sid in ids[start : start + 500]
            for c in ragport.domain.chunk_text(
                " ".join(f"{sid} word{k}" for k in range(40 * args.chunks)),
                source_id=sid,
                size=400,
                overlap=0,
            )[: args.chunks]
        ]
        ragport.application.index_chunks(
            chunks=chunks, embedder=embedder, store=stores.chunks, scope=scope
        )
    for n in range(args.edits):
        sid = ids[n]
        chunks = ragport.domain.chunk_text(f"{sid} edited {n}", source_id=sid)
        ragport.application.replace_source(
            source_id=sid, chunks=chunks, embedder=embedder, store=stores.chunks, scope=scope
        )
        ragport.application.delete_source(source_id=ids[-1 - n], store=stores.chunks, scope=scope)


def _time(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def _measure(name: str, stores: Stores, args: argparse.Namespace) -> dict[str, list[float]]:
    scope = ragport.Scope("bench", "r", "history")
    started = time.perf_counter()
    _load(stores, scope, args)
    print(f"{name}: loaded {args.sources} sources x {args.chunks} chunks, "
          f"{2 * args.edits} edits in {time.perf_counter() - started:.1f} s")  # fmt: skip
    store: Any = stores.chunks
    history = store.generation_history(scope, limit=10)
    assert history and history[0].sources_retired == 1, history[0]

    def listing() -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for row in list_sources(stores, scope, counts=True):
            out.setdefault(row.generation or 0, []).append(row.source_id)
        return out

    times: dict[str, list[float]] = {"history": [], "listing": []}
    for _ in range(args.repeat):
        times["history"].append(_time(lambda: store.generation_history(scope, limit=10)))
        times["listing"].append(_time(listing))
    for key, values in times.items():
        values.sort()
        p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
        print(f"  {key:<8} median {statistics.median(values):9.2f} ms  p95 {p95:9.2f} ms")
    speedup = statistics.median(times["listing"]) / statistics.median(times["history"])
    print(f"  listing / history (medians): {speedup:.1f}x")
    return times


STORE_TEXT = {"memory": "in memory", "postgres": "PostgreSQL"}


def _write_json(measured: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> None:
    figures: dict[str, dict[str, Any]] = {}
    for name, times in measured.items():
        where = STORE_TEXT[name]
        figures[f"{name}_history_ms"] = figure(
            f"{where}: generation_history(limit=10)", "ms", samples=times["history"]
        )
        figures[f"{name}_listing_ms"] = figure(
            f"{where}: the listing it replaced", "ms", samples=times["listing"]
        )
        figures[f"{name}_ratio"] = ratio(
            f"{where}: listing / history (medians)",
            statistics.median(times["listing"]),
            statistics.median(times["history"]),
            (f"{name}_listing_ms", f"{name}_history_ms"),
        )
    write_result(
        "generation_history",
        figures=figures,
        quick=args.sources < 2000,
        details={"sources": args.sources, "chunks": args.chunks, "edits": args.edits},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=5)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    measured = {
        "memory": _measure("memory", Stores(InMemoryStore(), InMemoryStatusStore(), "memory"), args)
    }
    if args.postgres:
        from ragport.adapters.postgres import PostgresStatusStore, PostgresStore, embedded_server

        with (
            tempfile.TemporaryDirectory() as data,
            embedded_server(data, keep_running=False) as url,
        ):
            note_postgres(url)
            store = PostgresStore(url, schema="bench_history", create=True)
            try:
                status = PostgresStatusStore(store.engine, schema="bench_history")
                measured["postgres"] = _measure("postgres", Stores(store, status, "postgres"), args)
            finally:
                store.engine.dispose()
    _write_json(measured, args)


if __name__ == "__main__":
    main()
