"""``ragport query`` and ``ragport mcp``: retrieval from the command line."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from ragport.application import (
    RetrievalResult,
    retrieve_context,
)
from ragport.application.retrieval_request import (
    AUTO_LEXICAL,
    DEPRECATED_LEXICAL_MODES,
    RetrievalRequest,
)
from ragport.bootstrap import Stores
from ragport.cli.config import _embedder, _scope, _stores
from ragport.cli.options import MODES, Parents, command
from ragport.cli.output import EXIT_FAILED, EXIT_OK, NothingFound, _json, _note, _print_json, _table
from ragport.domain.deprecation import REMOVED_IN
from ragport.domain.errors import (
    RerankError,
    ValidationError,
)
from ragport.domain.filters import prefix_filter
from ragport.domain.limits import DEFAULT_LIMITS, HARD_LIMITS
from ragport.domain.model import AccessDenial, Authorization, Hit, Scope
from ragport.ports.capabilities import supports
from ragport.ports.rerank import Reranker

# Tokens of context budget per wanted hit: a 1,000-character chunk is ~250 tokens plus its
# citation, so --top-k 20 gets room for 20 hits (capped at the hard ceiling).
TOKENS_PER_HIT = 300


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


@attrs.frozen
class HitOut:
    """One hit as ``ragport query --json`` prints it (stable field names)."""

    rank: int
    citation_id: str
    id: str
    source_id: str
    corpus: str
    score: float
    score_kind: str  # rrf (fused ranks, --mode lexical|hybrid) or cosine (--mode vector)
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
    score_kind: str
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


def _under(raw: str | None) -> dict[str, Any] | None:
    """``--under FOLDER`` as a filter on the ``path`` metadata (``ingest`` and ``sync`` set it
    to the source id): the source named ``FOLDER`` or any under ``FOLDER/``."""
    if raw is None:
        return None
    folder = raw
    while folder.startswith("./"):
        folder = folder[2:]
    folder = folder.rstrip("/")
    if not folder or folder == "." or raw.startswith("/") or ".." in folder.split("/"):
        raise ValidationError(
            "--under takes a folder relative to the corpus root, as `ragport sources` lists "
            "source ids (e.g. docs/guides)",
            field="under",
        )
    return {"$or": [{"path": folder}, prefix_filter("path", folder + "/")]}


def _filters(args: argparse.Namespace) -> Mapping[str, Any] | None:
    """``--filter`` and ``--under``, both holding when both are given."""
    given = [f for f in (_parse_filter(args.filter), _under(args.under)) if f is not None]
    if len(given) == 2:
        return {"$and": given}
    return given[0] if given else None


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


# Kinds that run a model on this machine's CPU: they get the local budget by default.
_LOCAL_KINDS = ("local", "embedding")


def _rerank_ms(args: argparse.Namespace) -> int:
    """The reranker's time budget in ms: --rerank-timeout, else the default for its kind."""
    seconds = args.rerank_timeout
    if seconds is None:
        local = args.rerank in _LOCAL_KINDS
        return DEFAULT_LIMITS.local_rerank_ms if local else DEFAULT_LIMITS.rerank_ms
    ceiling = HARD_LIMITS.rerank_ms / 1000
    if not math.isfinite(seconds) or not 0 < seconds <= ceiling:
        raise ValidationError(
            f"--rerank-timeout must be above 0 and at most {ceiling:g} seconds",
            field="rerank_timeout",
            limit="rerank_ms",
        )
    return max(1, math.ceil(float(seconds) * 1000))


def _warm(reranker: Reranker) -> None:
    """Load a local reranker's model now, so that its time budget is spent on scoring."""
    load = getattr(reranker, "load", None)
    if callable(load):
        load()


