"""Documents from files and folders into a corpus: the walk, the corpus root, one outcome per
file, and ``sync_knowledge`` with ragport's parsers.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path

import attrs

from ragport.application import (
    ReplaceResult,
    SyncResult,
    replace_document,
    replace_source,
    sync_knowledge,
)
from ragport.application.sync import SyncProgress
from ragport.bootstrap.stores import Stores
from ragport.domain.chunking import chunk_markdown, chunk_text
from ragport.domain.documents import DOCUMENT_SUFFIXES as _SUFFIXES
from ragport.domain.errors import RagportError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, HARD_LIMITS, Limits, check_limit
from ragport.domain.model import Scope
from ragport.ports.documents import Parser
from ragport.ports.embedder import Embedder
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore
from ragport.ports.sync import CheckpointStore, Connector

MARKDOWN_SUFFIXES = (".md", ".markdown")


DOCUMENT_SUFFIXES = _SUFFIXES


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
        except Exception as exc:  # a parser's RecursionError, MemoryError...: this file only
            yield FileOutcome(
                shown,
                candidate.source_id,
                "failed",
                reason="internal",
                error=type(exc).__name__,  # a foreign message may quote the document
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
    on_progress: Callable[[SyncProgress], None] | None = None,
    adopt: bool = False,
) -> SyncResult:
    """``sync_knowledge`` with ragport's parsers (``parser_for`` under ``max_bytes``);
    ``adopt`` as there (the command line adopts: a corpus equals what it syncs)."""
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
        on_progress=on_progress,
        adopt=adopt,
    )
