"""``ragport eval QUERIES QRELS``: retrieval quality of a corpus on judged queries (docs/evaluation.md).

The evaluation's logic (parsing, metrics, the runner, ``--compare`` specs) lives in
``ragport.application.evaluation``; this module reads the options, builds one ``EvalConfig``
per ``--compare`` (or one from the base options), and prints one table or ``--json``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs

from ragport.application import index_chunks
from ragport.application.evaluation import (
    COMPARE_KEYS,
    CUTOFF,
    MAX_COMPARE,
    MODES,
    EvalConfig,
    EvalResult,
    check_candidates,
    check_weight,
    evaluate,
    parse_compare,
    parse_documents,
    parse_qrels,
    parse_queries,
    retriever,
)
from ragport.application.evaluation import MAX_FILE_BYTES as MAX_FILE_BYTES  # its old home
from ragport.bootstrap import Stores, collect_documents, default_root, ingest_files
from ragport.bootstrap.evaluate import read_judged_file
from ragport.cli.config import _config, _embedder, _scope, _stores
from ragport.cli.options import Parents, command
from ragport.cli.output import EXIT_OK, NothingFound, _note, _print_json, _table
from ragport.cli.query import _lexical_for, _rerank_config
from ragport.domain.errors import ValidationError
from ragport.domain.limits import HARD_LIMITS
from ragport.domain.model import Chunk

_T = TypeVar("_T")

EXAMPLES = (
    "ragport eval queries.jsonl qrels.tsv --corpus handbook --mode hybrid",
    "ragport eval q.jsonl qrels.tsv --compare mode=vector --compare mode=hybrid,rerank=fake",
    "ragport eval bench/data/demo-queries.jsonl bench/data/demo-qrels.tsv --store memory:// "
    "--embedder hash --ingest ragport/demo/leave-policy.md --json",
)


@attrs.frozen
class EvalOut:
    """``ragport eval --json``."""

    corpus: str
    qrels_format: str
    k: int
    queries: int
    judged_queries: int
    results: list[EvalResult]


def _parsed(path: str, field: str, parse: Callable[[str], _T]) -> _T:
    """``parse`` of the file ``path``, read bounded (``read_judged_file``); a bad line's
    ``ValidationError`` names the file as well as the line."""
    text = read_judged_file(path, field=field)
    try:
        return parse(text)
    except ValidationError as exc:
        raise ValidationError(f"{path}: {exc}", field=exc.field, limit=exc.limit) from None


def _configs(args: argparse.Namespace, stores: Stores) -> list[EvalConfig]:
    specs = [parse_compare(s) for s in args.compare] if args.compare else [{}]
    if len(specs) > MAX_COMPARE:
        raise ValidationError(f"at most {MAX_COMPARE} --compare", field="compare")
    from ragport.adapters.rerankers import resolve_reranker

    out: list[EvalConfig] = []
    for raw, spec in zip(args.compare or [""], specs, strict=True):
        mode = spec.get("mode", args.mode)
        if mode not in MODES:
            raise ValidationError(f"mode must be one of {', '.join(MODES)}", field="mode")
        explicit_lexical = spec.get("lexical", args.lexical)
        lexical = _lexical_for(argparse.Namespace(mode=mode, lexical=explicit_lexical), stores)
        vector_w = check_weight(spec.get("vector-weight", args.vector_weight), "vector_weight")
        lexical_w = check_weight(spec.get("lexical-weight", args.lexical_weight), "lexical_weight")
        rerank = spec.get("rerank", args.rerank) or "none"
        reranker = None
        if rerank != "none":
            reranker = resolve_reranker(
                _rerank_config(argparse.Namespace(rerank=rerank, rerank_option=args.rerank_option))
            )
        candidates = spec.get("candidates")
        count = args.candidates if candidates is None else check_candidates(candidates)
        name = spec.get("name") or raw or mode
        out.append(
            EvalConfig(
                name=name,
                mode=mode,
                lexical=lexical,
                weights=None if mode == "vector" else {"vector": vector_w, "lexical": lexical_w},
                candidates=count,
                reranker=reranker,
                rerank=rerank,
            )
        )
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValidationError("two --compare configurations share a name", field="compare")
    return out


def _ingest_first(args: argparse.Namespace, stores: Stores, embedder: Any) -> None:
    scope = _scope(args)
    if args.documents:
        docs = _parsed(args.documents, "documents", parse_documents)
        chunks = [Chunk.of(d.id, 0, d.text) for d in docs]
        index_chunks(chunks=chunks, embedder=embedder, store=stores.chunks, scope=scope)
        _note(f"indexed {len(chunks)} document(s) from --documents, one chunk each")
    if args.ingest:
        existing = [p for p in args.ingest if Path(p).exists()]
        root = default_root(existing)
        candidates = collect_documents(args.ingest, root=root)
        outcomes = list(
            ingest_files(
                candidates,
                root=root,
                store=stores.chunks,
                status_store=stores.status,
                embedder=embedder,
                scope=scope,
            )
        )
        failed = [o for o in outcomes if o.state == "failed"]
        for o in failed:
            _note(f"--ingest {o.source_id or o.path}: failed ({o.reason})")
        _note(f"ingested {len(outcomes) - len(failed)} of {len(outcomes)} file(s) from --ingest")
        if failed:
            raise ValidationError(f"{len(failed)} --ingest file(s) failed", field="ingest")


def _eval(args: argparse.Namespace) -> int:
    if not 1 <= args.k <= HARD_LIMITS.top_k:
        raise ValidationError(f"--k must be between 1 and {HARD_LIMITS.top_k}", field="k")
    if args.candidates is not None:
        check_candidates(str(args.candidates))
    if args.mode is None:
        args.mode = "hybrid" if args.lexical is not None else _config(args).query.mode
    queries = _parsed(args.queries, "queries", parse_queries)
    qrels, fmt = _parsed(args.qrels, "qrels", parse_qrels)
    scope = _scope(args)
    depth = max(args.k, CUTOFF)
    with _stores(args) as stores:
        embedder = _embedder(args, stores, [scope])
        if args.documents or args.ingest:
            _ingest_first(args, stores, embedder)
        if stores.chunks.current_generation(scope) == 0:
            raise NothingFound(
                f"corpus {scope.corpus_id} is empty or unknown (ingest documents whose ids are "
                "the qrels' document ids, or pass --ingest / --documents)"
            )
        configs = _configs(args, stores)
        results = []
        for config in configs:
            run = retriever(
                config, embedder=embedder, store=stores.chunks, scope=scope, depth=depth
            )
            results.append(evaluate(queries, qrels, run, config, k=args.k))
    judged = sum(1 for q in queries if any(g > 0 for g in qrels.get(q.id, {}).values()))
    out = EvalOut(scope.corpus_id, fmt, args.k, len(queries), judged, results)
    if judged < len(queries):
        _note(f"{len(queries) - judged} query(ies) without a relevant judgment skipped")
    if args.json:
        _print_json(out)
        return EXIT_OK
    if args.per_query:
        for r in results:
            _table(
                ["query", f"recall@{args.k}", "MRR@10", "nDCG@10", "ms", "top 3"],
                [
                    (s.id, f"{s.recall:.3f}", f"{s.mrr:.3f}", f"{s.ndcg:.3f}",
                     f"{s.latency_ms:.1f}", " ".join(s.ranked[:3]))
                    for s in r.per_query
                ],
                title=f"{r.config}:",
            )  # fmt: skip
    _table(
        ["config", "mode", "rerank", "queries", f"recall@{args.k}", "MRR@10", "nDCG@10",
         "p50 ms", "p95 ms"],
        [
            (r.config, r.mode if r.lexical is None else f"{r.mode} ({r.lexical})", r.rerank,
             r.queries, f"{r.recall:.3f}", f"{r.mrr:.3f}", f"{r.ndcg:.3f}",
             f"{r.p50_ms:.1f}", f"{r.p95_ms:.1f}")
            for r in results
        ],
        title=f"corpus {scope.corpus_id}: {judged} judged of {len(queries)} queries "
        f"(qrels {fmt})",
    )  # fmt: skip
    return EXIT_OK


def register(sub: Any, parents: Parents) -> None:
    """``eval`` on ``sub``."""
    p = command(sub, "eval",
                "score retrieval on judged queries: recall@k, MRR@10, nDCG@10, latency",
                list(EXAMPLES), [parents.common, parents.json_out])  # fmt: skip
    p.add_argument("queries", help='queries as JSONL, {"id": ..., "text": ...} a line')
    p.add_argument("qrels", help="judgments: TREC (qid 0 docid grade) or TSV (qid, docid, grade)")
    p.add_argument("--k", type=int, default=10, help=f"recall cut-off, at most {HARD_LIMITS.top_k}")
    p.add_argument("--mode", choices=MODES,
                   help="vector, lexical or hybrid (default: ragport.toml, else vector)")  # fmt: skip
    p.add_argument(
        "--lexical", help="lexical index for lexical|hybrid (default: the store's first)"
    )
    p.add_argument("--vector-weight", type=float, default=1.0, help="vector leg's fusion weight")
    p.add_argument("--lexical-weight", type=float, default=1.0, help="lexical leg's fusion weight")
    p.add_argument("--candidates", type=int,
                   help=f"candidates per leg, at most {HARD_LIMITS.query_candidates} "
                   "(default: the retrieval default, 20)")  # fmt: skip
    p.add_argument("--rerank", help="reranker kind as for `ragport query` (default: none)")
    p.add_argument("--rerank-option", action="append", metavar="KEY=VALUE",
                   help="a reranker option (repeatable), as for `ragport query`")  # fmt: skip
    p.add_argument("--compare", action="append", metavar="KEY=VALUE[,...]",
                   help="one configuration to score (repeatable; keys: " + ", ".join(COMPARE_KEYS)
                   + "; unset keys take the options above)")  # fmt: skip
    p.add_argument("--ingest", action="append", metavar="PATH",
                   help="ingest these files or folders first, as `ragport ingest` names them")  # fmt: skip
    p.add_argument("--documents", metavar="FILE.jsonl",
                   help='index a JSONL corpus {"id", "text"} first, one chunk per document')  # fmt: skip
    p.add_argument("--per-query", action="store_true", help="also print each query's scores")
    p.set_defaults(func=_eval)
