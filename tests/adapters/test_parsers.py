"""Format-specific behaviour of the shipped parsers, on tests/data and PDFs made at test time."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import pytest
from pdf_bytes import pdf
from worker_children import worker_children

from ragport.adapters.parsers import (
    DocxParser,
    HtmlParser,
    MarkdownParser,
    PdfParser,
    RstParser,
    TextParser,
    parser_for,
)
from ragport.domain.chunking import chunk_markdown
from ragport.domain.errors import AbortedError, ParseError

DATA = Path(__file__).resolve().parents[1] / "data"


def _reason(parser, data: bytes, **kwargs) -> str:
    with pytest.raises(ParseError) as info:
        parser.parse(data, **kwargs)
    return info.value.reason


# --- text and Markdown ------------------------------------------------------------------------


def test_text_drops_the_bom_normalises_newlines_and_refuses_nul():
    """BOM dropped, CRLF and CR become LF, NUL is refused. If this fails, check text.py."""
    assert TextParser().parse(b"\xef\xbb\xbfone\r\ntwo\rthree").text == "one\ntwo\nthree"
    assert _reason(TextParser(), b"one\x00two") == "nul"
    assert _reason(TextParser(), (DATA / "hostile" / "invalid-utf8.txt").read_bytes()) == "decode"


def test_markdown_front_matter_goes_to_metadata_not_text():
    """YAML front matter becomes metadata (dates as ISO text). If this fails, check _front_matter."""
    doc = MarkdownParser().parse((DATA / "handbook.md").read_bytes())
    assert not doc.text.startswith("---")
    assert "owner:" not in doc.text
    assert doc.metadata["title"] == "Employee handbook"
    assert doc.metadata["front_matter"]["reviewed"] == "2024-03-01"
    assert doc.markdown
    stacks = [c.metadata["heading"] for c in chunk_markdown(doc.text, source_id="h", size=120)]
    assert ["Employee handbook", "Parental leave"] in stacks


def test_markdown_title_falls_back_to_the_first_heading():
    """Without front matter the first heading is the title. If this fails, check first_heading."""
    assert MarkdownParser().parse(b"intro\n\n## Setup\n\ntext").metadata["title"] == "Setup"
    assert MarkdownParser().parse(b"Readme\n======\n\ntext").metadata["title"] == "Readme"


@pytest.mark.parametrize(
    "front",
    [
        b"---\n: : bad: [yaml\n---\nbody",  # not YAML
        b"---\n- a list\n---\nbody",  # not a mapping
        b"---\na: &x [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: &y [*x, *x, *x, *x, *x, *x, *x, *x, *x]\n"
        b"c: &z [*y, *y, *y, *y, *y, *y, *y, *y, *y]\nd: [*z, *z, *z, *z, *z, *z, *z, *z, *z]\n"
        b"---\nbody",  # an alias bomb: small text, huge tree
        b"---\nkey: " + b"v" * 5000 + b"\n---\nbody",  # too large for every chunk's metadata
    ],
)
def test_markdown_bad_front_matter_is_refused(front):
    """Invalid, non-mapping, alias-bomb or oversized front matter is ParseError(front_matter).

    If this fails, check _front_matter and its node budget.
    """
    assert _reason(MarkdownParser(), front) == "front_matter"


# --- HTML ---------------------------------------------------------------------------------------


def test_html_keeps_the_main_content_and_drops_the_chrome():
    """<main> only; scripts, nav, header, footer, aside, form, hidden and comments gone.

    If this fails, check DROP, _visible and _content_root in html.py.
    """
    doc = HtmlParser().parse((DATA / "site" / "leave.html").read_bytes())
    for dropped in ("SCRIPT", "HEADER", "NAV", "COMMENT", "HIDDEN", "ARIA-HIDDEN", "FORM",
                    "NOSCRIPT", "SIDEBAR", "FOOTER"):  # fmt: skip
        assert f"{dropped}-TEXT" not in doc.text
    assert doc.metadata == {"title": "Leave policy | Example Corp intranet", "lang": "en-GB"}
    lines = doc.text.splitlines()
    assert lines[0] == "# Leave policy"
    assert "Everyone gets 25 days of annual leave. Unused days expire in March." in lines
    assert "- Parental leave" in lines and "  - Primary carer: sixteen weeks" in lines
    assert "Grade | Days" in lines and "Senior | 28" in lines
    assert "# this line is code, not a heading" in lines  # inside a fenced block
    chunks = chunk_markdown(doc.text, source_id="leave", size=60, overlap=0)
    assert ["Leave policy", "Allowance by grade"] in [c.metadata["heading"] for c in chunks]
    assert all("this line is code" not in " ".join(c.metadata["heading"]) for c in chunks)


def test_html_charset_from_meta_media_type_or_bom():
    """windows-1252 by <meta>, a media type charset, a BOM; UTF-8 strictly otherwise.

    If this fails, check _decode in html.py.
    """
    doc = HtmlParser().parse((DATA / "site" / "conges-1252.html").read_bytes())
    assert doc.metadata["title"] == "Congés"
    assert "Les salariés ont droit à cinq semaines – “ vraiment ”." in doc.text
    latin = "<p>café</p>".encode("latin-1")
    assert HtmlParser().parse(latin, media_type="text/html; charset=ISO-8859-1").text == "café"
    assert _reason(HtmlParser(), latin) == "decode"
    utf16 = "\ufeff<p>naïve</p>".encode("utf-16-le")
    assert HtmlParser().parse(utf16).text == "naïve"
    assert _reason(HtmlParser(), b'<meta charset="x-unknown"><p>a</p>') == "encoding"


def test_html_malformed_is_parsed_but_too_deep_is_refused():
    """Unclosed tags parse; nesting past max_depth (or libxml2's own cut) is ParseError.

    If this fails, check the ERR_RESOURCE_LIMIT check and _Walker's depth guard.
    """
    assert HtmlParser().parse(b"<p>one<p>two<div><b>three").text == "one\n\ntwo\n\nthree"
    deep = (DATA / "hostile" / "deeply-nested.html").read_bytes()  # 3,000 levels
    assert _reason(HtmlParser(), deep) == "too_deep"
    medium = b"<div>" * 600 + b"x"
    assert _reason(HtmlParser(), medium) == "too_deep"
    assert HtmlParser(max_depth=700).parse(medium).text == "x"


def test_html_hidden_elements_are_found_whatever_the_attribute_spelling():
    """hidden / aria-hidden / style are matched in any case, with spaces or an escaped value.

    If this fails, check the attribute-name pre-check (names, _STYLE_ATTR) in _prune.
    """
    page = (
        b'<main><p>keep</p><div HIDDEN>x</div><p STYLE = "Display: None">y</p>'
        b'<p style="display&#58;none">z</p><section aria-hidden=" TRUE ">w</section>'
        b'<p aria-hidden="false">shown</p><p style="color: red">red</p>t\xc3\xa9il</main>'
    )
    assert HtmlParser().parse(page).text == "keep\n\nshown\n\nred\n\nt\u00e9il"
    only_style = b'<main><p>keep</p><p STYLE\n= "Display: None">y</p><p>z</p></main>'
    assert HtmlParser().parse(only_style).text == "keep\n\nz"  # the page never says "hidden"


def test_html_role_main_is_the_content_root_when_there_is_no_visible_main():
    """[role=main] (any case of the attribute name) wins over <body>; a hidden <main> is skipped.

    If this fails, check _content_root and its "role" pre-check.
    """
    page = b'<body><div>chrome</div><div ROLE="main"><p>content</p></div></body>'
    assert HtmlParser().parse(page).text == "content"
    page = b"<body><main hidden>old</main><section role=main><h2>New</h2><p>x</p></section></body>"
    assert HtmlParser().parse(page).text == "## New\n\nx"


def test_html_rendering_is_pinned_byte_for_byte():
    """Numbered and nested lists, blocks and tables in items, fences, tails: the exact text.

    The walk is the parser's hot loop and is tuned for speed; this pins its output (current
    quirks included: a heading inside an item is not indented, the content root's tail text
    is kept). If this fails, check _Walker.walk, flush and close in html.py.
    """
    page = (
        b"<article><h1>Guide</h1>intro <foo>in <b>foo</b></foo> text<br>after break"
        b"<ol><li>one<li><p>two</p><p>two more</p><li>three<ol><li>a</li><li>b<table><tr>"
        b"<td>c1<td> c 2 </td></tr><tr><td></td><td></td></tr></table></li></ol></li></ol>"
        b"<ul><li>\n  <div>lead</div>\n rest</li><li><h3>Head in item</h3>body</li>"
        b"<li><pre>code\n```\nx</pre></li></ul><dl><dt>term</dt><dd>defn</dd></dl><hr>"
        b"<pre>\n\nkeep   spaces\n\n</pre>tail&nbsp;text&emsp;x<table><tr><th>A</th><th>B</th>"
        b"</tr></table><h2></h2><h4>  four  </h4></article>after"
    )
    assert HtmlParser().parse(page).text == (
        "# Guide\n\nintro in foo text\nafter break\n\n"
        "1. one\n2. two\n   two more\n3. three\n  1. a\n  2. b\n     c1 | c 2\n\n"
        "- lead\n  rest\n### Head in item\n- body\n````\ncode\n```\nx\n````\n\n"
        "term\ndefn\n\n```\nkeep   spaces\n```\n\ntail text x\n\nA | B\n\n#### four\n\nafter"
    )


# --- reStructuredText ---------------------------------------------------------------------------


def test_rst_sections_literals_and_unknown_directives():
    """Sections become # headings, literal blocks stay fenced, unknown directives stay text.

    If this fails, check _Writer in rst.py and the docutils SETTINGS.
    """
    doc = RstParser().parse((DATA / "guide.rst").read_bytes())
    assert doc.metadata["title"] == "Operations guide"
    lines = doc.text.splitlines()
    assert lines[0] == "# Operations guide" and "## Deploying" in lines
    assert "./deploy --env production" in lines
    assert ".. unknown-directive:: kept as text" in lines
    assert '<script>alert("raw is disabled")</script>' in doc.text  # as inert text
    chunks = chunk_markdown(doc.text, source_id="g", size=120, overlap=0)
    assert ["Operations guide", "Rollback"] in [c.metadata["heading"] for c in chunks]


def test_rst_include_is_not_run(tmp_path):
    """``.. include::`` never reads a file. If this fails, check file_insertion_enabled."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-FILE")
    doc = RstParser().parse(f"Title\n=====\n\n.. include:: {secret}\n".encode())
    assert "TOP-SECRET-FILE" not in doc.text


