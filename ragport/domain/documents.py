"""Document media types: which file suffixes ragport reads and what each is called.

One table, used by the loaders (media type from a file name), by ``parser_for`` and by the
command line (which files a folder walk picks up), so the three never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "BINARY_MEDIA_TYPES",
    "DOCUMENT_SUFFIXES",
    "MEDIA_TYPES",
    "base_media_type",
    "media_type_for",
]

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

MEDIA_TYPES: Mapping[str, str] = MappingProxyType(
    {
        ".md": "text/markdown",
        ".markdown": "text/markdown",
        ".txt": "text/plain",
        ".rst": "text/x-rst",
        ".html": "text/html",
        ".htm": "text/html",
        ".pdf": "application/pdf",
        ".docx": DOCX,
    }
)
"""File suffix (lower case, with the dot) -> media type."""

DOCUMENT_SUFFIXES: tuple[str, ...] = tuple(MEDIA_TYPES)

BINARY_MEDIA_TYPES: frozenset[str] = frozenset({"application/pdf", DOCX})
"""Formats whose bytes are not their text (fonts, images, zip structure): a file of one may
be up to ``Limits.binary_bytes``; its extracted text is held to ``Limits.parse_bytes``."""


def base_media_type(media_type: str) -> str:
    """``"text/html; charset=x"`` -> ``"text/html"`` (lower case, parameters dropped)."""
    return media_type.split(";", 1)[0].strip().lower()


def media_type_for(name: str) -> str | None:
    """The media type of a file name or path by its suffix, or None when ragport has none."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1].lower()
    dot = base.rfind(".")
    return MEDIA_TYPES.get(base[dot:]) if dot > 0 else None
