"""Documents from files and folders into a corpus: the walk, the corpus root, one outcome per
file, and ``sync_knowledge`` with ragport's parsers.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from importlib import resources
from pathlib import Path
from typing import Any, cast

import attrs

from ragport.application import (
    ReplaceResult,
    replace_document,
    replace_source,
)
from ragport.application._support import (
    EMBED_CALL_BATCHES,
    NOOP_TELEMETRY,
    check_abort,
    embed_batches,
)
from ragport.application.documents import (
    PreparedDocument,
    prepare_document,
    record_failed,
    replace_prepared,
)
from ragport.bootstrap.roots import CorpusRoots as CorpusRoots
from ragport.domain.chunking import chunk_markdown, chunk_text
from ragport.domain.documents import DOCUMENT_SUFFIXES as _SUFFIXES
from ragport.domain.errors import AbortedError, RagportError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, HARD_LIMITS, Limits, check_limit
from ragport.domain.model import Scope
from ragport.ports.documents import DocumentLoader, Parser
from ragport.ports.embedder import Embedder, VectorMatrix
from ragport.ports.runtime import Abort
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

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


def default_workers() -> int:
    """Parse threads of the pipelined ingest: the cores this process may use, 2 to 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(2, min(8, cores))


MAX_WORKERS = 32


def check_workers(workers: object) -> int:
    """``workers`` as given when it is an integer in 1..32, else ``ValidationError``."""
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise ValidationError(f"workers must be an integer in 1..{MAX_WORKERS}", field="workers")
    return workers


def _failure(shown: str, source_id: str | None, exc: BaseException, seconds: float) -> FileOutcome:
    """A failed outcome: ragport errors keep their (text-free) message and reason; an
    ``OSError`` its strerror; any other exception only its type name."""
    if isinstance(exc, RagportError):
        reason = getattr(exc, "reason", None) or getattr(exc, "limit", None) or type(exc).__name__
        return FileOutcome(
            shown, source_id, "failed", reason=str(reason),
            error=f"{type(exc).__name__}: {exc}"[:256], seconds=seconds,
        )  # fmt: skip
    if isinstance(exc, OSError):
        return FileOutcome(
            shown, source_id, "failed", reason="os_error",
            error=f"{type(exc).__name__}: {exc.strerror or ''}", seconds=seconds,
        )  # fmt: skip
    # a parser's RecursionError, MemoryError...: a foreign message may quote the document
    return FileOutcome(
        shown, source_id, "failed", reason="internal", error=type(exc).__name__, seconds=seconds
    )


def _success(shown: str, result: ReplaceResult, seconds: float) -> FileOutcome:
    return FileOutcome(
        shown,
        result.source_id,
        "unchanged" if result.skipped else "indexed",
        chunks=result.indexed,
        replaced=result.deleted,
        generation=result.generation,
        seconds=seconds,
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
    workers: int | None = None,
    abort: Abort | None = None,
) -> Iterator[FileOutcome]:
    """``replace_document`` for every candidate, one outcome each; a failure never stops the run.

    Refused candidates come out as failed outcomes; ragport errors keep their (text-free)
    message and reason; any other exception only its type name.

    ``workers`` (1..32, default ``default_workers()``): 1 runs the files one after another
    (load, parse, embed, write); more runs the pipeline of ``_pipeline``: ``workers`` threads
    load and parse while one thread embeds the chunks of several files per call and this
    generator writes. Either way outcomes come in input order, each file is written by its
    own ``replace_source`` (atomic) in input order, so generations follow the input order,
    and a file failing anywhere is that file's failure only. ``abort`` stops the run at the
    next check (``AbortedError``); closing the generator (or Ctrl-C) stops every thread
    before it returns, and the file in flight writes nothing.
    """
    import time

    from ragport.adapters.loaders import FileDocumentLoader
    from ragport.adapters.parsers import parser_for

    count = 1 if workers is None else check_workers(workers)
    tick = clock or time.perf_counter
    limits = ingest_limits(max_bytes)
    loader = FileDocumentLoader(root=root, max_bytes=max_bytes)

    def parsers(media_type_or_name: str) -> Parser:
        return parser_for(media_type_or_name, max_bytes=max_bytes)

    if count > 1:
        yield from _pipeline(
            candidates, loader=loader, parsers=parsers, store=store, status_store=status_store,
            embedder=embedder, scope=scope, size=size, overlap=overlap, limits=limits,
            tick=tick, workers=count, abort=abort,
        )  # fmt: skip
        return
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
                abort=abort,
            )
        except AbortedError:
            raise
        except Exception as exc:
            yield _failure(shown, candidate.source_id, exc, tick() - started)
            continue
        yield _success(shown, result, tick() - started)


