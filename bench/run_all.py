"""Run every benchmark of ``bench/`` one after another (``make bench``).

Each benchmark prints its own table and writes its headline figures and targets as JSON
(``bench/results/<name>.json``; ``bench/_results.py``), from which ``bench/render_results.py``
writes bench/RESULTS.md. ``--quick`` runs each script's smoke-test size instead (under five
minutes in all rather than hours) and the JSON goes to ``bench/results/quick/``. A benchmark
that fails does not stop the others. At the end bench/RESULTS.md is rendered again from all
the JSON there is (what this run wrote and what earlier runs left), also when a benchmark
failed (``--no-render`` skips it); the exit status is 1 when any benchmark failed. The
machines are shared and noisy: compare ratios measured within one run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"  # what render_results reads at the end ...
RESULTS_MD = HERE / "RESULTS.md"  # ... and writes
QUICK_ENV = "RAGPORT_BENCH_QUICK"  # read by _results.write_result

# (result name, script, title, arguments of the full run, arguments of the quick run). The
# result name is the JSON file the script writes (bench/results[/quick]/<name>.json);
# render_results.py gives each entry one section of bench/RESULTS.md, in this order. The
# quick sizes keep `make bench-quick` under 5 minutes on the 2-core development VM.
PG_LEXICAL_DATA = "bench/out/pg_lexical"
BENCHMARKS: tuple[tuple[str, str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("foundation", "bench_foundation.py", "Foundation: in-memory path", (), ("--quick",)),
    ("bm25", "bench_bm25.py", "Lexical index: Bm25Index vs rank_bm25", (), ("--quick",)),
    ("forgetting", "bench_forgetting.py", "Forgetting", (), ("--quick",)),
    (
        "sqlite_example",
        "bench_sqlite_example.py",
        "SQLite example store: a vector query against InMemoryStore",
        (),
        ("--quick",),
    ),
    (
        "parsers",
        "bench_parsers.py",
        "Parsers: MB/s against the bare library call",
        ("--repeat", "7"),
        ("--repeat", "1", "--skip-ingest"),
    ),
    (
        "pdf",
        "bench_pdf.py",
        "PDF worker: PdfParser vs bare pdfminer",
        ("--repeat", "5"),
        ("--repeat", "1", "--only", "100kB"),
    ),
    (
        "sync",
        "bench_sync.py",
        "Knowledge sync",
        ("--repeat", "3", "--postgres"),
        ("--repeat", "1", "--files", "200"),
    ),
    ("mcp", "bench_mcp.py", "MCP search round trip", (), ("--calls", "5")),
    ("rerank_seam", "bench_rerank_seam.py", "Reranking seam overhead", (), ()),
    (
        "http_embed",
        "bench_http_embed.py",
        "Concurrent HTTP embedding: TeiEmbedder at max_concurrency 1 vs 4",
        (),
        ("--chunks", "1000", "--repeat", "1"),
    ),
    (
        "quality_memory",
        "quality.py",
        "Retrieval quality: Cranfield, in memory",
        ("--store", "memory"),
        ("--store", "memory", "--limit-queries", "40", "--limit-docs", "200"),
    ),
    (
        "quality_postgres",
        "quality.py",
        "Retrieval quality: Cranfield, PostgreSQL",
        ("--store", "postgres"),
        ("--store", "postgres", "--limit-queries", "20", "--limit-docs", "200"),
    ),
    (
        "postgres",
        "bench_postgres.py",
        "PostgreSQL: ingest, retrieve, recall, delete",
        (),
        ("--quick", "--smoke", "--rows", "2000"),
    ),
    (
        "pg_recall",
        "bench_pg_recall.py",
        "PostgreSQL recall@10 under grants and filters",
        ("--rows", "100000", "--builds", "2"),
        ("--rows", "5000", "--builds", "1"),
    ),
    (
        "pg_groups",
        "bench_pg_groups.py",
        "PostgreSQL grant-checked vector query: 1,000 groups against 10",
        ("--rows", "100000", "--groups", "10,1000,65536"),
        ("--rows", "5000", "--queries", "40"),
    ),
    (
        "pg_access",
        "bench_pg_access.py",
        "PostgreSQL access-checked query against the same rows by an equality filter",
        ("bench/out/pg_access", "--stop"),
        ("bench/out/pg_access-2k", "--chunks", "2000", "--queries", "40", "--stop"),
    ),
    (
        "pg_lexical",
        "bench_pg_lexical.py",
        "PostgreSQL lexical leg and hybrid retrieve",
        # --stop: the server the script keeps for later runs on DIR is stopped (data kept)
        (
            "100000",
            PG_LEXICAL_DATA + "-100k",
            "--load",
            "copy",
            "--hybrid",
            "--queries",
            "80",
            "--stop",
        ),
        (
            "5000",
            PG_LEXICAL_DATA + "-5k",
            "--load",
            "copy",
            "--hybrid",
            "--queries",
            "10",
            "--stop",
        ),
    ),
    (
        "pg_million",
        "bench_pg_million.py",
        "A million rows: hybrid, vector-only and lexical latency, recall@10",
        # about 14 minutes to load 1M rows by COPY (HNSW built after it), then 2 minutes
        ("1000000", "bench/out/pg_million-1m", "--queries", "80", "--stop"),
        ("5000", "bench/out/pg_million-5k", "--queries", "10", "--stop"),
    ),
    (
        "pg_bulk",
        "bench_pg_bulk.py",
        "PostgreSQL ingest with HNSW present: the merge, the build parameters, the bulk-load mode",
        ("--rows", "50000"),
        ("--quick",),
    ),
    (
        "tombstones",
        "bench_tombstones.py",
        "100,000 tombstones vs 10",
        (),
        ("--rows", "2000", "--rounds", "1"),
    ),
    (
        "scale_out",
        "bench_scale_out.py",
        "Scale out: read replica, partitioned schema",
        (),
        ("--rows", "1000", "--seconds", "2"),
    ),
    (
        "ingest_memory",
        "bench_ingest_memory.py",
        "Ingest memory with MiniLM",
        ("--files", "12", "--kb", "16"),
        ("--files", "2", "--kb", "4", "--rounds", "1", "--variants", "after"),
    ),
    (
        "ingest_pipeline",
        "bench_ingest_pipeline.py",
        "Pipelined ingest: serial vs pipelined ingest_files",
        ("--files", "300", "--rounds", "2", "--embedder", "tei"),
        ("--files", "40", "--rounds", "1", "--embedder", "tei"),
    ),
    (
        "batch_ingest",
        "bench_batch_ingest.py",
        "Batched ingest on PostgreSQL: replace_source per source vs Rag.replace_sources",
        (),
        ("--quick",),
    ),
    (
        "minilm",
        "bench_minilm.py",
        "MiniLM on every core: MiniLmEmbedder.embed vs a bare onnxruntime session",
        ("--chunks", "600", "--repeat", "5", "--configs", "bare-all,embed,bare-2x1"),
        ("--chunks", "48", "--repeat", "1", "--configs", "bare-all,embed"),
    ),
    (
        "aio",
        "bench_aio.py",
        "AsyncRag's thread limiter vs psycopg's async pool",
        (),
        ("--sources", "40", "--rounds", "1"),
    ),
    (
        "peers",
        "bench_peers.py",
        "Peers: ragport, LangChain, LlamaIndex and Haystack on one PostgreSQL",
        # the peers run in .venv-peers (make bench-peers creates it); without it, ragport only.
        # The 200,000-chunk run (hours) is by hand: --chunks 200000 (result peers_200k)
        ("--chunks", "20000"),
        ("--quick",),
    ),
    (
        "generation_history",
        "bench_generation_history.py",
        "ragport generations: the store's generation history",
        ("--postgres",),
        ("--sources", "200", "--repeat", "3"),
    ),
)


def result_name(script: str) -> str:
    """The result name of the first entry that runs ``script`` (or ``name`` itself)."""
    for name, entry_script, *_ in BENCHMARKS:
        if script in (name, entry_script):
            return name
    raise KeyError(script)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="each script's smoke-test size")
    parser.add_argument(
        "--only", nargs="*", default=None, help="result or script names to run (default all)"
    )
    parser.add_argument("--no-render", action="store_true", help="leave bench/RESULTS.md as it is")
    args = parser.parse_args(argv)
    failed: list[str] = []
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the recorded commands: one BLAS thread
    if args.quick:
        env[QUICK_ENV] = "1"
    else:
        env.pop(QUICK_ENV, None)
    for name, script, _title, full, quick in BENCHMARKS:
        if args.only and not {name, script} & set(args.only):
            continue
        command = [sys.executable, str(HERE / script), *(quick if args.quick else full)]
        print(f"\n=== {' '.join(command[1:])}", flush=True)
        started = time.perf_counter()
        code = subprocess.call(command, env=env, cwd=HERE.parent)
        print(f"=== {script}: exit {code} after {time.perf_counter() - started:.1f} s", flush=True)
        if code != 0:
            failed.append(script)
    if not args.no_render:
        import render_results  # here: it imports this module's BENCHMARKS

        render_results.main(["--results", str(RESULTS), "--out", str(RESULTS_MD)])
    if failed:
        print(f"failed: {' '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
