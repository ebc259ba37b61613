"""Step 1 of ``retrieve_context``: every argument checked once, into one ``Request``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ragport.application._support import Redaction, require_scope
from ragport.domain.errors import ValidationError
from ragport.domain.filters import Filter, parse_filter
from ragport.domain.fusion import check_weights
from ragport.domain.limits import HARD_LIMITS, Limits, check_limit
from ragport.domain.model import Authorization, Scope, validate_text
from ragport.ports.rerank import Reranker

__all__ = ["LEXICAL_MODES", "QUERY_MAX_CHARS", "Request", "check_request"]

LEXICAL_MODES = ("off", "bm25", "fts")
QUERY_MAX_CHARS = HARD_LIMITS.chunk_size


class Request(NamedTuple):
    """The validated arguments of one ``retrieve_context`` call (step 1).

    A named tuple (immutable, built in a third of a frozen attrs instance's time: one per
    query).
    """

    query: str
    text: str  # the query as the store and the reranker see it (redacted)
    scopes: tuple[Scope, ...]
    top_k: int
    candidates: int
    lexical: str
    rrf_k: int
    fusion_weights: Mapping[str, float] | None
    metadata_filter: Filter | None
    authorization: Authorization | None
    reranker: Reranker | None
    rerank_bytes: int
    rerank_ms: int
    rerank_concurrency: int
    result_bytes: int
    context_tokens: int


def _scopes(scope: Scope | None, scopes: Sequence[Scope] | None) -> list[Scope]:
    if (scope is None) == (scopes is None):
        raise ValidationError("pass exactly one of scope or scopes", field="scope")
    if scope is not None:
        return [require_scope(scope)]
    assert scopes is not None
    if isinstance(scopes, Scope) or not isinstance(scopes, Sequence):
        raise ValidationError("scopes must be a sequence of Scope", field="scopes")
    unique = list(dict.fromkeys(require_scope(s, field="scopes") for s in scopes))
    if len(unique) > HARD_LIMITS.scopes_per_retrieve:
        raise ValidationError(
            f"at most {HARD_LIMITS.scopes_per_retrieve} scopes per retrieve",
            field="scopes",
            limit="scopes_per_retrieve",
        )
    return unique


def _check_fusion_weights(fusion_weights: Mapping[str, float]) -> None:
    check_weights(fusion_weights, field="fusion_weights")
    if not set(fusion_weights) <= {"vector", "lexical"}:
        raise ValidationError(
            "fusion_weights keys are 'vector' and 'lexical'", field="fusion_weights"
        )
    if not any(fusion_weights.get(leg, 1.0) for leg in ("vector", "lexical")):
        raise ValidationError("at least one leg must weigh more than 0", field="fusion_weights")


def check_request(
    query: str,
    *,
    scope: Scope | None,
    scopes: Sequence[Scope] | None,
    lexical: str,
    fusion: str,
    fusion_weights: Mapping[str, float] | None,
    metadata_filter: Mapping[str, Any] | None,
    authorization: Authorization | None,
    reranker: Reranker | None,
    redact: Redaction,
    limits: Limits,
    top_k: int | None,
    query_candidates: int | None,
    rrf_k: int | None,
    result_bytes: int | None,
    context_tokens: int | None,
    rerank_bytes: int | None,
    rerank_ms: int | None,
    rerank_concurrency: int | None,
) -> Request:
    """Step 1: every argument checked once; per-call numbers default to ``limits``."""
    validate_text(query, field="query")
    if len(query) > QUERY_MAX_CHARS:
        raise ValidationError(f"query is longer than {QUERY_MAX_CHARS} characters", field="query")
    wanted = _scopes(scope, scopes)
    # A value left at None comes from ``limits``, whose constructor checked it against the
    # same ceilings: only the numbers the caller passed are checked here (each by the
    # ``Limits`` field of its name).
    top_k = limits.top_k if top_k is None else check_limit("top_k", top_k)
    query_candidates = (
        limits.query_candidates
        if query_candidates is None
        else check_limit("query_candidates", query_candidates)
    )
    rrf_k = limits.rrf_k if rrf_k is None else check_limit("rrf_k", rrf_k)
    result_bytes = (
        limits.result_bytes if result_bytes is None else check_limit("result_bytes", result_bytes)
    )
    context_tokens = (
        limits.context_tokens
        if context_tokens is None
        else check_limit("context_tokens", context_tokens)
    )
    rerank_bytes = (
        limits.rerank_bytes if rerank_bytes is None else check_limit("rerank_bytes", rerank_bytes)
    )
    rerank_ms = limits.rerank_ms if rerank_ms is None else check_limit("rerank_ms", rerank_ms)
    rerank_concurrency = (
        limits.rerank_concurrency
        if rerank_concurrency is None
        else check_limit("rerank_concurrency", rerank_concurrency)
    )
    if lexical not in LEXICAL_MODES:
        raise ValidationError("lexical must be 'off', 'bm25' or 'fts'", field="lexical")
    if fusion != "rrf":
        raise ValidationError("fusion must be 'rrf'", field="fusion")
    if fusion_weights is not None:
        _check_fusion_weights(fusion_weights)
    # ValidationError before any embed or read
    parsed_filter = None if metadata_filter is None else parse_filter(metadata_filter)
    if authorization is not None and not isinstance(authorization, Authorization):
        raise ValidationError("authorization must be an Authorization", field="authorization")
    if reranker is not None and not isinstance(reranker, Reranker):
        raise ValidationError("reranker must have a rerank(query, hits) method", field="reranker")
    text = query
    if redact.active:
        text = validate_text(redact(query), field="query")  # a host redactor's output too
    return Request(
        query=query,
        text=text,
        scopes=tuple(wanted),
        top_k=top_k,
        candidates=query_candidates,
        lexical=lexical,
        rrf_k=rrf_k,
        fusion_weights=None if fusion_weights is None else dict(fusion_weights),
        metadata_filter=parsed_filter,
        authorization=authorization,
        reranker=reranker,
        rerank_bytes=rerank_bytes,
        rerank_ms=rerank_ms,
        rerank_concurrency=rerank_concurrency,
        result_bytes=result_bytes,
        context_tokens=context_tokens,
    )
