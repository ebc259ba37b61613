"""Composition root: build adapters from a URL or config and bind them to the use cases.

The only module (with ``cli``) that imports both ``application`` and ``adapters``. Nothing
here runs at import time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.application import ReplaceResult, replace_source
from ragport.domain.chunking import chunk_markdown, chunk_text
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope
from ragport.ports.embedder import Embedder
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

__all__ = ["build_embedder", "build_stores", "demo_documents", "ingest_text"]

MARKDOWN_SUFFIXES = (".md", ".markdown")


def build_stores(url: str) -> tuple[ChunkStore, IngestionStatusStore]:
    """A chunk store and a status store for ``url`` (``memory://`` for now)."""
    if url == "memory://" or url == "memory":
        return InMemoryStore(), InMemoryStatusStore()
    raise ValidationError(
        f"unsupported store URL scheme in {url.split(':', 1)[0]!r}", field="store"
    )


def build_embedder(name: str = "hash") -> Embedder:
    """The embedder named ``name``: ``hash`` (deterministic, zero dependencies)."""
    if name == "hash":
        return HashEmbedder(dimensions=256)
    raise ValidationError(f"unknown embedder {name!r}", field="embedder")


def demo_documents() -> Mapping[str, str]:
    """The bundled demo corpus: file name -> Markdown text."""
    folder = resources.files("ragport") / "demo"
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(MARKDOWN_SUFFIXES)
    }


def ingest_text(
    *,
    name: str,
    text: str,
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    embedder: Embedder,
    scope: Scope,
    size: int = 1_000,
    overlap: int = 100,
) -> ReplaceResult:
    """Chunk one document (Markdown by suffix) and replace its source atomically."""
    source_id = Path(name).stem if name.endswith(MARKDOWN_SUFFIXES) else name
    chunker = chunk_markdown if name.endswith(MARKDOWN_SUFFIXES) else chunk_text
    chunks = chunker(text, source_id=source_id, size=size, overlap=overlap)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return replace_source(
        source_id=source_id,
        chunks=chunks,
        embedder=embedder,
        store=store,
        scope=scope,
        content_hash=digest,
        status_store=status_store,
    )
