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
    """Text a parser extracted, with metadata (e.g. title, page boundaries)."""

    text: str
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    media_type: str | None = None


@runtime_checkable
class DocumentLoader(Protocol):
    """Fetches one document by URI through a host-owned policy.

    Promises: performs only the I/O its host configured; refuses URIs its policy forbids with
    ``UrlRejectedError`` *before* any socket opens; never returns partial bytes as complete.
    """

    def load(self, uri: str) -> LoadedDocument: ...


@runtime_checkable
class Parser(Protocol):
    """Turns bytes into text, bounded by byte, page and time caps.

    Promises (checked by ``ParserContract`` once parsers land): strict decoding; input past
    ``max_bytes``, a page cap or ``timeout_s`` raises ``ParseError`` and returns nothing (no
    partial text); abort is checked before and after parsing; errors carry no document text.
    """

    def parse(
        self, data: bytes, *, media_type: str | None = None, abort: Abort | None = None
    ) -> ParsedDocument: ...
