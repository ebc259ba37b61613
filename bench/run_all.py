"""Run every benchmark of ``bench/`` one after another (``make bench``).

Each benchmark prints its own table; the figures that bench/RESULTS.md quotes come from the
full runs named there. ``--quick`` runs each script's smoke-test size instead (minutes rather
than an hour). A benchmark that fails does not stop the others; the exit status is 1 when any
failed. The machines are shared and noisy: compare ratios measured within one run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (script, arguments of the full run, arguments of the quick run)
BENCHMARKS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("bench_foundation.py", (), ("--quick",)),
    ("bench_bm25.py", (), ("--quick",)),
    ("bench_forgetting.py", (), ("--quick",)),
    ("bench_parsers.py", ("--repeat", "7"), ("--repeat", "2", "--skip-ingest")),
    ("bench_pdf.py", ("--repeat", "5"), ("--repeat", "1", "--only", "100kB", "8MB")),
    ("bench_sync.py", ("--repeat", "3", "--postgres"), ("--repeat", "1", "--files", "200")),
    ("bench_mcp.py", (), ("--calls", "5")),
    ("bench_rerank_seam.py", (), ()),
    ("bench_http_embed.py", (), ("--chunks", "1000", "--repeat", "1")),
    ("quality.py", (), ("--limit-queries", "40")),
    ("bench_postgres.py", (), ("--quick",)),
    ("bench_scale_out.py", (), ("--rows", "2000", "--seconds", "3")),
    (
        "bench_ingest_memory.py",
        ("--files", "12", "--kb", "16"),
        ("--files", "2", "--kb", "4", "--rounds", "1"),
    ),
    ("bench_generation_history.py", ("--postgres",), ("--sources", "200", "--repeat", "3")),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="each script's smoke-test size")
    parser.add_argument("--only", nargs="*", default=None, help="script names to run (default all)")
    args = parser.parse_args(argv)
    failed: list[str] = []
    for script, full, quick in BENCHMARKS:
        if args.only and script not in args.only:
            continue
        command = [sys.executable, str(HERE / script), *(quick if args.quick else full)]
        print(f"\n=== {' '.join(command[1:])}", flush=True)
        started = time.perf_counter()
        code = subprocess.call(command)
        print(f"=== {script}: exit {code} after {time.perf_counter() - started:.1f} s", flush=True)
        if code != 0:
            failed.append(script)
    if failed:
        print(f"failed: {' '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