def _lexical_for(args: argparse.Namespace, stores: Stores) -> str:
    """The lexical mode the query runs: 'off' for vector mode, else one the store offers
    (``supports(store, "lexical")``: declared and defined)."""
    lexical = supports(stores.chunks, "lexical")
    offered = tuple(stores.chunks.capabilities.lexical_modes) if lexical else ()
    if args.mode == "vector":
        return "off"
    if not offered:
        raise ValidationError(
            f"--mode {args.mode} needs a lexical index and this store offers none "
            "(use --mode vector)",
            field="mode",
        )
    if args.lexical in (None, AUTO_LEXICAL):  # "auto": the store's own, as in Python
        return str(offered[0])
    renamed = DEPRECATED_LEXICAL_MODES.get(args.lexical)
    if args.lexical not in offered and renamed in offered:
        _note(
            f"--lexical {args.lexical} is deprecated: it is named {renamed} now (the same BM25 "
            f"leg), and {args.lexical} will be refused from ragport {REMOVED_IN} "
            "(docs/deprecations.md)"
        )
        return str(renamed)
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


def _check_query_args(args: argparse.Namespace) -> None:
    """The checks of ``ragport query``'s own options, before any store opens."""
    if not args.text.strip():
        raise ValidationError("the query is empty", field="text")
    if args.group and args.principal is None:
        raise ValidationError("--group needs --principal", field="group")
    for weight, name in ((args.vector_weight, "vector"), (args.lexical_weight, "lexical")):
        if not math.isfinite(weight) or weight < 0:
            raise ValidationError(f"--{name}-weight must be a number >= 0", field=f"{name}_weight")


def _reranker(args: argparse.Namespace) -> tuple[Reranker | None, int | None]:
    """The reranker of ``--rerank`` (``None`` for none) and its time budget in ms."""
    if args.rerank_timeout is not None and args.rerank in (None, "none"):
        raise ValidationError("--rerank-timeout needs --rerank KIND", field="rerank_timeout")
    if args.rerank in (None, "none"):
        return None, None
    from ragport.adapters.rerankers import resolve_reranker

    rerank_ms = _rerank_ms(args)
    return resolve_reranker(_rerank_config(args)), rerank_ms


def _live(stores: Stores, scopes: Sequence[Scope]) -> list[Scope]:
    """The scopes that hold something; a note names each empty one, and ``NothingFound`` when
    every one is empty."""
    empty = [s.corpus_id for s in scopes if stores.chunks.current_generation(s) == 0]
    if len(empty) == len(scopes):
        raise NothingFound(
            f"corpus {', '.join(empty)} is empty or unknown (ingest documents with "
            "`ragport ingest PATH --corpus NAME`; `ragport sources` lists what a corpus holds)"
        )
    for name in empty:
        _note(f"corpus {name} is empty or unknown")
    return [s for s in scopes if s.corpus_id not in empty]


def _request(
    args: argparse.Namespace, lexical: str, metadata_filter: Any, rerank_ms: int | None
) -> RetrievalRequest:
    weights = None
    if lexical != "off":
        weights = {
            "vector": 0.0 if args.mode == "lexical" else args.vector_weight,
            "lexical": args.lexical_weight,
        }
    return RetrievalRequest(
        top_k=args.top_k,
        query_candidates=max(DEFAULT_LIMITS.query_candidates, min(4 * args.top_k, 128)),
        lexical=lexical,
        fusion_weights=weights,
        metadata_filter=metadata_filter,
        max_context_tokens=_budget(args.top_k, args.max_tokens),
        collapse_duplicates=not args.keep_duplicates,
        max_rerank_ms=rerank_ms,
    )


def _withheld(denials: Sequence[AccessDenial], principal: str | None) -> WithheldOut | None:
    """What the grants withheld (``None``: nothing), also noted on stderr."""
    if not denials:
        return None
    reasons: dict[str, int] = {}
    for d in denials:
        reasons[d.reason] = reasons.get(d.reason, 0) + 1
    withheld = WithheldOut(len(denials), sum(d.hits for d in denials), reasons)
    summary = ", ".join(f"{reason}: {n}" for reason, n in sorted(reasons.items()))
    _note(
        f"{withheld.sources} source(s) with {withheld.hits} matching chunk(s) withheld "
        f"from {principal} ({summary})"
    )
    return withheld


