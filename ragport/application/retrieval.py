"""Retrieve cited, access-checked context.

retrieve_context:
1. Validate arguments against the hard ceilings; exactly one of ``scope``/``scopes``; empty
   ``scopes`` (or a blank query) returns an empty result with no embed and no store call.
2. Refuse what the store cannot promise: a lexical mode it does not advertise, or an
   authorization on a store without ACL (``CapabilityError``); a tenant mismatch (``ScopeError``).
3. Drift guard: every scope's stored records must come from the active embedder and dimension
   (``EmbedderMismatchError`` naming the re-index path).
4. Redact and embed the query once.
5. Vector leg per scope at that scope's current generation: ``query_candidates`` records, with
   scope, visibility, tombstones, grants and ``metadata_filter`` inside the store predicate.
   With a lexical mode, both legs come from one ``hybrid_query`` per scope: one snapshot, so
   fused results never mix two versions of a source.
6. Recheck what came back: stored scope among the requested ones, embedder identity; merge
   across scopes keyed on (scope, record id).
7. Tombstone guard: drop candidates whose id, source, lineage or roots are forgotten.
8. Access gate (with an authorization): one ``check_source_access`` per scope with every
   distinct source; denied or failed checks withhold those sources (``on_access_denied``).
9. Render ``[citation-id] text`` blocks until top-k, the byte ceiling or the token ceiling.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

from ragport.application._support import (
    Redaction,
    check_abort,
    check_vectors,
)
from ragport.application.answer import (
    Candidate,
    access_gate,
    build_hits,
    render,
)
from ragport.application.rerank import rerank_hits
from ragport.application.results import RetrievalResult
from ragport.application.retrieval_request import (
    DEFAULT_REQUEST,
    QUERY_MAX_CHARS,
    Request,
    RetrievalRequest,
    check_request,
    lexical_mode_for,
)
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime
from ragport.domain.errors import (
    CapabilityError,
    EmbedderMismatchError,
    ScopeError,
    ValidationError,
)
from ragport.domain.fusion import fuse_ranked
from ragport.domain.model import (
    AccessDecision,
    AccessDenial,
    AccessReason,
    Authorization,
    Capabilities,
    Hit,
    Record,
    RetrievalLeg,
    Scope,
    Trust,
    is_forgotten,
)
from ragport.ports.borrowed import SupportsBorrowedQuery
from ragport.ports.embedder import Embedder, Vector
from ragport.ports.rerank import Reranker
from ragport.ports.runtime import Abort, Telemetry
from ragport.ports.store import (
    ChunkStore,
    ScoredRecord,
    SupportsForgottenLookup,
    SupportsGuardedQuery,
    SupportsLexicalSearch,
    supports,
)

__all__ = ["QUERY_MAX_CHARS", "estimate_tokens", "retrieve_context"]

_TRUST = Trust()


def estimate_tokens(text: str) -> int:
    """The token estimate ragport budgets with: UTF-8 bytes / 4, rounded up."""
    return math.ceil(len(text.encode("utf-8")) / 4)


_Key = tuple[Scope, str]


def _scope_order(key: _Key) -> tuple[str, str, str, str]:
    scope, record_id = key
    return (scope.tenant_id, scope.resource_id, scope.corpus_id, record_id)


def _checked(
    found: Sequence[ScoredRecord],
    scope: Scope,
    *,
    expected: tuple[str, int],
    embedder: Embedder,
) -> list[ScoredRecord]:
    """Recheck what a leg returned: its scope, its embedder, a finite score, no repeats."""
    out: list[ScoredRecord] = []
    seen: set[str] = set()
    same = scope  # a Scope object found equal to ``scope``: the next record's is likely it
    for item in found:
        record = item.record
        if record.scope is not same:
            if record.scope != scope:
                raise ScopeError("the store returned a record from another scope", field="scope")
            same = record.scope
        if record.embedder_id != expected[0] or record.dimensions != expected[1]:
            raise _mismatch(embedder, (record.embedder_id, record.dimensions), (record.id,))
        if not math.isfinite(item.score):
            raise ValidationError("the store returned a non-finite score", field="score")
        if record.id not in seen:
            seen.add(record.id)
            out.append(item)
    return out


class _Read(NamedTuple):
    """What every leg of one query shares: the store, the query vector and how to ask."""

    store: ChunkStore
    vector: Vector
    embedder: Embedder
    expected: tuple[str, int]  # the active embedder's (id, dimensions), read once
    guarded: bool  # the store answers the drift guard with the vector leg
    borrowed: bool  # the vector-only leg lends the store's own records (borrowed_query)
    collapse: bool  # collapse_duplicates
    runtime: Runtime
    store_denied: dict[_Key, AccessReason] | None  # what the store screened, to report

    def on_denied(self, scope: Scope) -> Callable[[Sequence[AccessDecision]], None] | None:
        return None if self.store_denied is None else _collector(self.store_denied, scope)

    def checked(self, found: Sequence[ScoredRecord], scope: Scope) -> list[ScoredRecord]:
        return _checked(found, scope, expected=self.expected, embedder=self.embedder)


def _search(read: _Read, req: Request) -> list[Candidate]:
    """Run each scope's legs and merge them: by cosine with one leg, by RRF with two.

    Each (scope, leg) is its own ranked list in the fusion, so scores from different scopes
    or legs are never compared; candidates are keyed on (scope, record id). A store with
    ``guarded_query`` answers the drift guard with the vector leg: a mismatch raises here.
    ``borrowed`` (the store also offers ``borrowed_query``): the vector-only leg comes from
    ``borrowed_query``, so its candidates hold the store's own records, which nothing here
    changes and only ``build_hits`` reads (on a copy of their metadata).
    """
    if req.lexical != "off":
        return _fused(read, req)
    limit = req.candidates
    if read.guarded and req.authorization is None and req.reranker is None and not read.collapse:
        # Nothing downstream can drop or reorder a candidate (no tombstone re-read, no access
        # gate, no fusion, no reranker, no collapse of duplicates), so the top_k of each
        # scope's top `candidates` are its top_k: asking for more would build, recheck and
        # discard records never rendered.
        limit = min(limit, req.top_k)
    by_cosine: list[Candidate] = []
    for s in req.scopes:
        ranked = read.checked(_vector_leg(read, req, s, limit), s)
        by_cosine += [Candidate(s, item.record, item.score, "vector") for item in ranked]
        check_abort(read.runtime.abort)
    # By cosine, ties by (scope, record id); (scope, record id) is unique (see _checked).
    if len(req.scopes) == 1:
        by_cosine.sort(key=lambda c: (-c.score, c.record.id))
    else:
        by_cosine.sort(key=lambda c: (-c.score, _scope_order((c.scope, c.record.id))))
    return by_cosine


def _vector_leg(read: _Read, req: Request, s: Scope, limit: int) -> Sequence[ScoredRecord]:
    """Scope ``s``'s vector leg: guarded (or borrowed) where the store offers it, else plain."""
    store, on_denied = read.store, read.on_denied(s)
    with read.runtime.effective_telemetry.span("rag.vector"):
        if not read.guarded:
            return store.query(
                s,
                read.vector,
                limit=limit,
                authorization=req.authorization,
                metadata_filter=req.metadata_filter,
                on_denied=on_denied,
            )
        # supports() checked the class; a runtime Protocol check costs ~20 us a call.
        answer = (
            cast(SupportsBorrowedQuery, store).borrowed_query
            if read.borrowed
            else cast(SupportsGuardedQuery, store).guarded_query
        )(
            s,
            read.vector,
            embedder_id=read.expected[0],
            dimensions=read.expected[1],
            limit=limit,
            authorization=req.authorization,
            metadata_filter=req.metadata_filter,
            on_denied=on_denied,
        )
    if answer.foreign_embedders:
        raise _mismatch(read.embedder, sorted(answer.foreign_embedders, key=repr)[0])
    return answer.records


