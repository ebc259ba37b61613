"""``RetrievalRequest`` (how to retrieve, checked once when built) and step 1 of
``retrieve_context``: every argument checked once, into one ``Request``."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import attrs

from ragport.application._support import Redaction, require_scope
from ragport.domain.deprecation import warn_removal
from ragport.domain.errors import CapabilityError, ValidationError
from ragport.domain.filters import Filter, parse_filter
from ragport.domain.fusion import check_weights
from ragport.domain.lexical import check_lexical_mode
from ragport.domain.limits import HARD_LIMITS, Limits, check_limit
from ragport.domain.model import Authorization, Capabilities, Scope, validate_text
from ragport.ports.rerank import Reranker

__all__ = [
    "AUTO_LEXICAL",
    "DEPRECATED_LEXICAL_MODES",
    "QUERY_MAX_CHARS",
    "Request",
    "RetrievalRequest",
    "auto_lexical_mode",
    "check_authorization",
    "check_request",
    "lexical_mode_for",
]

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


AUTO_LEXICAL = "auto"
"""``RetrievalRequest(lexical="auto")``: the store's own lexical leg, whatever it is named."""


def _lexical(value: str) -> str:
    return check_lexical_mode(value, field="lexical")


def auto_lexical_mode(capabilities: Capabilities) -> str:
    """The mode ``"auto"`` stands for on a store: the first it declares, so that hybrid
    retrieval is asked for the same way of every store (``bm25`` on both built-in stores, a
    third-party store's own name). A store with no lexical leg refuses it:
    ``CapabilityError``, never a silent fall-back to vector-only retrieval."""
    modes = tuple(capabilities.lexical_modes)
    if not modes:
        raise CapabilityError(
            "lexical='auto' needs a store with a lexical leg; this one declares none "
            "(use lexical='off' for vector-only retrieval)",
            capability="lexical",
        )
    return modes[0]


DEPRECATED_LEXICAL_MODES: Mapping[str, str] = {"fts": "bm25"}
"""Old lexical mode names and the name that replaced them. ``fts`` was PostgreSQL's name for
its BM25 leg until 2026-12; both built-in stores now serve ``bm25``. An old name is accepted
for one release on a store that serves its new name and not the old one, with a
``DeprecationWarning``."""


def lexical_mode_for(lexical: str, capabilities: Capabilities, *, stacklevel: int = 2) -> str:
    """The lexical mode ``lexical`` asks of a store with ``capabilities``: ``"off"``; the
    store's own for ``"auto"``; a name the store declares; or, for a deprecated name
    (``DEPRECATED_LEXICAL_MODES``) the store does not declare, its new name, with a
    ``DeprecationWarning``. Any other name is a ``CapabilityError`` naming what the store
    offers."""
    if lexical == "off":
        return lexical
    if lexical == AUTO_LEXICAL:
        return auto_lexical_mode(capabilities)
    modes = tuple(capabilities.lexical_modes)
    renamed = DEPRECATED_LEXICAL_MODES.get(lexical)
    if lexical not in modes and renamed in modes:
        warn_removal(
            f"lexical mode {lexical!r}",
            f"it is named {renamed!r} now (the same BM25 leg)",
            stacklevel=stacklevel + 1,
        )
        return str(renamed)
    if lexical not in modes:
        raise CapabilityError(
            f"this store does not offer lexical mode {lexical!r} (it offers {list(modes)})",
            capability="lexical",
        )
    return lexical


def _fusion(value: str) -> str:
    if value != "rrf":
        raise ValidationError("fusion must be 'rrf'", field="fusion")
    return value


def _weights(value: Mapping[str, float] | None) -> Mapping[str, float] | None:
    if value is None:
        return None
    _check_fusion_weights(value)
    return dict(value)