# --- PDF ----------------------------------------------------------------------------------------


def test_pdf_keeps_pages_from_compressed_streams():
    """Each page's text, in order, from Flate streams. If this fails, check extract_pages."""
    doc = PdfParser().parse((DATA / "travel-policy.pdf").read_bytes())
    assert len(doc.pages) == 3 and doc.metadata["pages"] == 3
    assert doc.pages[1].startswith("Booking trains")
    assert doc.text == "\f".join(doc.pages)
    uncompressed = PdfParser().parse(pdf(["plain stream"], compress=False))
    assert uncompressed.pages == ("plain stream",)


def test_pdf_title_from_the_document_information_goes_to_metadata():
    """The info dictionary's /Title (PDFDocEncoding or UTF-16 with a BOM, whitespace
    collapsed) is metadata["title"]; no title, a blank one or one past MAX_TITLE_CHARS is no
    key, never a cut one.

    If this fails, check document_title in _pdf_worker.py and PdfParser._parse.
    """
    from ragport.adapters.parsers.pdf import MAX_TITLE_CHARS

    def title(value):
        return PdfParser().parse(pdf(["some words"], title=value)).metadata.get("title")

    assert title("Travel policy 2026") == "Travel policy 2026"
    assert title("Reisekosten –  Überblick\n(Stand 2026)") == "Reisekosten – Überblick (Stand 2026)"
    assert title(None) is None and title("   ") is None
    assert title("x" * MAX_TITLE_CHARS) == "x" * MAX_TITLE_CHARS
    assert title("x" * (MAX_TITLE_CHARS + 1)) is None
    assert PdfParser().parse(pdf(["some words"], title="T")).metadata == {"pages": 1, "title": "T"}


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"encrypt": True}, "encrypted"),
        ({"image_only": True}, "no_text"),
        ({"claimed_count": 100_000}, "too_many_pages"),
        ({"bomb_bytes": 40_000_000}, "bomb"),
    ],
)
def test_pdf_refusals(options, reason):
    """Encrypted, image-only, a 100,000-page tree, a decompression bomb: typed refusals.

    If this fails, check the order of checks in _pdf_worker.extract_pages.
    """
    assert _reason(PdfParser(), pdf(["some words"], **options)) == reason


