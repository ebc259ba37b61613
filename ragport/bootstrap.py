"""Composition root: build adapters from a URL or config and bind them to the use cases.

The only module (with ``cli``) that imports both ``application`` and ``adapters``. Nothing
here runs at import time; optional adapters are imported when a URL asks for them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore
from ragport.application import (
    Rag,
    ReplaceResult,
    SyncResult,
    publish_generation,
    replace_document,
    replace_source,
    sync_knowledge,
)
from ragport.domain.chunking import chunk_markdown, chunk_text
from ragport.domain.documents import DOCUMENT_SUFFIXES as _SUFFIXES
from ragport.domain.errors import RagportError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, HARD_LIMITS, Limits, check_limit
from ragport.domain.model import Chunk, Scope
from ragport.ports.documents import Parser
from ragport.ports.embedder import Embedder
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore
from ragport.ports.sync import CheckpointStore, Connector

__all__ = [
    "DOCUMENT_SUFFIXES",
    "CliConfig",
    "CorpusRoots",
    "FileOutcome",
    "QueryDefaults",
    "ReindexResult",
    "SourceRow",
    "Stores",
    "build_embedder",
    "collect_documents",
    "demo_documents",
    "embedder_name_for",
    "find_config",
    "ingest_files",
    "ingest_text",
    "list_sources",
    "load_config",
    "open_checkpoints",
    "open_rag",
    "open_stores",
    "reindex_corpus",
    "sync_connector",
    "walk_documents",
]

MARKDOWN_SUFFIXES = (".md", ".markdown")
DOCUMENT_SUFFIXES = _SUFFIXES
EMBEDDED = "embedded"


@attrs.frozen
class Stores:
    """A chunk store and an ingestion-status store over one backend, and where it lives."""

    chunks: ChunkStore
    status: IngestionStatusStore
    description: str


@contextmanager
def open_stores(
    url: str | None,
    *,
    schema: str = "ragport",
    upgrade: bool | None = None,
    read_url: str | None = None,
    partitions: int | None = None,
) -> Iterator[Stores]:
    """Stores for ``url``: ``memory://``, a ``postgresql://`` URL, or ``None`` / ``embedded``
    for the embedded PostgreSQL server under the user's data directory (started on demand,
    left running for the next command).

    ``upgrade`` applies migrations first: the default is yes for the embedded server (ragport
    owns it) and no for a server someone else runs (use ``ragport db upgrade``).

    ``read_url`` names a streaming replica of the PostgreSQL server: retrieval and status
    reads go there (see ``PostgresStore``). ``partitions`` (with ``upgrade``) creates a new
    schema's tables partitioned by tenant.
    """
    if read_url is not None and not read_url.startswith(
        ("postgresql://", "postgres://", "postgresql+psycopg://")
    ):
        raise ValidationError("the read store must be a postgresql:// URL", field="read_store")
    if url in ("memory://", "memory"):
        if read_url is not None:
            raise ValidationError("the in-memory store has no read replica", field="read_store")
        yield Stores(InMemoryStore(), InMemoryStatusStore(), "in-memory store")
        return
    from ragport.adapters.postgres import PostgresStatusStore, PostgresStore

    if url in (None, "", EMBEDDED):
        from ragport.adapters.postgres import default_data_dir, embedded_server

        with embedded_server(default_data_dir()) as server_url:
            store = PostgresStore(
                server_url,
                schema=schema,
                create=upgrade is not False,
                read_url=read_url,
                partitions=partitions,
            )
            try:
                yield Stores(
                    store,
                    PostgresStatusStore(store.engine, schema=schema, read_url=store.read_engine),
                    f"embedded PostgreSQL in {default_data_dir()}",
                )
            finally:
                _dispose(store)
        return
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        store = PostgresStore(
            url, schema=schema, create=bool(upgrade), read_url=read_url, partitions=partitions
        )
        status = PostgresStatusStore(store.engine, schema=schema, read_url=store.read_engine)
        try:
            yield Stores(store, status, "PostgreSQL" + (" + read replica" if read_url else ""))
        finally:
            _dispose(store)
        return
    scheme = url.split(":", 1)[0]
    raise ValidationError(f"unsupported store URL scheme {scheme!r}", field="store")


@contextmanager
def postgres_url(url: str | None) -> Iterator[str]:
    """The PostgreSQL URL behind ``url``: a ``postgresql://`` URL as given, or for ``None`` /
    ``embedded`` the embedded server's (started on demand, left running)."""
    if url in (None, "", EMBEDDED):
        from ragport.adapters.postgres import default_data_dir, embedded_server

        with embedded_server(default_data_dir()) as server_url:
            yield server_url
        return
    assert url is not None
    if not url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        raise ValidationError("this command needs a PostgreSQL store", field="store")
    yield url


