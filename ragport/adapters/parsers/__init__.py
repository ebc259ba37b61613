"""Parsers: bytes in, text and metadata out, under byte, page, depth and time caps.

``TextParser`` and ``MarkdownParser`` need nothing extra (front matter needs ``ragport[yaml]``);
``HtmlParser`` needs ``ragport[html]``, ``PdfParser`` ``ragport[pdf]``, ``DocxParser``
``ragport[docx]``, ``RstParser`` ``ragport[rst]``. Libraries are imported on first parse.
"""

from __future__ import annotations

from typing import Any

from ragport.adapters.parsers._common import BaseParser, EncodedTextParser, check_encoding
from ragport.adapters.parsers.docx import DocxParser
from ragport.adapters.parsers.html import HtmlParser
from ragport.adapters.parsers.pdf import PdfParser
from ragport.adapters.parsers.rst import RstParser
from ragport.adapters.parsers.text import MarkdownParser, TextParser
from ragport.domain.documents import base_media_type, media_type_for
from ragport.domain.errors import ParseError, ValidationError
from ragport.domain.limits import Limits

__all__ = [
    "PARSERS",
    "DocxParser",
    "HtmlParser",
    "MarkdownParser",
    "PdfParser",
    "RstParser",
    "TextParser",
    "parser_for",
]

PARSERS: tuple[type[BaseParser], ...] = (
    TextParser,
    MarkdownParser,
    HtmlParser,
    PdfParser,
    DocxParser,
    RstParser,
)
_BY_TYPE = {media_type: cls for cls in PARSERS for media_type in cls.media_types}


def parser_for(media_type_or_name: str, **options: Any) -> BaseParser:
    """A parser for a media type (``"text/html; charset=utf-8"``) or a file name (``"a.pdf"``).

    ``options`` go to the parser's constructor (``max_bytes=``, ``timeout_s=``,
    ``ceilings=``, ...), except ``encoding=``, which only the parsers of plain text, Markdown
    and reST take (HTML, PDF and DOCX carry their own): ``"utf-8"`` (the default), ``"auto"``
    or a codec name, and ``limits=``: a ``Limits`` whose caps (``parse_bytes``, ``parse_ms``,
    ``html_depth``, ``pdf_pages``, ``inflated_bytes``) and ``ceilings`` the parser takes, each
    where an explicit option does not say otherwise. An unknown type is a
    ``ParseError(reason="unsupported_type")`` naming it: ragport never guesses.
    """
    limits = options.pop("limits", None)
    if limits is not None and not isinstance(limits, Limits):
        raise ValidationError("limits must be a Limits", field="limits")
    encoding = options.pop("encoding", None)
    if encoding is not None:
        encoding = check_encoding(encoding)  # refused whatever the type: a typo never waits
    if not isinstance(media_type_or_name, str) or not media_type_or_name.strip():
        raise ParseError("no media type or file name to pick a parser", reason="unsupported_type")
    value = media_type_or_name.strip()
    media_type: str | None = base_media_type(value)
    if media_type not in _BY_TYPE:
        media_type = media_type_for(value) or (media_type if "/" in (media_type or "") else None)
    cls = _BY_TYPE.get(media_type or "")
    if cls is None:
        shown = (media_type or value)[:100]
        raise ParseError(
            f"no parser for {shown!r}", reason="unsupported_type", media_type=media_type
        )
    if limits is not None:
        options = {**cls.limit_options(limits), **options}
    if encoding is not None and issubclass(cls, EncodedTextParser):
        return cls(encoding=encoding, **options)
    return cls(**options)
