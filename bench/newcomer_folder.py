"""A newcomer's folder made from documentation already on the machine (issue 43's closing note).

About 340 files, 44 MB: the Rust Book and Reference, the Rustonomicon and 16 large standard
library pages (HTML, from rustup's docs); Markdown, reST and text from the Python install;
8 PDFs (140 kB to 4.9 MB) and 6 DOCX made from Rust Book chapters (real text: the PDF writer
of tests/support/pdf_bytes.py, python-docx); and broken and oddly named files (an empty and a
truncated PDF, a DOCX that is not a zip, a Latin-1 text, an emoji name, a name that is not
UTF-8, a PNG). Nothing is downloaded. The 12 judged questions are
bench/data/newcomer-queries.jsonl and newcomer-qrels.tsv (PDF and DOCX chapters are left out
of the HTML, so their questions can only be answered from the PDF or DOCX).

    .venv/bin/python bench/newcomer_folder.py /tmp/newcomer \\
        --rust-docs ~/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html
    ragport ingest /tmp/newcomer --corpus rustdocs
    ragport eval bench/data/newcomer-queries.jsonl bench/data/newcomer-qrels.tsv \\
        --corpus rustdocs --k 5 --per-query
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import sysconfig
import textwrap
from pathlib import Path

import docx
import lxml.html

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from pdf_bytes import pdf

PDF_CHAPTERS = {
    "ch08-01-vectors": 140_000,
    "ch08-02-strings": 400_000,
    "ch08-03-hash-maps": 900_000,
    "ch11-01-writing-tests": 1_600_000,
    "ch12-00-an-io-project": 2_500_000,
    "ch17-00-async-await": 3_200_000,
    "ch19-00-patterns": 4_000_000,
    "ch20-01-unsafe-rust": 4_900_000,
}
DOCX_CHAPTERS = [
    "ch13-01-closures",
    "ch13-02-iterators",
    "ch14-00-more-about-cargo",
    "ch14-03-cargo-workspaces",
    "ch18-00-oop",
    "ch21-00-final-project-a-web-server",
]
LATIN1 = str.maketrans({"\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2014": "-"})


def _text(path: Path) -> str:
    tree = lxml.html.parse(str(path))
    main = tree.find(".//main")
    node = main if main is not None else tree.getroot()
    return "\n".join(line.strip() for line in node.text_content().splitlines() if line.strip())


def _chapter(rust: Path, stem: str) -> Path:
    return sorted((rust / "book").glob(stem + "*.html"))[0]


def _pdfs(rust: Path, out: Path) -> set[str]:
    used = set()
    for stem, size in PDF_CHAPTERS.items():
        src = _chapter(rust, stem)
        body = _text(src).translate(LATIN1).encode("latin-1", "replace").decode("latin-1")
        lines = [wrapped for para in body.splitlines() for wrapped in textwrap.wrap(para, 90)]
        pages = ["\n".join(lines[i : i + 45]) for i in range(0, len(lines), 45)]
        figure = max(0, (size - len(pdf(pages))) // len(pages))
        (out / f"{src.stem}.pdf").write_bytes(pdf(pages, figure_bytes=figure))
        used.add(src.name)
    return used


def _docx(rust: Path, out: Path) -> set[str]:
    used = set()
    for stem in DOCX_CHAPTERS:
        src = _chapter(rust, stem)
        document = docx.Document()
        for paragraph in _text(src).splitlines():
            document.add_paragraph(paragraph)
        document.save(str(out / f"{src.stem}.docx"))
        used.add(src.name)
    return used


def _copy_html(rust: Path, out: Path, skip: set[str]) -> None:
    for folder, limit in (("book", None), ("reference", 60), ("nomicon", 40)):
        (out / folder).mkdir()
        for src in sorted((rust / folder).glob("*.html"))[:limit]:
            if src.name not in skip | {"print.html", "toc.html"}:
                shutil.copy(src, out / folder / src.name)
    (out / "std").mkdir()
    big = sorted(p for p in (rust / "std").rglob("*.html") if p.stat().st_size > 400_000)
    for src in big[:16]:
        shutil.copy(src, out / "std" / f"{src.parent.name}-{src.name}")


def _copy_notes(rust: Path, out: Path) -> None:
    notes = out / "notes"
    notes.mkdir()
    lib = Path(sysconfig.get_paths()["stdlib"])
    site = Path(sysconfig.get_paths()["purelib"])
    markdown = sorted(p for p in site.glob("**/*.md") if 3_000 < p.stat().st_size < 200_000)
    for i, src in enumerate(markdown[:40]):
        shutil.copy(src, notes / f"{i:02d}-{src.parent.name}-{src.name}")
    clippy = (rust / ".." / "clippy" / "README.md").resolve()
    if clippy.is_file():
        shutil.copy(clippy, notes / "clippy-README.md")
    for src in [*sorted(site.glob("**/*.rst"))[:25], lib / "email" / "architecture.rst"]:
        if src.is_file():
            shutil.copy(src, notes / src.name)
    for src in sorted(p for p in Path("/usr/share/common-licenses").glob("*") if p.is_file())[:15]:
        shutil.copy(src, notes / f"{src.name}.txt")


def _broken(out: Path) -> None:
    broken = out / "broken"
    broken.mkdir()
    (broken / "empty.pdf").write_bytes(b"")
    (broken / "truncated.pdf").write_bytes(
        (out / "manuals" / "ch08-01-vectors.pdf").read_bytes()[:5000]
    )
    (broken / "not-a-zip.docx").write_bytes(b"PK\x03\x04 this is not a docx")
    latin1 = "Caf\xe9 au lait and cr\xe8me br\xfbl\xe9e recipes.\n" * 40
    (broken / "latin1 café notes.txt").write_bytes(latin1.encode("latin-1"))
    (broken / "résumé ünïcode 🚀 name.md").write_text("# Rocket\n\nAn odd name.\n" * 20)
    (broken / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(4000))
    with open(bytes(broken) + b"/undecodable-\xff\xfe.txt", "wb") as f:
        f.write(b"bytes under a name that is not UTF-8\n" * 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--rust-docs", type=Path, required=True, help="rustup's share/doc/rust/html"
    )
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    (args.out / "manuals").mkdir(parents=True)
    used = _pdfs(args.rust_docs, args.out / "manuals") | _docx(args.rust_docs, args.out / "manuals")
    _copy_html(args.rust_docs, args.out, used)
    _copy_notes(args.rust_docs, args.out)
    _broken(args.out)
    files = [p for p in args.out.rglob("*") if p.is_file()]
    print(f"{len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
