"""PDF and DOCX files of several megabytes are accepted by default (issue 43, item 6).

Their bytes are not their text (fonts, images, zip structure), so the file may be up to
``Limits.binary_bytes`` (8 MiB, the ceiling of ``parse_bytes``) while the text extracted from
it stays under ``parse_bytes`` (1 MiB): the parsers, the file loader and the folder connector
all apply the two caps that way, and a refusal names the setting to raise, never the text.
Every file is made by the test (tests/support/pdf_bytes.py ``manual``,
tests/support/docx_bytes.py ``padded_docx``).
"""

from __future__ import annotations

import pytest
from docx_bytes import HANDBOOK, padded_docx
from pdf_bytes import manual, pdf

from ragport.adapters.connectors import FolderConnector
from ragport.adapters.loaders import FileDocumentLoader
from ragport.adapters.parsers import DocxParser, PdfParser, parser_for
from ragport.domain import DEFAULT_LIMITS, HARD_LIMITS
from ragport.domain.errors import LoadError, ParseError

MIB = 1 << 20
CANARY = "QX7-CANARY-do-not-echo"


@pytest.fixture(scope="module")
def four_mb_pdf() -> bytes:
    data = manual(4, size=4_000_000)
    assert 3 * MIB < len(data) < 4 * MIB + MIB // 2
    return data


@pytest.fixture(scope="module")
def three_mb_docx() -> bytes:
    data = padded_docx(3_000_000)
    assert 2 * MIB < len(data) < 3 * MIB
    return data


def test_multi_megabyte_pdf_and_docx_parse_under_the_default_limits(four_mb_pdf, three_mb_docx):
    """A 4 MB PDF and a 3 MB DOCX, past the 1 MiB parse_bytes, parse with the defaults (the
    parsers' own and parser_for(limits=DEFAULT_LIMITS)): their file cap is binary_bytes.

    If this fails, check BinaryParser in parsers/_common.py and its limit_options.
    """
    assert DEFAULT_LIMITS.binary_bytes == HARD_LIMITS.parse_bytes == 8 * MIB
    for parser in (PdfParser(), parser_for("report.pdf", limits=DEFAULT_LIMITS)):
        assert parser.max_bytes == 8 * MIB
        assert len(parser.parse(four_mb_pdf).pages) == 4
    for parser in (DocxParser(), parser_for("handbook.docx", limits=DEFAULT_LIMITS)):
        assert "# Passwords" in parser.parse(three_mb_docx).text.splitlines()


def test_their_extracted_text_stays_under_parse_bytes_naming_the_setting():
    """Text past max_text_bytes (parse_bytes) is ParseError(too_large) whose message names the
    setting to raise (--max-bytes, Limits.parse_bytes) and carries no document text; a file
    past max_bytes (binary_bytes) names binary_bytes.

    If this fails, check BinaryParser._check_text and PdfParser._extract's answer cap.
    """
    words = " ".join([CANARY] * 40)
    document = pdf([words, words])
    for parser, data in (
        (PdfParser(max_text_bytes=1_000), document),
        (DocxParser(max_text_bytes=50), HANDBOOK.read_bytes()),
    ):
        with pytest.raises(ParseError) as caught:
            parser.parse(data)
        assert caught.value.reason == "too_large"
        assert "--max-bytes" in str(caught.value) and "parse_bytes" in str(caught.value)
        assert CANARY not in str(caught.value)
    assert len(PdfParser(max_text_bytes=4_000).parse(document).pages) == 2
    with pytest.raises(ParseError) as caught:
        PdfParser(max_bytes=len(document) - 1).parse(document)
    assert caught.value.reason == "too_large" and "binary_bytes" in str(caught.value)


def test_the_loader_and_the_folder_connector_read_pdf_and_docx_up_to_binary_bytes(
    tmp_path, four_mb_pdf, three_mb_docx
):
    """With their defaults the file loader and the folder connector load the 4 MB PDF and the
    3 MB DOCX, refuse a 2 MB text file naming --max-bytes, and a 9 MB PDF naming binary_bytes.

    If this fails, check FileCaps in adapters/_files.py and the binary_max_bytes of
    FileDocumentLoader and FolderConnector.
    """
    (tmp_path / "manual.pdf").write_bytes(four_mb_pdf)
    (tmp_path / "handbook.docx").write_bytes(three_mb_docx)
    (tmp_path / "notes.txt").write_bytes(b"words " * (2 * MIB // 6))
    (tmp_path / "huge.pdf").write_bytes(b"%PDF-1.4\n" + b"0" * (9 * MIB))
    loader = FileDocumentLoader(root=tmp_path)
    assert loader.load("manual.pdf").data == four_mb_pdf
    assert loader.load("handbook.docx").data == three_mb_docx
    for name, setting in (("notes.txt", "--max-bytes"), ("huge.pdf", "binary_bytes")):
        with pytest.raises(LoadError) as caught:
            loader.load(name)
        assert caught.value.reason == "too_large" and setting in str(caught.value)
    upserts = {u.source_id: u for u in FolderConnector(tmp_path).bootstrap().upserts}
    assert upserts["manual.pdf"].load().data == four_mb_pdf
    assert upserts["handbook.docx"].load().data == three_mb_docx
    for name in ("notes.txt", "huge.pdf"):
        with pytest.raises(LoadError) as caught:
            upserts[name].load()
        assert caught.value.reason == "too_large"