def _fused(read: _Read, req: Request) -> list[Candidate]:
    """Both legs of every scope, each from one ``hybrid_query`` (one snapshot: a replacement
    committed meanwhile is seen by both or by neither, so the fused list never mixes two
    versions of a source), fused by RRF over the union."""
    legs: dict[str, list[_Key]] = {}
    records: dict[_Key, Record] = {}
    for n, s in enumerate(req.scopes):
        with read.runtime.effective_telemetry.span("rag.hybrid"):
            hybrid = cast(SupportsLexicalSearch, read.store).hybrid_query(
                s,
                read.vector,
                req.text,
                embedder_id=read.expected[0],
                dimensions=read.expected[1],
                limit=req.candidates,
                mode=req.lexical,
                authorization=req.authorization,
                metadata_filter=req.metadata_filter,
                on_denied=read.on_denied(s),
            )
        for found_key in sorted(hybrid.foreign_embedders, key=repr):
            raise _mismatch(read.embedder, found_key)
        for leg, found in (("vector", hybrid.vector), ("lexical", hybrid.lexical)):
            ranked = read.checked(found, s)
            legs[f"{leg}:{n}"] = [(s, item.record.id) for item in ranked]
            for item in ranked:  # a record both legs found keeps the vector leg's copy
                records.setdefault((s, item.record.id), item.record)
        check_abort(read.runtime.abort)
    with read.runtime.effective_telemetry.span("rag.fuse"):
        weights = req.fusion_weights
        fused = fuse_ranked(
            legs,
            k=req.rrf_k,
            tie_key=_scope_order,
            weights=None
            if weights is None
            else {leg: weights.get(leg.split(":", 1)[0], 1.0) for leg in legs},
        )
    out = []
    for key, score, found_by in fused:
        kinds = {leg.split(":", 1)[0] for leg in found_by}
        retrieval: RetrievalLeg = (
            "hybrid" if len(kinds) == 2 else ("vector" if "vector" in kinds else "lexical")
        )
        out.append(Candidate(key[0], records[key], score, retrieval))
    return out