def _dispose(store: Any) -> None:
    store.engine.dispose()
    if store.read_engine is not None:
        store.read_engine.dispose()


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


@attrs.frozen
class Candidate:
    """A file the walk found (``source_id`` relative to the root) or refused (``reason``)."""

    path: Path
    source_id: str | None
    reason: str | None = None
    detail: str | None = None


def collect_documents(paths: Sequence[str | os.PathLike[str]], *, root: Path) -> list[Candidate]:
    """Every document under ``paths``, by suffix, named relative to ``root``.

    Folders are walked (hidden folders and files, names starting with ``.``, are skipped;
    symlinked folders are not followed); a file named directly is held to the same suffix
    set. A path outside ``root``, a missing path or an unsupported suffix is returned as a
    refused candidate, so the caller reports it and goes on.
    """
    found: dict[str, Candidate] = {}
    refused: list[Candidate] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files: list[Path] = []
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                files.extend(
                    Path(folder) / n
                    for n in sorted(names)
                    if not n.startswith(".") and Path(n).suffix.lower() in DOCUMENT_SUFFIXES
                )
        elif path.is_file():
            if path.suffix.lower() not in DOCUMENT_SUFFIXES:
                refused.append(
                    Candidate(
                        path, None, "unsupported_type", "not one of " + " ".join(DOCUMENT_SUFFIXES)
                    )
                )
                continue
            files = [path]
        else:
            refused.append(Candidate(path, None, "not_found", "no such file or folder"))
            continue
        for file in files:
            resolved = file.resolve()
            if not resolved.is_relative_to(root):
                refused.append(
                    Candidate(
                        file, None, "outside_root", f"outside the corpus root {root} (use --root)"
                    )
                )
                continue
            sid = resolved.relative_to(root).as_posix()
            found.setdefault(sid, Candidate(file, sid))
    return [*sorted(found.values(), key=lambda c: c.source_id or ""), *refused]


def default_root(paths: Sequence[str | os.PathLike[str]]) -> Path:
    """The deepest folder holding every path (a folder given is its own root)."""
    folders = []
    for raw in paths:
        path = Path(raw).resolve()
        folders.append(path if path.is_dir() else path.parent)
    return Path(os.path.commonpath(folders)) if folders else Path.cwd().resolve()


class CorpusRoots:
    """The root recorded for each corpus on its first ingest, in the user's data directory.

    Keyed by store, schema and scope, so ``ragport ingest corpus`` and, later,
    ``cd corpus && ragport ingest nodejs`` name the same file with the same id.
    """

    def __init__(self, path: Path | None = None) -> None:
        if path is None:
            import platformdirs

            path = Path(platformdirs.user_data_dir("ragport")) / "corpus-roots.json"
        self.path = path

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def get(self, key: str) -> Path | None:
        value = self._load().get(key)
        return Path(value) if value else None

    def set(self, key: str, root: Path) -> None:
        data = self._load()
        data[key] = str(root)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(self.path)


@attrs.frozen
class FileOutcome:
    """What happened to one file of an ingest run."""

    path: str
    source_id: str | None
    state: str  # indexed | unchanged | failed
    chunks: int = 0
    replaced: int = 0
    generation: int | None = None
    reason: str | None = None
    error: str | None = None
    seconds: float = 0.0


def ingest_limits(max_bytes: int) -> Limits:
    """Limits that let a document of ``max_bytes`` through the chunker."""
    check_limit("parse_bytes", max_bytes)
    if max_bytes <= DEFAULT_LIMITS.parse_bytes:
        return DEFAULT_LIMITS
    return Limits(
        document_chars=max(DEFAULT_LIMITS.document_chars, max_bytes),
        chunks_per_source=HARD_LIMITS.chunks_per_source,
    )


