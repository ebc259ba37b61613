"""Peak RSS and chunks/s of `ragport ingest` with the default MiniLM embedder, settings compared.

Writes a deterministic corpus (FILES Markdown files of about KB kilobytes each, headed
sections of varied prose) to a temporary folder and runs `ragport ingest` on it in a child
process per measurement (`--store memory://`, so the number is ragport's own process, not a
database server). Each child reports its peak RSS (ru_maxrss from wait4), wall seconds and CPU
seconds; chunks/s is chunks over wall seconds, chunks/cpu-s chunks over CPU seconds (less
sensitive to other load on a shared machine). The variants alternate within each round, so a
noisy machine hurts them alike; the summary gives each variant's median.

Variants (MiniLM settings; ``after`` is the shipped code as is, the others reproduce older
settings in the child through MiniLmEmbedder's batch_tokens and onnxruntime's SessionOptions):

  before  32 rows a batch whatever their width, onnxruntime arena and memory patterns on
          (the settings under which issue 12 saw 1.9 GB on its own corpus)
  main    batches of at most 4,096 padded tokens, arena and memory patterns off (5790a91)
  after   the current defaults: 4,096-token batches, arena on, memory patterns off
  hash    `--embedder hash`: the floor without a model

    .venv/bin/python bench/bench_ingest_memory.py [--files 12] [--kb 16] [--size 1000]
        [--variants before,main,after] [--rounds 2]

Each variant's peak RSS and chunks/s (min/median/max over the rounds), the ``after`` /
``before`` chunks/s ratio when both ran, and the target (``after`` peaks at or under 800 MB)
go to ``bench/results/ingest_memory.json`` (``results/quick/`` for fewer than 12 files).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _results import figure, ratio, target, write_result

PEAK_RSS_TARGET_MB = 800  # issue 12, item "Memory": the shipped settings
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


# Runs `ragport ingest` in the child with older MiniLM settings: the MiniLmEmbedder the CLI
# builds gets the variant's batch_tokens, and every onnxruntime session its arena and memory
# pattern flags (set on the SessionOptions just before the session is created).
CHILD = """
import json, sys
import onnxruntime
import ragport.adapters.embedders as embedders
from ragport.adapters.embedders import minilm

settings = json.loads(sys.argv[1])
Base = minilm.MiniLmEmbedder
Session = onnxruntime.InferenceSession

class Embedder(Base):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("batch_tokens", settings["batch_tokens"])
        super().__init__(*args, **kwargs)

def session(model, sess_options, *args, **kwargs):
    sess_options.enable_cpu_mem_arena = settings["arena"]
    sess_options.enable_mem_pattern = settings["pattern"]
    return Session(model, sess_options, *args, **kwargs)

embedders.MiniLmEmbedder = minilm.MiniLmEmbedder = Embedder
onnxruntime.InferenceSession = session
from ragport.cli import main
sys.exit(main(sys.argv[2:]))
"""

# The shipped code as the console script runs it.
ENTRY = "import sys; from ragport.cli import main; sys.exit(main(sys.argv[1:]))"

VARIANTS: dict[str, dict[str, object] | None] = {
    "before": {"batch_tokens": 32 * 256, "arena": True, "pattern": True},
    "main": {"batch_tokens": 4_096, "arena": False, "pattern": False},
    "after": None,  # the shipped defaults, no shim
    "hash": None,
}


def run_once(root: Path, variant: str, size: int) -> dict[str, object]:
    ingest = ["ingest", str(root), "--store", "memory://", "--json", "--size", str(size)]
    if variant == "hash":
        ingest += ["--embedder", "hash"]
    settings = VARIANTS[variant]
    if settings is None:
        command = [sys.executable, "-c", ENTRY, *ingest]
    else:
        command = [sys.executable, "-c", CHILD, json.dumps(settings), *ingest]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"{variant}: ingest failed ({child.returncode}): "
                             f"{err.read().decode(errors='replace')[-2000:]}")  # fmt: skip
        outcomes = [json.loads(line) for line in out.read().decode().splitlines()]
    chunks = sum(o["chunks"] for o in outcomes)
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "variant": variant,
        "files": len(outcomes),
        "chunks": chunks,
        "seconds": round(seconds, 1),
        "cpu_s": round(cpu, 1),
        "chunks_per_s": round(chunks / seconds, 2),
        "chunks_per_cpu_s": round(chunks / cpu, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),  # Linux: kilobytes
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--kb", type=int, default=16)
    parser.add_argument("--size", type=int, default=1000, help="ingest --size (characters)")
    parser.add_argument("--variants", default="before,main,after")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {sorted(VARIANTS)}")
    results: dict[str, list[dict[str, object]]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="ragport-ingest-bench-") as tmp:
        root = Path(tmp)
        write_corpus(root, args.files, args.kb)
        for n in range(args.rounds):
            # Alternate the order each round, so no variant always runs first.
            for variant in variants if n % 2 == 0 else variants[::-1]:
                result = run_once(root, variant, args.size)
                results[variant].append(result)
                print(json.dumps({"round": n + 1, **result}), flush=True)
    print("median per variant:")
    for variant, runs in results.items():
        summary = {
            key: round(statistics.median(float(str(r[key])) for r in runs), 2)
            for key in ("peak_rss_mb", "chunks_per_s", "chunks_per_cpu_s", "seconds", "cpu_s")
        }
        print(json.dumps({"variant": variant, "runs": len(runs), **summary}), flush=True)
    write_json(args, results)


def write_json(args: argparse.Namespace, results: dict[str, list[dict[str, object]]]) -> None:
    figures: dict[str, dict[str, Any]] = {}
    for variant, runs in results.items():
        figures[f"{variant}_rss_mb"] = figure(
            f"{variant}: peak RSS", "MB", samples=[float(str(r["peak_rss_mb"])) for r in runs]
        )
        figures[f"{variant}_chunks_per_s"] = figure(
            f"{variant}: ingest rate over wall time",
            "chunks/s",
            samples=[float(str(r["chunks_per_s"])) for r in runs],
        )
    targets = []
    if "after" in results:
        targets.append(target("after_rss_mb", "<=", PEAK_RSS_TARGET_MB))
    if "after" in results and "before" in results:
        figures["after_before_chunks_per_s"] = ratio(
            "after / before, chunks/s (medians)",
            statistics.median(float(str(r["chunks_per_s"])) for r in results["after"]),
            statistics.median(float(str(r["chunks_per_s"])) for r in results["before"]),
            ("after_chunks_per_s", "before_chunks_per_s"),
        )
    write_result(
        "ingest_memory",
        figures=figures,
        targets=targets,
        quick=args.files < 12,
        details={"files": args.files, "kb": args.kb, "size": args.size, "runs": results},
    )


if __name__ == "__main__":
    main()
