"""Document loaders: a host-owned function, files under one root, or the web (SSRF-checked)."""

from __future__ import annotations

from ragport.adapters.loaders.file import FileDocumentLoader
from ragport.adapters.loaders.resource import ResourceDocumentLoader
from ragport.adapters.loaders.web import DEFAULT_MEDIA_TYPES, WebFetchDocumentLoader

__all__ = [
    "DEFAULT_MEDIA_TYPES",
    "FileDocumentLoader",
    "ResourceDocumentLoader",
    "WebFetchDocumentLoader",
]