def ingest_files(
    candidates: Sequence[Candidate],
    *,
    root: Path,
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    embedder: Embedder,
    scope: Scope,
    size: int = 1_000,
    overlap: int = 100,
    max_bytes: int = DEFAULT_LIMITS.parse_bytes,
    clock: Callable[[], float] | None = None,
) -> Iterator[FileOutcome]:
    """``replace_document`` for every candidate, one outcome each; a failure never stops the run.

    Refused candidates come out as failed outcomes; ragport errors keep their (text-free)
    message and reason; any other exception only its type name.
    """
    import time

    from ragport.adapters.loaders import FileDocumentLoader
    from ragport.adapters.parsers import parser_for

    tick = clock or time.perf_counter
    limits = ingest_limits(max_bytes)
    loader = FileDocumentLoader(root=root, max_bytes=max_bytes)

    def parsers(media_type_or_name: str) -> Parser:
        return parser_for(media_type_or_name, max_bytes=max_bytes)

    for candidate in candidates:
        shown = candidate.source_id or str(candidate.path)
        if candidate.source_id is None:
            yield FileOutcome(
                shown, None, "failed", reason=candidate.reason, error=candidate.detail
            )
            continue
        started = tick()
        try:
            result = replace_document(
                uri=candidate.source_id,
                loader=loader,
                parser=parsers,
                embedder=embedder,
                store=store,
                scope=scope,
                source_id=candidate.source_id,
                size=size,
                overlap=overlap,
                status_store=status_store,
                limits=limits,
            )
        except RagportError as exc:
            reason = (
                getattr(exc, "reason", None) or getattr(exc, "limit", None) or type(exc).__name__
            )
            yield FileOutcome(
                shown,
                candidate.source_id,
                "failed",
                reason=str(reason),
                error=f"{type(exc).__name__}: {exc}"[:256],
                seconds=tick() - started,
            )
            continue
        except OSError as exc:
            yield FileOutcome(
                shown,
                candidate.source_id,
                "failed",
                reason="os_error",
                error=f"{type(exc).__name__}: {exc.strerror or ''}",
                seconds=tick() - started,
            )
            continue
        yield FileOutcome(
            shown,
            candidate.source_id,
            "unchanged" if result.skipped else "indexed",
            chunks=result.indexed,
            replaced=result.deleted,
            generation=result.generation,
            seconds=tick() - started,
        )


@contextmanager
def open_rag(
    url: str | None,
    *,
    scope: Scope,
    embedder: str | Embedder = "minilm",
    schema: str = "ragport",
    upgrade: bool | None = None,
) -> Iterator[Rag]:
    """A ``Rag`` bound to ``scope`` over the stores of ``url`` (see ``open_stores``), with
    the embedder named ``embedder`` (or the one given) and the backend's status store."""
    with open_stores(url, schema=schema, upgrade=upgrade) as stores:
        yield Rag(
            store=stores.chunks,
            embedder=build_embedder(embedder) if isinstance(embedder, str) else embedder,
            scope=scope,
            status_store=stores.status,
        )


def open_checkpoints(stores: Stores, *, schema: str = "ragport") -> CheckpointStore:
    """The checkpoint store beside ``stores``: in memory for the in-memory store, else the
    ``sync_checkpoints`` table of the same PostgreSQL schema."""
    if isinstance(stores.chunks, InMemoryStore):
        return InMemoryCheckpointStore()
    from ragport.adapters.postgres import PostgresCheckpointStore

    engine = getattr(stores.chunks, "engine", None)
    if engine is None:
        raise ValidationError("this store has no checkpoint store beside it", field="store")
    return PostgresCheckpointStore(engine, schema=schema)


def sync_connector(
    connector: Connector,
    *,
    stores: Stores,
    checkpoints: CheckpointStore,
    embedder: Embedder,
    scope: Scope,
    size: int = 1_000,
    overlap: int = 100,
    max_bytes: int = DEFAULT_LIMITS.parse_bytes,
    max_pages: int | None = None,
) -> SyncResult:
    """``sync_knowledge`` with ragport's parsers (``parser_for`` under ``max_bytes``)."""
    from ragport.adapters.parsers import parser_for

    def parsers(media_type_or_name: str) -> Parser:
        return parser_for(media_type_or_name, max_bytes=max_bytes)

    return sync_knowledge(
        connector=connector,
        checkpoints=checkpoints,
        store=stores.chunks,
        embedder=embedder,
        scope=scope,
        status_store=stores.status,
        max_pages=max_pages,
        parser=parsers,
        size=size,
        overlap=overlap,
        limits=ingest_limits(max_bytes),
    )


def embedder_name_for(embedder_id: str) -> str | None:
    """The ``build_embedder`` name of a stored embedder id (``None`` for one ragport did not build)."""
    if embedder_id.startswith("hash-v1:256"):
        return "hash"
    if embedder_id.startswith("all-minilm-l6-v2"):
        return "minilm"
    return None


@attrs.frozen
class SourceRow:
    """One source of a corpus as ``ragport sources`` lists it."""

    source_id: str
    state: str
    chunks: int
    generation: int | None
    content_hash: str | None
    embedder: str | None