def _narrowed(req: Request, *, guarded: bool, collapse: bool, report: bool) -> Request | None:
    """``req`` asking each scope for ``top_k`` candidates, not ``candidates``, where that
    cannot change the answer; else ``None``.

    With an authorization, the vector leg of a guarded store already applies the grants
    (and the forgotten tombstones) before its ``LIMIT``, so in the usual case the access
    gate after it withholds nothing and only the first ``top_k`` are rendered: asking for
    ``candidates`` made the store walk, build and recheck twice the rows (issue 45). The gate
    still rechecks every hit; when it withholds one, ``retrieve_context`` reads the full
    ``candidates`` again. Not narrowed: a lexical leg (fusion ranks over the candidates),
    a reranker or ``collapse_duplicates`` (they look past ``top_k``), an ``on_access_denied``
    callback (the store reports what it screened among its ``candidates``), or a store that
    is not guarded (the tombstone guard may drop a candidate before the gate).
    """
    if (
        req.authorization is None
        or req.lexical != "off"
        or not guarded
        or req.reranker is not None
        or collapse
        or report
        or req.candidates <= req.top_k
    ):
        return None
    return req._replace(candidates=req.top_k)


def _collector(
    store_denied: dict[tuple[Scope, str], AccessReason], scope: Scope
) -> Callable[[Sequence[AccessDecision]], None]:
    """An ``on_denied`` for the store: the first reason per (scope, source) is kept."""

    def collect(decisions: Sequence[AccessDecision]) -> None:
        for d in decisions:
            store_denied.setdefault((scope, d.source_id), d.reason)

    return collect


def _forgotten(
    store: ChunkStore, caps: Capabilities, scopes: Sequence[Scope], found: Sequence[Candidate]
) -> dict[Scope, frozenset[str]]:
    """Per scope, the forgotten ids among what its candidates name (id, source, lineage,
    roots): looked up by those ids where the store can (``SupportsForgottenLookup``, a cost
    that follows the candidates), else every forgotten id of the scope."""
    if not supports(store, "forgotten_lookup", caps):
        return {s: store.list_invalidated_ids(s) for s in scopes}
    named: dict[Scope, set[str]] = {s: set() for s in scopes}
    for c in found:
        r = c.record
        named[c.scope].update((r.id, r.source_id, *r.lineage, *r.roots))
    lookup = cast(SupportsForgottenLookup, store)
    return {
        s: lookup.forgotten_among(s, sorted(ids)) if ids else frozenset()
        for s, ids in named.items()
    }


