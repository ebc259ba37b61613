"""Documents from files and folders into a corpus: the walk, the corpus root, one outcome per
file, and ``sync_knowledge`` with ragport's parsers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TypedDict, Unpack

import attrs

from ragport.application import SharedGeneration
from ragport.application.deprecation import fold_run_options
from ragport.application.ingest import (
    MARKDOWN_SUFFIXES,
    Candidate,
    FileOutcome,
    IngestOptions,
    IngestProgress,
    check_workers,
    ingest_documents,
    ingest_limits,
    ingest_text,
)
from ragport.application.ingest import (
    MAX_WORKERS as MAX_WORKERS,
)
from ragport.application.runtime import Runtime, check_runtime
from ragport.bootstrap.roots import CorpusRoots as CorpusRoots
from ragport.domain.deprecation import warn_removal
from ragport.domain.documents import DOCUMENT_SUFFIXES as _SUFFIXES
from ragport.domain.errors import ValidationError
from ragport.domain.limits import Limits
from ragport.domain.model import Scope
from ragport.ports.documents import Parser
from ragport.ports.embedder import Embedder
from ragport.ports.runtime import Abort
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

__all__ = [
    "DOCUMENT_SUFFIXES",
    "MARKDOWN_SUFFIXES",
    "Candidate",
    "CorpusRoots",
    "FileOutcome",
    "IngestProgress",
    "check_workers",
    "collect_documents",
    "default_root",
    "default_workers",
    "demo_documents",
    "ingest_files",
    "ingest_limits",
    "ingest_text",
    "walk_documents",
]


DOCUMENT_SUFFIXES = _SUFFIXES


def demo_documents() -> Mapping[str, str]:
    """The bundled demo corpus: file name -> Markdown text.

    Deprecated: ``ragport.demo.demo_markdown`` (the demo lives in ``ragport.demo``); kept
    for one release with a ``DeprecationWarning``."""
    warn_removal("ragport.bootstrap.demo_documents", "use ragport.demo.demo_markdown")
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


def collect_documents(
    paths: Sequence[str | os.PathLike[str]], *, root: Path, skipped: list[Path] | None = None
) -> list[Candidate]:
    """Every document under ``paths``, by suffix, named relative to ``root``.

    Folders are walked (hidden folders and files, names starting with ``.``, are skipped;
    symlinked folders are not followed); a file named directly is held to the same suffix
    set. A path outside ``root``, a missing path or an unsupported suffix is returned as a
    refused candidate, so the caller reports it and goes on. ``skipped``, when given, gets
    each file a folder walk passed over for its suffix (not hidden ones), in walk order, so
    the caller can count and name them.
    """
    found: dict[str, Candidate] = {}
    refused: list[Candidate] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files: list[Path] = []
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for n in sorted(names):
                    if n.startswith("."):
                        continue
                    if Path(n).suffix.lower() in DOCUMENT_SUFFIXES:
                        files.append(Path(folder) / n)
                    elif skipped is not None:
                        skipped.append(Path(folder) / n)
        elif path.is_file():
            if path.suffix.lower() not in DOCUMENT_SUFFIXES:
                refused.append(
                    Candidate(
                        path, None, "unsupported_type", "not one of " + " ".join(DOCUMENT_SUFFIXES)
                    )
                )
                continue
            files = [path]
        elif path.is_symlink():
            refused.append(Candidate(path, None, "broken_symlink", _BROKEN))
            continue
        else:
            refused.append(Candidate(path, None, "not_found", "no such file or folder"))
            continue
        for file in files:
            if file.is_symlink() and not file.exists():
                refused.append(Candidate(file, None, "broken_symlink", _BROKEN))
                continue
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


_BROKEN = "a symlink whose target does not exist"


def default_root(paths: Sequence[str | os.PathLike[str]]) -> Path:
    """The deepest folder holding every path (a folder given is its own root)."""
    folders = []
    for raw in paths:
        path = Path(raw).resolve()
        folders.append(path if path.is_dir() else path.parent)
    return Path(os.path.commonpath(folders)) if folders else Path.cwd().resolve()


def default_workers() -> int:
    """Parse threads of the pipelined ingest: the cores this process may use, 2 to 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(2, min(8, cores))