def _hits_out(
    hits: Sequence[Hit], offsets: Mapping[tuple[str, str], tuple[Any, Any]], score_kind: str
) -> list[HitOut]:
    def offset(h: Hit) -> tuple[Any, Any]:
        return offsets.get((h.provenance.corpus_id, h.id), (None, None))

    return [
        HitOut(
            rank=n,
            citation_id=h.provenance.citation_id,
            id=h.id,
            source_id=h.source_id,
            corpus=h.provenance.corpus_id,
            score=h.score,
            score_kind=score_kind,
            retrieval=h.provenance.retrieval,
            heading=list(h.metadata.get("heading", [])),
            page=h.metadata.get("page"),
            start=offset(h)[0],
            end=offset(h)[1],
            text=h.text,
            metadata=dict(h.metadata),
            provenance=_json.unstructure(h.provenance),
        )
        for n, h in enumerate(hits, start=1)
    ]


def _print_query(out: QueryOut, as_json: bool) -> None:
    if as_json:
        _print_json(out)
        return
    _table(
        ["#", "citation", f"score ({out.score_kind})", "page", "heading"],
        [
            (h.rank, h.citation_id, f"{h.score:.3f}", h.page or "", " > ".join(h.heading))
            for h in out.hits
        ],
    )
    print("context:")
    for line in out.text.splitlines():
        print(f"    {line}")


@contextlib.contextmanager
def _rerank_hint(rerank_ms: int | None) -> Iterator[None]:
    """A reranker out of time: a note says how to give it more, and the error goes on."""
    try:
        yield
    except RerankError as exc:
        if exc.reason == "timeout":
            _note(
                f"the reranker had {rerank_ms} ms; give it more with --rerank-timeout "
                f"SECONDS (at most {HARD_LIMITS.rerank_ms // 1000}), or query without --rerank"
            )
        raise


def _query(args: argparse.Namespace) -> int:
    _check_query_args(args)
    metadata_filter = _filters(args)
    corpora = list(dict.fromkeys(args.corpus))
    scopes = [_scope(args, c) for c in corpora]
    authorization = (
        Authorization(args.principal, args.tenant, group_ids=tuple(args.group or ()))
        if args.principal is not None
        else None
    )
    reranker, rerank_ms = _reranker(args)
    denials: list[AccessDenial] = []
    with _stores(args) as stores:
        lexical = _lexical_for(args, stores)
        live = _live(stores, scopes)
        embedder = _embedder(args, stores, live)
        if reranker is not None:
            _warm(reranker)
        with _rerank_hint(rerank_ms):
            result = retrieve_context(
                args.text,
                embedder=embedder,
                store=stores.chunks,
                scope=live[0] if len(live) == 1 else None,
                scopes=live if len(live) > 1 else None,
                authorization=authorization,
                on_access_denied=denials.append,
                reranker=reranker,
                request=_request(args, lexical, metadata_filter, rerank_ms),
            )
        offsets = _offsets(stores, result.hits) if result.hits else {}
    return _report(args, corpora, lexical, result, offsets, denials)