def _mismatch(
    embedder: Embedder, found: tuple[str | None, int | None], ids: tuple[str, ...] = ()
) -> EmbedderMismatchError:
    return EmbedderMismatchError(
        f"stored records were embedded by {found[0] or 'an unknown embedder'} "
        f"({found[1]} dimensions) but the active embedder is {embedder.id} "
        f"({embedder.dimensions} dimensions); re-index the affected sources with "
        "replace_source under the active embedder before retrieving",
        expected_id=embedder.id,
        expected_dimensions=embedder.dimensions,
        found_id=found[0],
        found_dimensions=found[1],
        record_ids=ids,
    )


def _distinct_texts(ordered: list[Candidate]) -> list[Candidate]:
    """The first (best-ranked) of the candidates whose text is the same, whitespace folded."""
    seen: set[bytes] = set()
    kept: list[Candidate] = []
    for candidate in ordered:
        key = hashlib.sha256(" ".join(candidate.record.text.split()).encode()).digest()
        if key not in seen:
            seen.add(key)
            kept.append(candidate)
    return kept


Gate = Callable[[list[Candidate]], list[Candidate]]
"""The access gate of one query: the candidates its authorization may read."""


def _served(
    store: ChunkStore, caps: Capabilities, req: Request, authorization: Authorization | None
) -> Request:
    """``req`` with the lexical mode the store serves for it; ``CapabilityError`` when the
    store cannot serve that mode or enforce the authorization, ``ScopeError`` when the
    authorization is of another tenant than a requested scope."""
    lexical = req.lexical
    if lexical != "off" and lexical != (served := lexical_mode_for(lexical, caps, stacklevel=3)):
        req = req._replace(lexical=served)
        lexical = served
    if lexical != "off" and not supports(store, "lexical", caps):
        raise CapabilityError(
            f"this store declares lexical mode {lexical!r} but its class does not define "
            "lexical_query and hybrid_query",
            capability="lexical",
        )
    if authorization is not None:
        if caps.authorization != "acl":
            raise CapabilityError(
                "an authorization was given but this store cannot enforce grants",
                capability="authorization",
            )
        for s in req.scopes:
            if s.tenant_id != authorization.tenant_id:
                raise ScopeError(
                    "authorization tenant differs from a requested scope", field="scopes"
                )
    return req


def _reranked(
    req: Request,
    reranker: Reranker,
    hits: list[Hit],
    ordered: list[Candidate],
    gate: Gate | None,
    tel: Telemetry,
    abort: Abort | None,
) -> list[Hit]:
    """``hits`` (built from ``ordered``, in order) reranked under the request's caps, then
    gated again: a revoke that landed meanwhile still withholds."""
    candidate_of = {id(hit): c for hit, c in zip(hits, ordered, strict=True)}
    with tel.span("rag.rerank") as span:
        span.set_attribute("rag.rerank.candidates", len(hits))
        hits = list(
            rerank_hits(
                req.text,
                hits,
                reranker=reranker,
                max_bytes=req.rerank_bytes,
                max_ms=req.rerank_ms,
                concurrency=req.rerank_concurrency,
                runtime=Runtime(abort=abort),  # the texts are redacted already
            )
        )
    check_abort(abort)
    if gate is None:
        return hits
    with tel.span("rag.acl_recheck"):
        kept = gate([candidate_of[id(h)] for h in hits])
    allowed = {id(c) for c in kept}
    return [h for h in hits if id(candidate_of[id(h)]) in allowed]


