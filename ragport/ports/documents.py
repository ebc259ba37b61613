"""Document ports: loaders fetch bytes, parsers turn bytes into text under caps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from ragport.ports.runtime import Abort

__all__ = ["DocumentLoader", "LoadedDocument", "ParsedDocument", "Parser"]


@attrs.frozen
class LoadedDocument:
    """Bytes from a loader, with an optional stable ``source_id`` and metadata."""

    data: bytes
    media_type: str | None = None
    source_id: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ParsedDocument:
    """Text a parser extracted, with metadata (e.g. title, lang).

    ``markdown`` is true when ``text`` is Markdown (headings as ``#`` lines), so it is chunked
    with ``chunk_markdown``. ``pages`` is set by page-oriented parsers (PDF): the text of each
    page, in order, with ``text == "\f".join(pages)``; such a document is chunked page by page
    and a chunk never spans two pages.
    """

    text: str
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    media_type: str | None = None
    markdown: bool = False
    pages: tuple[str, ...] = ()


@runtime_checkable
class DocumentLoader(Protocol):
    """Fetches one document by URI through a host-owned policy.

    Promises: performs only the I/O its host configured; refuses URIs its policy forbids with
    ``UrlRejectedError`` *before* any socket opens; never returns partial bytes as complete.
    """

    def load(self, uri: str) -> LoadedDocument:
        """The bytes ``uri`` names, whole, with media type, source id and metadata if known."""
        ...


@runtime_checkable
class Parser(Protocol):
    """Turns bytes into text, bounded by byte, page and time caps.

    Promises (checked by ``ParserContract``):

    - ``id`` names the parser and its version (``"html-v1+lxml-6.1"``); it changes whenever
      the same bytes could parse to different text, so ``replace_document`` re-indexes.
    - ``max_bytes`` is the input cap: longer input raises ``ParseError(reason="too_large")``
      before any parsing, never truncated. The cap has a ceiling: a constructor given
      ``max_bytes`` above ``HARD_LIMITS.parse_bytes`` (``ragport.domain.limits``, 8 MiB), or
      ``timeout_s`` above ``parse_ms`` (300 s; ragport's own parsers count it as CPU time),
      or ``max_bytes <= 0`` or ``timeout_s <= 0``,
      raises ``ValidationError``, unless its ``ceilings=`` (``Ceilings``, an operator's
      explicit choice) raises them, never past ``ABSOLUTE_CAPS`` (256 MiB, 600 s).
    - Empty input (``b""``) raises ``ParseError``: an empty document is never an empty index.
    - Strict decoding: bytes that do not decode raise ``ParseError(reason="decode")``; nothing
      is guessed or replaced.
    - Input past a page, depth, inflation or time cap, or that the library cannot read, raises
      ``ParseError`` (``reason`` names the rule) and returns nothing: no partial text.
    - ``abort`` is checked before and after parsing (``AbortedError``).
    - The text is a non-blank ``str`` with ``\\n`` line ends (no ``\\r``) and no NUL; the
      metadata is JSON-serialisable (``json.dumps(dict(metadata))``); ``pages``, when set,
      join with ``"\\f"`` to the text.
    - Deterministic: the same bytes give an equal ``ParsedDocument``.
    - Errors carry no document text, neither in the message nor in a chained cause.
    """

    @property
    def id(self) -> str:
        """Parser name and version (with its library's), part of the re-index skip key."""
        ...

    @property
    def max_bytes(self) -> int:
        """The input cap in bytes."""
        ...

    def parse(
        self, data: bytes, *, media_type: str | None = None, abort: Abort | None = None
    ) -> ParsedDocument:
        """The text and metadata of ``data``, whole, or ``ParseError``: never partial. The text
        is non-blank, with ``\\n`` line ends (no ``\\r``) and no NUL; the metadata
        JSON-serialisable."""
        ...