def test_pdf_page_cap_counts_real_pages_when_the_tree_lies():
    """A tree claiming 1 page but holding 3 is refused at max_pages=2. If this fails, check
    the page loop's count in extract_pages."""
    assert _reason(PdfParser(max_pages=2), pdf(["a", "b", "c"], claimed_count=1)) == (
        "too_many_pages"
    )
    assert len(PdfParser(max_pages=3).parse(pdf(["a", "b", "c"])).pages) == 3


def test_pdf_timeout_kills_the_worker():
    """A PDF that keeps pdfminer busy stops at timeout_s of CPU time; no worker stays.

    If this fails, check PdfParser._extract: the kill and the reap in its finally block.
    """
    busy = pdf(["busy"], busy_ops=2_000_000)
    before = _pdf_workers()
    # timeout_s is CPU time: how long that takes on the clock depends on the machine's load
    assert _reason(PdfParser(timeout_s=0.5), busy) == "timeout"
    assert _pdf_workers() == before


def test_pdf_abort_during_extraction_kills_the_worker():
    """An abort set while the worker runs raises AbortedError promptly.

    If this fails, check the abort check in PdfParser._extract's wait loop.
    """

    class Later:
        def __init__(self):
            self.at = time.monotonic() + 0.3

        def is_set(self):
            return time.monotonic() > self.at

    started = time.monotonic()
    with pytest.raises(AbortedError):
        PdfParser(timeout_s=10).parse(pdf(["busy"], busy_ops=2_000_000), abort=Later())
    assert time.monotonic() - started < 2.0
    assert _pdf_workers() == set()


