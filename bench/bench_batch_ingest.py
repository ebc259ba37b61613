"""Chunks/s of ragport's ingest on PostgreSQL: one ``replace_source`` per source against the
batched path (``Rag.replace_sources``: a batch of sources in one unit of work, one generation,
one COPY of its rows), interleaved in one run (issue 45).

SOURCES sources x CHUNKS chunks (texts of 300-600 characters, 384-d precomputed unit vectors:
no embedding cost in the timings), written in rounds of ROUND sources (the peers benchmark's
rounds of 100) into two fresh schemas of one server, ragport's defaults (HNSW m 24,
ef_construction 128, the index there before the first row). Each round times each variant
around its own calls plus ``finish_maintenance()`` (its background GIN merges land in its own
span), the variant that goes first alternating every round. Chunks/s per variant (total
chunks / total seconds, and the median of the rounds), the ratio batched / per-source, and
the statements of each variant's last round.

    .venv/bin/python bench/bench_batch_ingest.py [--sources 2000] [--chunks 10] [--round 100]
        [--url postgresql://...]   (default: an embedded server in a temporary directory)

Writes bench/results/batch_ingest.json (results/quick/ below 2,000 sources).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _results import figure, note_postgres, ratio, write_result  # noqa: E402
from pg_corpus import SCOPE, SEED, PrecomputedEmbedder, random_texts  # noqa: E402
from pg_writes import StatementCounter  # noqa: E402

from ragport.adapters.postgres import PostgresStore, embedded_server  # noqa: E402
from ragport.application import Rag, SourceWrite, replace_source  # noqa: E402
from ragport.domain import Chunk  # noqa: E402


def corpus(sources: int, chunks: int) -> tuple[PrecomputedEmbedder, dict[str, list[Chunk]]]:
    rng = np.random.default_rng(SEED)
    texts = random_texts(rng, sources * chunks)
    vectors = rng.standard_normal((len(texts), PrecomputedEmbedder.dimensions)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    embedder = PrecomputedEmbedder()
    embedder.add(texts, vectors)
    by_source: dict[str, list[Chunk]] = {}
    for s in range(sources):
        sid = f"src-{s:05d}"
        by_source[sid] = [
            Chunk.of(sid, i, texts[s * chunks + i], metadata={"tag": f"t{s % 100}"})
            for i in range(chunks)
        ]
    return embedder, by_source


def digest(chunks: list[Chunk]) -> str:
    return hashlib.sha256("\0".join(c.text for c in chunks).encode()).hexdigest()


class Variant:
    def __init__(self, name: str, url: str, embedder: PrecomputedEmbedder) -> None:
        self.name = name
        self.store = PostgresStore(url, schema=f"bench_{name}", create=True)
        self.embedder = embedder
        self.rag = Rag(store=self.store, embedder=embedder, scope=SCOPE)
        self.seconds: list[float] = []
        self.chunks: list[int] = []

    def write(self, batch: dict[str, list[Chunk]]) -> None:
        if self.name == "per_source":
            for sid, chunks in batch.items():
                replace_source(
                    source_id=sid, chunks=chunks, embedder=self.embedder, store=self.store,
                    scope=SCOPE, content_hash=digest(chunks),
                )  # fmt: skip
        else:
            result = self.rag.replace_sources(
                [
                    SourceWrite(source_id=s, chunks=c, content_hash=digest(c))
                    for s, c in batch.items()
                ]
            )
            assert not result.failures, result.failures
        self.store.finish_maintenance()

    def round(self, batch: dict[str, list[Chunk]]) -> None:
        started = time.perf_counter()
        self.write(batch)
        self.seconds.append(time.perf_counter() - started)
        self.chunks.append(sum(len(c) for c in batch.values()))

    @property
    def rate(self) -> float:
        return sum(self.chunks) / sum(self.seconds)

    def rates(self) -> list[float]:
        return [c / s for c, s in zip(self.chunks, self.seconds, strict=True)]


def run(url: str, sources: int, chunks: int, size: int) -> dict[str, Any]:
    note_postgres(url)
    embedder, by_source = corpus(sources, chunks)
    variants = [Variant("per_source", url, embedder), Variant("batched", url, embedder)]
    ids = list(by_source)
    rounds = [ids[i : i + size] for i in range(0, len(ids), size)]
    statements: dict[str, int] = {}
    for n, round_ids in enumerate(rounds):
        batch = {s: by_source[s] for s in round_ids}
        order = variants if n % 2 == 0 else variants[::-1]
        for v in order:
            if n == len(rounds) - 1:  # the last round counted (not timed)
                counter = StatementCounter(v.store.engine)
                with counter.counting():
                    v.write({f"{s}-count": [
                        Chunk.of(f"{s}-count", c.index, c.text, metadata=c.metadata)
                        for c in batch[s]] for s in round_ids})  # fmt: skip
                statements[v.name] = len(counter.statements) + counter.copies
            v.round(batch)
        print(
            f"round {n + 1}/{len(rounds)}: "
            + ", ".join(f"{v.name} {v.chunks[-1] / v.seconds[-1]:,.0f} chunks/s" for v in variants),
            flush=True,
        )
    for v in variants:  # every row there, each source whole at one generation
        rows = v.store.get_by_source(SCOPE, ids[-1])
        assert len(rows) == chunks, (v.name, len(rows))
    per, bat = variants
    return {
        "per_source": per.rate, "batched": bat.rate,
        "per_source_rounds": per.rates(), "batched_rounds": bat.rates(),
        "statements": statements, "rounds": len(rounds),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=2_000)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--round", type=int, default=100)
    parser.add_argument("--url")
    parser.add_argument("--quick", action="store_true", help="200 sources")
    args = parser.parse_args(argv)
    sources = 200 if args.quick else args.sources
    if args.url:
        measured = run(args.url, sources, args.chunks, args.round)
    else:
        with (
            tempfile.TemporaryDirectory(prefix="ragport-bench-batch-") as tmp,
            embedded_server(Path(tmp) / "data", keep_running=False) as url,
        ):
            measured = run(url, sources, args.chunks, args.round)
    per, bat = measured["per_source"], measured["batched"]
    print(f"per-source {per:,.0f} chunks/s, batched {bat:,.0f} chunks/s: {bat / per:.2f}x")
    print(f"statements in one round of {args.round} sources: {measured['statements']}")
    figures = {
        "per_source": figure("replace_source per source, chunks/s", "chunks/s", per),
        "batched": figure("Rag.replace_sources (batches of 100), chunks/s", "chunks/s", bat),
        "per_source_rounds": figure(
            "per source, chunks/s of each round", "chunks/s", samples=measured["per_source_rounds"]
        ),
        "batched_rounds": figure(
            "batched, chunks/s of each round", "chunks/s", samples=measured["batched_rounds"]
        ),
        "speedup": ratio("batched / per source", bat, per, ("batched", "per_source")),
        "statements_per_source": figure(
            f"statements + COPYs, one round of {args.round} sources, per source", "count",
            measured["statements"]["per_source"],
        ),
        "statements_batched": figure(
            f"statements + COPYs, one round of {args.round} sources, batched", "count",
            measured["statements"]["batched"],
        ),
    }  # fmt: skip
    write_result(
        "batch_ingest",
        figures=figures,
        targets=[{"figure": "speedup", "op": ">=", "bound": 1.2}],
        quick=sources < 2_000,
        details={"sources": sources, "chunks_per_source": args.chunks, "round": args.round},
        url=args.url,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