class _Stop:
    """The caller's abort, or this run's own stop (set when the generator exits)."""

    def __init__(self, outer: Abort | None) -> None:
        self.outer = outer
        self.event = threading.Event()

    def is_set(self) -> bool:
        return self.event.is_set() or (self.outer is not None and self.outer.is_set())


@attrs.define
class _Slot:
    """One file in flight in the pipeline, from its parse to its outcome."""

    candidate: Candidate
    started: float
    prepare: Future[tuple[PreparedDocument, int]] | None = None
    prepared: PreparedDocument | None = None
    size_bytes: int = 0
    error: BaseException | None = None
    embed: Future[VectorMatrix] | None = None
    rows: slice | None = None  # this file's rows in its embed call's answer
    solo: bool = False  # embedded alone after its group's call failed


# A call groups the chunks of consecutive files up to this many texts (one embed_batches
# call: embed_batch x EMBED_CALL_BATCHES); a larger file is embedded alone, in such calls.
PIPELINE_CALL = DEFAULT_LIMITS.embed_batch * EMBED_CALL_BATCHES


def _pipeline(
    candidates: Sequence[Candidate],
    *,
    loader: DocumentLoader,
    parsers: Callable[[str], Parser],
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    embedder: Embedder,
    scope: Scope,
    size: int,
    overlap: int,
    limits: Limits,
    tick: Callable[[], float],
    workers: int,
    abort: Abort | None,
) -> Iterator[FileOutcome]:
    """Load and parse in ``workers`` threads, embed in one thread, write here, in input order.

    Bounds (so memory does not grow with the folder): at most ``2 x workers`` files are
    submitted for loading and parsing and not yet handed on; parsed files wait as chunks, and
    no file is submitted while ``PIPELINE_CALL`` chunks or more wait (one file larger than
    that is held alone, as the serial path would); one embed call runs at a time. Only the
    embed thread calls the embedder. A failed group call is retried one file per call, so
    a file the embedder refuses fails alone. Each file is written by ``replace_prepared``
    (its vectors through ``replace_source``'s reuse path: every validation kept) by this
    generator only, in input order.
    """
    stop = _Stop(abort)
    telemetry = NOOP_TELEMETRY
    parse_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ragport-parse")
    embed_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragport-embed")
    queue = deque(candidates)
    slots: deque[_Slot] = deque()
    in_parse = 0
    waiting_chunks = 0  # chunks of parsed files not yet embedded
    running: Future[VectorMatrix] | None = None

    def prepare(candidate: Candidate) -> tuple[PreparedDocument, int]:
        check_abort(stop)
        sid = cast(str, candidate.source_id)
        loaded = loader.load(sid)
        prepared = prepare_document(
            loaded, source_id=sid, uri=sid, parser=parsers, embedder=embedder, store=store,
            scope=scope, size=size, overlap=overlap, limits=limits, abort=stop,
        )  # fmt: skip
        return prepared, len(loaded.data)

    def embed(texts: list[str]) -> VectorMatrix:
        return embed_batches(
            embedder, texts, batch_size=DEFAULT_LIMITS.embed_batch, abort=stop, telemetry=telemetry
        )

    def submit_embed(group: list[_Slot]) -> Future[VectorMatrix]:
        texts: list[str] = []
        for slot in group:
            chunks = cast(PreparedDocument, slot.prepared).chunks
            slot.rows = slice(len(texts), len(texts) + len(chunks))
            texts.extend(c.text for c in chunks)
        future = embed_pool.submit(embed, texts)
        for slot in group:
            slot.embed = future
        return future

    try:
        while queue or slots:
            check_abort(stop)
            # 1. admit files while the bounds allow
            while queue and in_parse < 2 * workers and waiting_chunks < PIPELINE_CALL:
                candidate = queue.popleft()
                slot = _Slot(candidate, tick())
                slots.append(slot)
                if candidate.source_id is not None:
                    slot.prepare = parse_pool.submit(prepare, candidate)
                    in_parse += 1
            # 2. harvest finished parses (any order), counting their chunks as waiting
            for slot in slots:
                if slot.prepare is not None and slot.prepare.done():
                    future, slot.prepare = slot.prepare, None
                    in_parse -= 1
                    try:
                        slot.prepared, slot.size_bytes = future.result()
                    except AbortedError:
                        raise
                    except Exception as exc:
                        slot.error = exc
                        continue
                    if not slot.prepared.unchanged:
                        waiting_chunks += len(slot.prepared.chunks)
            # 3. when the embedder is idle, hand it the parsed files in input order
            if running is None or running.done():
                group: list[_Slot] = []
                texts = 0
                for slot in slots:
                    if slot.prepare is not None:
                        break  # keep input order: nothing past a file still parsing
                    if slot.error is not None or slot.embed is not None:
                        continue
                    prepared = slot.prepared
                    if prepared is None or prepared.unchanged:
                        continue
                    if group and texts + len(prepared.chunks) > PIPELINE_CALL:
                        break
                    group.append(slot)
                    texts += len(prepared.chunks)
                if group:
                    running = submit_embed(group)
                    waiting_chunks -= texts
            # 4. write (and yield) the files at the head that are ready, in input order
            wrote = False
            while slots:
                head = slots[0]
                if head.prepare is not None:
                    break
                outcome = _settle(
                    head, tick, submit_solo=lambda s: _solo(s, embed_pool, embed),
                    status_store=status_store, scope=scope,
                )  # fmt: skip
                if outcome is None:
                    break
                slots.popleft()
                wrote = True
                if outcome is not _WRITE:
                    yield cast(FileOutcome, outcome)
                    continue
                yield _write(
                    head, store=store, status_store=status_store, embedder=embedder,
                    scope=scope, limits=limits, tick=tick, stop=stop,
                )  # fmt: skip
            if wrote:
                continue
            # 5. nothing to write yet: wait for a parse or the embed call to finish
            pending: list[Future[Any]] = [s.prepare for s in slots if s.prepare is not None]
            pending.extend({s.embed for s in slots if s.embed is not None and not s.embed.done()})
            if pending:
                wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
    finally:
        stop.event.set()  # parsers and the embedder stop at their next check
        parse_pool.shutdown(wait=True, cancel_futures=True)
        embed_pool.shutdown(wait=True, cancel_futures=True)