class _OldIngestKeywords(TypedDict, total=False):
    """``ingest_files``'s keywords before ``options=`` and ``runtime=`` (deprecated)."""

    size: int
    overlap: int
    max_bytes: int
    clock: Callable[[], float] | None
    workers: int | None
    abort: Abort | None
    shared_generation: SharedGeneration | None
    limits: Limits | None
    progress: IngestProgress | None


def ingest_files(
    candidates: Sequence[Candidate],
    *,
    root: Path,
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    embedder: Embedder,
    scope: Scope,
    encoding: str = "utf-8",
    options: IngestOptions | None = None,
    runtime: Runtime | None = None,
    **deprecated: Unpack[_OldIngestKeywords],
) -> Generator[FileOutcome, None, None]:
    """``ingest_documents`` over the files under ``root`` with ragport's parsers; one outcome
    per candidate, a failure never stopping the run (``ragport.application.ingest``).

    ``options`` (``IngestOptions``): the write options, ``workers`` (1..32; default
    ``default_workers()``: 1 runs the files one after another, more runs the ingestion
    pipeline, ``ragport.application.pipeline``), ``progress`` and ``timer``.

    ``runtime``: its ``limits`` are the loader's and parsers' caps and ceilings
    (``parse_bytes``, ``parse_ms``, ``parse_wall_ms``, ``binary_bytes``, ``pdf_pages``,
    ``inflated_bytes``, ``Limits.ceilings``), widened by ``ingest_limits`` for files past
    1 MiB; its ``abort`` stops the run at the next check (``AbortedError``); closing the
    generator (or Ctrl-C) stops every thread before it returns, and the file in flight
    writes nothing.

    ``encoding`` goes to the plain text, Markdown and reST parsers (``parser_for``):
    ``"utf-8"`` (strict), ``"auto"`` or a codec name; a bad name is a ``ValidationError``
    before any file is read.

    Deprecated keywords (one release, ``DeprecationWarning``): ``size``, ``overlap``,
    ``shared_generation`` (now ``options.write``), ``workers``, ``progress``, ``clock`` (now
    ``options``), ``abort``, ``limits`` and ``max_bytes`` (now ``runtime``; ``max_bytes``
    was the limits' ``parse_bytes``).
    """
    from ragport.adapters.loaders import FileDocumentLoader
    from ragport.adapters.parsers import parser_for
    from ragport.adapters.parsers._common import check_encoding

    options, runtime = _old_ingest_keywords(options, runtime, deprecated)
    if options.workers is None:
        options = attrs.evolve(options, workers=default_workers())
    encoding = check_encoding(encoding)
    limits = ingest_limits(runtime.limits.parse_bytes, base=runtime.limits)
    loader = FileDocumentLoader(
        root=root,
        max_bytes=limits.parse_bytes,
        binary_max_bytes=limits.binary_bytes,
        ceilings=limits.ceilings,
    )

    def parsers(media_type_or_name: str) -> Parser:
        return parser_for(media_type_or_name, limits=limits, encoding=encoding)

    yield from ingest_documents(
        candidates, loader=loader, parser=parsers, store=store, embedder=embedder, scope=scope,
        status_store=status_store, options=options, runtime=attrs.evolve(runtime, limits=limits),
    )  # fmt: skip


def _old_ingest_keywords(
    options: IngestOptions | None, runtime: Runtime | None, old: _OldIngestKeywords
) -> tuple[IngestOptions, Runtime]:
    """``options`` and ``runtime`` with the deprecated keywords of ``ingest_files`` folded in
    (a ``DeprecationWarning`` naming them)."""
    runtime = Runtime() if runtime is None else check_runtime(runtime)
    folded, aside = fold_run_options(
        "ingest_files",
        IngestOptions() if options is None else options,
        old,
        "options=IngestOptions(write=WriteOptions(size=, overlap=, shared_generation=), "
        "workers=, progress=, timer=) and runtime=Runtime(limits=, abort=)",
        write=("size", "overlap", "shared_generation"),
        aside=("clock", "limits", "max_bytes", "abort"),
    )
    if aside.get("clock") is not None:  # the old clock was the per-file timer
        folded = attrs.evolve(folded, timer=aside["clock"])
    limits = aside.get("limits") or runtime.limits
    if "max_bytes" in aside:
        limits = ingest_limits(aside["max_bytes"], base=limits)
    return folded, attrs.evolve(runtime, limits=limits, abort=aside.get("abort", runtime.abort))
