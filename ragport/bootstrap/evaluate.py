"""Retrieval quality on judged queries: parse queries and qrels, score rankings, run configurations.

Used by ``ragport eval`` and ``bench/quality.py`` (docs/evaluation.md).

1. ``read_judged_file`` reads a queries, qrels or documents file as the loaders read a
   document: resolved, then opened without blocking and checked on its descriptor (a FIFO,
   a device such as ``/dev/zero`` or a socket is refused, even behind a symlink), and read to
   at most ``MAX_FILE_BYTES`` + 1 bytes. ``parse_queries`` reads JSONL ``{"id", "text"}``;
   ``parse_qrels`` reads TREC (``qid 0 docid grade``) or TSV (``qid<TAB>docid<TAB>grade``,
   optional header), detected from the first data line. A bad line (not JSON, nested past
   the parser's stack, the wrong shape) is a ``ValidationError`` whose ``field`` is
   ``queries:N`` or ``qrels:N`` (N counts from 1); no text of the line is quoted.
2. ``recall_at``, ``mrr_at`` and ``ndcg_at`` score one ranking of document ids against one
   query's grades (grade > 0 is relevant; nDCG gain = the grade, linear, with a log2
   discount, as bench/quality.py has always computed it).
3. ``evaluate`` runs one ``EvalConfig`` over every query through ``retrieve_context`` and
   returns an ``EvalResult``: per-query scores, means, latency p50/p95. A query with no
   relevant judgment is skipped and counted (``skipped``), never scored 0 or 1.

A hit's ``source_id`` is the document id the qrels name; a document's later chunks are
collapsed onto its first (best) rank.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs

from ragport.application import retrieve_context
from ragport.application.retrieval_request import RetrievalRequest
from ragport.domain.errors import LoadError, ValidationError
from ragport.domain.limits import HARD_LIMITS, Ceilings
from ragport.domain.model import Scope
from ragport.ports.embedder import Embedder
from ragport.ports.rerank import Reranker
from ragport.ports.store import ChunkStore

MAX_QUERIES = 10_000
MAX_JUDGMENTS = 1_000_000
MAX_ID_CHARS = 256
MAX_QUERY_CHARS = 4_096
MAX_FILE_BYTES = 64 * 1024 * 1024  # each queries, qrels or documents file
CUTOFF = 10  # MRR and nDCG are at 10, recall at --k
MODES = ("vector", "lexical", "hybrid")

Qrels = dict[str, dict[str, int]]


@attrs.frozen
class Query:
    """One judged query."""

    id: str
    text: str


_UNREADABLE = {  # LoadError.reason -> why a judged file is refused
    "not_found": "not found",
    "not_a_file": "not a regular file (a folder, FIFO, device or socket is refused)",
    "too_large": "over {max_bytes} bytes",
    "outside_root": "changed while it was opened",
}


def read_judged_file(
    path: str | os.PathLike[str], *, field: str, max_bytes: int = MAX_FILE_BYTES
) -> str:
    """The UTF-8 text of the file ``path`` (``field``: ``queries``, ``qrels`` or ``documents``,
    as the errors name it), read bounded like a document (see step 1); otherwise a
    ``ValidationError(field=field)`` naming the file (``limit="max_bytes"`` when too large)."""
    from ragport.adapters.loaders.file import FileDocumentLoader

    def refuse(why: str, limit: str | None = None) -> ValidationError:
        return ValidationError(f"{field} file {os.fspath(path)}: {why}", field=field, limit=limit)

    try:
        resolved = Path(path).resolve(strict=True)
    except (OSError, RuntimeError, ValueError):  # missing, a symlink loop, a NUL
        raise refuse("not found") from None
    try:
        loader = FileDocumentLoader(
            root=resolved.parent,
            max_bytes=max_bytes,
            ceilings=Ceilings(parse_bytes=max(max_bytes, HARD_LIMITS.parse_bytes)),
        )
        data = loader.load(resolved.name).data
    except LoadError as exc:
        why = _UNREADABLE.get(exc.reason, "cannot be read").format(max_bytes=max_bytes)
        raise refuse(why, "max_bytes" if exc.reason == "too_large" else None) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise refuse("not UTF-8") from None


def _json_line(kind: str, line: int, raw: str) -> object:
    """One JSONL line; not JSON, or nested past the parser's stack, is ``_bad``."""
    try:
        return json.loads(raw)
    except ValueError:
        raise _bad(kind, line, "not valid JSON") from None
    except RecursionError:
        raise _bad(kind, line, "JSON nested too deeply") from None


def _bad(kind: str, line: int, why: str) -> ValidationError:
    return ValidationError(f"{kind} line {line}: {why}", field=f"{kind}:{line}")


