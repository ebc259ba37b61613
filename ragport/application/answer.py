"""The last steps of ``retrieve_context``: the access gate, the hits and their rendering.

- ``access_gate``: one ``check_source_access`` per scope with every distinct source of the
  candidates; denied or failed checks withhold those sources and are reported.
- ``build_hits``: the canonical ``Hit`` of each candidate, built from the store's record (its
  text redacted when a redactor is active), shared with nobody.
- ``render``: ``[citation-id] text`` blocks in rank order until top-k, the byte ceiling or
  the token ceiling; a block that does not fit is dropped whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import NamedTuple

from ragport.application._support import Redaction
from ragport.application.results import RetrievalResult
from ragport.domain.errors import AbortedError
from ragport.domain.hits import citations_of, ranked_hits
from ragport.domain.model import (
    AccessDenial,
    AccessReason,
    Authorization,
    Hit,
    Record,
    RetrievalLeg,
    Scope,
    Trust,
)
from ragport.ports.store import ChunkStore

__all__ = ["BLOCK_SEPARATOR", "Candidate", "access_gate", "build_hits", "render"]

BLOCK_SEPARATOR = "\n\n"
_SEPARATOR_BYTES = len(BLOCK_SEPARATOR.encode("utf-8"))
_TRUST = Trust()


class Candidate(NamedTuple):
    """A record a leg found in one scope, with its (fused) score and the legs that found it.

    A named tuple, not an attrs class: one is built per candidate of every query, and a
    tuple is built in half the time of a frozen attrs instance.
    """

    scope: Scope
    record: Record
    score: float
    retrieval: RetrievalLeg = "vector"


# Allow-listed function shape (pyproject [tool.ruff.lint]): the access gate's cases read as one decision table.
def access_gate(  # noqa: C901
    store: ChunkStore,
    ordered: list[Candidate],
    authorization: Authorization,
    on_access_denied: Callable[[AccessDenial], None] | None,
    redact: Redaction,
) -> list[Candidate]:
    """One ``check_source_access`` per scope; withhold every source not allowed."""
    by_scope: dict[Scope, list[str]] = {}
    for c in ordered:
        sources = by_scope.setdefault(c.scope, [])
        for source in c.record.access_sources or (c.record.source_id,):
            if source not in sources:
                sources.append(source)
    denied: dict[tuple[Scope, str], tuple[AccessReason, str | None]] = {}
    for s, sources in by_scope.items():
        try:
            decisions = store.check_source_access(s, sources, authorization)
        except AbortedError:
            raise
        except Exception as exc:  # a failed check withholds; it never grants
            error = redact.error(exc)
            for source in sources:
                denied[(s, source)] = ("check_failed", error)
            continue
        for source in sources:
            decision = decisions.get(source)
            if decision is None or not decision.allowed:
                reason: AccessReason = decision.reason if decision is not None else "no_grant"
                denied[(s, source)] = (reason if reason != "granted" else "no_grant", None)
    if not denied:
        return ordered
    kept: list[Candidate] = []
    withheld: dict[tuple[Scope, str], int] = {}
    for c in ordered:
        blocked = [
            src
            for src in (c.record.access_sources or (c.record.source_id,))
            if (c.scope, src) in denied
        ]
        if blocked:
            for src in blocked:
                withheld[(c.scope, src)] = withheld.get((c.scope, src), 0) + 1
        else:
            kept.append(c)
    if on_access_denied is not None:
        for (s, source), count in withheld.items():
            reason, detail = denied[(s, source)]
            on_access_denied(
                AccessDenial(source_id=source, scope=s, reason=reason, hits=count, error=detail)
            )
    return kept


def build_hits(
    ordered: Sequence[Candidate],
    *,
    provider: str,
    retrieved_at: datetime,
    redact: Redaction,
    private_reads: bool = False,
) -> list[Hit]:
    """The canonical hits of ``ordered``, ranked from 1; each text is redacted before anyone
    sees it.

    Built from the store's records and shared with nobody: a reranker gets copies (see
    rerank_hits), and the metadata is a deep copy (``ranked_hits``), so writing to a returned
    hit's nested metadata cannot change a stored record even on a store that hands out its
    own rows (or lends them: ``borrowed_query``). ``private_reads`` (the store declares
    ``Capabilities.private_reads``, which the aliasing contract checks, and the records were
    handed out, not lent): the record's metadata is already the caller's own, at every depth,
    and retrieval holds each record once, so the hit takes it as it is.
    """
    texts = [redact(c.record.text) for c in ordered] if redact.active else None
    return ranked_hits(
        ordered,
        texts=texts,
        provider=provider,
        retrieved_at=retrieved_at,
        trust=_TRUST,
        take_metadata=private_reads,
    )


def render(
    query: str, hits: Sequence[Hit], *, top_k: int, max_bytes: int, max_tokens: int
) -> RetrievalResult:
    """``[citation-id] text`` blocks in order until top-k, the byte or the token ceiling."""
    blocks: list[str] = []
    used_bytes = 0
    truncated = False
    wanted = hits[:top_k]
    # The token estimate of n bytes is ceil(n / 4), and ceil(n / 4) > t exactly when n > 4t
    # (whole numbers): both ceilings are one bound on the bytes.
    budget = min(max_bytes, 4 * max_tokens)
    for hit in wanted:
        block = f"[{hit.provenance.citation_id}] {hit.text}"
        size = len(block) if block.isascii() else len(block.encode("utf-8"))
        extra = size + _SEPARATOR_BYTES if blocks else size
        if used_bytes + extra > budget:
            truncated = True
            break
        used_bytes += extra
        blocks.append(block)
    shown = tuple(wanted[: len(blocks)])
    return RetrievalResult(
        query=query,
        trust=_TRUST,
        text=BLOCK_SEPARATOR.join(blocks),
        hits=shown,
        citations=tuple(citations_of(shown)),
        truncated=truncated,
        dropped=len(wanted) - len(shown),
    )
