"""PdfParser (pdfminer in a killable worker) against bare pdfminer on PDFs of realistic size.

The files are made in memory by tests/support/pdf_bytes.py ``manual`` (nothing downloaded):
a 100 kB, a 1 MB and an 8 MB manual (8 pages of 45 lines of varied words, padded to size
with one uncompressed figure a page, which text extraction never decodes) and a 256-page one
(10 lines a page). For each: ``PdfParser(max_bytes=8 MiB).parse`` and, in process,
``pdfminer.high_level.extract_text``, alternating, ``--repeat`` runs each (default 3); min
and median seconds, the ratio of medians, and the ratio after subtracting the worker's start.

The worker's start is the median of ``--repeat`` round trips of the PDF worker on empty
input (interpreter, ``RLIMIT_AS``, pdfminer import, an answer): what every parse pays on top
of the extraction. Issue 24's goal: ratio at most 1.3 after subtracting it.

Run: .venv/bin/python bench/bench_pdf.py [--repeat N] [--only 100kB 1MB 8MB 256p]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from _results import figure, ratio, target, write_result  # noqa: E402
from pdf_bytes import manual  # noqa: E402

FILES: dict[str, Callable[[], bytes]] = {
    "100kB": lambda: manual(8, size=100_000),
    "1MB": lambda: manual(8, size=1_000_000),
    "8MB": lambda: manual(8, size=8_000_000),
    "256p": lambda: manual(256, lines=10),
}


def bare_pdf(data: bytes) -> str:
    from pdfminer.high_level import extract_text

    return str(extract_text(io.BytesIO(data)))


def worker_start(repeat: int) -> float:
    """Median seconds of a round trip of the PDF worker that extracts nothing."""
    from ragport.adapters.parsers import pdf as pdf_module
    from ragport.adapters.parsers._common import Deadline
    from ragport.adapters.parsers._worker import run_worker

    def once() -> float:
        t0 = time.perf_counter()
        answer = run_worker(
            pdf_module._WORKER,
            {"max_pages": 1, "max_inflated": 1 << 20},
            b"",
            deadline=Deadline(30),
            abort=None,
            memory_bytes=1 << 30,
            max_answer_bytes=1 << 20,
            media_type=None,
        )
        assert answer.get("error") == "malformed", answer  # empty input: pdfminer's refusal
        return time.perf_counter() - t0

    once()
    return statistics.median(once() for _ in range(repeat))


def paired(
    ours: Callable[[], object], bare: Callable[[], object], repeat: int
) -> tuple[list[float], list[float]]:
    """Seconds of ``ours`` and ``bare``, run alternately so machine noise hits both alike."""
    ours()
    bare()
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeat):
        for fn, out in ((ours, a), (bare, b)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return a, b


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(FILES))
    args = parser.parse_args()
    from ragport.adapters.parsers import PdfParser

    pdf_parser = PdfParser(max_bytes=8 << 20)
    start = worker_start(max(args.repeat, 5))
    print(f"worker start (empty round trip, median): {start * 1000:.0f} ms\n")
    print(
        "| File | Bytes | Pages | PdfParser min / median s | pdfminer min / median s"
        " | ratio | ratio less worker start |"
    )
    print("|---|---|---|---|---|---|---|")
    figures: dict[str, dict[str, object]] = {
        "worker_start_ms": figure("worker start (empty round trip, median)", "ms", start * 1000)
    }
    targets = []
    for name, make in FILES.items():
        if args.only and name not in args.only:
            continue
        data = make()
        pages = len(pdf_parser.parse(data).pages)
        ours, bare = paired(
            lambda d=data: pdf_parser.parse(d), lambda d=data: bare_pdf(d), args.repeat
        )
        m_ours, m_bare = statistics.median(ours), statistics.median(bare)
        print(
            f"| {name} | {len(data):,} | {pages} | {min(ours):.2f} / {m_ours:.2f}"
            f" | {min(bare):.2f} / {m_bare:.2f} | {m_ours / m_bare:.2f}x"
            f" | {(m_ours - start) / m_bare:.2f}x |",
            flush=True,
        )
        key = name.lower()
        figures[f"{key}_parser_s"] = figure(f"{name} ({pages} pages): PdfParser", "s", samples=ours)
        figures[f"{key}_pdfminer_s"] = figure(f"{name}: in-process pdfminer", "s", samples=bare)
        figures[f"{key}_ratio"] = ratio(
            f"{name}: ratio of medians less the worker start",
            m_ours - start,
            m_bare,
            (f"{key}_parser_s", f"{key}_pdfminer_s"),
        )
        targets.append(target(f"{key}_ratio", "<=", 1.3))
    write_result("pdf", figures=figures, targets=targets)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