class _Denials:
    """The denials of one query: each withheld source reported once, whoever withheld it."""

    def __init__(
        self,
        on_access_denied: Callable[[AccessDenial], None] | None,
        authorization: Authorization | None,
    ) -> None:
        self._callback = on_access_denied
        self._reported: set[_Key] = set()
        # What the store screened out among its candidates, collected only to be reported.
        self.store_denied: dict[_Key, AccessReason] | None = (
            {} if on_access_denied is not None and authorization is not None else None
        )

    def report(self, denial: AccessDenial) -> None:
        key = (denial.scope, denial.source_id)
        if self._callback is not None and key not in self._reported:
            self._reported.add(key)
            self._callback(denial)

    def report_store_denied(self) -> None:
        for (denied_scope, source), reason in (self.store_denied or {}).items():
            self.report(AccessDenial(source_id=source, scope=denied_scope, reason=reason, hits=0))


def _prepared(
    store: ChunkStore,
    caps: Capabilities,
    req: Request,
    embedder: Embedder,
    rt: Runtime,
    denials: _Denials,
    collapse: bool,
) -> _Read:
    """Steps 3-4: the drift guard where no leg answers it, then the query embedded once."""
    abort = rt.abort
    # A guarded store answers the drift guard with the vector leg, a hybrid query with its
    # legs (step 5); a plain store is asked here.
    guarded = supports(store, "guarded_query", caps)
    # A lent record is the store's own: its hit copies the metadata (private_reads off).
    borrowed = guarded and req.lexical == "off" and supports(store, "borrowed_query", caps)
    expected = (embedder.id, embedder.dimensions)
    for s in [] if guarded or req.lexical != "off" else req.scopes:
        for found_key in sorted(store.foreign_embedders(s, expected[0], expected[1]), key=repr):
            raise _mismatch(embedder, found_key)
    check_abort(abort)
    with rt.effective_telemetry.span("rag.embed"):
        vector = check_vectors(embedder.embed([req.text]), rows=1, dimensions=expected[1])[0]
    check_abort(abort)
    return _Read(
        store, vector, embedder, expected, guarded, borrowed, collapse, rt, denials.store_denied
    )


def _unforgotten(
    store: ChunkStore, caps: Capabilities, req: Request, ordered: list[Candidate]
) -> list[Candidate]:
    """Step 7, the tombstone guard: ``ordered`` without the candidates a forgotten id names."""
    forgotten = _forgotten(store, caps, req.scopes, ordered)
    return [c for c in ordered if not is_forgotten(c.record, forgotten[c.scope])]


def _gate_of(
    store: ChunkStore,
    authorization: Authorization,
    report: Callable[[AccessDenial], None],
    redact: Redaction,
) -> Gate:
    def gate(candidates: list[Candidate]) -> list[Candidate]:
        return access_gate(store, candidates, authorization, report, redact)

    return gate


def _first_gated(
    read: _Read, req: Request, gate: Gate, ordered: list[Candidate], *, narrowed: bool
) -> list[Candidate]:
    """Step 8, the access gate after fusion, before the reranker. When the store was asked
    for ``top_k`` only (``narrowed``) and the gate withheld a hit the store's predicate let
    through (a grant changed in between, or a store that screens only at the gate), the
    request's full candidates are read again, as without the narrowing, and gated."""
    with read.runtime.effective_telemetry.span("rag.acl_recheck"):
        gated = gate(ordered)
        if narrowed and len(gated) < len(ordered):
            check_abort(read.runtime.abort)
            gated = gate(_search(read, req))
    return gated


def _candidates(
    read: _Read, req: Request, caps: Capabilities, denials: _Denials
) -> tuple[list[Candidate], Gate | None]:
    """Steps 5-8: the legs of every scope, rechecked and merged, the tombstone guard, and the
    first access gate (after fusion, before the reranker); with the gate it applied."""
    narrowed = _narrowed(
        req, guarded=read.guarded, collapse=read.collapse, report=denials.store_denied is not None
    )
    ordered = _search(read, req if narrowed is None else narrowed)
    # 7. Skipped only where it can add nothing: every candidate came from one guarded
    # statement per scope (no lexical leg), which applied every forgotten tombstone committed
    # before it (the SupportsGuardedQuery promise, checked by the contract suite; a store
    # reading a lagging replica checks its answer against the primary's). A hybrid query or a plain store is re-read: that is what catches a store whose
    # legs miss a tombstone.
    if not (read.guarded and req.lexical == "off"):
        ordered = _unforgotten(read.store, caps, req, ordered)
    if req.authorization is None:
        return ordered, None
    gate = _gate_of(read.store, req.authorization, denials.report, read.runtime.redaction)
    return _first_gated(read, req, gate, ordered, narrowed=narrowed is not None), gate