def _report(
    args: argparse.Namespace,
    corpora: list[str],
    lexical: str,
    result: RetrievalResult,
    offsets: Mapping[tuple[str, str], tuple[Any, Any]],
    denials: Sequence[AccessDenial],
) -> int:
    """Print what ``ragport query`` found (notes on stderr); exit 1 when it found nothing."""
    # A lexical leg means fused ranks (reciprocal rank fusion, 1/(k + rank) summed: about
    # 0.016 to 0.033), never comparable with the vector-only cosine; a reranker reorders the
    # hits and keeps their scores.
    score_kind = "cosine" if lexical == "off" else "rrf"
    withheld = _withheld(denials, args.principal)
    if result.dropped:
        _note(
            f"{result.dropped} hit(s) dropped by the context budget "
            f"({_budget(args.top_k, args.max_tokens)} tokens; raise it with --max-tokens)"
        )
    hits = _hits_out(result.hits, offsets, score_kind)
    out = QueryOut(
        query=args.text,
        corpora=corpora,
        mode=args.mode,
        lexical=None if lexical == "off" else lexical,
        score_kind=score_kind,
        top_k=args.top_k,
        hits=hits,
        text=result.text,
        truncated=result.truncated,
        dropped=result.dropped,
        withheld=withheld,
    )
    _print_query(out, args.json)
    if not hits:
        _note("nothing found")
        return EXIT_FAILED
    return EXIT_OK


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
    # The SDK reports a bad tool argument with pydantic's message; without this each line
    # of it ends with a link to pydantic's documentation, meaningless to the model reading it.
    # pydantic reads the variable once, at its first error message: this process has had none.
    os.environ.setdefault("PYDANTIC_ERRORS_INCLUDE_URL", "0")
    # stdout is the MCP channel: nothing started while opening the stores may write to it.
    with contextlib.ExitStack() as stack:
        with stdout_to_stderr():
            stores = stack.enter_context(_stores(args))
            embedder = _embedder(args, stores, [_scope(args)])
            scope = _scope(args)
            if stores.chunks.current_generation(scope) == 0:
                _note(
                    f"corpus {scope.corpus_id} is empty or unknown; serving it anyway (ingest "
                    "documents with `ragport ingest PATH --corpus NAME`)"
                )
        build_server(
            store=stores.chunks,
            status_store=stores.status,
            embedder=embedder,
            scope=_scope(args),
            authorization=authorization,
        ).run("stdio")
    return EXIT_OK


def register(sub: Any, parents: Parents) -> None:
    """``query`` on ``sub``."""
    query = command(
        sub, "query", "retrieve cited context from one or more corpora",
        [
            'ragport query "parental leave" --corpus handbook',
            'ragport query "leave" --mode hybrid --lexical-weight 2 --top-k 10',
            'ragport query "leave" --principal alice --group staff --filter \'{"lang": "en"}\'',
            'ragport query "leave" --corpus handbook --corpus wiki --json',
        ],
        [parents.stored, parents.embed, parents.json_out],
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
        help="lexical index for --mode lexical|hybrid: one the store offers (bm25 on both "
        "built-in stores; fts, PostgreSQL's old name, is deprecated) or auto, the store's "
        "first (default: ragport.toml, else auto)",
    )
    query.add_argument(
        "--vector-weight", type=float, default=1.0, help="weight of the vector leg in fusion"
    )
    query.add_argument(
        "--lexical-weight", type=float, default=1.0, help="weight of the lexical leg in fusion"
    )
    query.add_argument("--filter", help="metadata filter as JSON (docs/access-control.md)")
    query.add_argument(
        "--under", metavar="FOLDER",
        help="only sources under this folder (their path relative to the corpus root, "
        "e.g. docs/guides/)",
    )  # fmt: skip
    query.add_argument("--principal", help="retrieve as this principal (grants enforced)")
    query.add_argument(
        "--keep-duplicates", action="store_true",
        help="show every copy of the same text (default: the best-ranked copy only)",
    )  # fmt: skip
    query.add_argument("--group", action="append", help="a group of the principal (repeatable)")
    _rerank_options(query)
    query.set_defaults(func=_query)


def _rerank_options(query: argparse.ArgumentParser) -> None:
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
    query.add_argument(
        "--rerank-timeout", type=float, metavar="SECONDS",
        help="time budget of the reranker, above 0 and at most "
        f"{HARD_LIMITS.rerank_ms // 1000} (default: {DEFAULT_LIMITS.local_rerank_ms // 1000} "
        f"for local and embedding, {DEFAULT_LIMITS.rerank_ms / 1000:g} for the others); "
        "past it: RerankError, exit 4",
    )  # fmt: skip


def register_mcp(sub: Any, parents: Parents) -> None:
    """``mcp`` on ``sub``."""
    mcp = command(sub, "mcp", "serve search over MCP (stdio)",
                  ["ragport mcp --corpus handbook --principal alice --group staff"],
                  [parents.common])  # fmt: skip
    mcp.add_argument("--principal", help="the caller every search runs as (grants enforced)")
    mcp.add_argument("--group", action="append", help="a group of the principal (repeatable)")
    mcp.set_defaults(func=_mcp)
