"""Rerankers behind an HTTP API: Hugging Face TEI, OpenAI-compatible ``/rerank``, and Voyage AI.

All three are synchronous httpx clients with the same guard rails:

- ``base_url`` must be ``https://``; plain ``http://`` only to a loopback host (127.0.0.0/8,
  ::1, ``localhost``) and only with ``allow_loopback=True``. No credentials, query or fragment
  in the URL; checked in the constructor. Redirects are not followed. Only Voyage has a
  default URL (its own API).
- One ``POST {base_url}/rerank`` per ``rerank`` call with every candidate; ``top_k`` is never
  sent, so the server scores them all. ``TeiReranker(max_batch=n)`` is the one exception: it
  splits a longer candidate list into requests of at most ``n``, sends up to
  ``max_concurrency`` of them at once (default 4, ceiling 16) and merges the scores in input
  order; one failed request cancels those not yet sent and fails the call.
- ``timeout_ms`` is the deadline of the whole call: every phase of every request waits at most
  what is left of it, and it is checked between body chunks (a server that drips its answer
  cannot stretch it).
- The body is streamed and counted (``Accept-Encoding: identity`` is asked for); past
  ``max_response_bytes`` the request is abandoned.
- Answers are parsed strictly: the right JSON types, every index exactly once and in range
  (an int, not a bool), every score a finite JSON number (``NaN``/``Infinity`` tokens,
  strings and booleans are refused). Extra keys in items are ignored.

``rerank(query, hits)`` returns ``(hit, score)`` pairs, highest score first; equal scores keep
the input order. Every failure is a ``RerankError`` whose message names the host and the HTTP
status or the failure's type only: never the API key, the URL path, the query or a document.
Nothing is chained (``__cause__`` and ``__context__`` are ``None``): httpx's exceptions hold
the request, whose body is the query and the documents. Bad constructor arguments are
``ValidationError(field=...)``; a missing httpx is ``CapabilityError`` naming ``ragport[http]``.

The API key travels only in ``Authorization: Bearer``; it never appears in an error, a log
line or ``repr()``. ``http=HttpOptions(...)`` holds the transport: ``client`` (an
``httpx.Client``, never closed by ragport) or ``transport`` (an ``httpx.BaseTransport``) to own
retries, proxies or mTLS, ``allow_loopback``, ``max_response_bytes`` (default 64 KiB) and, for
``TeiReranker``, ``max_concurrency`` (default 4); the time budget stays ``timeout_ms``. The
flat keywords of those names still work for one release, with a ``DeprecationWarning``. A client built
here ignores proxy and netrc settings from the environment (``trust_env=False``).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragport.adapters._http import (
    HttpFailure,
    OwnedClient,
    check_api_key,
    check_base_url,
    check_int,
    check_model,
    failure_error,
    parse_json,
    place_by_index,
    post_json,
    run_in_order,
)
from ragport.adapters.http_options import HttpOptions, check_http, http_fold
from ragport.domain.deprecation import keyword_folds
from ragport.domain.errors import RerankError, ValidationError, raise_unchained
from ragport.domain.limits import HARD_LIMITS, check_limit
from ragport.domain.model import Hit

if TYPE_CHECKING:
    pass

__all__ = ["OpenAICompatibleReranker", "TeiReranker", "VoyageReranker"]

DEFAULT_MAX_RESPONSE_BYTES = 65_536
VOYAGE_BASE_URL = "https://api.voyageai.com/v1"
_MAX_RESPONSE_BYTES_CEILING = 16 * 1024 * 1024
_MIN_RESPONSE_BYTES = 256
_MAX_BATCH_CEILING = 4_096


def _check_timeout_ms(value: object) -> int:
    # The seam's hard ceiling: a reranker may never be given longer than rerank_hits allows.
    try:
        return check_limit("rerank_ms", value)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ValidationError(str(exc), field="timeout_ms", limit="rerank_ms") from None


def _finite(value: object) -> float | None:
    """``value`` as a float if it is a finite JSON number (not a bool), else None."""
    if type(value) is not float and type(value) is not int:
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer with hundreds of digits
        return None
    return number if math.isfinite(number) else None


class _HttpReranker(OwnedClient):
    """The transport, limits and output checks the three API dialects share."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None,
        model_required: bool,
        api_key: str | None,
        api_key_required: bool,
        timeout_ms: int,
        http: HttpOptions,
    ):
        if http.timeout_s is not None:
            raise ValidationError(
                "a reranker's time budget is timeout_ms (the whole rerank call), not "
                "http.timeout_s",
                field="http",
            )
        self._base_url, self._host = check_base_url(base_url, http.allow_loopback)
        self._model = check_model(model, model_required)
        self._api_key = check_api_key(api_key, api_key_required)
        self._timeout_ms = _check_timeout_ms(timeout_ms)
        self._max_response_bytes = check_int(
            DEFAULT_MAX_RESPONSE_BYTES
            if http.max_response_bytes is None
            else http.max_response_bytes,
            "max_response_bytes",
            _MIN_RESPONSE_BYTES,
            _MAX_RESPONSE_BYTES_CEILING,
        )
        self._init_client(
            http.client, http.transport, what="HTTP rerankers", capability="reranking"
        )

    def __repr__(self) -> str:
        key = "<set>" if self._api_key is not None else None
        return (
            f"{type(self).__name__}(base_url={self._base_url!r}, model={self._model!r}, "
            f"timeout_ms={self._timeout_ms}, max_response_bytes={self._max_response_bytes}, "
            f"api_key={key})"
        )

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[tuple[Hit, float]]:
        hits = list(hits)
        if not hits:
            return []
        deadline = time.monotonic() + self._timeout_ms / 1000
        scores = self._scores(query, [hit.text for hit in hits], deadline)
        order = sorted(range(len(hits)), key=lambda i: -scores[i])  # stable: ties keep order
        return [(hits[i], scores[i]) for i in order]

    def _scores(self, query: str, documents: list[str], deadline: float) -> list[float]:
        body = self._post(self._payload(query, documents), deadline)
        return self._parse(self._json(body), len(documents))

    def _payload(self, query: str, documents: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def _items(self, doc: object) -> list[Any]:
        """The list of ``{index, score}`` items inside the answer's JSON document."""
        raise NotImplementedError

    _score_key: str

    def _parse(self, doc: object, count: int) -> list[float]:
        return place_by_index(self._items(doc), count, self._score, self._malformed)

    def _score(self, item: dict[str, Any]) -> float:
        score = _finite(item.get(self._score_key))
        if score is None:
            raise self._malformed(f'a result has a missing or non-finite "{self._score_key}"')
        return score

    def _malformed(self, what: str) -> RerankError:
        return RerankError(f"malformed rerank response from {self._host}: {what}")

    def _json(self, body: bytes) -> object:
        return parse_json(body, self._malformed)

    def _post(self, payload: dict[str, Any], deadline: float) -> bytes:
        """POST ``payload`` as JSON; return the raw 2xx body, read under the byte ceiling."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._failed(HttpFailure("timeout"))
        try:
            return post_json(
                self._client,
                self._base_url + "/rerank",
                payload,
                api_key=self._api_key,
                timeout_s=remaining,
                deadline=deadline,
                max_bytes=self._max_response_bytes,
            )
        except HttpFailure as failure:
            raise_unchained(self._failed(failure))

    def _failed(self, failure: HttpFailure) -> Exception:
        """The error for a failed POST, by kind only: httpx's exception holds the request body."""
        return failure_error(
            failure,
            service="rerank",
            host=self._host,
            within=f"{self._timeout_ms} ms",
            max_bytes=self._max_response_bytes,
            error=RerankError,
        )


_TRANSPORT = ("client", "transport", "allow_loopback", "max_response_bytes")


def _single_request(http: HttpOptions) -> HttpOptions:
    """``http`` for a reranker that sends one request per call (no ``max_concurrency``)."""
    if http.max_concurrency is not None:
        raise ValidationError(
            "this reranker sends one request per call: http.max_concurrency is TeiReranker's",
            field="http",
        )
    return http


class TeiReranker(_HttpReranker):
    """``POST {base_url}/rerank`` with ``{"query", "texts", "raw_scores": false}``, as Hugging
    Face text-embeddings-inference speaks it; answer ``[{"index", "score"}, ...]``.

    TEI serves one model, so ``model`` only names it in ``repr``. TEI refuses more than
    ``--max-client-batch-size`` (default 32) texts per request with HTTP 413/422, which is a
    ``RerankError`` here; pass ``max_batch=32`` (or the server's setting) to split a longer
    candidate list into several requests instead. Their scores are merged as they are: with
    ``raw_scores`` false each score is a per-pair probability, comparable across requests.
    All requests of one call share the ``timeout_ms`` deadline. Up to ``max_concurrency``
    of them (default 4, ceiling 16, as the HTTP embedders' ``embed_concurrency``) are in
    flight at once on worker threads sharing the client; a failed one cancels those not yet
    sent, the call raises the first failure in input order and never merges partial scores.
    """

    _score_key = "score"

    # The transport keywords of old fold into http=HttpOptions(...) for one release.
    @keyword_folds((http_fold(*_TRANSPORT, "max_concurrency"),), name="TeiReranker")
    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        timeout_ms: int = 2_000,
        api_key: str | None = None,
        max_batch: int | None = None,
        http: HttpOptions | None = None,
    ):
        options = check_http(http)
        super().__init__(
            base_url,
            model=model,
            model_required=False,
            api_key=api_key,
            api_key_required=False,
            timeout_ms=timeout_ms,
            http=options,
        )
        self._max_batch = (
            None if max_batch is None else check_int(max_batch, "max_batch", 1, _MAX_BATCH_CEILING)
        )
        self._max_concurrency = check_int(
            4 if options.max_concurrency is None else options.max_concurrency,
            "max_concurrency",
            1,
            HARD_LIMITS.embed_concurrency,
        )

    def __repr__(self) -> str:
        return (
            f"{super().__repr__()[:-1]}, max_batch={self._max_batch}, "
            f"max_concurrency={self._max_concurrency})"
        )

    def _scores(self, query: str, documents: list[str], deadline: float) -> list[float]:
        step = self._max_batch or len(documents)
        one = super()._scores
        parts = run_in_order(
            [
                functools.partial(one, query, documents[start : start + step], deadline)
                for start in range(0, len(documents), step)
            ],
            lambda _index, scores: scores,
            self._max_concurrency,
            thread_name="ragport-rerank",
        )
        return [score for part in parts for score in part]

    def _payload(self, query: str, documents: list[str]) -> dict[str, Any]:
        return {"query": query, "texts": documents, "raw_scores": False}

    def _items(self, doc: object) -> list[Any]:
        if not isinstance(doc, list):
            raise self._malformed("expected a JSON array of results")
        return doc


