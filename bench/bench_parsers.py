"""Parser throughput (MB/s) against the bare library call on the same bytes.

Deterministic, realistic documents are built in memory (nothing downloaded):

- HTML: a 600 KB intranet page (nav, header, sidebar, footer, sections with paragraphs full of
  links and emphasis, nested lists, tables, code); bare call ``lxml.html.document_fromstring
  (data).text_content()``.
- PDF: 40 pages of Flate-compressed text (tests/support/pdf_bytes.py); bare call
  ``pdfminer.high_level.extract_text`` in process. ragport's figure includes its worker
  process (start-up, transfer, kill-safe wait).
- DOCX: 1,500 paragraphs with headings, lists and a table (python-docx); bare call
  ``docx.Document(...)`` plus a walk of ``paragraphs`` and table cells.
- Markdown and reST for reference: bare calls ``bytes.decode`` and docutils ``publish_doctree``.

Each figure is the median of ``--repeat`` runs (default 5), ragport and the bare call
alternating. Also ``ragport ingest`` of 200
mixed files (in-memory store, hash embedder) split into parse, embed and write time.

Run: .venv/bin/python bench/bench_parsers.py [--repeat N] [--skip-ingest] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from _results import figure, ratio, target, write_result  # noqa: E402
from pdf_bytes import pdf  # noqa: E402

WORDS = [
    "policy",
    "leave",
    "approval",
    "manager",
    "request",
    "days",
    "notice",
    "records",
    "travel",
    "expense",
    "receipt",
    "hotel",
    "train",
    "booking",
    "security",
    "badge",
    "office",
    "payroll",
    "benefit",
    "review",
    "quarter",
    "budget",
]


def _words(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3 + i // 5) % len(WORDS)] for i in range(n))


def html_page(target: int = 600_000) -> bytes:
    chrome = (
        "<header><a href='/'>Example Corp</a><form><input name=q><button>Search</button>"
        "</form></header><nav><ul>"
        + "".join(f"<li><a href='/s{i}'>Section {i}</a></li>" for i in range(40))
        + "</ul></nav>"
    )
    body: list[str] = []
    n = 0
    while sum(map(len, body)) < target:
        n += 1
        body.append(f"<section><h2>Topic {n}</h2>")
        for p in range(4):
            words = _words(60, n * 10 + p).split()
            inline = " ".join(
                f"<a href='/w/{w}'>{w}</a>" if i % 9 == 0 else f"<em>{w}</em>" if i % 13 == 0 else w
                for i, w in enumerate(words)
            )
            body.append(f"<p>{inline}.</p>")
        body.append(
            "<ul>"
            + "".join(
                f"<li>{_words(8, n + i)}<ul><li>{_words(5, i)}</li></ul></li>" for i in range(4)
            )
            + "</ul>"
        )
        body.append(
            "<table><tr><th>Grade</th><th>Days</th><th>Notes</th></tr>"
            + "".join(
                f"<tr><td>G{i}</td><td>{20 + i}</td><td>{_words(6, i)}</td></tr>" for i in range(5)
            )
            + "</table>"
        )
        body.append(
            f"<pre><code>ragport ingest --corpus c{n}\n  # step {n}\n</code></pre></section>"
        )
    page = (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>Handbook</title>"
        "<style>body{margin:0}</style><script>var x = 1;</script></head><body>"
        + chrome
        + "<main>"
        + "".join(body)
        + "</main><aside>Related pages</aside><footer>Example Corp</footer></body></html>"
    )
    return page.encode()


def pdf_document(pages: int = 40) -> bytes:
    return pdf(["\n".join(_words(12, p * 50 + line) for line in range(45)) for p in range(pages)])


def docx_document(paragraphs: int = 1_500) -> bytes:
    import docx

    document = docx.Document()
    document.core_properties.title = "Handbook"
    for i in range(paragraphs):
        if i % 50 == 0:
            document.add_heading(f"Chapter {i // 50}", 1)
        style = "List Bullet" if i % 10 == 9 else None
        document.add_paragraph(_words(40, i), style=style)
    table = document.add_table(rows=30, cols=3)
    for r in range(30):
        for c in range(3):
            table.cell(r, c).text = _words(3, r * 3 + c)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def markdown_document(target: int = 600_000) -> bytes:
    parts = ["---\ntitle: Handbook\n---\n"]
    n = 0
    while sum(map(len, parts)) < target:
        n += 1
        parts.append(
            f"## Topic {n}\n\n{_words(120, n)}.\n\n- {_words(8, n)}\n- {_words(8, n + 1)}\n\n"
        )
    return "".join(parts).encode()


def rst_document(target: int = 300_000) -> bytes:
    parts = ["Handbook\n========\n\n"]
    n = 0
    while sum(map(len, parts)) < target:
        n += 1
        title = f"Topic {n}"
        parts.append(
            f"{title}\n{'-' * len(title)}\n\n{_words(120, n)}.\n\n- {_words(8, n)}\n- {_words(8, n + 1)}\n\n::\n\n    code {n}\n\n"
        )
    return "".join(parts).encode()


def bare_html(data: bytes) -> str:
    import lxml.html

    return str(lxml.html.document_fromstring(data).text_content())


def bare_pdf(data: bytes) -> str:
    from pdfminer.high_level import extract_text

    return extract_text(io.BytesIO(data))


def bare_docx(data: bytes) -> str:
    import docx

    document = docx.Document(io.BytesIO(data))
    parts = [p.text for p in document.paragraphs]
    for table in document.tables:
        parts.extend(cell.text for row in table.rows for cell in row.cells)
    return "\n".join(parts)


def bare_markdown(data: bytes) -> str:
    return data.decode("utf-8")


def bare_rst(data: bytes) -> str:
    from docutils.core import publish_doctree

    settings = {"report_level": 5, "halt_level": 5, "_disable_config": True}
    return str(publish_doctree(data.decode(), settings_overrides=settings).astext())


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm up (imports, caches)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def paired_seconds(
    ours: Callable[[], object], bare: Callable[[], object], repeat: int
) -> tuple[float, float]:
    """Medians of ``ours`` and ``bare``, run alternately so machine noise hits both alike."""
    ours()
    bare()
    a, b = [], []
    for _ in range(repeat):
        for fn, out in ((ours, a), (bare, b)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return statistics.median(a), statistics.median(b)


def parse_figures(
    repeat: int, only: list[str] | None = None
) -> list[tuple[str, int, float, float]]:
    from ragport.adapters.parsers import (
        DocxParser,
        HtmlParser,
        MarkdownParser,
        PdfParser,
        RstParser,
    )

    cases = [
        ("HTML", html_page, HtmlParser(), bare_html),
        ("PDF", pdf_document, PdfParser(), bare_pdf),
        ("DOCX", docx_document, DocxParser(), bare_docx),
        ("Markdown", markdown_document, MarkdownParser(), bare_markdown),
        ("reST", rst_document, RstParser(), bare_rst),
    ]
    wanted = {name.lower() for name in only} if only else None
    rows = []
    for name, make, parser, bare in cases:
        if wanted is not None and name.lower() not in wanted:
            continue
        data = make()
        ours, theirs = paired_seconds(
            lambda p=parser, d=data: p.parse(d), lambda b=bare, d=data: b(d), repeat
        )
        rows.append((name, len(data), len(data) / ours / 1e6, len(data) / theirs / 1e6))
    return rows


def ingest_figures(files: int = 200) -> dict[str, float]:
    """ingest_files over 200 mixed files; parse and embed timed by wrapping the adapters."""
    from ragport.adapters import parsers as parser_module
    from ragport.adapters.embedders import HashEmbedder
    from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
    from ragport.bootstrap import collect_documents, ingest_files
    from ragport.domain.model import Scope

    spent = {"parse": 0.0, "embed": 0.0}
    original_parse = parser_module.BaseParser.parse

    def timed_parse(self, data, **kwargs):
        t0 = time.perf_counter()
        try:
            return original_parse(self, data, **kwargs)
        finally:
            spent["parse"] += time.perf_counter() - t0

    class TimedEmbedder(HashEmbedder):
        def embed(self, texts):
            t0 = time.perf_counter()
            try:
                return super().embed(texts)
            finally:
                spent["embed"] += time.perf_counter() - t0

    makers = [
        (".md", lambda i: markdown_document(6_000 + i * 10)),
        (".html", lambda i: html_page(12_000 + i * 10)),
        (".txt", lambda i: (_words(900, i) + "\n").encode()),
        (".rst", lambda i: rst_document(5_000 + i * 10)),
        (".pdf", lambda i: pdf_document(2)),
        (".docx", lambda i: docx_document(40)),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(files):
            suffix, make = makers[i % len(makers)]
            (root / f"doc-{i:03d}{suffix}").write_bytes(make(i))
        parser_module.BaseParser.parse = timed_parse  # type: ignore[method-assign]
        try:
            started = time.perf_counter()
            outcomes = list(
                ingest_files(
                    collect_documents([root], root=root.resolve()),
                    root=root.resolve(),
                    store=InMemoryStore(),
                    status_store=InMemoryStatusStore(),
                    embedder=TimedEmbedder(dimensions=256),
                    scope=Scope("bench", "r", "c"),
                )
            )
            total = time.perf_counter() - started
        finally:
            parser_module.BaseParser.parse = original_parse  # type: ignore[method-assign]
    failed = [o for o in outcomes if o.state == "failed"]
    return {
        "files": len(outcomes),
        "failed": len(failed),
        "seconds": total,
        "parse": spent["parse"],
        "embed": spent["embed"],
        "write": total - spent["parse"] - spent["embed"],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument(
        "--only", action="append", metavar="NAME", help="one parser (HTML, PDF, ...); repeatable"
    )
    args = parser.parse_args()
    print("| Parser | Document | ragport MB/s | bare call MB/s | ratio |")
    print("|---|---|---|---|---|")
    figures: dict[str, dict[str, object]] = {}
    targets = []
    for name, size, ours, bare in parse_figures(args.repeat, args.only):
        print(f"| {name} | {size / 1e3:,.0f} KB | {ours:.3g} | {bare:.3g} | {ours / bare:.2f}x |")
        key = name.lower()
        figures[f"{key}_mb_s"] = figure(f"{name} ({size / 1e3:,.0f} KB): ragport", "MB/s", ours)
        figures[f"{key}_bare_mb_s"] = figure(f"{name}: bare library call", "MB/s", bare)
        figures[f"{key}_ratio"] = ratio(
            f"{name}: ragport / bare call", ours, bare, (f"{key}_mb_s", f"{key}_bare_mb_s")
        )
        if name != "Markdown":  # its bare call is bytes.decode, not a like-for-like baseline
            targets.append(target(f"{key}_ratio", ">=", 0.8))
    if not args.skip_ingest:
        f = ingest_figures()
        print(
            f"\ningest of {f['files']:.0f} mixed files ({f['failed']:.0f} failed): "
            f"{f['seconds']:.1f} s, {f['files'] / f['seconds']:.1f} files/s; "
            f"parse {f['parse']:.1f} s, embed {f['embed']:.1f} s, load+chunk+write {f['write']:.1f} s"
        )
        figures["ingest_files_per_s"] = figure(
            f"ingest_files of {f['files']:.0f} mixed files (HashEmbedder)",
            "files/s",
            f["files"] / f["seconds"],
        )
    write_result("parsers", figures=figures, targets=targets)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
