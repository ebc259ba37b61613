"""Retrieval quality on judged queries: parse queries and qrels, score rankings, run configurations.

Used by ``ragport eval`` and ``bench/quality.py`` (docs/evaluation.md); the one module of the
evaluation's logic (``ragport.bootstrap.evaluate.read_judged_file`` reads its files bounded,
with the file loader; ``ragport.cli.evaluate`` reads the options and prints).

1. ``parse_queries`` reads JSONL ``{"id", "text"}``;
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
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import attrs

from ragport.application.retrieval import retrieve_context
from ragport.application.retrieval_request import RetrievalRequest
from ragport.domain.errors import ValidationError
from ragport.domain.limits import HARD_LIMITS
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


def _id_text_lines(kind: str, text: str) -> Iterator[tuple[int, str, object]]:
    """Each non-blank JSONL line of ``text`` as ``(line number, checked id, its "text")``: an
    object ``{"id", "text"}`` whose id is a string or an int (made a string)."""
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        item = _json_line(kind, n, raw)
        if not isinstance(item, dict):
            raise _bad(kind, n, 'not a JSON object {"id", "text"}')
        ident = item.get("id")
        if isinstance(ident, int) and not isinstance(ident, bool):
            ident = str(ident)
        yield n, _check_id(kind, n, ident, "id"), item.get("text")


def parse_queries(text: str, *, max_queries: int = MAX_QUERIES) -> list[Query]:
    """Queries from JSONL, one ``{"id": str, "text": str}`` a line (blank lines skipped)."""
    out: list[Query] = []
    seen: set[str] = set()
    for n, qid, query in _id_text_lines("queries", text):
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
    for n, did, body in _id_text_lines("documents", text):
        if not isinstance(body, str):  # empty is allowed: Cranfield has empty abstracts
            raise _bad("documents", n, "text must be a string")
        if len(out) >= max_documents:
            raise ValidationError(
                f"more than {max_documents} documents", field="documents", limit="max_documents"
            )
        out.append(JudgedDocument(did, body))
    return out


MAX_COMPARE = 16
COMPARE_KEYS = (
    "name",
    "mode",
    "lexical",
    "vector-weight",
    "lexical-weight",
    "rerank",
    "candidates",
)


def check_weight(raw: object, name: str) -> float:
    """A fusion weight: a finite number >= 0 (``ValidationError(field=name)``)."""
    try:
        value = float(str(raw))
    except ValueError:
        raise ValidationError(f"{name} must be a number >= 0", field=name) from None
    if not math.isfinite(value) or value < 0:
        raise ValidationError(f"{name} must be a number >= 0", field=name)
    return value


def parse_compare(spec: str) -> dict[str, str]:
    """One ``--compare`` spec, ``KEY=VALUE[,KEY=VALUE...]``, as a dict; keys from
    ``COMPARE_KEYS``, each at most once (``ValidationError(field="compare")``)."""
    out: dict[str, str] = {}
    for item in spec.split(","):
        key, sep, value = item.strip().partition("=")
        key = key.strip().replace("_", "-")
        if not sep or not key or not value.strip():
            raise ValidationError("--compare takes KEY=VALUE[,KEY=VALUE...]", field="compare")
        if key not in COMPARE_KEYS:
            raise ValidationError(
                f"--compare key {key!r} is not one of {', '.join(COMPARE_KEYS)}", field="compare"
            )
        if key in out:
            raise ValidationError(f"--compare names {key} twice", field="compare")
        out[key] = value.strip()
    return out


def check_candidates(raw: str) -> int:
    """Candidates per leg, as digits, within the hard ceiling."""
    if not raw.isdigit() or not 1 <= int(raw) <= HARD_LIMITS.query_candidates:
        raise ValidationError(
            f"candidates must be between 1 and {HARD_LIMITS.query_candidates}", field="candidates"
        )
    return int(raw)