def _check_id(kind: str, line: int, value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_CHARS:
        raise _bad(kind, line, f"{what} must be a non-empty string of at most {MAX_ID_CHARS}")
    return value


def parse_queries(text: str, *, max_queries: int = MAX_QUERIES) -> list[Query]:
    """Queries from JSONL, one ``{"id": str, "text": str}`` a line (blank lines skipped)."""
    out: list[Query] = []
    seen: set[str] = set()
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        item = _json_line("queries", n, raw)
        if not isinstance(item, dict):
            raise _bad("queries", n, 'not a JSON object {"id", "text"}')
        qid = item.get("id")
        if isinstance(qid, int) and not isinstance(qid, bool):
            qid = str(qid)
        qid = _check_id("queries", n, qid, "id")
        query = item.get("text")
        if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
            raise _bad(
                "queries", n, f"text must be a non-empty string of at most {MAX_QUERY_CHARS}"
            )
        if qid in seen:
            raise _bad("queries", n, "duplicate query id")
        seen.add(qid)
        if len(out) >= max_queries:
            raise ValidationError(
                f"more than {max_queries} queries", field="queries", limit="max_queries"
            )
        out.append(Query(qid, query))
    if not out:
        raise ValidationError("no queries", field="queries")
    return out


def _grade(line: int, raw: str) -> int:
    try:
        grade = int(raw)
    except ValueError:
        raise _bad("qrels", line, "the grade is not an integer") from None
    if grade < 0:
        raise _bad("qrels", line, "the grade is negative")
    return grade


def parse_qrels(text: str, *, max_judgments: int = MAX_JUDGMENTS) -> tuple[Qrels, str]:
    """Graded judgments ``{query id: {doc id: grade}}`` and the format found (``trec``/``tsv``).

    TREC: four whitespace-separated fields ``qid iteration docid grade`` (the iteration is
    ignored). TSV: three tab-separated fields ``qid docid grade``; a first line whose grade
    is not an integer is a header. The first data line decides; every line must then match.
    Grade 0 is a judged non-relevant document. A repeated (query, doc) pair is refused.
    """
    lines = text.splitlines()
    fmt: str | None = None
    qrels: Qrels = {}
    count = 0
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if fmt is None:
            tabbed = raw.rstrip("\r\n").split("\t")
            if len(tabbed) == 3:
                fmt = "tsv"
                try:
                    int(tabbed[2].strip())
                except ValueError:
                    continue  # the header
            elif len(raw.split()) == 4:
                fmt = "trec"
            else:
                raise _bad(
                    "qrels", n, "neither TREC (qid 0 docid grade) nor TSV (qid, docid, grade)"
                )
        if fmt == "tsv":
            fields = [f.strip() for f in raw.rstrip("\r\n").split("\t")]
            if len(fields) != 3:
                raise _bad("qrels", n, "a TSV line needs three tab-separated fields")
            qid, did, grade_raw = fields
        else:
            fields = raw.split()
            if len(fields) != 4:
                raise _bad("qrels", n, "a TREC line needs four fields")
            qid, _iteration, did, grade_raw = fields
        qid = _check_id("qrels", n, qid, "the query id")
        did = _check_id("qrels", n, did, "the document id")
        grade = _grade(n, grade_raw)
        judged = qrels.setdefault(qid, {})
        if did in judged:
            raise _bad("qrels", n, "this query and document are judged twice")
        count += 1
        if count > max_judgments:
            raise ValidationError(
                f"more than {max_judgments} judgments", field="qrels", limit="max_judgments"
            )
        judged[did] = grade
    if not qrels or fmt is None:
        raise ValidationError("no judgments", field="qrels")
    return qrels, fmt


def _dedupe(ranked: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranked))


def recall_at(ranked: Sequence[str], grades: Mapping[str, int], k: int) -> float:
    """|relevant in the first k| / |relevant| (relevant: grade > 0); 0 when none is relevant."""
    relevant = {d for d, g in grades.items() if g > 0}
    if not relevant:
        return 0.0
    return len(set(_dedupe(ranked)[:k]) & relevant) / len(relevant)