def _filter_copy(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The caller's filter, copied: the request keeps what it parsed, whatever they change."""
    return None if value is None else copy.deepcopy(dict(value))


def _collapse(value: bool) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(
            "collapse_duplicates must be True or False", field="collapse_duplicates"
        )
    return value


@attrs.frozen(kw_only=True)
class RetrievalRequest:
    """How ``retrieve_context`` retrieves: sizes, legs, fusion, filter and caps.

    Every field is checked when the value is built (``ValidationError`` naming the field), so
    a request that exists is well-formed; build it once and reuse it for many queries.

    - ``top_k`` (default 5), ``query_candidates`` (20, candidates per leg), ``rrf_k`` (60),
      ``max_result_bytes`` (65,536), ``max_context_tokens`` (2,000), ``max_rerank_bytes``
      (65,536), ``max_rerank_ms`` (2,000), ``rerank_concurrency`` (2): a number left at
      ``None`` takes its value from the call's ``Runtime.limits``; a number given must lie
      within its floor and ``HARD_LIMITS`` (``ValidationError(field=..., limit=...)`` names
      the limit, e.g. ``result_bytes``).
    - ``lexical``: ``"off"`` (vector only, the default), ``"auto"`` (hybrid with the store's
      own lexical leg, the first name it declares: the same request on every store), or the
      name of a lexical mode; any name a store declares in ``capabilities.lexical_modes``
      (both built-in stores declare ``bm25``; ``"fts"``, PostgreSQL's old name, is accepted
      for one release with a ``DeprecationWarning``). Whether the store offers it is checked
      per call (``CapabilityError``; ``"auto"`` on a store with no lexical leg too).
    - ``fusion``: ``"rrf"`` (reciprocal-rank fusion, the only one); ``fusion_weights``:
      ``{"vector": w, "lexical": w}`` (finite, >= 0, default 1 each, not both 0); a leg of
      weight 0 is left out, so ``{"vector": 0}`` is lexical-only retrieval.
    - ``metadata_filter``: the filter language of docs/filters.md, parsed here (a malformed
      filter is a ``ValidationError`` before any embed or read).
    - ``collapse_duplicates``: keep only the best-ranked of candidates with the same text
      (whitespace folded), after the access gate.
    """

    top_k: int | None = None
    query_candidates: int | None = None
    lexical: str = attrs.field(default="off", converter=_lexical)
    fusion: str = attrs.field(default="rrf", converter=_fusion)
    rrf_k: int | None = None
    fusion_weights: Mapping[str, float] | None = attrs.field(default=None, converter=_weights)
    metadata_filter: Mapping[str, Any] | None = attrs.field(default=None, converter=_filter_copy)
    max_result_bytes: int | None = None
    max_context_tokens: int | None = None
    max_rerank_bytes: int | None = None
    max_rerank_ms: int | None = None
    rerank_concurrency: int | None = None
    collapse_duplicates: bool = attrs.field(default=False, converter=_collapse)
    _filter: Filter | None = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        # each number by the Limits field (and hard ceiling) of its name
        for limit, value in (
            ("top_k", self.top_k),
            ("query_candidates", self.query_candidates),
            ("rrf_k", self.rrf_k),
            ("result_bytes", self.max_result_bytes),
            ("context_tokens", self.max_context_tokens),
            ("rerank_bytes", self.max_rerank_bytes),
            ("rerank_ms", self.max_rerank_ms),
            ("rerank_concurrency", self.rerank_concurrency),
        ):
            if value is not None:
                check_limit(limit, value)
        given = self.metadata_filter
        object.__setattr__(self, "_filter", None if given is None else parse_filter(given))

    @property
    def parsed_filter(self) -> Filter | None:
        """``metadata_filter`` as parsed when the request was built."""
        return self._filter


DEFAULT_REQUEST = RetrievalRequest()


def check_authorization(authorization: object, limits: Limits) -> Authorization:
    """An ``Authorization`` holding at most ``limits.group_ids`` groups: the deployment's
    per-call ceiling (``Authorization`` itself refused any past the hard one when it was
    built), checked here for every store alike."""
    if not isinstance(authorization, Authorization):
        raise ValidationError("authorization must be an Authorization", field="authorization")
    held = len(authorization.group_ids)
    if held > limits.group_ids:
        raise ValidationError(
            f"the authorization holds {held} group ids, past limits.group_ids of "
            f"{limits.group_ids}; a deployment may raise it with Limits(group_ids=...) up to "
            f"{HARD_LIMITS.group_ids}",
            field="authorization",
            limit="group_ids",
        )
    return authorization


def check_request(
    query: str,
    *,
    scope: Scope | None,
    scopes: Sequence[Scope] | None,
    request: RetrievalRequest,
    authorization: Authorization | None,
    reranker: Reranker | None,
    redact: Redaction,
    limits: Limits,
) -> Request:
    """Step 1: every argument checked once; per-call numbers default to ``limits``."""
    validate_text(query, field="query")
    if len(query) > QUERY_MAX_CHARS:
        raise ValidationError(f"query is longer than {QUERY_MAX_CHARS} characters", field="query")
    if not isinstance(request, RetrievalRequest):
        raise ValidationError("request must be a RetrievalRequest", field="request")
    wanted = _scopes(scope, scopes)
    r = request

    def pick(given: int | None, default: int) -> int:
        return default if given is None else given

    if authorization is not None:
        check_authorization(authorization, limits)
    if reranker is not None and not isinstance(reranker, Reranker):
        raise ValidationError("reranker must have a rerank(query, hits) method", field="reranker")
    text = query
    if redact.active:
        text = validate_text(redact(query), field="query")  # a host redactor's output too
    return Request(
        query=query,
        text=text,
        scopes=tuple(wanted),
        top_k=pick(r.top_k, limits.top_k),
        candidates=pick(r.query_candidates, limits.query_candidates),
        lexical=r.lexical,
        rrf_k=pick(r.rrf_k, limits.rrf_k),
        fusion_weights=r.fusion_weights,
        metadata_filter=r.parsed_filter,
        authorization=authorization,
        reranker=reranker,
        rerank_bytes=pick(r.max_rerank_bytes, limits.rerank_bytes),
        rerank_ms=pick(r.max_rerank_ms, limits.rerank_ms),
        rerank_concurrency=pick(r.rerank_concurrency, limits.rerank_concurrency),
        result_bytes=pick(r.max_result_bytes, limits.result_bytes),
        context_tokens=pick(r.max_context_tokens, limits.context_tokens),
    )