def list_sources(
    stores: Stores,
    scope: Scope,
    *,
    start: str | None = None,
    limit: int | None = None,
    counts: bool = True,
) -> Iterator[SourceRow]:
    """Every source visible in ``scope`` (``ChunkStore.list_source_ids``), by id, after ``start``.

    Pages through the store (no cap on the total); with ``counts`` each source's visible
    records are read for its chunk count, generation, content hash and embedder, and its
    ingestion status (``unknown`` when the source was written without one).
    """
    after = start
    shown = 0
    while True:
        page_size = 500 if limit is None else min(500, limit - shown)
        if page_size <= 0:
            return
        ids = stores.chunks.list_source_ids(scope, after=after, limit=page_size)
        for source_id in ids:
            records = stores.chunks.get_by_source(scope, source_id) if counts else ()
            first = records[0] if records else None
            status = stores.status.get(scope, source_id) if counts else None
            yield SourceRow(
                source_id=source_id,
                state=status.state if status is not None else "unknown",
                chunks=len(records),
                generation=max((r.generation for r in records), default=None),
                content_hash=first.content_hash if first else None,
                embedder=first.embedder_id if first else None,
            )
            shown += 1
        if len(ids) < page_size:
            return
        after = ids[-1]


@attrs.frozen
class ReindexResult:
    """``sources`` and ``chunks`` re-embedded, visible together at ``generation``."""

    sources: int
    chunks: int
    generation: int
    embedder: str


def reindex_corpus(
    *,
    store: ChunkStore,
    scope: Scope,
    embedder: Embedder,
    sources: Sequence[str],
    status_store: IngestionStatusStore | None = None,
    on_source: Callable[[int, str], None] | None = None,
) -> ReindexResult:
    """Re-embed every chunk of ``sources`` under ``embedder``, published in one generation.

    Each source is staged with ``advance_generation=False`` (readers keep the old vectors),
    then one ``publish_generation`` makes all of them visible at once. Derived records are
    not re-embedded here (re-run whatever built them).
    """
    chunks_done = 0
    for n, source_id in enumerate(sources, start=1):
        records = [r for r in store.get_by_source(scope, source_id) if r.kind == "chunk"]
        chunks = [
            Chunk(
                id=r.id,
                source_id=r.source_id,
                index=r.chunk_index if r.chunk_index is not None else i,
                start=r.start if r.start is not None else 0,
                end=r.end if r.end is not None else len(r.text),
                text=r.text,
                metadata=dict(r.metadata),
            )
            for i, r in enumerate(sorted(records, key=lambda r: (r.chunk_index or 0, r.id)))
        ]
        replace_source(
            source_id=source_id,
            chunks=chunks,
            embedder=embedder,
            store=store,
            scope=scope,
            content_hash=records[0].content_hash if records else None,
            skip_if_unchanged=False,
            advance_generation=False,
            status_store=status_store,
        )
        chunks_done += len(chunks)
        if on_source is not None:
            on_source(n, source_id)
    generation = publish_generation(store=store, scope=scope)
    return ReindexResult(len(sources), chunks_done, generation, embedder.id)


@attrs.frozen
class QueryDefaults:
    """``[query]`` in ragport.toml: defaults for ``ragport query``."""

    top_k: int = 5
    mode: str = "vector"
    lexical: str | None = None
    rerank: str | None = None


@attrs.frozen
class CliConfig:
    """A ``ragport.toml``: store, scope, embedder and query defaults (every key optional)."""

    store: str | None = None
    schema: str = "ragport"
    tenant: str = "local"
    resource: str = "default"
    corpus: str = "default"
    embedder: str = "minilm"
    query: QueryDefaults = QueryDefaults()


CONFIG_FILE = "ragport.toml"


def find_config(start: Path) -> Path | None:
    """The nearest ``ragport.toml`` in ``start`` or a folder above it."""
    for folder in [start, *start.parents]:
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
    return None


def load_config(path: Path) -> CliConfig:
    """Read ``path`` (TOML); an unknown key or a wrong type is a ``ValidationError`` naming it."""
    import tomllib

    import cattrs

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, tomllib.TOMLDecodeError) as exc:
        raise ValidationError(
            f"{path} is not readable TOML ({type(exc).__name__})", field="config"
        ) from None
    converter = cattrs.Converter(forbid_extra_keys=True)
    try:
        config = converter.structure(data, CliConfig)
    except (cattrs.BaseValidationError, cattrs.ForbiddenExtraKeysError) as exc:
        found = "; ".join(cattrs.transform_error(exc, path=str(path)))
        raise ValidationError(f"invalid configuration: {found}", field="config") from None
    if config.query.mode not in ("vector", "lexical", "hybrid"):
        raise ValidationError(
            f"{path}: query.mode must be vector, lexical or hybrid", field="query.mode"
        )
    if config.embedder not in ("minilm", "hash"):
        raise ValidationError(f"{path}: embedder must be minilm or hash", field="embedder")
    return config
