"""Every shipped parser against the shipped ParserContract, each with a sample of its format."""

from __future__ import annotations

import io

import pytest
from pdf_bytes import pdf

from ragport.adapters.parsers import (
    DocxParser,
    HtmlParser,
    MarkdownParser,
    PdfParser,
    RstParser,
    TextParser,
)
from ragport.contract_tests import ParserContract, Sample


def docx_bytes() -> bytes:
    import docx

    document = docx.Document()
    document.core_properties.title = "Handbook"
    document.add_heading("Leave", 1)
    document.add_paragraph("Parental leave lasts sixteen weeks.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


class TestTextParser(ParserContract):
    @pytest.fixture
    def parser(self) -> TextParser:
        return TextParser()


class TestMarkdownParser(ParserContract):
    @pytest.fixture
    def parser(self) -> MarkdownParser:
        return MarkdownParser()

    @pytest.fixture
    def parser_sample(self) -> Sample:
        return Sample(b"---\ntitle: Leave\n---\n# Leave\n\nSixteen weeks.\n", "text/markdown")


class TestHtmlParser(ParserContract):
    @pytest.fixture
    def parser(self) -> HtmlParser:
        return HtmlParser()

    @pytest.fixture
    def parser_sample(self) -> Sample:
        return Sample(
            b"<html lang=en><title>Leave</title><nav>menu</nav><main><h1>Leave</h1>"
            b"<p>Sixteen weeks.</p></main></html>",
            "text/html",
        )


class TestRstParser(ParserContract):
    @pytest.fixture
    def parser(self) -> RstParser:
        return RstParser()

    @pytest.fixture
    def parser_sample(self) -> Sample:
        return Sample(b"Leave\n=====\n\nSixteen weeks::\n\n    code line\n", "text/x-rst")


class TestPdfParser(ParserContract):
    @pytest.fixture
    def parser(self) -> PdfParser:
        return PdfParser()

    @pytest.fixture
    def parser_sample(self) -> Sample:
        return Sample(pdf(["Leave policy", "Sixteen weeks of leave."]), "application/pdf")


class TestDocxParser(ParserContract):
    @pytest.fixture
    def parser(self) -> DocxParser:
        return DocxParser()

    @pytest.fixture
    def parser_sample(self) -> Sample:
        return Sample(docx_bytes(), DocxParser.media_types[0])
