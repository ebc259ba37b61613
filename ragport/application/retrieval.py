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
from typing import cast

from ragport.application._support import (
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


def _search(
    store: ChunkStore,
    req: Request,
    vector: Vector,
    *,
    embedder: Embedder,
    expected: tuple[str, int],
    guarded: bool,
    runtime: Runtime,
    store_denied: dict[tuple[Scope, str], AccessReason] | None = None,
    borrowed: bool = False,
    collapse: bool = False,
) -> list[Candidate]:
    """Run each scope's legs and merge them: by cosine with one leg, by RRF with two.

    Each (scope, leg) is its own ranked list in the fusion, so scores from different scopes
    or legs are never compared; candidates are keyed on (scope, record id). A store with
    ``guarded_query`` answers the drift guard with the vector leg: a mismatch raises here.
    ``borrowed`` (the store also offers ``borrowed_query``): the vector-only leg comes from
    ``borrowed_query``, so its candidates hold the store's own records, which nothing here
    changes and only ``build_hits`` reads (on a copy of their metadata).
    """
    abort, telemetry = runtime.abort, runtime.effective_telemetry
    embedder_id, dimensions = expected
    lexical, limit, authorization, metadata_filter = (
        req.lexical,
        req.candidates,
        req.authorization,
        req.metadata_filter,
    )
    if (
        lexical == "off"
        and guarded
        and authorization is None
        and req.reranker is None
        and not collapse
    ):
        # Nothing downstream can drop or reorder a candidate (no tombstone re-read, no access
        # gate, no fusion, no reranker, no collapse of duplicates), so the top_k of each scope's top `candidates` are its
        # top_k: asking for more would build, recheck and discard records never rendered.
        limit = min(limit, req.top_k)
    legs: dict[str, list[_Key]] = {}
    records: dict[_Key, Record] = {}
    by_cosine: list[Candidate] = []  # the one leg's candidates when lexical is off
    for n, s in enumerate(req.scopes):
        on_denied = None if store_denied is None else _collector(store_denied, s)
        lexical_found: Sequence[ScoredRecord] = ()
        if lexical != "off":
            # Both legs from one snapshot: a replacement committed meanwhile is seen by both
            # or by neither, so the fused list never mixes two versions of a source.
            with telemetry.span("rag.hybrid"):
                hybrid = cast(SupportsLexicalSearch, store).hybrid_query(
                    s,
                    vector,
                    req.text,
                    embedder_id=embedder_id,
                    dimensions=dimensions,
                    limit=limit,
                    mode=lexical,
                    authorization=authorization,
                    metadata_filter=metadata_filter,
                    on_denied=on_denied,
                )
            for found_key in sorted(hybrid.foreign_embedders, key=repr):
                raise _mismatch(embedder, found_key)
            found, lexical_found = hybrid.vector, hybrid.lexical
        elif guarded:
            with telemetry.span("rag.vector"):
                # supports() checked the class; a runtime Protocol check costs ~20 us a call.
                answer = (
                    cast(SupportsBorrowedQuery, store).borrowed_query
                    if borrowed
                    else cast(SupportsGuardedQuery, store).guarded_query
                )(
                    s,
                    vector,
                    embedder_id=embedder_id,
                    dimensions=dimensions,
                    limit=limit,
                    authorization=authorization,
                    metadata_filter=metadata_filter,
                    on_denied=on_denied,
                )
            if answer.foreign_embedders:
                raise _mismatch(embedder, sorted(answer.foreign_embedders, key=repr)[0])
            found = answer.records
        else:
            with telemetry.span("rag.vector"):
                found = store.query(
                    s,
                    vector,
                    limit=limit,
                    authorization=authorization,
                    metadata_filter=metadata_filter,
                    on_denied=on_denied,
                )
        ranked = _checked(found, s, expected=expected, embedder=embedder)
        if lexical == "off":
            by_cosine += [Candidate(s, item.record, item.score, "vector") for item in ranked]
        else:
            legs[f"vector:{n}"] = [(s, item.record.id) for item in ranked]
            for item in ranked:
                records[(s, item.record.id)] = item.record
            ranked = _checked(lexical_found, s, expected=expected, embedder=embedder)
            legs[f"lexical:{n}"] = [(s, item.record.id) for item in ranked]
            for item in ranked:
                records.setdefault((s, item.record.id), item.record)
        check_abort(abort)
    if lexical == "off":
        # By cosine, ties by (scope, record id); (scope, record id) is unique (see _checked).
        if len(req.scopes) == 1:
            by_cosine.sort(key=lambda c: (-c.score, c.record.id))
        else:
            by_cosine.sort(key=lambda c: (-c.score, _scope_order((c.scope, c.record.id))))
        return by_cosine
    with telemetry.span("rag.fuse"):
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


# Allow-listed function shape (pyproject [tool.ruff.lint]): a use case with its public keyword surface; the write-options value of issue 42 narrows it.
def retrieve_context(  # noqa: C901, PLR0915
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
    redact = rt.redaction
    req = check_request(
        query,
        scope=scope,
        scopes=scopes,
        request=wanted,
        authorization=authorization,
        reranker=reranker,
        redact=redact,
        limits=rt.limits,
    )
    lexical = req.lexical
    collapse_duplicates = wanted.collapse_duplicates
    abort = rt.abort
    tel = rt.effective_telemetry
    clk = rt.effective_clock
    if not req.scopes or not query.strip():
        return RetrievalResult(
            query=query, trust=_TRUST, text="", hits=(), citations=(), truncated=False
        )

    # 2. capabilities and tenancy
    caps = store.capabilities
    req = _served(store, caps, req, authorization)
    lexical = req.lexical

    with tel.span("rag.retrieve") as root:
        root.set_attribute("rag.scopes", len(req.scopes))
        # 3. drift guard (a guarded store answers it with the vector leg, a hybrid query with
        # its legs, in step 5)
        guarded = supports(store, "guarded_query", caps)
        # A lent record is the store's own: its hit copies the metadata (private_reads off).
        borrowed = guarded and lexical == "off" and supports(store, "borrowed_query", caps)
        # The active embedder's identity, read once: every check of this query uses it.
        expected = (embedder.id, embedder.dimensions)
        for s in [] if guarded or lexical != "off" else req.scopes:
            for found_key in sorted(store.foreign_embedders(s, expected[0], expected[1]), key=repr):
                raise _mismatch(embedder, found_key)
        check_abort(abort)

        # 4. embed once
        with tel.span("rag.embed"):
            vector = check_vectors(embedder.embed([req.text]), rows=1, dimensions=expected[1])[0]
        check_abort(abort)

        # Each withheld source is reported once per query, whoever withheld it.
        reported: set[tuple[Scope, str]] = set()

        def report(denial: AccessDenial) -> None:
            key = (denial.scope, denial.source_id)
            if on_access_denied is not None and key not in reported:
                reported.add(key)
                on_access_denied(denial)

        report_all = on_access_denied is not None and authorization is not None
        store_denied: dict[tuple[Scope, str], AccessReason] | None = {} if report_all else None

        # 5-6. legs per scope, rechecked, then fused over the union
        def search(r: Request) -> list[Candidate]:
            return _search(
                store,
                r,
                vector,
                embedder=embedder,
                expected=expected,
                guarded=guarded,
                runtime=rt,
                store_denied=store_denied,
                borrowed=borrowed,
                collapse=collapse_duplicates,
            )

        narrowed = (
            None
            if authorization is None
            else _narrowed(req, guarded=guarded, collapse=collapse_duplicates, report=report_all)
        )
        ordered = search(req if narrowed is None else narrowed)

        # 7. tombstone guard. Skipped only where it can add nothing: every candidate came from
        # one guarded statement per scope (no lexical leg), which applied the forgotten
        # tombstones in the same snapshot it read the rows in (the SupportsGuardedQuery
        # promise, checked by the contract suite). A hybrid query or a plain store is
        # re-read: that is what catches a store whose legs miss a tombstone.
        if not (guarded and lexical == "off"):
            forgotten = _forgotten(store, caps, req.scopes, ordered)
            ordered = [c for c in ordered if not is_forgotten(c.record, forgotten[c.scope])]

        # 8. first access gate (after fusion, before rerank)
        gate: Gate | None = None
        if authorization is not None:
            who = authorization

            def gate(candidates: list[Candidate]) -> list[Candidate]:
                return access_gate(store, candidates, who, report, redact)

            with tel.span("rag.acl_recheck"):
                gated = gate(ordered)
                if narrowed is not None and len(gated) < len(ordered):
                    # The gate withheld a hit the store's predicate let through (a grant
                    # changed in between, or a store that screens only at the gate): read
                    # the request's full candidates, as without the narrowing, and gate them.
                    check_abort(abort)
                    gated = gate(search(req))
            ordered = gated
        check_abort(abort)
        retrieved_at = clk.now()
        if collapse_duplicates:
            ordered = _distinct_texts(ordered)
        # Rendering shows at most top_k hits in order; only a reranker looks further down.
        if reranker is None:
            ordered = ordered[: req.top_k]
        hits = build_hits(
            ordered,
            provider=store.provider,
            retrieved_at=retrieved_at,
            redact=redact,
            private_reads=caps.private_reads and not borrowed,
        )

        # 9-10. rerank, then a fresh gate: a revoke that landed meanwhile still withholds
        if req.reranker is not None and hits:
            hits = _reranked(req, req.reranker, hits, ordered, gate, tel, abort)

        for (denied_scope, source), reason in (store_denied or {}).items():
            report(AccessDenial(source_id=source, scope=denied_scope, reason=reason, hits=0))

        # 11. render
        with tel.span("rag.render"):
            return render(
                query,
                hits,
                top_k=req.top_k,
                max_bytes=req.result_bytes,
                max_tokens=req.context_tokens,
            )
