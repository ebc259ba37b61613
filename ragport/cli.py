"""The ``ragport`` command line (composition root for the command line).

Every command that reads or writes a corpus takes ``--store URL`` (or ``RAGPORT_STORE``, or
``store`` in a ``ragport.toml`` found upward from the current directory): ``memory://``, a
``postgresql://`` URL, or by default an embedded PostgreSQL + pgvector server under the
user's data directory, started on demand and reused by the next command.

Exit codes: 0 ok, 1 some inputs failed or nothing was found, 2 usage (a bad option, value or
configuration), 3 the store is unavailable.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import attrs
import cattrs

from ragport.application import (
    RagDeletionHandler,
    RetrievalResult,
    SyncResult,
    compact,
    create_deletion_propagator,
    delete_source,
    list_ingestion_status,
    retrieve_context,
    rollback_generation,
)
from ragport.bootstrap import (
    CliConfig,
    CorpusRoots,
    FileOutcome,
    SourceRow,
    Stores,
    build_embedder,
    collect_documents,
    default_root,
    demo_documents,
    embedder_name_for,
    find_config,
    ingest_files,
    ingest_text,
    list_sources,
    load_config,
    open_checkpoints,
    open_stores,
    reindex_corpus,
    sync_connector,
)
from ragport.domain.documents import DOCUMENT_SUFFIXES
from ragport.domain.errors import (
    CapabilityError,
    EmbedderMismatchError,
    RagportError,
    StoreError,
    ValidationError,
)
from ragport.domain.limits import DEFAULT_LIMITS, HARD_LIMITS
from ragport.domain.model import AccessDenial, Authorization, Grant, Hit, Scope
from ragport.ports.embedder import Embedder

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_STORE", "EXIT_USAGE", "main"]

EXIT_OK = 0
EXIT_FAILED = 1  # some inputs failed, or nothing was found
EXIT_USAGE = 2  # a bad option, value or configuration
EXIT_STORE = 3  # the store is unavailable

DEMO_QUERIES = (
    "Who has to approve a large payment?",
    "How long is parental leave?",
)
EMBEDDERS = ("minilm", "hash")
MODES = ("vector", "lexical", "hybrid")
# Tokens of context budget per wanted hit: a 1,000-character chunk is ~250 tokens plus its
# citation, so --top-k 20 gets room for 20 hits (capped at the hard ceiling).
TOKENS_PER_HIT = 300

_json = cattrs.Converter()
_json.register_unstructure_hook(datetime, lambda d: d.isoformat())


class NothingFound(Exception):
    """The command ran and found nothing to act on (exit 1); the message says what."""


# -- output ----------------------------------------------------------------------------------


def _rich_console() -> Any | None:
    """A rich Console when stdout is a terminal and rich is installed, else None."""
    if not sys.stdout.isatty():
        return None
    try:
        from rich.console import Console
    except ImportError:  # pragma: no cover - rich is in the cli extra
        return None
    return Console()


def _table(columns: Sequence[str], rows: Sequence[Sequence[object]], *, title: str = "") -> None:
    """A rich table on a terminal; plain aligned columns (two-space indent) otherwise."""
    console = _rich_console()
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    if console is not None:
        from rich.table import Table

        table = Table(title=title or None)
        for column in columns:
            table.add_column(column)
        for row in cells:
            table.add_row(*row)
        console.print(table)
        return
    if title:
        print(title)
    head = [c.upper() for c in columns]
    widths = [max(len(r[i]) for r in [head, *cells]) for i in range(len(columns))]
    for row in [head, *cells]:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  " + line.rstrip())


def _print_json(value: object, *, indent: int | None = 2) -> None:
    print(json.dumps(_json.unstructure(value), indent=indent, ensure_ascii=False))


def _note(message: str) -> None:
    print(f"ragport: {message}", file=sys.stderr)


# -- configuration ---------------------------------------------------------------------------


def _config(args: argparse.Namespace) -> CliConfig:
    cached = getattr(args, "_config", None)
    if isinstance(cached, CliConfig):
        return cached
    path = find_config(Path.cwd())
    config = load_config(path) if path is not None else CliConfig()
    args._config = config
    args._config_path = path
    return config


def _resolve(args: argparse.Namespace) -> None:
    """Fill the options left unset from ragport.toml, then the built-in defaults."""
    config = _config(args)
    for name in ("schema", "tenant", "resource"):
        if hasattr(args, name) and getattr(args, name) is None:
            setattr(args, name, getattr(config, name))
    if getattr(args, "corpus_many", False):
        if not args.corpus:
            args.corpus = [config.corpus]
    elif hasattr(args, "corpus") and args.corpus is None:
        args.corpus = config.corpus
    if args.command == "query":
        if args.top_k is None:
            args.top_k = config.query.top_k
        if args.mode is None:
            # --lexical alone asks for the fused (hybrid) mode, as it always has.
            args.mode = "hybrid" if args.lexical is not None else config.query.mode
        if args.lexical is None and args.mode != "vector":
            args.lexical = config.query.lexical
    if hasattr(args, "rerank") and args.rerank is None:
        args.rerank = config.query.rerank


def _store_url(args: argparse.Namespace) -> str | None:
    return args.store or os.environ.get("RAGPORT_STORE") or _config(args).store or None


def _scope(args: argparse.Namespace, corpus: str | None = None) -> Scope:
    name = corpus if corpus is not None else args.corpus
    if isinstance(name, list):
        name = name[0]
    return Scope(args.tenant, args.resource, name)


def _is_memory(url: str | None) -> bool:
    return url in ("memory://", "memory")


def _stores(
    args: argparse.Namespace, *, upgrade: bool | None = None, partitions: int | None = None
) -> Any:
    url = _store_url(args)
    if _is_memory(url):
        _note("warning: memory:// keeps nothing: every command starts from an empty store")
    return open_stores(
        url, schema=args.schema, upgrade=upgrade, read_url=_read_url(args), partitions=partitions
    )


def _embedder(args: argparse.Namespace, stores: Stores, scopes: Sequence[Scope]) -> Embedder:
    """``--embedder``, else the embedder the corpus was ingested with, else ragport.toml's.

    An explicit embedder other than the corpus's is refused (it would mix vector spaces).
    """
    recorded: set[str] = set()
    for scope in scopes:
        for embedder_id, _dims in stores.chunks.list_embedders(scope):
            if embedder_id is not None:
                recorded.add(embedder_id)
    wanted: str | None = args.embedder
    if wanted is None:
        names = {embedder_name_for(e) for e in recorded}
        wanted = names.pop() if len(names) == 1 else None
        wanted = wanted or _config(args).embedder
    embedder = build_embedder(wanted)
    if recorded and embedder.id not in recorded:
        raise EmbedderMismatchError(
            f"corpus {scopes[0].corpus_id!r} was embedded with {', '.join(sorted(recorded))}, "
            f"not {embedder.id}; to switch, run `ragport reindex --embedder {wanted} "
            f"--corpus {scopes[0].corpus_id}`",
            expected_id=embedder.id,
            expected_dimensions=embedder.dimensions,
            found_id=sorted(recorded)[0],
            found_dimensions=None,
        )
    return embedder


# -- commands --------------------------------------------------------------------------------


def _read_url(args: argparse.Namespace) -> str | None:
    return getattr(args, "read_store", None) or os.environ.get("RAGPORT_READ_STORE") or None


def _print_result(result: RetrievalResult) -> None:
    for hit in result.hits:
        heading = " > ".join(hit.metadata.get("heading", [])) or "(no heading)"
        if hit.metadata.get("page") is not None:
            heading = f"page {hit.metadata['page']}  {heading}"
        print(f"  [{hit.provenance.citation_id}] score={hit.score:.3f}  {heading}")
    if result.truncated:
        print("  (context truncated by the byte or token ceiling)")
    print("context:")
    for line in result.text.splitlines():
        print(f"    {line}")


def _demo(args: argparse.Namespace) -> int:
    embedder = build_embedder(args.embedder or _config(args).embedder)
    scope = Scope(args.tenant, args.resource, "demo")
    with _stores(args) as stores:
        print(
            f"ragport demo: {stores.description}, embedder {embedder.id}, corpus {scope.corpus_id}"
        )
        for name, text in demo_documents().items():
            result = ingest_text(
                name=name,
                text=text,
                store=stores.chunks,
                status_store=stores.status,
                embedder=embedder,
                scope=scope,
                size=args.size,
                overlap=args.overlap,
            )
            state = "unchanged, skipped" if result.skipped else f"{result.indexed} chunks"
            print(f"  ingested {result.source_id}: {state} (generation {result.generation})")
        for query in args.query or DEMO_QUERIES:
            found = retrieve_context(
                query, embedder=embedder, store=stores.chunks, scope=scope, top_k=args.top_k
            )
            print(f"\nquery: {query}")
            _print_result(found)
    return EXIT_OK


def _corpus_root(args: argparse.Namespace) -> Path:
    """``--root``, else the root recorded with the corpus, else the paths' common folder.

    The chosen root is recorded (except for ``memory://``), so later runs name every file
    the same way however its path is typed.
    """
    url = _store_url(args)
    # A store URL may carry a password: the file keeps only a digest of it.
    store = hashlib.sha256(url.encode()).hexdigest()[:16] if url else "embedded"
    key = "|".join([store, args.schema, args.tenant, args.resource, args.corpus])
    roots = None if _is_memory(url) else CorpusRoots()
    recorded = roots.get(key) if roots is not None else None
    if args.root:
        root = Path(args.root).resolve()
        if not root.is_dir():
            raise ValidationError(f"--root {args.root} is not an existing folder", field="root")
        if recorded is not None and recorded != root:
            _note(f"corpus root changed from {recorded} to {root}")
    else:
        existing = [p for p in args.paths if Path(p).exists()]
        if not existing and recorded is None:
            return Path.cwd().resolve()  # nothing to ingest: record no root from it
        root = recorded or default_root(existing)
    if roots is not None and root != recorded:
        roots.set(key, root)
    return root


class _Progress:
    """A progress bar (done / total, rate, current item) on a terminal, else nothing."""

    def __init__(self, total: int, enabled: bool, unit: str = "files") -> None:
        self.total = total
        self.enabled = enabled and total > 0
        self.unit = unit
        self.done = 0
        self.started = time.perf_counter()

    def show(self, current: str) -> None:
        if not self.enabled:
            return
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        width = 24
        filled = int(width * self.done / self.total)
        bar = "#" * filled + "-" * (width - filled)
        rate = self.done / elapsed
        line = f"[{bar}] {self.done}/{self.total} {rate:.1f} {self.unit}/s {current}"
        columns = shutil.get_terminal_size().columns
        sys.stdout.write("\r" + line[: columns - 1].ljust(columns - 1))
        sys.stdout.flush()

    def clear(self) -> None:
        if self.enabled:
            sys.stdout.write("\r" + " " * (shutil.get_terminal_size().columns - 1) + "\r")
            sys.stdout.flush()


def _outcome_line(n: int, total: int, outcome: FileOutcome) -> str:
    name = outcome.source_id or outcome.path
    if outcome.state == "failed":
        detail = f"FAILED ({outcome.reason}) {outcome.error or ''}".rstrip()
    elif outcome.state == "unchanged":
        detail = f"unchanged (generation {outcome.generation})"
    else:
        detail = f"{outcome.chunks} chunks, {outcome.replaced} replaced (generation {outcome.generation})"
    return f"[{n}/{total}] {name}: {detail}"


def _ingest(args: argparse.Namespace) -> int:
    scope = _scope(args)
    root = _corpus_root(args)
    candidates = collect_documents(args.paths, root=root)
    for c in candidates:
        if c.reason == "not_found":
            _note(f"no such file or folder: {c.path}")
    total = len(candidates)
    progress = _Progress(total, sys.stdout.isatty() and not args.json)
    outcomes: list[FileOutcome] = []
    started = time.perf_counter()
    with _stores(args) as stores:
        embedder = _embedder(args, stores, [scope])
        results = ingest_files(
            candidates,
            root=root,
            store=stores.chunks,
            status_store=stores.status,
            embedder=embedder,
            scope=scope,
            size=args.size,
            overlap=args.overlap,
            max_bytes=args.max_bytes,
        )
        for n, outcome in enumerate(results, start=1):
            outcomes.append(outcome)
            progress.done = n
            if args.json:
                print(json.dumps(_json.unstructure(outcome), ensure_ascii=False), flush=True)
                continue
            if progress.enabled:
                progress.clear()
                if outcome.state == "failed":
                    print(_outcome_line(n, total, outcome))
                progress.show(outcome.source_id or outcome.path)
            else:
                print(_outcome_line(n, total, outcome), flush=True)
    progress.clear()
    failed = [o for o in outcomes if o.state == "failed"]
    if not args.json:
        counts = {
            state: sum(o.state == state for o in outcomes)
            for state in ("indexed", "unchanged", "failed")
        }
        seconds = time.perf_counter() - started
        print(f"{total} document(s) in corpus {scope.corpus_id} (root {root}) in {seconds:.1f} s")
        print(f"  {'indexed':<10}{counts['indexed']:>6}")
        print(f"  {'unchanged':<10}{counts['unchanged']:>6}")
        print(f"  {'failed':<10}{counts['failed']:>6}")
        if failed:
            width = max(len(o.source_id or o.path) for o in failed)
            print("failed:")
            for o in failed:
                print(f"  {(o.source_id or o.path):<{width}}  {o.reason or '':<16} {o.error or ''}")
    return EXIT_FAILED if failed or not outcomes else EXIT_OK


@attrs.frozen
class HitOut:
    """One hit as ``ragport query --json`` prints it (stable field names)."""

    rank: int
    citation_id: str
    id: str
    source_id: str
    corpus: str
    score: float
    retrieval: str
    heading: list[str]
    page: int | None
    start: int | None
    end: int | None
    text: str
    metadata: dict[str, Any]
    provenance: Any


@attrs.frozen
class WithheldOut:
    """Sources the authorization withheld, by reason (``ragport query --principal``)."""

    sources: int
    hits: int
    reasons: dict[str, int]


@attrs.frozen
class QueryOut:
    """``ragport query --json``."""

    query: str
    corpora: list[str]
    mode: str
    lexical: str | None
    top_k: int
    hits: list[HitOut]
    text: str
    truncated: bool
    dropped: int
    withheld: WithheldOut | None


def _offsets(stores: Stores, hits: Sequence[Hit]) -> dict[tuple[str, str], tuple[Any, Any]]:
    """(corpus, record id) -> (start, end) of each hit, read from its stored record."""
    out: dict[tuple[str, str], tuple[Any, Any]] = {}
    wanted: dict[tuple[str, str, str, str], None] = {}
    for hit in hits:
        p = hit.provenance
        wanted[(p.tenant_id, p.resource_id, p.corpus_id, hit.source_id)] = None
    for tenant, resource, corpus, source_id in wanted:
        for record in stores.chunks.get_by_source(Scope(tenant, resource, corpus), source_id):
            out[(corpus, record.id)] = (record.start, record.end)
    return out


def _parse_filter(raw: str | None) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        raise ValidationError("--filter is not valid JSON", field="filter") from None
    if not isinstance(value, dict):
        raise ValidationError("--filter must be a JSON object", field="filter")
    return value


def _rerank_config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {"kind": args.rerank}
    for item in args.rerank_option or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValidationError("--rerank-option takes KEY=VALUE", field="rerank_option")
        if key == "api_key":
            raise ValidationError(
                "pass the reranker's API key in RAGPORT_RERANK_API_KEY, never on the command line",
                field="rerank_option",
            )
        parsed: Any = value
        if value in ("true", "false"):
            parsed = value == "true"
        elif value.isdigit():
            parsed = int(value)
        config[key] = parsed
    key = os.environ.get("RAGPORT_RERANK_API_KEY")
    if key and args.rerank in ("tei", "openai-compatible", "voyage"):
        config["api_key"] = key
    return config


def _lexical_for(args: argparse.Namespace, stores: Stores) -> str:
    """The lexical mode the query runs: 'off' for vector mode, else one the store offers."""
    offered = tuple(stores.chunks.capabilities.lexical_modes)
    if args.mode == "vector":
        return "off"
    if not offered:
        raise ValidationError(
            f"--mode {args.mode} needs a lexical index and this store offers none "
            "(use --mode vector)",
            field="mode",
        )
    if args.lexical is None:
        return str(offered[0])
    if args.lexical not in offered:
        raise ValidationError(
            f"--lexical {args.lexical}: this store offers {', '.join(offered)}", field="lexical"
        )
    return str(args.lexical)


def _budget(top_k: int, given: int | None) -> int:
    if given is not None:
        return given
    return min(
        HARD_LIMITS.context_tokens, max(DEFAULT_LIMITS.context_tokens, TOKENS_PER_HIT * top_k)
    )


def _query(args: argparse.Namespace) -> int:
    if not args.text.strip():
        raise ValidationError("the query is empty", field="text")
    if args.group and args.principal is None:
        raise ValidationError("--group needs --principal", field="group")
    for weight, name in ((args.vector_weight, "vector"), (args.lexical_weight, "lexical")):
        if not math.isfinite(weight) or weight < 0:
            raise ValidationError(f"--{name}-weight must be a number >= 0", field=f"{name}_weight")
    metadata_filter = _parse_filter(args.filter)
    corpora = list(dict.fromkeys(args.corpus))
    scopes = [_scope(args, c) for c in corpora]
    authorization = (
        Authorization(args.principal, args.tenant, group_ids=tuple(args.group or ()))
        if args.principal is not None
        else None
    )
    reranker = None
    if args.rerank not in (None, "none"):
        from ragport.adapters.rerankers import resolve_reranker

        reranker = resolve_reranker(_rerank_config(args))
    denials: list[AccessDenial] = []
    with _stores(args) as stores:
        lexical = _lexical_for(args, stores)
        weights = None
        if lexical != "off":
            weights = {
                "vector": 0.0 if args.mode == "lexical" else args.vector_weight,
                "lexical": args.lexical_weight,
            }
        empty = [s.corpus_id for s in scopes if stores.chunks.current_generation(s) == 0]
        if len(empty) == len(scopes):
            raise NothingFound(
                f"corpus {', '.join(empty)} is empty or unknown (ingest documents with "
                "`ragport ingest PATH --corpus NAME`; `ragport sources` lists what a corpus holds)"
            )
        for name in empty:
            _note(f"corpus {name} is empty or unknown")
        live = [s for s in scopes if s.corpus_id not in empty]
        embedder = _embedder(args, stores, live)
        result = retrieve_context(
            args.text,
            embedder=embedder,
            store=stores.chunks,
            scope=live[0] if len(live) == 1 else None,
            scopes=live if len(live) > 1 else None,
            top_k=args.top_k,
            query_candidates=max(DEFAULT_LIMITS.query_candidates, min(4 * args.top_k, 128)),
            lexical=lexical,
            fusion_weights=weights,
            metadata_filter=metadata_filter,
            authorization=authorization,
            on_access_denied=denials.append,
            reranker=reranker,
            max_context_tokens=_budget(args.top_k, args.max_tokens),
        )
        offsets = _offsets(stores, result.hits) if result.hits else {}
    withheld = None
    if denials:
        reasons: dict[str, int] = {}
        for d in denials:
            reasons[d.reason] = reasons.get(d.reason, 0) + 1
        withheld = WithheldOut(len(denials), sum(d.hits for d in denials), reasons)
        summary = ", ".join(f"{reason}: {n}" for reason, n in sorted(reasons.items()))
        _note(
            f"{withheld.sources} source(s) with {withheld.hits} matching chunk(s) withheld "
            f"from {args.principal} ({summary})"
        )
    if result.dropped:
        _note(
            f"{result.dropped} hit(s) dropped by the context budget "
            f"({_budget(args.top_k, args.max_tokens)} tokens; raise it with --max-tokens)"
        )
    hits = [
        HitOut(
            rank=n,
            citation_id=h.provenance.citation_id,
            id=h.id,
            source_id=h.source_id,
            corpus=h.provenance.corpus_id,
            score=h.score,
            retrieval=h.provenance.retrieval,
            heading=list(h.metadata.get("heading", [])),
            page=h.metadata.get("page"),
            start=offsets.get((h.provenance.corpus_id, h.id), (None, None))[0],
            end=offsets.get((h.provenance.corpus_id, h.id), (None, None))[1],
            text=h.text,
            metadata=dict(h.metadata),
            provenance=_json.unstructure(h.provenance),
        )
        for n, h in enumerate(result.hits, start=1)
    ]
    out = QueryOut(
        query=args.text,
        corpora=corpora,
        mode=args.mode,
        lexical=None if lexical == "off" else lexical,
        top_k=args.top_k,
        hits=hits,
        text=result.text,
        truncated=result.truncated,
        dropped=result.dropped,
        withheld=withheld,
    )
    if args.json:
        _print_json(out)
    else:
        _table(
            ["#", "citation", "score", "page", "heading"],
            [
                (h.rank, h.citation_id, f"{h.score:.3f}", h.page or "", " > ".join(h.heading))
                for h in hits
            ],
        )
        print("context:")
        for line in result.text.splitlines():
            print(f"    {line}")
    if not hits:
        _note("nothing found")
        return EXIT_FAILED
    return EXIT_OK


def _known_sources(stores: Stores, scope: Scope, source_ids: Sequence[str]) -> list[str]:
    """The ids among ``source_ids`` with no visible record in ``scope``."""
    return [s for s in source_ids if not stores.chunks.get_by_source(scope, s)]


def _confirm(question: str, *, yes: bool) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        raise ValidationError(f"{question}: pass --yes to confirm without a terminal", field="yes")
    answer = input(f"{question} [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _delete(args: argparse.Namespace) -> int:
    if not args.source_id and args.prefix is None:
        raise ValidationError("name a SOURCE or pass --prefix P", field="source_id")
    scope = _scope(args)
    with _stores(args) as stores:
        wanted = list(dict.fromkeys(args.source_id))
        unknown = _known_sources(stores, scope, wanted)
        if unknown:
            raise NothingFound(
                f"no source {', '.join(unknown)} in corpus {scope.corpus_id}; nothing deleted "
                "(`ragport sources` lists them)"
            )
        if args.prefix is not None:
            matched = [
                row.source_id
                for row in list_sources(stores, scope)
                if row.source_id.startswith(args.prefix) and row.chunks
            ]
            if not matched:
                raise NothingFound(
                    f"no source of corpus {scope.corpus_id} starts with {args.prefix!r}"
                )
            if not _confirm(
                f"delete {len(matched)} source(s) starting with {args.prefix!r} from corpus "
                f"{scope.corpus_id}?",
                yes=args.yes,
            ):
                _note("nothing deleted")
                return EXIT_FAILED
            wanted = list(dict.fromkeys([*wanted, *matched]))
        results = [
            delete_source(
                source_id=source_id, store=stores.chunks, scope=scope, status_store=stores.status
            )
            for source_id in wanted
        ]
    if args.json:
        _print_json(results)
    else:
        for r in results:
            print(f"{r.source_id}: {r.deleted} record(s) retired (generation {r.generation})")
    return EXIT_OK


def _forget(args: argparse.Namespace) -> int:
    scope = _scope(args)
    authorization = Authorization(args.principal, args.tenant, group_ids=tuple(args.group or ()))
    with _stores(args) as stores:
        if _known_sources(stores, scope, [args.source_id]):
            raise NothingFound(f"no source {args.source_id} in corpus {scope.corpus_id}")
        propagator = create_deletion_propagator(
            scope=scope,
            store=stores.chunks,
            authorization=authorization,
            handlers=(
                RagDeletionHandler(store=stores.chunks, scope=scope, status_store=stores.status),
            ),
        )
        result = propagator.propagate(args.source_id)
    if args.json:
        _print_json(result)
    else:
        print(
            f"{result.source_id}: forgotten; {result.tombstoned} id(s) tombstoned, "
            f"layers {dict(result.layers)}"
        )
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        page = list_ingestion_status(
            store=stores.status, scope=scope, limit=args.limit, cursor=args.cursor
        )
        generation = stores.chunks.current_generation(scope)
    if args.json:
        _print_json(page)
    else:
        print(f"corpus {scope.corpus_id}: generation {generation}")
        _table(
            ["source", "state", "chunks", "bytes", "updated", "error"],
            [
                (
                    item.source_id,
                    item.state,
                    f"{item.chunks_indexed}/{item.chunks_total}",
                    item.bytes,
                    item.updated_at.strftime("%Y-%m-%d %H:%M:%S") if item.updated_at else "",
                    item.error or "",
                )
                for item in page.items
            ],
        )
        if page.cursor:
            print(f"more: --cursor {page.cursor}")
    if not page.items and generation == 0 and args.cursor is None:
        raise NothingFound(f"corpus {scope.corpus_id} is empty or unknown")
    return EXIT_OK


def _sources(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        rows: list[SourceRow] = list(
            list_sources(stores, scope, start=args.cursor, limit=args.limit, counts=True)
        )
    if args.json:
        _print_json(rows)
    else:
        _table(
            ["source", "chunks", "generation", "content hash", "embedder", "state"],
            [
                (
                    r.source_id,
                    r.chunks,
                    r.generation,
                    (r.content_hash or "")[:12],
                    r.embedder,
                    r.state,
                )
                for r in rows
            ],
            title=f"corpus {scope.corpus_id}: {len(rows)} source(s)",
        )
        if args.limit is not None and len(rows) == args.limit:
            print(f"more: --cursor {rows[-1].source_id}")
    if not rows and args.cursor is None:
        raise NothingFound(f"corpus {scope.corpus_id} is empty or unknown")
    return EXIT_OK


@attrs.frozen
class GrantOut:
    """One source's grant as ``ragport grants show --json`` prints it (``grant`` null: none)."""

    source_id: str
    principal_ids: list[str] | None
    group_ids: list[str] | None
    access_version: int | None


def _grants_set(args: argparse.Namespace) -> int:
    scope = _scope(args)
    grant = Grant(
        args.source_id,
        principal_ids=tuple(args.principal or ()),
        group_ids=tuple(args.group or ()),
        access_version=args.access_version,
    )
    with _stores(args) as stores:
        if _known_sources(stores, scope, [args.source_id]):
            raise NothingFound(
                f"no source {args.source_id} in corpus {scope.corpus_id}; no grant set"
            )
        stores.chunks.set_source_access(scope, [grant])
    print(
        f"{args.source_id}: principals {list(grant.principal_ids)}, groups "
        f"{list(grant.group_ids)}, access version {grant.access_version}"
    )
    return EXIT_OK


def _grants_show(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        wanted = list(args.source_id) or [
            r.source_id for r in list_sources(stores, scope) if r.chunks
        ]
        found = stores.chunks.get_source_access(scope, wanted)
    rows = []
    for source_id in wanted:
        g = found.get(source_id)
        rows.append(
            GrantOut(
                source_id,
                None if g is None else list(g.principal_ids),
                None if g is None else list(g.group_ids),
                None if g is None else g.access_version,
            )
        )
    if args.json:
        _print_json(rows)
    else:
        _table(
            ["source", "principals", "groups", "access version"],
            [
                (
                    r.source_id,
                    "(no grant: nobody with an authorization)"
                    if r.principal_ids is None
                    else " ".join(r.principal_ids),
                    " ".join(r.group_ids or []),
                    r.access_version if r.access_version is not None else "",
                )
                for r in rows
            ],
        )
    if not rows:
        raise NothingFound(f"corpus {scope.corpus_id} is empty or unknown")
    return EXIT_OK


@attrs.frozen
class GenerationsOut:
    """``ragport generations --json``: the pointer, the counter, the compaction floor, and the
    sources each recent generation wrote (as they are visible now)."""

    corpus: str
    current: int
    counter: int
    floor: int
    written: dict[int, list[str]]


def _generations(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        with stores.chunks.unit_of_work(scope) as uow:
            current = uow.generations.current()
            counter = uow.generations.counter()
            floor = uow.generations.floor()
        written: dict[int, list[str]] = {}
        for row in list_sources(stores, scope, counts=True):
            if row.generation is not None:
                written.setdefault(row.generation, []).append(row.source_id)
    recent = dict(sorted(written.items(), reverse=True)[: args.limit])
    out = GenerationsOut(scope.corpus_id, current, counter, floor, recent)
    if args.json:
        _print_json(out)
    else:
        print(f"corpus {scope.corpus_id}: current {current}, counter {counter}, floor {floor}")
        _table(
            ["generation", "sources written (still visible)"],
            [(g, " ".join(ids)) for g, ids in recent.items()],
        )
    if current == 0:
        raise NothingFound(f"corpus {scope.corpus_id} is empty or unknown")
    return EXIT_OK


def _rollback(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        result = rollback_generation(store=stores.chunks, scope=scope, to=args.to)
    if args.json:
        _print_json(result)
    else:
        print(
            f"corpus {scope.corpus_id} now shows generation {result.generation}: "
            f"{result.discarded} row(s) discarded, {result.restored} restored"
        )
    return EXIT_OK


def _compact(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        result = compact(store=stores.chunks, scope=scope, keep=args.keep)
    if args.json:
        _print_json(result)
    else:
        print(
            f"corpus {scope.corpus_id}: {result.purged} retired row(s) physically removed "
            f"(their text is gone from the store); rollback possible to generation "
            f"{result.floor} and above"
        )
    return EXIT_OK


def _reindex(args: argparse.Namespace) -> int:
    scope = _scope(args)
    embedder = build_embedder(args.embedder)
    with _stores(args) as stores:
        sources = [r.source_id for r in list_sources(stores, scope) if r.chunks]
        if not sources:
            raise NothingFound(f"corpus {scope.corpus_id} is empty or unknown")
        progress = _Progress(len(sources), sys.stdout.isatty() and not args.json, "sources")

        def tick(n: int, source_id: str) -> None:
            progress.done = n
            progress.show(source_id)

        result = reindex_corpus(
            store=stores.chunks, scope=scope, embedder=embedder, sources=sources, on_source=tick
        )
        progress.clear()
    if args.json:
        _print_json(result)
    else:
        print(
            f"corpus {scope.corpus_id}: {result.sources} source(s), {result.chunks} chunk(s) "
            f"re-embedded with {embedder.id}; visible at generation {result.generation}"
        )
    return EXIT_OK


def _db_upgrade(args: argparse.Namespace) -> int:
    with _stores(args, upgrade=True, partitions=args.partitions) as stores:
        print(f"schema {args.schema!r} is up to date ({stores.description})")
    return EXIT_OK


def _db_dump(args: argparse.Namespace) -> int:
    from ragport.adapters.postgres import dump_schema
    from ragport.bootstrap import postgres_url

    with postgres_url(_store_url(args)) as url:
        dump_schema(url, args.path, schema=args.schema)
    print(f"schema {args.schema!r} dumped to {args.path}")
    return 0


def _db_restore(args: argparse.Namespace) -> int:
    from ragport.adapters.postgres import restore_schema
    from ragport.bootstrap import postgres_url

    with postgres_url(_store_url(args)) as url:
        restore_schema(url, args.path, schema=args.schema)
    print(f"schema {args.schema!r} restored from {args.path}")
    return 0


def _db_copy(args: argparse.Namespace) -> int:
    import tempfile

    from ragport.adapters.postgres import copy_schema
    from ragport.bootstrap import postgres_url

    with postgres_url(_store_url(args)) as url, tempfile.TemporaryDirectory() as work:
        copy_schema(url, args.to, work, schema=args.schema)
    print(f"schema {args.schema!r} copied; continue with --store URL")
    return 0


def _db_stop(args: argparse.Namespace) -> int:
    from ragport.adapters.postgres import default_data_dir, stop_embedded_server

    stopped = stop_embedded_server(default_data_dir())
    print("embedded server stopped" if stopped else "no embedded server was running")
    return EXIT_OK


def _db_status(args: argparse.Namespace) -> int:
    from ragport.adapters.postgres import default_data_dir, embedded_status

    status = embedded_status(default_data_dir())
    if args.json:
        _print_json(status)
    else:
        _table(["field", "value"], [(k, v) for k, v in _json.unstructure(status).items()])
    return EXIT_OK


def _config_show(args: argparse.Namespace) -> int:
    config = _config(args)
    path = getattr(args, "_config_path", None)
    store = args.store or os.environ.get("RAGPORT_STORE") or config.store
    where = (
        "--store"
        if args.store
        else "RAGPORT_STORE"
        if os.environ.get("RAGPORT_STORE")
        else str(path)
        if config.store
        else "default"
    )
    values = {**_json.unstructure(config), "store": _redact_url(store) if store else "embedded"}
    if args.json:
        print(
            json.dumps(
                {"file": str(path) if path else None, "store_from": where, **values}, indent=2
            )
        )
    else:
        print(f"configuration file: {path or '(none found upward from here)'}")
        print(f"store ({where}): {values['store']}")
        _table(
            ["key", "value"],
            [(k, v) for k, v in values.items() if k not in ("store", "query")]
            + [(f"query.{k}", v) for k, v in values["query"].items()],
        )
    return EXIT_OK


def _redact_url(url: str) -> str:
    """The URL with any password replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, at, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in credentials else ''}{at}{host}"


def _mcp(args: argparse.Namespace) -> int:
    import contextlib

    from ragport.integrations.mcp import build_server, stdout_to_stderr

    if args.group and args.principal is None:
        raise ValidationError("--group needs --principal", field="group")
    authorization = (
        Authorization(args.principal, args.tenant, group_ids=args.group or ())
        if args.principal is not None
        else None
    )
    # stdout is the MCP channel: nothing started while opening the stores may write to it.
    with contextlib.ExitStack() as stack:
        with stdout_to_stderr():
            stores = stack.enter_context(_stores(args))
            embedder = _embedder(args, stores, [_scope(args)])
        build_server(
            store=stores.chunks,
            status_store=stores.status,
            embedder=embedder,
            scope=_scope(args),
            authorization=authorization,
        ).run("stdio")
    return EXIT_OK


# -- the parser ------------------------------------------------------------------------------


class _Help(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples' layout and shows each option's default where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "%(default)" not in text
            and "default" not in text
            and action.option_strings
            and action.default not in (None, False, argparse.SUPPRESS)
        ):
            text += " (default: %(default)s)"
        return text


def _sub(
    sub: Any, name: str, summary: str, examples: Sequence[str], parents: Sequence[Any] = ()
) -> argparse.ArgumentParser:
    epilog = "examples:\n" + "".join(f"  {e}\n" for e in examples) if examples else None
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        parents=list(parents),
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=epilog,
        formatter_class=_Help,
    )
    return parser


def _print_sync(args: argparse.Namespace, result: SyncResult, seconds: float) -> int:
    if args.json:
        print(json.dumps({**_json.unstructure(result), "seconds": round(seconds, 3)}))
    else:
        print(
            f"synced corpus {args.corpus} in {seconds:.2f} s: {result.pages} page(s), "
            f"{result.upserted} upserted, {result.skipped} unchanged, {result.deleted} deleted"
            f"{f' ({result.swept} swept)' if result.swept else ''}, {result.withheld} withheld, "
            f"{result.failed} failed" + (" (full listing)" if result.bootstrapped else "")
        )
        if result.lost:
            print("another worker advanced the checkpoint first; this run stopped")
        elif not result.exhausted:
            print("more pages remain: run again to continue")
    return 1 if result.failed else 0


def _sync_run(args: argparse.Namespace, connector: Any) -> int:
    embedder = build_embedder(args.embedder)
    started = time.perf_counter()
    with open_stores(_store_url(args), schema=args.schema) as stores:
        result = sync_connector(
            connector,
            stores=stores,
            checkpoints=open_checkpoints(stores, schema=args.schema),
            embedder=embedder,
            scope=_scope(args),
            size=args.size,
            overlap=args.overlap,
            max_bytes=args.max_bytes,
            max_pages=args.max_pages,
        )
    return _print_sync(args, result, time.perf_counter() - started)


def _sync_folder(args: argparse.Namespace) -> int:
    from ragport.adapters.connectors import FolderConnector

    return _sync_run(args, FolderConnector(args.path, max_bytes=args.max_bytes))


def _sync_drive(args: argparse.Namespace) -> int:
    from ragport.adapters.connectors import GoogleDriveConnector, drive_permissions_access

    name = args.token_env
    if not os.environ.get(name):
        raise ValidationError(f"set the Drive access token in ${name}", field="token")

    def token_provider() -> str:
        return os.environ.get(name, "")

    connector = GoogleDriveConnector(
        token_provider=token_provider,
        resolve_access=drive_permissions_access,
        folder_id=args.folder,
        shared_drive_id=args.shared_drive,
        base_url=args.base_url,
        allow_loopback=args.allow_loopback,
        max_bytes=args.max_bytes,
    )
    try:
        return _sync_run(args, connector)
    finally:
        connector.close()


def _parser() -> argparse.ArgumentParser:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ragport_version = version("ragport")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        ragport_version = "unknown"

    stored = argparse.ArgumentParser(add_help=False)
    stored.add_argument(
        "--store",
        help="memory://, postgresql://... or embedded (default: RAGPORT_STORE, "
        "ragport.toml, else the embedded server)",
    )
    stored.add_argument(
        "--read-store",
        help="a streaming replica for reads: postgresql://... (default: RAGPORT_READ_STORE)",
    )
    stored.add_argument("--schema", help="PostgreSQL schema (default: ragport.toml, else ragport)")
    stored.add_argument("--tenant", help="tenant id (default: ragport.toml, else local)")
    stored.add_argument("--resource", help="resource id (default: ragport.toml, else default)")
    one_corpus = argparse.ArgumentParser(add_help=False)
    one_corpus.add_argument("--corpus", help="corpus name (default: ragport.toml, else default)")
    one_corpus.set_defaults(corpus_many=False)
    embed = argparse.ArgumentParser(add_help=False)
    embed.add_argument(
        "--embedder",
        choices=EMBEDDERS,
        help="embedder (default: the one the corpus was ingested with, ragport.toml, else minilm)",
    )
    json_out = argparse.ArgumentParser(add_help=False)
    json_out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common = argparse.ArgumentParser(add_help=False, parents=[stored, one_corpus, embed])
    corpus_only = argparse.ArgumentParser(add_help=False, parents=[stored, one_corpus])

    parser = argparse.ArgumentParser(
        prog="ragport",
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: 0 ok, 1 some inputs failed or nothing found, 2 usage, "
        "3 store unavailable. `ragport COMMAND --help` for each command.\n",
        formatter_class=_Help,
    )
    parser.add_argument("--version", action="version", version=f"ragport {ragport_version}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = _sub(sub, "demo", "ingest the bundled corpus and print cited results",
                ["ragport demo --store memory://"], [common])  # fmt: skip
    demo.add_argument("--query", action="append", help="a query to run (repeatable)")
    demo.add_argument("--top-k", type=int, default=3, help="hits per query")
    demo.add_argument("--size", type=int, default=400, help="chunk size in characters")
    demo.add_argument("--overlap", type=int, default=40, help="chunk overlap in characters")
    demo.set_defaults(func=_demo)

    ingest = _sub(
        sub, "ingest",
        "ingest documents (" + " ".join(DOCUMENT_SUFFIXES) + "; folders walked)",
        ["ragport ingest docs/ --corpus handbook", "ragport ingest a.md b.pdf --json"],
        [common, json_out],
    )  # fmt: skip
    ingest.add_argument("paths", nargs="+", help="files and folders to ingest")
    ingest.add_argument(
        "--root",
        help="corpus root: ids are paths relative to it (default: recorded, or common folder)",
    )
    ingest.add_argument("--size", type=int, default=1000, help="chunk size in characters")
    ingest.add_argument("--overlap", type=int, default=100, help="chunk overlap in characters")
    ingest.add_argument(
        "--max-bytes",
        type=int,
        default=DEFAULT_LIMITS.parse_bytes,
        help=f"document byte cap, at most {HARD_LIMITS.parse_bytes}",
    )
    ingest.set_defaults(func=_ingest)

    query = _sub(
        sub, "query", "retrieve cited context from one or more corpora",
        [
            'ragport query "parental leave" --corpus handbook',
            'ragport query "leave" --mode hybrid --lexical-weight 2 --top-k 10',
            'ragport query "leave" --principal alice --group staff --filter \'{"lang": "en"}\'',
            'ragport query "leave" --corpus handbook --corpus wiki --json',
        ],
        [stored, embed, json_out],
    )  # fmt: skip
    query.add_argument("text", help="the query")
    query.add_argument(
        "--corpus", action="append", default=[],
        help="corpus to search (repeatable; default: ragport.toml, else default)",
    )  # fmt: skip
    query.set_defaults(corpus_many=True)
    query.add_argument(
        "--top-k", type=int, default=None,
        help=f"hits to return, at most {HARD_LIMITS.top_k} (default: ragport.toml, else 5)",
    )  # fmt: skip
    query.add_argument(
        "--max-tokens", type=int,
        help=f"context budget in tokens (default: {TOKENS_PER_HIT} per hit, "
        f"{DEFAULT_LIMITS.context_tokens} to {HARD_LIMITS.context_tokens})",
    )  # fmt: skip
    query.add_argument(
        "--mode", choices=MODES,
        help="vector only, lexical only, or hybrid (fused) retrieval "
        "(default: ragport.toml, else vector)",
    )  # fmt: skip
    query.add_argument(
        "--lexical",
        help="lexical index for --mode lexical|hybrid: one the store offers (memory:// "
        "bm25; PostgreSQL fts, bm25) (default: the store's first)",
    )
    query.add_argument(
        "--vector-weight", type=float, default=1.0, help="weight of the vector leg in fusion"
    )
    query.add_argument(
        "--lexical-weight", type=float, default=1.0, help="weight of the lexical leg in fusion"
    )
    query.add_argument("--filter", help="metadata filter as JSON (docs/access-control.md)")
    query.add_argument("--principal", help="retrieve as this principal (grants enforced)")
    query.add_argument("--group", action="append", help="a group of the principal (repeatable)")
    query.add_argument(
        "--rerank",
        help="reranker kind: local, embedding, tei, openai-compatible, voyage, fake, none "
        "(default: ragport.toml, else none)",
    )
    query.add_argument(
        "--rerank-option", action="append", metavar="KEY=VALUE",
        help="a reranker option, e.g. model=... or base_url=... (repeatable; the API key "
        "comes from RAGPORT_RERANK_API_KEY)",
    )  # fmt: skip
    query.set_defaults(func=_query)

    delete = _sub(
        sub, "delete", "retire every record of one or more sources (a new generation)",
        ["ragport delete guides/old.md --corpus handbook", "ragport delete --prefix drafts/ --yes"],
        [corpus_only, json_out],
    )  # fmt: skip
    delete.add_argument("source_id", nargs="*", help="source ids (as `ragport sources` lists)")
    delete.add_argument("--prefix", help="also every source whose id starts with this")
    delete.add_argument("--yes", action="store_true", help="do not ask before a --prefix delete")
    delete.set_defaults(func=_delete)

    forget = _sub(
        sub, "forget",
        "forget a source everywhere: tombstone it and what rests on it, remove its rows",
        ["ragport forget leave.md --principal admin --corpus handbook"],
        [corpus_only, json_out],
    )  # fmt: skip
    forget.add_argument("source_id", help="the source id")
    forget.add_argument(
        "--principal", required=True, help="who forgets (needs a grant on the source)"
    )
    forget.add_argument("--group", action="append", help="a group of the principal (repeatable)")
    forget.set_defaults(func=_forget)

    status = _sub(sub, "status", "ingestion status of a corpus",
                  ["ragport status --corpus handbook"], [corpus_only, json_out])  # fmt: skip
    status.add_argument(
        "--limit", type=int, default=50, help=f"rows per page, at most {HARD_LIMITS.status_page}"
    )
    status.add_argument("--cursor", help="continue after this page (printed as `more:`)")
    status.set_defaults(func=_status)

    sources = _sub(
        sub, "sources",
        "every source of a corpus: chunks, generation, content hash, embedder",
        ["ragport sources --corpus handbook", "ragport sources --limit 100 --cursor guides/z.md"],
        [corpus_only, json_out],
    )  # fmt: skip
    sources.add_argument("--limit", type=int, help="rows per page (default: all)")
    sources.add_argument("--cursor", help="start after this source id")
    sources.set_defaults(func=_sources)

    grants = sub.add_parser(
        "grants", help="read and set who may see a source", formatter_class=_Help,
        description="Read and set who may see a source.",
    )  # fmt: skip
    grants_sub = grants.add_subparsers(dest="grants_command", required=True, metavar="COMMAND")
    gset = _sub(
        grants_sub, "set", "replace a source's grant",
        ["ragport grants set leave.md --principal alice --group staff --corpus handbook"],
        [corpus_only],
    )  # fmt: skip
    gset.add_argument("source_id", help="the source id")
    gset.add_argument("--principal", action="append", help="a principal id (repeatable)")
    gset.add_argument("--group", action="append", help="a group id (repeatable)")
    gset.add_argument("--access-version", type=int, default=1, help="the grant's access version")
    gset.set_defaults(func=_grants_set)
    gshow = _sub(grants_sub, "show", "show the grants of sources (default: every source)",
                 ["ragport grants show --corpus handbook"], [corpus_only, json_out])  # fmt: skip
    gshow.add_argument("source_id", nargs="*", help="source ids (default: every source)")
    gshow.set_defaults(func=_grants_show)

    generations = _sub(
        sub, "generations",
        "the generation pointer, the counter, and what each recent generation wrote",
        ["ragport generations --corpus handbook"], [corpus_only, json_out],
    )  # fmt: skip
    generations.add_argument("--limit", type=int, default=10, help="recent generations shown")
    generations.set_defaults(func=_generations)

    rollback = _sub(sub, "rollback", "show the corpus as it was at generation N",
                    ["ragport rollback --to 3 --corpus handbook"], [corpus_only, json_out])  # fmt: skip
    rollback.add_argument("--to", type=int, required=True, help="the generation to go back to")
    rollback.set_defaults(func=_rollback)

    compact_p = _sub(
        sub, "compact",
        "physically remove retired rows (and their text) older than the last N generations",
        ["ragport compact --keep 2 --corpus handbook"], [corpus_only, json_out],
    )  # fmt: skip
    compact_p.add_argument("--keep", type=int, default=1, help="generations kept for rollback")
    compact_p.set_defaults(func=_compact)

    reindex = _sub(
        sub, "reindex",
        "re-embed a corpus under another embedder (old vectors serve until the new commit)",
        ["ragport reindex --embedder minilm --corpus handbook"], [corpus_only, json_out],
    )  # fmt: skip
    reindex.add_argument("--embedder", required=True, choices=EMBEDDERS, help="the new embedder")
    reindex.set_defaults(func=_reindex)

    config = _sub(sub, "config", "show the configuration in effect and where it came from",
                  ["ragport config"], [stored, one_corpus, json_out])  # fmt: skip
    config.set_defaults(func=_config_show)

    mcp = _sub(sub, "mcp", "serve search over MCP (stdio)",
               ["ragport mcp --corpus handbook --principal alice --group staff"], [common])  # fmt: skip
    mcp.add_argument("--principal", help="the caller every search runs as (grants enforced)")
    mcp.add_argument("--group", action="append", help="a group of the principal (repeatable)")
    mcp.set_defaults(func=_mcp)

    sync = sub.add_parser("sync", help="keep a corpus equal to a folder or a Google Drive")
    sync_sub = sync.add_subparsers(dest="sync_command", required=True)
    sync_common = argparse.ArgumentParser(add_help=False, parents=[common])
    sync_common.add_argument("--size", type=int, default=1000)
    sync_common.add_argument("--overlap", type=int, default=100)
    sync_common.add_argument("--max-bytes", type=int, default=DEFAULT_LIMITS.parse_bytes)
    sync_common.add_argument("--max-pages", type=int, help="stop after N committed pages")
    sync_common.add_argument("--json", action="store_true", help="the SyncResult as JSON")
    folder = sync_sub.add_parser(
        "folder", parents=[sync_common], help="sync a local folder (ids: paths relative to it)"
    )
    folder.add_argument("path")
    folder.set_defaults(func=_sync_folder)
    drive = sync_sub.add_parser(
        "drive", parents=[sync_common], help="sync a Google Drive folder or shared drive"
    )
    drive.add_argument("--folder", help="Drive folder id (its subfolders included)")
    drive.add_argument("--shared-drive", help="shared drive id")
    drive.add_argument(
        "--token-env",
        default="RAGPORT_DRIVE_ACCESS_TOKEN",
        help="environment variable holding the OAuth access token",
    )
    drive.add_argument("--base-url", default="https://www.googleapis.com", help=argparse.SUPPRESS)
    drive.add_argument("--allow-loopback", action="store_true", help=argparse.SUPPRESS)
    drive.set_defaults(func=_sync_drive)

    db = sub.add_parser(
        "db", help="database administration", formatter_class=_Help,
        description="Database administration.",
    )  # fmt: skip
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    upgrade = _sub(db_sub, "upgrade", "apply schema migrations",
                   ["ragport db upgrade --store postgresql://me@db/rag",
                    "ragport db upgrade --store postgresql://me@db/rag --partitions 16"],
                   [stored])  # fmt: skip
    upgrade.add_argument(
        "--partitions",
        type=int,
        help="create the tables PARTITION BY HASH (tenant_id) in N partitions (default: none)",
    )
    upgrade.set_defaults(func=_db_upgrade)
    dump = _sub(db_sub, "dump", "pg_dump ragport's schema to PATH (custom format)",
                ["ragport db dump backup.dump"], [stored])  # fmt: skip
    dump.add_argument("path", help="the dump file to write")
    dump.set_defaults(func=_db_dump)
    restore = _sub(db_sub, "restore", "pg_restore a dump into a server without that schema",
                   ["ragport db restore backup.dump --store postgresql://me@db/rag"],
                   [stored])  # fmt: skip
    restore.add_argument("path", help="the dump file to read")
    restore.set_defaults(func=_db_restore)
    copy = _sub(db_sub, "copy", "copy ragport's schema to another server (dump + restore)",
                ["ragport db copy --to postgresql://me@db/rag"], [stored])  # fmt: skip
    copy.add_argument("--to", required=True, help="postgresql://... of the target server")
    copy.set_defaults(func=_db_copy)
    stop = _sub(db_sub, "stop", "stop the embedded PostgreSQL server", ["ragport db stop"])
    stop.set_defaults(func=_db_stop)
    dbstatus = _sub(
        db_sub, "status", "which embedded server, which binaries, which data directory, how big",
        ["ragport db status"], [json_out],
    )  # fmt: skip
    dbstatus.set_defaults(func=_db_status)
    return parser


def _exit_code(exc: RagportError) -> int:
    if isinstance(exc, StoreError):
        return EXIT_STORE
    if isinstance(exc, ValidationError | CapabilityError | EmbedderMismatchError):
        return EXIT_USAGE
    return EXIT_FAILED


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the interpreter's flush is silent."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _run(args: argparse.Namespace) -> int:
    _resolve(args)
    func: Callable[[argparse.Namespace], int] = args.func
    return int(func(args))


def main(argv: Sequence[str] | None = None, *, stderr: TextIO | None = None) -> int:
    args: Any = _parser().parse_args(argv)
    err = stderr or sys.stderr
    try:
        return _run(args)
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_OK
    except NothingFound as exc:
        print(f"ragport: {exc}", file=err)
        return EXIT_FAILED
    except RagportError as exc:
        print(f"ragport: {type(exc).__name__}: {exc}", file=err)
        return _exit_code(exc)
    except OSError as exc:
        name = f" {exc.filename}" if exc.filename else ""
        print(f"ragport: {type(exc).__name__}:{name} {exc.strerror or exc}", file=err)
        return EXIT_FAILED


def _iter_commands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every (command path, parser) under ``parser`` (for the help tests and docs)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield name, child
                for sub_name, grandchild in _iter_commands(child):
                    yield f"{name} {sub_name}", grandchild


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