def mrr_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = CUTOFF) -> float:
    """1 / rank of the first relevant document in the first k, else 0."""
    for rank, doc in enumerate(_dedupe(ranked)[:k], start=1):
        if grades.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def ndcg_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = CUTOFF) -> float:
    """DCG / ideal DCG at k, gain = grade, discount log2(rank + 1); 0 when nothing is relevant."""
    dcg = sum(grades.get(d, 0) / math.log2(i + 2) for i, d in enumerate(_dedupe(ranked)[:k]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile (p in (0, 100]) of ``values``; 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@attrs.frozen
class EvalConfig:
    """One retrieval configuration to score.

    ``lexical`` is the store's lexical mode (``off`` for vector mode); ``weights`` the fusion
    weights (``None``: 1 each); ``candidates`` per leg; ``reranker`` with its own
    ``rerank_candidates`` per leg when given.
    """

    name: str
    mode: str = "vector"
    lexical: str = "off"
    weights: Mapping[str, float] | None = None
    candidates: int | None = None
    reranker: Reranker | None = None
    rerank: str = "none"


@attrs.frozen
class QueryScore:
    """One query's scores under one configuration."""

    id: str
    recall: float
    mrr: float
    ndcg: float
    latency_ms: float
    ranked: list[str]


@attrs.frozen
class EvalResult:
    """One configuration's scores: means over the scored queries, latency over every query run."""

    config: str
    mode: str
    lexical: str | None
    weights: dict[str, float] | None
    rerank: str
    k: int
    queries: int
    skipped: int
    recall: float
    mrr: float
    ndcg: float
    p50_ms: float
    p95_ms: float
    per_query: list[QueryScore]


Retrieve = Callable[[str], list[str]]


def retriever(
    config: EvalConfig, *, embedder: Embedder, store: ChunkStore, scope: Scope, depth: int
) -> Retrieve:
    """A function from query text to ranked source ids under ``config`` (at most ``depth``)."""
    if config.mode not in MODES:
        raise ValidationError(f"mode must be one of {', '.join(MODES)}", field="mode")
    weights = config.weights
    if config.mode == "lexical":
        weights = {**(weights or {}), "vector": 0.0}
    # Rendering ceilings at their maximum: the context budget must not cut a ranked hit.
    rerank_bytes = HARD_LIMITS.rerank_bytes if config.reranker is not None else None
    rerank_ms = HARD_LIMITS.rerank_ms if config.reranker is not None else None

    def run(text: str) -> list[str]:
        result = retrieve_context(
            text,
            embedder=embedder,
            store=store,
            scope=scope,
            reranker=config.reranker,
            request=RetrievalRequest(
                top_k=depth,
                query_candidates=config.candidates,
                lexical="off" if config.mode == "vector" else config.lexical,
                fusion_weights=None if config.mode == "vector" else weights,
                max_rerank_bytes=rerank_bytes,
                max_rerank_ms=rerank_ms,
                max_result_bytes=HARD_LIMITS.result_bytes,
                max_context_tokens=HARD_LIMITS.context_tokens,
            ),
        )
        return [hit.source_id for hit in result.hits]

    return run


def evaluate(
    queries: Sequence[Query],
    qrels: Mapping[str, Mapping[str, int]],
    run: Retrieve,
    config: EvalConfig,
    *,
    k: int = CUTOFF,
    clock: Callable[[], float] = time.perf_counter,
) -> EvalResult:
    """Score ``run`` over ``queries``; queries without a relevant judgment are skipped."""
    if not 1 <= k <= HARD_LIMITS.top_k:
        raise ValidationError(f"k must be between 1 and {HARD_LIMITS.top_k}", field="k")
    scores: list[QueryScore] = []
    skipped = 0
    for query in queries:
        grades = qrels.get(query.id, {})
        if not any(g > 0 for g in grades.values()):
            skipped += 1
            continue
        started = clock()
        ranked = _dedupe(run(query.text))
        elapsed = (clock() - started) * 1e3
        scores.append(
            QueryScore(
                id=query.id,
                recall=recall_at(ranked, grades, k),
                mrr=mrr_at(ranked, grades),
                ndcg=ndcg_at(ranked, grades),
                latency_ms=elapsed,
                ranked=ranked[: max(k, CUTOFF)],
            )
        )

    def mean(values: list[float]) -> float:
        return statistics.fmean(values) if values else 0.0

    latencies = [s.latency_ms for s in scores]
    return EvalResult(
        config=config.name,
        mode=config.mode,
        lexical=None if config.mode == "vector" else config.lexical,
        weights=dict(config.weights) if config.weights is not None else None,
        rerank=config.rerank,
        k=k,
        queries=len(scores),
        skipped=skipped,
        recall=mean([s.recall for s in scores]),
        mrr=mean([s.mrr for s in scores]),
        ndcg=mean([s.ndcg for s in scores]),
        p50_ms=statistics.median(latencies) if latencies else 0.0,
        p95_ms=percentile(latencies, 95),
        per_query=scores,
    )


@attrs.frozen
class JudgedDocument:
    """A document of a JSONL corpus, ``{"id", "text"}`` (other keys ignored)."""

    id: str
    text: str


def parse_documents(text: str, *, max_documents: int = 1_000_000) -> list[JudgedDocument]:
    """Documents from JSONL, one ``{"id", "text"}`` a line (the Cranfield corpus's form)."""
    out: list[JudgedDocument] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        item = _json_line("documents", n, raw)
        if not isinstance(item, dict):
            raise _bad("documents", n, 'not a JSON object {"id", "text"}')
        did = item.get("id")
        if isinstance(did, int) and not isinstance(did, bool):
            did = str(did)
        did = _check_id("documents", n, did, "id")
        body = item.get("text")
        if not isinstance(body, str):  # empty is allowed: Cranfield has empty abstracts
            raise _bad("documents", n, "text must be a string")
        if len(out) >= max_documents:
            raise ValidationError(
                f"more than {max_documents} documents", field="documents", limit="max_documents"
            )
        out.append(JudgedDocument(did, body))
    return out