class _DocumentsReranker(_HttpReranker):
    """The hosted shape: ``{"model", "query", "documents"}`` in, a list of
    ``{"index", "relevance_score"}`` under ``_results_key`` out."""

    _score_key = "relevance_score"
    _results_key: str

    def _payload(self, query: str, documents: list[str]) -> dict[str, Any]:
        return {"model": self._model, "query": query, "documents": documents}

    def _items(self, doc: object) -> list[Any]:
        key = self._results_key
        if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
            raise self._malformed(f'expected an object with a "{key}" array')
        items: list[Any] = doc[key]
        return items


class OpenAICompatibleReranker(_DocumentsReranker):
    """``POST {base_url}/rerank`` with ``{"model", "query", "documents"}``; answer
    ``{"results": [{"index", "relevance_score"}, ...]}``, the shape vLLM, Jina, Cohere-style
    gateways and LiteLLM speak.

    Servers that echo each document back in its result spend ``max_response_bytes`` on it:
    raise the ceiling for them.
    """

    _results_key = "results"

    @keyword_folds((http_fold(*_TRANSPORT),), name="OpenAICompatibleReranker")
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_ms: int = 2_000,
        http: HttpOptions | None = None,
    ):
        super().__init__(
            base_url,
            model=model,
            model_required=True,
            api_key=api_key,
            api_key_required=False,
            timeout_ms=timeout_ms,
            http=_single_request(check_http(http)),
        )


class VoyageReranker(_DocumentsReranker):
    """Voyage AI: ``POST {base_url}/rerank`` with ``{"model", "query", "documents"}``; answer
    ``{"data": [{"index", "relevance_score"}, ...]}``. ``api_key`` is required.
    """

    _results_key = "data"

    @keyword_folds((http_fold(*_TRANSPORT),), name="VoyageReranker")
    def __init__(
        self,
        api_key: str,
        *,
        model: str = "rerank-2",
        base_url: str = VOYAGE_BASE_URL,
        timeout_ms: int = 2_000,
        http: HttpOptions | None = None,
    ):
        super().__init__(
            base_url,
            model=model,
            model_required=True,
            api_key=api_key,
            api_key_required=True,
            timeout_ms=timeout_ms,
            http=_single_request(check_http(http)),
        )