def _pdf_workers() -> set[str]:
    # This process's own children only: under pytest-xdist other workers run PDF tests too.
    return {entry.split()[0] for entry in worker_children("_pdf_worker.py")}


# --- DOCX ---------------------------------------------------------------------------------------


def test_docx_headings_lists_tables_and_core_properties():
    """Heading styles to #, list styles to items, tables to rows, title/author to metadata.

    If this fails, check DocxParser._body and _table_rows.
    """
    doc = DocxParser().parse((DATA / "security-handbook.docx").read_bytes())
    assert doc.metadata == {"title": "Security handbook", "author": "Security team"}
    lines = doc.text.splitlines()
    assert "# Passwords" in lines and "- Turn on two-factor sign-in" in lines
    assert "Security desk | ext. 4242" in lines


def test_docx_zip_bomb_is_refused_from_the_directory():
    """Parts that claim more than max_inflated_bytes are refused before inflating.

    If this fails, check DocxParser._check_archive.
    """
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"\0" * 3_000_000)  # ~3 KB compressed
    data = buffer.getvalue()
    assert len(data) < 20_000
    assert _reason(DocxParser(max_inflated_bytes=1_000_000), data) == "bomb"
    assert _reason(DocxParser(), b"PK\x03\x04 not really a zip") == "malformed"


# --- parser_for ---------------------------------------------------------------------------------


def test_parser_for_picks_by_media_type_or_name_and_never_guesses():
    """Known types map to their parser; an unknown type is ParseError(unsupported_type).

    If this fails, check parser_for and ragport.domain.documents.MEDIA_TYPES.
    """
    assert isinstance(parser_for("text/html; charset=utf-8"), HtmlParser)
    assert isinstance(parser_for("docs/guide.RST"), RstParser)
    assert isinstance(parser_for("report.pdf", max_pages=10), PdfParser)
    assert isinstance(parser_for("a.docx"), DocxParser)
    for unknown in ("image/png", "notes.odt", "README", ""):
        with pytest.raises(ParseError) as info:
            parser_for(unknown)
        assert info.value.reason == "unsupported_type"


def test_pdf_worker_that_cannot_start_is_a_parse_error(monkeypatch):
    """No usable interpreter for the worker is ParseError(worker), not an OSError.

    If this fails, check the Popen guard in PdfParser._extract.
    """
    import sys

    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    assert _reason(PdfParser(), pdf(["text"])) == "worker"
