"""Composition root: build adapters from a URL or config and bind them to the use cases.

The only module (with ``cli``) that imports both ``application`` and ``adapters``. Nothing
here runs at import time; optional adapters are imported when a URL asks for them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import attrs

from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.application import ReplaceResult, replace_source
from ragport.domain.chunking import chunk_markdown, chunk_text
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope
from ragport.ports.embedder import Embedder
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

__all__ = [
    "DOCUMENT_SUFFIXES",
    "Stores",
    "build_embedder",
    "demo_documents",
    "ingest_text",
    "open_stores",
    "walk_documents",
]

MARKDOWN_SUFFIXES = (".md", ".markdown")
DOCUMENT_SUFFIXES = (*MARKDOWN_SUFFIXES, ".txt")
EMBEDDED = "embedded"


@attrs.frozen
class Stores:
    """A chunk store and an ingestion-status store over one backend, and where it lives."""

    chunks: ChunkStore
    status: IngestionStatusStore
    description: str


@contextmanager
def open_stores(
    url: str | None, *, schema: str = "ragport", upgrade: bool | None = None
) -> Iterator[Stores]:
    """Stores for ``url``: ``memory://``, a ``postgresql://`` URL, or ``None`` / ``embedded``
    for the embedded PostgreSQL server under the user's data directory (started on demand,
    left running for the next command).

    ``upgrade`` applies migrations first: the default is yes for the embedded server (ragport
    owns it) and no for a server someone else runs (use ``ragport db upgrade``).
    """
    if url in ("memory://", "memory"):
        yield Stores(InMemoryStore(), InMemoryStatusStore(), "in-memory store")
        return
    from ragport.adapters.postgres import PostgresStatusStore, PostgresStore

    if url in (None, "", EMBEDDED):
        from ragport.adapters.postgres import default_data_dir, embedded_server

        with embedded_server(default_data_dir()) as server_url:
            store = PostgresStore(server_url, schema=schema, create=upgrade is not False)
            try:
                yield Stores(
                    store,
                    PostgresStatusStore(store.engine, schema=schema),
                    f"embedded PostgreSQL in {default_data_dir()}",
                )
            finally:
                store.engine.dispose()
        return
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        store = PostgresStore(url, schema=schema, create=bool(upgrade))
        try:
            yield Stores(store, PostgresStatusStore(store.engine, schema=schema), "PostgreSQL")
        finally:
            store.engine.dispose()
        return
    scheme = url.split(":", 1)[0]
    raise ValidationError(f"unsupported store URL scheme {scheme!r}", field="store")


def build_embedder(name: str = "minilm") -> Embedder:
    """The embedder named ``name``: ``minilm`` (all-MiniLM-L6-v2 int8, offline; the default)
    or ``hash`` (deterministic, zero dependencies, not semantic)."""
    if name == "minilm":
        from ragport.adapters.embedders import MiniLmEmbedder

        return MiniLmEmbedder()
    if name == "hash":
        return HashEmbedder(dimensions=256)
    raise ValidationError(f"unknown embedder {name!r} (use minilm or hash)", field="embedder")


def demo_documents() -> Mapping[str, str]:
    """The bundled demo corpus: file name -> Markdown text."""
    folder = resources.files("ragport") / "demo"
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(MARKDOWN_SUFFIXES)
    }


def walk_documents(paths: list[str]) -> list[tuple[str, Path]]:
    """``(source_id, path)`` for every document under ``paths`` (folders walked by suffix).

    A file given directly is named by its file name; a file found in a folder by its path
    relative to that folder, so ids stay stable wherever the folder lives.
    """
    found: dict[str, Path] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for file in sorted(path.rglob("*")):
                if file.is_file() and file.suffix.lower() in DOCUMENT_SUFFIXES:
                    found[file.relative_to(path).as_posix()] = file
        elif path.is_file():
            found[path.name] = path
        else:
            raise ValidationError("no such file or folder", field="paths")
    return sorted(found.items())


def ingest_text(
    *,
    name: str,
    text: str,
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    embedder: Embedder,
    scope: Scope,
    source_id: str | None = None,
    size: int = 1_000,
    overlap: int = 100,
) -> ReplaceResult:
    """Chunk one document (Markdown by suffix) and replace its source atomically.

    The content hash makes re-ingesting an unchanged document a no-op (no embedding).
    """
    markdown = name.lower().endswith(MARKDOWN_SUFFIXES)
    sid = source_id or (Path(name).stem if markdown else name)
    chunker = chunk_markdown if markdown else chunk_text
    chunks = chunker(text, source_id=sid, size=size, overlap=overlap)
    digest = hashlib.sha256(f"{size}:{overlap}:{text}".encode()).hexdigest()
    return replace_source(
        source_id=sid,
        chunks=chunks,
        embedder=embedder,
        store=store,
        scope=scope,
        content_hash=digest,
        status_store=status_store,
    )
