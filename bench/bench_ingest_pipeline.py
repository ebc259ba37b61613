"""Files/s of `ingest_files` with MiniLM: the serial path (workers=1) against the pipeline.

Generates FILES mixed documents into a temporary folder (a quarter each: Markdown of 1-4 kB,
HTML pages of 1-4 kB of text inside navigation chrome, PDFs of 1-2 pages made by
tests/support/pdf_bytes.py ``manual`` (20 lines a page), DOCX of 8-27 paragraphs made with
python-docx: the small documents of a typical folder), then ingests the folder into a fresh scope once per variant, each in its own
child process (so the peak RSS, ru_maxrss from wait4, is the variant's own; the model loads
in each child before the clock starts). Variants alternate within each round; the summary
gives each one's median files/s, chunks/s and peak RSS, and the ratio pipelined / serial.

    .venv/bin/python bench/bench_ingest_pipeline.py [--files 300] [--rounds 1]
        [--workers 2] [--store memory://|postgresql://...|embedded] [--embedder minilm|tei]

``--embedder tei`` replaces MiniLM by ``TeiEmbedder`` against bench_http_embed's
TEI-compatible server in its own process on 127.0.0.1, answering each batch after
``--delay-ms`` (default 50): an embedder that waits instead of computing.

``--store embedded`` uses ragport's embedded PostgreSQL (``open_stores(None)``), a URL a
server; each child ingests into its own corpus, so no variant sees the other's rows.

Files/s of each variant (min/median/max over the rounds), their ratio (no target is fixed:
issue 27 asks for both in one run) and the pipeline's peak RSS go to
``bench/results/ingest_pipeline.json`` with ``--embedder tei`` (what ``make bench`` runs),
``ingest_pipeline_minilm.json`` with MiniLM; ``results/quick/`` below 300 files.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "bench"))

from _results import figure, ratio, write_result  # noqa: E402

EMBEDDER_TEXT = {"minilm": "MiniLM", "tei": "TEI stub"}


def write_corpus(folder: Path, files: int) -> None:
    from bench_parsers import docx_document, html_page, markdown_document
    from pdf_bytes import manual

    for i in range(files):
        kind = i % 4
        if kind == 0:
            data, suffix = markdown_document(1_000 + (i * 397) % 3_000), ".md"
        elif kind == 1:
            data, suffix = html_page(1_000 + (i * 211) % 3_000), ".html"
        elif kind == 2:
            data, suffix = manual(1 + i % 2, lines=20), ".pdf"
        else:
            data, suffix = docx_document(8 + i % 20), ".docx"
        (folder / f"doc-{i:03d}{suffix}").write_bytes(data)


CHILD = r"""
import json, sys, time
from pathlib import Path
from ragport.adapters.embedders import MiniLmEmbedder
from ragport.application.ingest import IngestOptions
from ragport.bootstrap import collect_documents, ingest_files, open_stores
from ragport.domain.model import Scope

folder, workers, store_url, corpus = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
if len(sys.argv) > 5:
    from ragport.adapters.embedders import HttpOptions, TeiEmbedder
    embedder = TeiEmbedder(
        sys.argv[5], dimensions=384, batch_size=32, http=HttpOptions(allow_loopback=True)
    )
else:
    embedder = MiniLmEmbedder()
    embedder.load()
embedder.embed(["warm up the session"])
url = None if store_url == "embedded" else store_url
with open_stores(url) as stores:
    candidates = collect_documents([folder], root=folder)
    t0 = time.perf_counter()
    outcomes = list(ingest_files(
        candidates, root=folder, store=stores.chunks, status_store=stores.status,
        embedder=embedder, scope=Scope("bench", "pipeline", corpus),
        options=IngestOptions(workers=workers),
    ))
    seconds = time.perf_counter() - t0
print(json.dumps({
    "seconds": seconds,
    "files": len(outcomes),
    "failed": sum(o.state == "failed" for o in outcomes),
    "chunks": sum(o.chunks for o in outcomes),
}))
"""


def run_child(folder: Path, workers: int, store: str, url: str | None) -> dict[str, float]:
    extra = [] if url is None else [url]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(folder),
            str(workers),
            store,
            uuid.uuid4().hex[:12],
            *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode})")
    figures = json.loads(out.strip().splitlines()[-1])
    figures["rss_mb"] = usage.ru_maxrss / 1024
    return figures


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2, help="parse threads of the pipeline")
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--embedder", choices=("minilm", "tei"), default="minilm")
    parser.add_argument("--delay-ms", type=float, default=50.0)
    args = parser.parse_args()
    url = None
    if args.embedder == "tei":
        import multiprocessing

        from bench_http_embed import _serve

        ours, theirs = multiprocessing.Pipe()
        server = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(args.delay_ms / 1000, 384, 32, theirs), daemon=True
        )
        server.start()
        url = f"http://127.0.0.1:{ours.recv()}"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp).resolve()
        started = time.perf_counter()
        write_corpus(folder, args.files)
        print(f"corpus: {args.files} files in {time.perf_counter() - started:.1f} s", flush=True)
        results: dict[str, list[dict[str, float]]] = {"serial": [], "pipelined": []}
        for _ in range(args.rounds):
            for name, workers in (("serial", 1), ("pipelined", args.workers)):
                figures = run_child(folder, workers, args.store, url)
                results[name].append(figures)
                print(name, json.dumps(figures), flush=True)
    print()
    print("| variant | files | chunks | failed | seconds | files/s | chunks/s | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    rate: dict[str, float] = {}
    for name, runs in results.items():
        seconds = statistics.median(r["seconds"] for r in runs)
        first = runs[0]
        rate[name] = first["files"] / seconds
        print(
            f"| {name} | {first['files']:.0f} | {first['chunks']:.0f} | {first['failed']:.0f} | "
            f"{seconds:.1f} | {first['files'] / seconds:.2f} | {first['chunks'] / seconds:.1f} | "
            f"{max(r['rss_mb'] for r in runs):.0f} |"
        )
    print(f"\npipelined / serial files/s: {rate['pipelined'] / rate['serial']:.2f}x")
    write_json(args, results, rate)
    return 0


def write_json(
    args: argparse.Namespace, results: dict[str, list[dict[str, float]]], rate: dict[str, float]
) -> None:
    embedder = EMBEDDER_TEXT[args.embedder]
    if args.embedder == "tei":
        embedder += f" ({args.delay_ms:g} ms a batch)"
    figures: dict[str, dict[str, Any]] = {}
    for name, runs in results.items():
        what = "serial (workers=1)" if name == "serial" else f"pipelined (workers={args.workers})"
        figures[f"{name}_files_per_s"] = figure(
            f"{embedder}, {args.files} files: {what}",
            "files/s",
            samples=[r["files"] / r["seconds"] for r in runs],
        )
    figures["ratio"] = ratio(
        "pipelined / serial files/s (medians)",
        rate["pipelined"],
        rate["serial"],
        ("pipelined_files_per_s", "serial_files_per_s"),
    )
    figures["pipelined_rss_mb"] = figure(
        "pipelined: peak RSS", "MB", max(r["rss_mb"] for r in results["pipelined"])
    )
    write_result(
        "ingest_pipeline" if args.embedder == "tei" else "ingest_pipeline_minilm",
        figures=figures,
        quick=args.files < 300,
        details={
            "files": args.files,
            "store": args.store if "://" not in args.store else args.store.split("://")[0],
            "runs": results,
        },
    )


if __name__ == "__main__":
    raise SystemExit(main())
