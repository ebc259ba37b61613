"""``ragport ingest``: documents from files and folders, named relative to a corpus root."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import attrs

from ragport.application import Runtime, SharedGeneration, WriteOptions
from ragport.application.ingest import IngestOptions
from ragport.bootstrap import (
    Candidate,
    FileOutcome,
    Stores,
    collect_documents,
    ingest_files,
)
from ragport.bootstrap.ingest import check_workers, default_workers
from ragport.bootstrap.roots import check_root, first_root, widen_corpus_root, widened_root
from ragport.cli.config import (
    _config,
    _embedder,
    _limits,
    _scope,
    _stores,
)
from ragport.cli.options import (
    ENCODING_HELP,
    Parents,
    add_document_options,
    command,
)
from ragport.cli.output import EXIT_FAILED, EXIT_OK, _json, _note
from ragport.cli.progress import track, wanted
from ragport.cli.settings import CorpusOptions, corpus_options, record
from ragport.domain.documents import DOCUMENT_SUFFIXES
from ragport.domain.errors import (
    ValidationError,
)
from ragport.domain.limits import Limits
from ragport.domain.model import Scope


@attrs.frozen
class _Root:
    """The root of this run; ``widen_from``: the recorded root it widens (sources to rename);
    ``record``: whether to record ``path`` once the run may go on."""

    path: Path
    widen_from: Path | None = None
    record: bool = False


def _corpus_root(args: argparse.Namespace, recorded: Path | None) -> _Root:
    """``--root``, else the root ``recorded`` with the corpus (widened to hold paths outside
    it), else ``first_root`` of the paths (bootstrap/roots.py); a root chosen here that is
    ``/`` or above the home folder is refused, naming ``--root``.

    The chosen root is recorded with the corpus (``ragport.cli.settings.record``), so later
    runs name every file the same way however its path is typed.
    """
    widen_from = None
    if args.root:
        root = Path(args.root).resolve()
        if not root.is_dir():
            raise ValidationError(f"--root {args.root} is not an existing folder", field="root")
        if recorded is not None and recorded != root:
            if recorded.is_relative_to(root):
                widen_from = recorded
            else:
                _note(f"corpus root changed from {recorded} to {root}")
    else:
        existing = [p for p in args.paths if Path(p).exists()]
        if not existing and recorded is None:
            return _Root(Path.cwd().resolve())  # nothing to ingest: record no root from it
        if recorded is None:
            root = check_root(first_root(existing, cwd=Path.cwd()))
        else:
            wider = widened_root(recorded, existing)
            if wider is not None:
                widen_from = recorded
            root = recorded if wider is None else check_root(wider, old=recorded)
    return _Root(root, widen_from, True)


def _widen(root: _Root, stores: Stores, scope: Scope, options: CorpusOptions) -> None:
    """Rename the sources of the old root, then record the new one with the options given
    (not when any rename failed: the next run tries again, and nothing is ingested under ids
    that would duplicate)."""
    if root.widen_from is not None:
        done = widen_corpus_root(
            store=stores.chunks, status_store=stores.status, scope=scope,
            old=root.widen_from, new=root.path,
        )  # fmt: skip
        kept = f"; {done.kept} kept their ids (files gone)" if done.kept else ""
        _note(
            f"corpus root widened from {done.old} to {done.new}; "
            f"{done.renamed} sources renamed{kept}"
        )
        if done.failures:
            first, error = done.failures[0]
            raise ValidationError(
                f"{len(done.failures)} source(s) could not be renamed under the widened root "
                f"(first: {first}: {error}); nothing ingested, run again or pass --root "
                f"{done.old}",
                field="root",
            )
    record(options, scope, root=str(root.path) if root.record else None)


def _text_encoding(args: argparse.Namespace) -> str:
    """``--encoding``, else ``encoding`` in ragport.toml, else ``utf-8``; checked here, before
    any store opens (a bad name is a usage error naming where it came from)."""
    from ragport.adapters.parsers._common import check_encoding

    given = vars(args).get("encoding")
    configured = _config(args).encoding
    try:
        return check_encoding(given or configured)
    except ValidationError as exc:
        where = "--encoding" if given else f"encoding in {args._config_path}"
        raise ValidationError(f"{where}: {exc}", field="encoding") from None


DECODE_HINT = "try --encoding auto (or the file's codec, e.g. --encoding cp1252)"


def _hinted(outcomes: Generator[FileOutcome, None, None], encoding: str) -> Iterator[FileOutcome]:
    """Each outcome; a file that did not decode gets the hint to name its encoding. Closing
    this closes ``outcomes`` at once (ingest_files then stops its threads)."""
    try:
        for outcome in outcomes:
            if outcome.reason == "decode" and encoding != "auto":
                outcome = attrs.evolve(outcome, error=f"{outcome.error or ''}; {DECODE_HINT}")
            yield outcome
    finally:
        outcomes.close()


def _outcome_line(n: int, total: int, outcome: FileOutcome) -> str:
    name = outcome.source_id or outcome.path
    if outcome.state == "failed":
        detail = f"FAILED ({outcome.reason}) {outcome.error or ''}".rstrip()
    elif outcome.state == "unchanged":
        detail = f"unchanged (generation {outcome.generation})"
    else:
        detail = f"{outcome.chunks} chunks, {outcome.replaced} replaced (generation {outcome.generation})"
    return f"[{n}/{total}] {name}: {detail}"


def _generation_line(generations: tuple[int, ...]) -> str:
    """Which generation(s) the command wrote and the one rollback that undoes it."""
    first, last = generations[0], generations[-1]
    wrote = f"generation {first}" if first == last else f"generations {first}..{last}"
    return f"wrote {wrote} (undo: ragport rollback --to {first - 1})"


def _run_ingest(
    args: argparse.Namespace,
    stores: Stores,
    scope: Scope,
    candidates: list[Candidate],
    chosen: _Root,
    options: CorpusOptions,
    *,
    encoding: str,
    limits: Limits,
    shared: SharedGeneration,
    bar: Any,
) -> list[FileOutcome]:
    """The run itself: the corpus's embedder, the root widened and recorded with the
    options given, then every candidate, one outcome (and line) each."""
    embedder = _embedder(args, stores, [scope])
    _widen(chosen, stores, scope, options)
    total = len(candidates)
    outcomes: list[FileOutcome] = []
    results = _hinted(ingest_files(
        candidates,
        root=chosen.path,
        store=stores.chunks,
        status_store=stores.status,
        embedder=embedder,
        scope=scope,
        encoding=encoding,
        options=IngestOptions(
            write=WriteOptions(size=args.size, overlap=args.overlap, shared_generation=shared),
            workers=args.workers,
            progress=bar,
        ),
        runtime=Runtime(limits=limits),
    ), encoding)  # fmt: skip
    for n, outcome in enumerate(results, start=1):
        outcomes.append(outcome)
        # the item shown is the work in flight (bar.working), or the file that just failed
        failed_now = outcome.state == "failed"
        bar.update(
            done=n,
            item=f"failed {outcome.source_id or outcome.path}" if failed_now else "",
            chunks=outcome.chunks if outcome.state == "indexed" else 0,
        )
        if args.json:
            print(json.dumps(_json.unstructure(outcome), ensure_ascii=False), flush=True)
        elif not (bar.active and sys.stdout.isatty()) or outcome.state == "failed":
            # on a terminal the bar stands for the per-file lines; failures still show
            bar.print(_outcome_line(n, total, outcome))
    return outcomes


def _ingest(args: argparse.Namespace) -> int:
    if args.workers is not None:
        check_workers(args.workers)  # before any store opens
    _text_encoding(args)  # the options given: checked before any store opens
    _limits(args)  # --max-bytes, --timeout, [limits]
    scope = _scope(args)
    outcomes: list[FileOutcome] = []
    shared = SharedGeneration()  # one generation per command: one rollback undoes it
    started = time.perf_counter()
    with _stores(args) as stores:
        # the options not given take the corpus's recorded settings (checked again)
        options = corpus_options(args, stores, scope)
        encoding = options.checked(lambda: _text_encoding(args))
        limits = options.checked(lambda: _limits(args))
        recorded = options.recorded.root
        chosen = _corpus_root(args, Path(recorded) if recorded else None)
        root = chosen.path
        skipped: list[Path] = []
        candidates = collect_documents(args.paths, root=root, skipped=skipped)
        for c in candidates:
            if c.reason == "not_found":
                _note(f"no such file or folder: {c.path}")
        total = len(candidates)
        with track(
            "ingest", total=total, unit="files", enabled=wanted(json_out=args.json),
            advice=_advice(args.workers),
        ) as bar:  # fmt: skip
            outcomes = _run_ingest(
                args, stores, scope, candidates, chosen, options,
                encoding=encoding, limits=limits, shared=shared, bar=bar,
            )  # fmt: skip
    failed = [o for o in outcomes if o.state == "failed"]
    if args.json:
        if skipped:
            _note(f"{len(skipped)} file(s) skipped, not a supported type ({_kinds(skipped)})")
            if args.verbose:
                for path in skipped:
                    _note(f"skipped {_shown(path, root)}")
    else:
        seconds = time.perf_counter() - started
        print(f"{total} document(s) in corpus {scope.corpus_id} (root {root}) in {seconds:.1f} s")
        _summary(outcomes, skipped, shared.generations, root=root, verbose=args.verbose)
    return EXIT_FAILED if failed or not outcomes else EXIT_OK


def _advice(workers: int | None) -> str:
    """How to go faster, with the options that do it (the estimate line of a long run)."""
    threads = workers if workers is not None else default_workers()
    return (
        "faster: an HTTP embedder (--embedder NAME, an installed ragport.embedders plugin: "
        "docs/models.md) or, when the embedder waits on parsing, more parse threads "
        f"(--workers N; now {threads})"
    )


def _shown(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


_NO_SUFFIX = "(no suffix)"


def _kinds(skipped: list[Path]) -> str:
    """``.png 2, .json 1``: the skipped files by suffix, most first (six at most)."""
    by_suffix: dict[str, int] = {}
    for path in skipped:
        suffix = path.suffix.lower() or _NO_SUFFIX
        by_suffix[suffix] = by_suffix.get(suffix, 0) + 1
    ranked = sorted(by_suffix.items(), key=lambda kv: (-kv[1], kv[0] == _NO_SUFFIX, kv[0]))
    return ", ".join(f"{k} {n}" for k, n in ranked[:6]) + (", ..." if len(ranked) > 6 else "")


def _summary(
    outcomes: list[FileOutcome],
    skipped: list[Path],
    generations: tuple[int, ...],
    *,
    root: Path,
    verbose: bool,
) -> None:
    """The counts by state (and the files skipped for their type), the generation line,
    the failures and, with ``--verbose``, the skipped files."""
    counts = {
        state: sum(o.state == state for o in outcomes)
        for state in ("indexed", "unchanged", "failed")
    }
    print(f"  {'indexed':<10}{counts['indexed']:>6}")
    print(f"  {'unchanged':<10}{counts['unchanged']:>6}")
    print(f"  {'failed':<10}{counts['failed']:>6}")
    if skipped:
        names = "" if verbose else " (--verbose names them)"
        print(f"  {'skipped':<10}{len(skipped):>6}  not a supported type: {_kinds(skipped)}{names}")
    if generations:
        print(_generation_line(generations))
    failed = [o for o in outcomes if o.state == "failed"]
    if failed:
        width = max(len(o.source_id or o.path) for o in failed)
        print("failed:")
        for o in failed:
            print(f"  {(o.source_id or o.path):<{width}}  {o.reason or '':<16} {o.error or ''}")
    if skipped and verbose:
        print("skipped (not a supported type):")
        for path in skipped:
            print(f"  {_shown(path, root)}")


def register(sub: Any, parents: Parents) -> None:
    """``ingest`` on ``sub``."""
    ingest = command(
        sub, "ingest",
        "ingest documents (" + " ".join(DOCUMENT_SUFFIXES) + "; folders walked)",
        ["ragport ingest docs/ --corpus handbook", "ragport ingest a.md b.pdf --json"],
        [parents.common, parents.json_out],
    )  # fmt: skip
    ingest.add_argument("paths", nargs="+", help="files and folders to ingest")
    ingest.add_argument(
        "--root",
        help="corpus root: ids are paths relative to it (default: recorded, or common folder)",
    )
    add_document_options(ingest)
    ingest.add_argument(
        "--workers",
        type=int,
        default=None,
        help="parse threads of the pipelined ingest, 1..32 (1: one file after another; "
        "default: the cores, 2 to 8)",
    )
    ingest.add_argument("--encoding", help=ENCODING_HELP)
    ingest.add_argument(
        "-v", "--verbose", action="store_true",
        help="name each file a folder walk skipped for its type (the summary counts them)",
    )  # fmt: skip
    ingest.set_defaults(func=_ingest)