_WRITE = object()


def _solo(
    slot: _Slot, pool: ThreadPoolExecutor, embed: Callable[[list[str]], VectorMatrix]
) -> None:
    chunks = cast(PreparedDocument, slot.prepared).chunks
    slot.rows = slice(0, len(chunks))
    slot.solo = True
    slot.embed = pool.submit(embed, [c.text for c in chunks])


def _settle(
    slot: _Slot,
    tick: Callable[[], float],
    *,
    submit_solo: Callable[[_Slot], None],
    status_store: IngestionStatusStore | None,
    scope: Scope,
) -> object | None:
    """The head file's outcome when it has one without writing, ``_WRITE`` when it is ready
    to write, ``None`` while it waits (for its embed call, or a solo retry just submitted)."""
    candidate = slot.candidate
    shown = candidate.source_id or str(candidate.path)
    if candidate.source_id is None:
        return FileOutcome(shown, None, "failed", reason=candidate.reason, error=candidate.detail)
    if slot.error is not None:  # its load or parse failed: recorded as replace_document would
        record_failed(
            status_store, scope=scope, source_id=candidate.source_id,
            size_bytes=slot.size_bytes, error=slot.error,
        )  # fmt: skip
        return _failure(shown, candidate.source_id, slot.error, tick() - slot.started)
    prepared = slot.prepared
    if prepared is None:
        return None
    if prepared.unchanged:
        return _WRITE
    if slot.embed is None or not slot.embed.done():
        return None
    exc = slot.embed.exception()
    if exc is None:
        return _WRITE
    if isinstance(exc, AbortedError):
        raise exc
    if not slot.solo:
        submit_solo(slot)  # the group's call failed: this file alone says whether it is its own
        return None
    record_failed(
        status_store, scope=scope, source_id=candidate.source_id,
        size_bytes=slot.size_bytes, error=exc,
    )  # fmt: skip
    return _failure(shown, candidate.source_id, exc, tick() - slot.started)


def _write(
    slot: _Slot,
    *,
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    embedder: Embedder,
    scope: Scope,
    limits: Limits,
    tick: Callable[[], float],
    stop: Abort,
) -> FileOutcome:
    """Write one parsed and embedded file (its own transaction) and say what happened."""
    prepared = cast(PreparedDocument, slot.prepared)
    sid = prepared.source_id
    vectors: dict[str, tuple[str, Any]] | None = None
    if slot.embed is not None and slot.rows is not None:
        answer = slot.embed.result()[slot.rows]
        vectors = {c.id: (c.text, answer[i]) for i, c in enumerate(prepared.chunks)}
    try:
        result = replace_prepared(
            prepared, size_bytes=slot.size_bytes, embedder=embedder, store=store, scope=scope,
            status_store=status_store, vectors=vectors, limits=limits, abort=stop,
        )  # fmt: skip
    except AbortedError:
        raise
    except Exception as exc:
        return _failure(sid, sid, exc, tick() - slot.started)
    return _success(sid, result, tick() - slot.started)
