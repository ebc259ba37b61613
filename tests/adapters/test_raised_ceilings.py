"""Parsers, loaders and connectors take an operator's raised ``Ceilings`` (issue 26)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragport import Limits, ValidationError
from ragport.adapters.connectors import FolderConnector
from ragport.adapters.loaders import FileDocumentLoader
from ragport.adapters.parsers import PARSERS, DocxParser, HtmlParser, PdfParser, parser_for
from ragport.domain import ABSOLUTE_CAPS, Ceilings

MIB = 1 << 20
RAISED = Ceilings(parse_bytes=16 * MIB, parse_ms=400_000, pdf_pages=8_192)


@pytest.mark.parametrize("cls", PARSERS, ids=lambda c: c.name)
def test_every_parser_takes_max_bytes_and_timeout_up_to_the_raised_ceiling(cls):
    """16 MiB and 400 s are refused by default and accepted under ``ceilings=``; one past the
    raised ceiling is still refused, naming the limit (``binary_bytes``, which shares the
    ceiling of ``parse_bytes``, for the file of a PDF or DOCX).

    If this fails, check BaseParser.__init__ and check_timeout in parsers/_common.py.
    """
    bytes_limit = "binary_bytes" if cls in (PdfParser, DocxParser) else "parse_bytes"
    for option, value, limit in (
        ("max_bytes", 16 * MIB, bytes_limit),
        ("timeout_s", 400, "parse_ms"),
    ):
        with pytest.raises(ValidationError) as caught:
            cls(**{option: value})
        assert caught.value.limit == limit
        parser = cls(**{option: value}, ceilings=RAISED)
        assert getattr(parser, option) == value
    with pytest.raises(ValidationError) as caught:
        cls(max_bytes=16 * MIB + 1, ceilings=RAISED)
    assert caught.value.limit == bytes_limit
    with pytest.raises(ValidationError) as caught:
        cls(timeout_s=400.001, ceilings=RAISED)
    assert caught.value.limit == "parse_ms"
    with pytest.raises(ValidationError) as caught:
        cls(ceilings={"parse_bytes": 16 * MIB})
    assert caught.value.field == "ceilings"


def test_an_html_page_over_8_mib_parses_under_a_raised_ceiling():
    """A 9 MiB HTML page is too_large at the default cap and parses with max_bytes raised.

    If this fails, check HtmlParser (its text check against max_bytes) in parsers/html.py.
    """
    words = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
    body = "".join(f"<p>{words[i % 8]} {words[(i * 3) % 8]} {i}</p>\n" for i in range(380_000))
    page = f"<html><body>{body}</body></html>".encode()
    assert 9 * MIB < len(page) < 16 * MIB
    with pytest.raises(Exception) as caught:
        HtmlParser(max_bytes=8 * MIB).parse(page, media_type="text/html")
    assert getattr(caught.value, "reason", None) == "too_large"
    parsed = HtmlParser(max_bytes=16 * MIB, timeout_s=400, ceilings=RAISED).parse(
        page, media_type="text/html"
    )
    assert "epsilon" in parsed.text and "379999" in parsed.text


def test_parser_for_takes_its_caps_and_ceilings_from_limits():
    """``parser_for(name, limits=...)`` passes parse_bytes, parse_ms, parse_wall_ms,
    binary_bytes (PDF and DOCX files), pdf_pages and the ceilings; an explicit option still
    wins; a non-Limits is refused.

    If this fails, check parser_for and the limit_options class methods.
    """
    limits = Limits(
        ceilings=RAISED,
        parse_bytes=16 * MIB,
        parse_ms=400_000,
        parse_wall_ms=900_000,
        binary_bytes=12 * MIB,
        pdf_pages=8_192,
    )
    html = parser_for("a.html", limits=limits)
    assert (html.max_bytes, html.timeout_s, html.wall_timeout_s) == (16 * MIB, 400.0, 900.0)
    pdf = parser_for("a.pdf", limits=limits)
    assert isinstance(pdf, PdfParser) and pdf._max_pages == 8_192
    assert (pdf.max_bytes, pdf.max_text_bytes, pdf.timeout_s) == (12 * MIB, 16 * MIB, 400.0)
    text = parser_for("a.md", limits=limits, max_bytes=MIB, encoding="auto")
    assert (text.max_bytes, text.timeout_s) == (MIB, 400.0)
    with pytest.raises(ValidationError) as caught:
        parser_for("a.md", limits={"parse_bytes": 1})
    assert caught.value.field == "limits"


def test_loaders_and_the_folder_connector_take_max_bytes_up_to_the_raised_ceiling(tmp_path: Path):
    """FileDocumentLoader and FolderConnector refuse 16 MiB by default, take it under
    ``ceilings=``, and never pass the absolute cap.

    If this fails, check their constructors (ceilings.check("parse_bytes", ...)).
    """
    (tmp_path / "a.md").write_text("# A\n\nbody\n", encoding="utf-8")
    for build in (
        lambda **kw: FileDocumentLoader(root=tmp_path, **kw),
        lambda **kw: FolderConnector(tmp_path, **kw),
    ):
        with pytest.raises(ValidationError) as caught:
            build(max_bytes=16 * MIB)
        assert caught.value.limit == "parse_bytes"
        build(max_bytes=16 * MIB, ceilings=RAISED)
        with pytest.raises(ValidationError):
            build(max_bytes=ABSOLUTE_CAPS.parse_bytes + 1, ceilings=ABSOLUTE_CAPS)
    loader = FileDocumentLoader(root=tmp_path, max_bytes=16 * MIB, ceilings=RAISED)
    assert loader.load("a.md").data.startswith(b"# A")
