"""Where the ingest time goes with HNSW present, and what the bulk-load mode saves (issue 28).

``pg_corpus.Corpus(N)`` (default 50,000 rows, 100 per source, 384 dimensions) through
``replace_source`` one source at a time (a precomputed embedder keeps embedding out), each
variant into a fresh schema of one embedded server, one after the other in one run:

- ``default``: the store as shipped (HNSW m 24, ef_construction 128, present from the first
  write; each add's vectors on a second connection beside its records; the GIN pending lists
  merged on the store's maintenance thread 2 s after a write; the 50k run in
  RESULTS.md was made with the earlier default of 1 s);
- ``one connection``: ``parallel_vector_rows=None`` (the vectors copied by the unit of work
  itself, the merge still on the maintenance thread);
- ``inline``: ``parallel_vector_rows=None, maintenance_delay=None``: the write path before
  both (one connection, the merge and re-analysis after each commit, on the writer's path);
- ``no merge``: ``merge_pending_lists=False`` (the merge left to autovacuum);
- ``merge 1000``: ``merge_pending_lists=1000`` (one merge per 1,000 rows written);
- ``m16``: the previous HNSW parameters, pgvector's defaults (m 16, ef_construction 64);
- ``m32``: ``hnsw_m=32, hnsw_ef_construction=200`` (the 1M-row recall setting);
- ``deferred``: the bulk-load mode, ``defer_vector_indexes=True``: no HNSW during the load,
  then ``build_vector_indexes(build_memory="1GB")`` once (its time counted in).

Rows/s of each and its ratio to ``default``, and the p50 of 30 hybrid queries right after
each load (the merge's gain: a reader scans unmerged GIN pending lists entry by entry). Run: .venv/bin/python bench/bench_pg_bulk.py
[--rows N] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import numpy as np
import pg_corpus as bp
from _results import figure, note_postgres, ratio, target, write_result

from ragport import RetrievalRequest, WriteOptions
from ragport.adapters.postgres import (
    PostgresStore,
    VectorIndexSettings,
    WriteSettings,
    embedded_server,
)
from ragport.application import replace_source, retrieve_context

N_QUERIES = 30
VARIANTS = (
    "default", "one connection", "inline", "no merge", "merge 1000", "m16", "m32", "deferred"
)  # fmt: skip
OPTIONS: dict[str, dict[str, Any]] = {
    "one connection": {"writes": WriteSettings(parallel_vector_rows=None)},
    "inline": {"writes": WriteSettings(parallel_vector_rows=None, maintenance_delay=None)},
    "no merge": {"writes": WriteSettings(merge_pending_lists=False)},
    "merge 1000": {"writes": WriteSettings(merge_pending_lists=1000)},
    "m16": {"vector_index": VectorIndexSettings(m=16, ef_construction=64)},
    "m32": {"vector_index": VectorIndexSettings(m=32, ef_construction=200)},
    "deferred": {"vector_index": VectorIndexSettings(deferred=True)},
}


def load(
    url: str, corpus: bp.Corpus, emb: bp.PrecomputedEmbedder, variant: str
) -> tuple[float, float]:
    """Seconds to load ``corpus`` in ``variant``, the deferred build included, and the p50
    (ms) of hybrid queries right after it (what unmerged GIN pending lists cost a reader)."""
    schema = "bulk_" + variant.replace(" ", "_")
    store = PostgresStore(url, schema=schema, create=True, **OPTIONS.get(variant, {}))
    start = time.perf_counter()
    for s in range(len(corpus.sources)):
        replace_source(
            source_id=corpus.sources[s],
            chunks=corpus.chunks(s),
            embedder=emb,
            store=store,
            scope=bp.SCOPE,
            write_options=WriteOptions(batch_size=128),
        )
    store.finish_maintenance()  # the load's last merge counts in its time
    loaded = time.perf_counter() - start
    built = store.build_vector_indexes(build_memory="1GB")
    seconds = time.perf_counter() - start
    hybrid = hybrid_p50(store, corpus, emb)
    store.engine.dispose()
    bp.log(
        f"{variant}: {len(corpus.texts) / seconds:,.0f} rows/s ({seconds:.0f} s; rows "
        f"{loaded:.0f} s, index build {seconds - loaded:.0f} s{' for ' + str(built) if built else ''})"
        f"; hybrid p50 right after it {hybrid:.1f} ms"
    )
    return seconds, hybrid


def hybrid_p50(store: PostgresStore, corpus: bp.Corpus, emb: bp.PrecomputedEmbedder) -> float:
    """p50 (ms) of 30 hybrid ``retrieve_context(lexical="bm25")`` calls of four corpus words
    each, right after the load (before autovacuum has merged what the writer left)."""
    rng = np.random.default_rng(bp.SEED + 7)
    picks = rng.integers(0, len(corpus.texts), N_QUERIES)
    queries = [" ".join(corpus.texts[p].split()[2:6]) for p in picks]
    emb.add(queries, corpus.vectors[picks])
    request = RetrievalRequest(top_k=bp.TOP_K, query_candidates=20, lexical="bm25")
    times = []
    for q in queries:
        t0 = time.perf_counter()
        retrieve_context(q, embedder=emb, store=store, scope=bp.SCOPE, request=request)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--quick", action="store_true", help="2,000 rows")
    args = ap.parse_args()
    rows = 2_000 if args.quick else args.rows
    corpus = bp.Corpus(rows)
    emb = bp.PrecomputedEmbedder()
    emb.add(corpus.texts, corpus.vectors)
    with tempfile.TemporaryDirectory() as data, embedded_server(Path(data)) as url:
        note_postgres(url)
        measured = {v: load(url, corpus, emb, v) for v in VARIANTS}
    seconds = {v: m[0] for v, m in measured.items()}
    figures: dict[str, dict[str, object]] = {}
    for variant, s in seconds.items():
        key = variant.replace(" ", "_")
        figures[f"{key}_rps"] = figure(f"{variant}: rows/s, {rows:,} rows", "rows/s", rows / s)
    for variant, (_, hybrid) in measured.items():
        if variant not in ("default", "no merge"):  # the merge's gain, in the same run
            continue
        key = variant.replace(" ", "_")
        figures[f"{key}_hybrid_p50"] = figure(
            f"{variant}: hybrid p50 right after the load", "ms", hybrid
        )
    for variant in VARIANTS[1:]:
        key = variant.replace(" ", "_")
        figures[f"{key}_ratio"] = ratio(
            f"{variant} / default, rows/s",
            figures[f"{key}_rps"]["value"],
            figures["default_rps"]["value"],
            (f"{key}_rps", "default_rps"),
        )
    write_result(
        "pg_bulk",
        figures=figures,
        targets=[target("deferred_ratio", ">=", 1.0)],
        quick=args.quick,
        details={"rows": rows},
    )


if __name__ == "__main__":
    main()