def _answered(
    read: _Read,
    req: Request,
    caps: Capabilities,
    ordered: list[Candidate],
    gate: Gate | None,
    denials: _Denials,
) -> RetrievalResult:
    """Steps 9-11: hits built from the gated candidates, reranked and gated again (a revoke
    that landed meanwhile still withholds), the store's denials reported, then rendered."""
    rt = read.runtime
    check_abort(rt.abort)  # an abort signalled while the legs or the gate ran stops here
    retrieved_at = rt.effective_clock.now()
    if read.collapse:
        ordered = _distinct_texts(ordered)
    # Rendering shows at most top_k hits in order; only a reranker looks further down.
    if req.reranker is None:
        ordered = ordered[: req.top_k]
    hits = build_hits(
        ordered,
        provider=read.store.provider,
        retrieved_at=retrieved_at,
        redact=rt.redaction,
        private_reads=caps.private_reads and not read.borrowed,
    )
    tel = rt.effective_telemetry
    if req.reranker is not None and hits:
        hits = _reranked(req, req.reranker, hits, ordered, gate, tel, rt.abort)
    denials.report_store_denied()
    with tel.span("rag.render"):
        return render(
            req.query,
            hits,
            top_k=req.top_k,
            max_bytes=req.result_bytes,
            max_tokens=req.context_tokens,
        )


def retrieve_context(
    query: str,
    *,
    embedder: Embedder,
    store: ChunkStore,
    scope: Scope | None = None,
    scopes: Sequence[Scope] | None = None,
    request: RetrievalRequest | None = None,
    authorization: Authorization | None = None,
    on_access_denied: Callable[[AccessDenial], None] | None = None,
    reranker: Reranker | None = None,
    runtime: Runtime | None = None,
) -> RetrievalResult:
    """Retrieve cited context for ``query``; see the module docstring for the steps.

    ``request`` (a ``RetrievalRequest``, default ``RetrievalRequest()``) says how: top-k,
    candidates, lexical mode, fusion weights, metadata filter, byte and token caps,
    ``collapse_duplicates``. ``runtime`` (a ``Runtime``) gives telemetry, redaction, limits,
    clock and abort; a number the request leaves at ``None`` takes its value from
    ``runtime.limits``.

    Exactly one of ``scope`` / ``scopes``. With ``authorization`` (a store with ACL only),
    sources it may not read are withheld and reported to ``on_access_denied``. ``reranker``
    reorders the candidates under the request's rerank caps (fail closed: ``RerankError``).
    """
    # 1. arguments
    rt = DEFAULT_RUNTIME if runtime is None else runtime
    if not isinstance(rt, Runtime):
        raise ValidationError("runtime must be a Runtime", field="runtime")
    wanted = DEFAULT_REQUEST if request is None else request
    req = check_request(
        query,
        scope=scope,
        scopes=scopes,
        request=wanted,
        authorization=authorization,
        reranker=reranker,
        redact=rt.redaction,
        limits=rt.limits,
    )
    if not req.scopes or not query.strip():
        return RetrievalResult(
            query=query, trust=_TRUST, text="", hits=(), citations=(), truncated=False
        )
    # 2. capabilities and tenancy
    caps = store.capabilities
    req = _served(store, caps, req, authorization)
    with rt.effective_telemetry.span("rag.retrieve") as root:
        root.set_attribute("rag.scopes", len(req.scopes))
        denials = _Denials(on_access_denied, authorization)
        # 3-4. drift guard, embed once
        read = _prepared(store, caps, req, embedder, rt, denials, wanted.collapse_duplicates)
        # 5-8. legs, tombstone guard, first access gate
        ordered, gate = _candidates(read, req, caps, denials)
        # 9-11. hits, rerank and a fresh gate, render
        return _answered(read, req, caps, ordered, gate, denials)
