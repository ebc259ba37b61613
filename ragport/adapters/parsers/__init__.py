"""Parsers: bytes in, text and metadata out, under byte, page, depth and time caps.

``TextParser`` and ``MarkdownParser`` need nothing extra (front matter needs ``ragport[yaml]``);
``HtmlParser`` needs ``ragport[html]``, ``PdfParser`` ``ragport[pdf]``, ``DocxParser``
``ragport[docx]``, ``RstParser`` ``ragport[rst]``. Libraries are imported on first parse.

A media type none of these parse is looked up in the ``ragport.parsers`` entry points
(name: the media type; object: a callable returning a ``Parser``), after the built-ins: a
plugin never replaces a built-in parser.
"""

from __future__ import annotations

from typing import Any

from ragport.adapters import _entry_points
from ragport.adapters.parsers._common import BaseParser, EncodedTextParser, check_encoding
from ragport.adapters.parsers.docx import DocxParser
from ragport.adapters.parsers.html import HtmlParser
from ragport.adapters.parsers.pdf import PdfParser
from ragport.adapters.parsers.rst import RstParser
from ragport.adapters.parsers.text import MarkdownParser, TextParser
from ragport.domain.documents import base_media_type, media_type_for
from ragport.domain.errors import ParseError, RagportError, ValidationError, raise_unchained
from ragport.domain.limits import Limits
from ragport.ports.documents import Parser

__all__ = [
    "PARSERS",
    "BaseParser",
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


def parser_for(media_type_or_name: str, **options: Any) -> Parser:
    """A parser for a media type (``"text/html; charset=utf-8"``) or a file name (``"a.pdf"``).

    ``options`` go to the parser's constructor (``max_bytes=``, ``timeout_s=``,
    ``ceilings=``, ...), except ``encoding=``, which only the parsers of plain text, Markdown,
    reST and HTML take (HTML for a page that declares no charset; PDF and DOCX carry their
    own): ``"utf-8"`` (the default), ``"auto"`` or a codec name, and ``limits=``: a
    ``Limits`` whose caps (``parse_bytes``, ``parse_ms``, ``parse_wall_ms``, ``html_depth``,
    ``pdf_pages``, ``inflated_bytes``; for PDF and DOCX ``binary_bytes`` the file and
    ``parse_bytes`` the text) and ``ceilings`` the parser takes, each where an explicit option
    does not say otherwise. A type no built-in parser takes goes to
    the ``ragport.parsers`` entry point of that name, called with the same options (those of
    ``limits=`` being ``max_bytes=``, ``timeout_s=`` and ``ceilings=``; never ``encoding=``);
    a plugin that does not load, raises anything but a ragport error or returns no
    ``Parser`` is a ``ValidationError(field="parser")`` naming it. An unknown type is a
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
    if cls is None and media_type is not None:
        plugin = _plugin_parser(media_type, limits, options)
        if plugin is not None:
            return plugin
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


def _plugin_parser(
    media_type: str, limits: Limits | None, options: dict[str, Any]
) -> Parser | None:
    """The ``ragport.parsers`` plugin's parser for ``media_type`` (``None``: none installed)."""
    found = _entry_points.load(_entry_points.PARSERS, media_type)
    if found is None:
        return None
    plugin, factory = found
    if limits is not None:
        options = {**_plugin_limit_options(limits), **options}
    if not callable(factory):
        raise _entry_points.broken(plugin, "is not callable")
    try:
        parser = factory(**options)
    except RagportError:
        raise
    except Exception as exc:
        raise_unchained(_entry_points.broken(plugin, f"raised {type(exc).__name__}"))
    if not isinstance(parser, Parser):
        raise _entry_points.broken(plugin, f"returned a {type(parser).__name__}, not a Parser")
    return parser


def _plugin_limit_options(limits: Limits) -> dict[str, Any]:
    """What a plugin's factory takes from ``limits=`` (only these three, as it always has)."""
    options = BaseParser.limit_options(limits)
    return {key: options[key] for key in ("max_bytes", "timeout_s", "ceilings")}
