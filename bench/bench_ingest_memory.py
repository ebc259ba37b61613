"""Peak RSS and chunks/s of `ragport ingest` with the default MiniLM embedder.

Writes a deterministic corpus (FILES Markdown files of about KB kilobytes each, headed
sections of varied prose) to a temporary folder, runs `ragport ingest` on it in a child
process (`--store memory://`, so the number is ragport's own process, not a database server)
and reports the child's peak RSS (ru_maxrss) and the chunks indexed per second.

    .venv/bin/python bench/bench_ingest_memory.py [--files 120] [--kb 20] [--runs 1]

Environment variables given to the child (e.g. RAGPORT_MINILM_TOKEN_BUDGET) pass through.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = [
    "node",
    "stream",
    "buffer",
    "event",
    "loop",
    "module",
    "require",
    "export",
    "process",
    "child",
    "worker",
    "thread",
    "timer",
    "socket",
    "server",
    "request",
    "response",
    "header",
    "body",
    "chunk",
    "encoding",
    "pipe",
    "readable",
    "writable",
    "error",
    "callback",
    "promise",
    "async",
    "await",
    "release",
    "note",
    "commit",
    "branch",
    "merge",
    "rebase",
    "tag",
    "pip",
    "install",
    "wheel",
    "package",
    "index",
    "requirement",
    "resolver",
    "version",
    "constraint",
    "environment",
    "virtual",
    "cache",
    "build",
]


def write_corpus(root: Path, files: int, kb: int) -> None:
    rng = random.Random(12)
    for n in range(files):
        parts = [f"# Document {n}\n"]
        size = 0
        section = 0
        while size < kb * 1024:
            section += 1
            parts.append(f"\n## Section {section}\n\n")
            for _ in range(rng.randint(2, 6)):
                sentence_count = rng.randint(3, 12)
                sentences = []
                for _ in range(sentence_count):
                    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 24))]
                    if rng.random() < 0.2:
                        words.append(f"`fn_{rng.randint(0, 9999)}()`")
                    sentences.append(" ".join(words).capitalize() + ".")
                paragraph = " ".join(sentences) + "\n\n"
                parts.append(paragraph)
                size += len(paragraph)
        (root / f"doc{n:04d}.md").write_text("".join(parts), encoding="utf-8")


def run_once(root: Path) -> dict[str, float]:
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run(
        [sys.executable, "-m", "ragport.cli", "ingest", str(root), "--store", "memory://",
         "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if done.returncode != 0:
        raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    outcomes = [json.loads(line) for line in done.stdout.splitlines()]
    chunks = sum(o["chunks"] for o in outcomes)
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: run each measurement in its
    # own process of this script (--runs 1) for a clean number.
    return {
        "files": len(outcomes),
        "chunks": chunks,
        "seconds": round(seconds, 1),
        "chunks_per_s": round(chunks / seconds, 1),
        "peak_rss_mb": round(max(peak_kb, before) / 1024, 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=120)
    parser.add_argument("--kb", type=int, default=20)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ragport-ingest-bench-") as tmp:
        root = Path(tmp)
        write_corpus(root, args.files, args.kb)
        for _ in range(args.runs):
            print(json.dumps(run_once(root)), flush=True)


if __name__ == "__main__":
    main()
