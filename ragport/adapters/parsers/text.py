"""Plain text and Markdown (YAML front matter to metadata, with PyYAML in safe mode)."""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from typing import Any

from ragport.adapters.parsers._common import (
    Deadline,
    EncodedTextParser,
)
from ragport.domain.errors import ParseError
from ragport.ports.documents import ParsedDocument
from ragport.ports.runtime import Abort

__all__ = ["FRONT_MATTER_BYTES", "MarkdownParser", "TextParser"]

FRONT_MATTER_BYTES = 4_096
"""Front matter goes onto every chunk, so its compact JSON is capped."""
_FRONT_MATTER_NODES = 1_000  # YAML aliases can make a small text a huge tree
_FRONT = re.compile(r"---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_ATX = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.M)
_SETEXT = re.compile(r"^ {0,3}(\S[^\n]*)\n {0,3}(?:=+|-+)[ \t]*$", re.M)
_FENCE = re.compile(r"^ {0,3}(?:`{3,}|~{3,})", re.M)


class TextParser(EncodedTextParser):
    """Text: strict UTF-8 by default (see ``encoding``), a BOM dropped, ``\\r\\n`` and ``\\r``
    become ``\\n``, NUL refused."""

    name = "text"
    media_types = ("text/plain",)

    def _parse(
        self, data: bytes, *, media_type: str | None, deadline: Deadline, abort: Abort | None
    ) -> ParsedDocument:
        metadata: dict[str, Any] = {}
        text = self._text(data, media_type, metadata)
        return ParsedDocument(text, metadata, "text/plain")


class MarkdownParser(EncodedTextParser):
    """Markdown as :class:`TextParser` reads text, plus YAML front matter.

    Front matter (a first line ``---``, YAML, a line ``---`` or ``...``) is parsed with
    ``yaml.safe_load``, must be a mapping, and goes to ``metadata["front_matter"]`` (JSON
    values; dates as ISO strings; at most 4,096 bytes), not into the text. ``title`` comes from
    the front matter, else the first ATX or setext heading outside fenced code.
    """

    name = "markdown"
    library = "PyYAML"
    media_types = ("text/markdown", "text/x-markdown")

    def _parse(
        self, data: bytes, *, media_type: str | None, deadline: Deadline, abort: Abort | None
    ) -> ParsedDocument:
        metadata: dict[str, Any] = {}
        text = self._text(data, media_type, metadata)
        front = _FRONT.match(text)
        if front is not None:
            fields = _front_matter(front.group(1) or "", media_type)
            text = text[front.end() :]
            if fields:
                metadata["front_matter"] = fields
            title = fields.get("title")
            if isinstance(title, str) and title.strip():
                metadata["title"] = title.strip()
        if "title" not in metadata:
            title = first_heading(text)
            if title:
                metadata["title"] = title
        return ParsedDocument(text, metadata, "text/markdown", markdown=True)


def first_heading(markdown: str) -> str | None:
    """The text of the first ATX or setext heading before any code fence, or None."""
    fence = _FENCE.search(markdown)
    limit = fence.start() if fence else len(markdown)
    found = [m for m in (_ATX.search(markdown, 0, limit), _SETEXT.search(markdown, 0, limit)) if m]
    if not found:
        return None
    title = min(found, key=lambda m: m.start()).group(1).strip()
    return title or None


def _front_matter(source: str, media_type: str | None) -> dict[str, Any]:
    try:
        import yaml
    except ImportError:  # pragma: no cover - the yaml extra is part of [all]
        raise ParseError(
            "front matter needs PyYAML: install ragport[yaml]",
            reason="dependency",
            media_type=media_type,
        ) from None
    try:
        loaded = yaml.safe_load(source)
    except yaml.YAMLError:
        # The YAML error quotes the offending line: no cause is chained.
        raise ParseError(
            "the front matter is not valid YAML", reason="front_matter", media_type=media_type
        ) from None
    except RecursionError:  # PyYAML composes and constructs nested nodes recursively
        raise ParseError(
            "the front matter nests too deep", reason="front_matter", media_type=media_type
        ) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ParseError(
            "the front matter must be a YAML mapping", reason="front_matter", media_type=media_type
        )
    budget = [_FRONT_MATTER_NODES]
    try:
        fields = _json_value(loaded, budget, media_type)
    except RecursionError:
        raise ParseError(
            "the front matter nests too deep", reason="front_matter", media_type=media_type
        ) from None
    assert isinstance(fields, dict)
    size = len(json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    if size > FRONT_MATTER_BYTES:
        raise ParseError(
            f"the front matter is {size} bytes as JSON, over {FRONT_MATTER_BYTES}",
            reason="front_matter",
            media_type=media_type,
        )
    return fields


def _json_value(value: Any, budget: list[int], media_type: str | None) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise ParseError(
            f"the front matter has more than {_FRONT_MATTER_NODES} values",
            reason="front_matter",
            media_type=media_type,
        )
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _json_value(v, budget, media_type) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_value(v, budget, media_type) for v in value]
    return str(value)
