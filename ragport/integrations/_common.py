"""What every face shares: a retrieval bound at construction and the metadata a hit carries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from ragport.application.context import (
    check_binding,
    check_retrieve_options,
    retrieve_arguments,
)
from ragport.application.results import RetrievalResult
from ragport.application.retrieval import retrieve_context
from ragport.application.retrieval_request import RetrievalRequest
from ragport.domain.errors import ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.domain.model import Authorization, Hit, Scope
from ragport.ports.embedder import Embedder
from ragport.ports.runtime import Abort
from ragport.ports.store import ChunkStore

__all__ = ["METADATA_KEYS", "BoundRetrieval", "hit_metadata", "pick_top_k"]

METADATA_KEYS = (
    "citation_id",
    "source_id",
    "chunk_id",
    "page",
    "heading",
    "score",
    "retrieval",
    "trust",
    "tenant_id",
    "resource_id",
    "corpus_id",
)


def hit_metadata(hit: Hit) -> dict[str, Any]:
    """The metadata every face attaches to a hit (JSON types only; ``page`` and ``heading``
    are ``None`` when the chunk has none)."""
    p = hit.provenance
    heading = hit.metadata.get("heading")
    page = hit.metadata.get("page")
    return {
        "citation_id": p.citation_id,
        "source_id": hit.source_id,
        "chunk_id": p.chunk_id,
        "page": page if isinstance(page, int) and not isinstance(page, bool) else None,
        "heading": [h for h in heading if isinstance(h, str)]
        if isinstance(heading, list)
        else None,
        "score": float(hit.score),
        "retrieval": p.retrieval,
        "trust": attrs.asdict(hit.trust),
        "tenant_id": p.tenant_id,
        "resource_id": p.resource_id,
        "corpus_id": p.corpus_id,
    }


def pick_top_k(k: object, top_k: object, default: int) -> int:
    """One result count from the ``k`` alias, ``top_k`` or the default; both given is an error."""
    if k is not None and top_k is not None:
        raise ValidationError("pass k or top_k, not both", field="top_k")
    chosen = top_k if top_k is not None else k if k is not None else default
    return check_limit("top_k", chosen)  # type: ignore[arg-type]


def _top_k_once(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` if they leave the result count to the face's own ``top_k`` / ``k``: neither
    a ``top_k`` option nor a ``request`` with its ``top_k`` set (the face would override it)."""
    request = options.get("request")
    if "top_k" in options or (isinstance(request, RetrievalRequest) and request.top_k is not None):
        raise ValidationError("pass top_k once: to the face, not in its options", field="top_k")
    return options


def _read_only(options: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(options))


@attrs.frozen
class BoundRetrieval:
    """``retrieve_context`` with everything but the query and the result count fixed."""

    store: ChunkStore
    embedder: Embedder
    scope: Scope | None
    scopes: tuple[Scope, ...] | None
    authorization: Authorization | None
    top_k: int
    options: Mapping[str, Any] = attrs.field(converter=_read_only)

    @classmethod
    def bind(
        cls,
        *,
        store: ChunkStore,
        embedder: Embedder,
        scope: Scope | None = None,
        scopes: Sequence[Scope] | None = None,
        authorization: Authorization | None = None,
        top_k: int = DEFAULT_LIMITS.top_k,
        options: Mapping[str, Any] | None = None,
    ) -> BoundRetrieval:
        """Validate the binding now (``ValidationError`` naming the field), not at first use."""
        one, many = check_binding(scope, scopes, authorization)
        extra = check_retrieve_options(options or {})
        _top_k_once(extra)
        return cls(
            store=store,
            embedder=embedder,
            scope=one,
            scopes=many,
            authorization=authorization,
            top_k=check_limit("top_k", top_k),
            options=extra,
        )

    def run(
        self,
        query: str,
        *,
        top_k: int | None = None,
        abort: Abort | None = None,
        **overrides: Any,
    ) -> RetrievalResult:
        """Retrieve for ``query``; ``overrides`` may only be retrieve options (never a scope or
        an authorization), and override the bound ones for this call. ``abort`` is this
        call's signal (an async face's cancellation); a bound ``abort`` option still applies,
        so either one stops the call."""
        options = {**self.options, **_top_k_once(check_retrieve_options(overrides))}
        arguments = retrieve_arguments(options, abort=abort)
        count = self.top_k if top_k is None else check_limit("top_k", top_k)
        request = arguments["request"]
        if request is None:
            arguments["request"] = RetrievalRequest(top_k=count)
        else:
            arguments["request"] = attrs.evolve(request, top_k=count)
        return retrieve_context(
            query,
            embedder=self.embedder,
            store=self.store,
            scope=self.scope,
            scopes=self.scopes,
            authorization=self.authorization,
            **arguments,
        )
