"""Embedders behind an HTTP API: OpenAI-compatible ``/embeddings`` and Hugging Face TEI ``/embed``.

Both are synchronous httpx clients with the same guard rails:

- ``base_url`` must be ``https://``; plain ``http://`` only to a loopback host (127.0.0.0/8,
  ::1, ``localhost``) and only with ``allow_loopback=True``. No credentials, query or fragment
  in the URL. Redirects are not followed.
- ``dimensions`` is required: the port needs ``id`` and ``dimensions`` before the first call,
  and every answer must have exactly that width.
- At most ``batch_size`` texts per request (hard ceiling 128, the ``embed_batch`` limit); a
  longer input becomes several requests. Up to ``max_concurrency`` of them are in flight at
  once (default 4, hard ceiling 16, the ``embed_concurrency`` limit), on worker threads that
  share the one ``httpx.Client``; rows come back in input order whatever order the answers
  arrive in. ``max_concurrency=1`` sends them one after another on the calling thread.
- Every phase of a request (connect, write, each read) waits at most ``timeout_s``, and the
  whole answer must have arrived by then (checked between body chunks). The body is streamed
  and counted; past ``max_response_bytes`` (decoded) the request is abandoned.
- Answers are parsed strictly: the right JSON types, one row per text (OpenAI: every
  ``index`` exactly once), every row ``dimensions`` wide, every value a finite JSON number
  (``NaN``/``Infinity`` tokens, strings and booleans are refused).
- Rows are L2-normalised here, whatever the server did, so the port's unit-length promise
  holds for every server. A row of zeros stays zero.

Failures:

- A batch that fails fails the whole ``embed`` call: the batches not yet sent are cancelled,
  those in flight are waited for (no thread outlives the call), and the error of the first
  failed batch in input order is raised; no partial matrix is ever returned. Nothing is
  retried here: a client with a retrying transport retries each request (one batch) alone.

- ``ValidationError(field=...)`` at construction for a bad argument; ``field="texts"`` for a
  bad input.
- ``EmbedderError`` when the server cannot be used or answers something unusable: a non-2xx
  status (``.status``), a timeout, a connection or protocol failure, a malformed answer or one
  past the byte ceiling. ``.retryable`` is true for a timeout, a transport failure and HTTP
  408/425/429/5xx. The message names the host and the status or the failure's type only:
  never the API key, the URL path or any input text. Nothing is chained (``__cause__`` and
  ``__context__`` are ``None``): httpx's exceptions hold the request, whose body is the
  input text.
- ``CapabilityError`` naming ``ragport[http]`` when httpx is not installed.

The API key travels only in ``Authorization: Bearer``; it never appears in an error, a log
line or ``repr()``. ``http=HttpOptions(...)`` (``ragport.adapters.http_options``) holds the
transport: ``client`` (an ``httpx.Client`` of your own, for retries, proxies or mTLS; ragport
then never closes it) or ``transport``, ``allow_loopback``, ``timeout_s`` (default 30),
``max_response_bytes`` (default 16 MiB) and ``max_concurrency`` (default 4); the keywords of
those names still work for one release, with a ``DeprecationWarning``. The client ragport builds itself ignores proxy and netrc
settings from the environment (``trust_env=False``).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ragport.adapters._http import (
    HttpFailure,
    OwnedClient,
    check_api_key,
    check_base_url,
    check_count,
    check_int,
    check_model,
    failure_error,
    parse_json,
    place_by_index,
    post_json,
    run_in_order,
)
from ragport.adapters.http_options import HTTP_KEYWORDS, HttpOptions, check_http, http_fold
from ragport.domain.deprecation import keyword_folds
from ragport.domain.errors import EmbedderError, ValidationError, raise_unchained
from ragport.domain.limits import check_limit
from ragport.ports.embedder import VectorMatrix

if TYPE_CHECKING:
    pass

__all__ = ["OpenAICompatibleEmbedder", "TeiEmbedder"]

DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
_MAX_RESPONSE_BYTES_CEILING = 256 * 1024 * 1024
_MAX_TIMEOUT_S = 600.0
_MAX_DIMENSIONS = 65_536
_DEFAULT_TIMEOUT_S = 30.0
_DEFAULT_CONCURRENCY = 4


def _check_batch_size(value: object) -> int:
    try:
        return check_limit("embed_batch", value)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ValidationError(str(exc), field="batch_size", limit="embed_batch") from None


def _check_concurrency(value: object) -> int:
    try:
        return check_limit("embed_concurrency", value)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ValidationError(
            str(exc), field="max_concurrency", limit="embed_concurrency"
        ) from None


def _check_timeout(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= _MAX_TIMEOUT_S
    ):
        raise ValidationError(
            f"timeout_s must be a number in (0, {_MAX_TIMEOUT_S:g}]", field="timeout_s"
        )
    return float(value)


def _check_texts(texts: object) -> list[str]:
    if isinstance(texts, str):
        raise ValidationError("embed takes a sequence of texts, not one string", field="texts")
    try:
        items = list(cast(Iterable[object], texts))
    except TypeError:
        raise ValidationError("embed takes a sequence of texts", field="texts") from None
    strings = [text for text in items if isinstance(text, str)]
    if len(strings) != len(items):
        raise ValidationError("every text must be a string", field="texts")
    return strings


def _malformed(host: str, what: str) -> EmbedderError:
    return EmbedderError(f"malformed embedding response from {host}: {what}")


def _row(value: object, dimensions: int, host: str) -> list[float]:
    if not isinstance(value, list):
        raise _malformed(host, "an embedding is not a JSON array")
    if len(value) != dimensions:
        raise _malformed(host, f"an embedding has {len(value)} values, expected {dimensions}")
    for number in value:
        if type(number) is not float and type(number) is not int:
            raise _malformed(host, "an embedding holds a value that is not a JSON number")
    return value


def _normalise(rows: list[list[float]], dimensions: int, host: str) -> VectorMatrix:
    try:
        matrix = np.array(rows, dtype=np.float64).reshape(len(rows), dimensions)
    except (OverflowError, ValueError):
        raise _malformed(host, "an embedding value is out of range") from None
    if not np.isfinite(matrix).all():
        raise _malformed(host, "an embedding holds a non-finite value")
    # Scale by the largest magnitude first so that huge (but finite) values cannot overflow.
    peak = np.abs(matrix).max(axis=1, keepdims=True)
    matrix = np.divide(matrix, peak, out=np.zeros_like(matrix), where=peak > 0)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return np.asarray(matrix, dtype=np.float32)


class _HttpEmbedder(OwnedClient):
    """The transport, limits and output checks the two API dialects share."""

    _path: str

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None,
        model_required: bool,
        dimensions: int,
        api_key: str | None,
        batch_size: int,
        http: HttpOptions | None,
    ):
        options = check_http(http)
        self._base_url, self._host = check_base_url(base_url, options.allow_loopback)
        self._model = check_model(model, model_required)
        self._dimensions = check_int(dimensions, "dimensions", 1, _MAX_DIMENSIONS)
        self._api_key = check_api_key(api_key)
        self._batch_size = _check_batch_size(batch_size)
        self._max_concurrency = _check_concurrency(
            _DEFAULT_CONCURRENCY if options.max_concurrency is None else options.max_concurrency
        )
        self._timeout_s = _check_timeout(
            _DEFAULT_TIMEOUT_S if options.timeout_s is None else options.timeout_s
        )
        self._max_response_bytes = check_int(
            DEFAULT_MAX_RESPONSE_BYTES
            if options.max_response_bytes is None
            else options.max_response_bytes,
            "max_response_bytes",
            1024,
            _MAX_RESPONSE_BYTES_CEILING,
        )
        self._init_client(
            options.client, options.transport, what="HTTP embedders", capability="embedding"
        )

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def __repr__(self) -> str:
        key = "<set>" if self._api_key is not None else None
        return (
            f"{type(self).__name__}(base_url={self._base_url!r}, model={self._model!r}, "
            f"dimensions={self._dimensions}, batch_size={self._batch_size}, "
            f"max_concurrency={self._max_concurrency}, timeout_s={self._timeout_s:g}, api_key={key})"
        )

    def embed(self, texts: Sequence[str]) -> VectorMatrix:
        items = _check_texts(texts)
        out = np.zeros((len(items), self._dimensions), dtype=np.float32)
        batches = [
            items[start : start + self._batch_size]
            for start in range(0, len(items), self._batch_size)
        ]
        # The requests go out concurrently; each answer is parsed on this thread, in order.
        matrices = run_in_order(
            [functools.partial(self._post, self._payload(batch)) for batch in batches],
            lambda index, body: self._rows(body, len(batches[index])),
            self._max_concurrency,
            thread_name="ragport-embed",
        )
        start = 0
        for matrix in matrices:
            out[start : start + len(matrix)] = matrix
            start += len(matrix)
        return out

    def _rows(self, body: bytes, count: int) -> VectorMatrix:
        """The normalised rows of one answer to a batch of ``count`` texts."""
        return _normalise(self._parse(body, count), self._dimensions, self._host)

    def _payload(self, batch: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, body: bytes, count: int) -> list[list[float]]:
        raise NotImplementedError

    def _post(self, payload: dict[str, Any]) -> bytes:
        """POST ``payload`` as JSON; return the raw 2xx body, read under the byte ceiling."""
        try:
            return post_json(
                self._client,
                self._base_url + self._path,
                payload,
                api_key=self._api_key,
                timeout_s=self._timeout_s,
                deadline=time.monotonic() + self._timeout_s,
                max_bytes=self._max_response_bytes,
            )
        except HttpFailure as failure:
            raise_unchained(
                failure_error(
                    failure,
                    service="embedding",
                    host=self._host,
                    within=f"{self._timeout_s:g} s",
                    max_bytes=self._max_response_bytes,
                    error=functools.partial(
                        EmbedderError, retryable=failure.retryable, status=failure.status
                    ),
                    too_large=EmbedderError,
                )
            )

    def _malformed(self, what: str) -> EmbedderError:
        return _malformed(self._host, what)

    def _json(self, body: bytes) -> object:
        return parse_json(body, self._malformed)


class OpenAICompatibleEmbedder(_HttpEmbedder):
    """``POST {base_url}/embeddings`` with ``{"model", "input": [...]}``, as OpenAI, vLLM,
    llama.cpp, Ollama and LiteLLM speak it; answer ``{"data": [{"index", "embedding"}]}``.

    ``dimensions`` is the width the answers must have. ``send_dimensions=True`` also sends it
    as ``"dimensions"`` in the request, for models that shorten their vectors on request
    (OpenAI's text-embedding-3-*); servers of other models may refuse that field, so it is off
    by default. ``id`` is ``"openai:<model>:<dimensions>"``.
    """

    _path = "/embeddings"

    # The transport keywords of old fold into http=HttpOptions(...) for one release.
    @keyword_folds((http_fold(*HTTP_KEYWORDS),), name="OpenAICompatibleEmbedder")
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        dimensions: int,
        api_key: str | None = None,
        send_dimensions: bool = False,
        batch_size: int = 64,
        http: HttpOptions | None = None,
    ):
        super().__init__(
            base_url,
            model=model,
            model_required=True,
            dimensions=dimensions,
            api_key=api_key,
            batch_size=batch_size,
            http=http,
        )
        self._send_dimensions = send_dimensions is True

    @property
    def id(self) -> str:
        return f"openai:{self._model}:{self._dimensions}"

    def _payload(self, batch: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self._model, "input": batch}
        if self._send_dimensions:
            payload["dimensions"] = self._dimensions
        return payload

    def _parse(self, body: bytes, count: int) -> list[list[float]]:
        doc = self._json(body)
        if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
            raise _malformed(self._host, 'expected an object with a "data" array')
        return place_by_index(
            doc["data"],
            count,
            lambda item: _row(item.get("embedding"), self._dimensions, self._host),
            self._malformed,
        )


class TeiEmbedder(_HttpEmbedder):
    """``POST {base_url}/embed`` with ``{"inputs": [...], "normalize": true, "truncate":
    false}``, as Hugging Face text-embeddings-inference speaks it; answer ``[[...], ...]``.

    ``truncate`` is false: a text past the server's token limit is refused by the server
    (HTTP 413/422, an ``EmbedderError``), never silently shortened. TEI serves one model, so
    ``model`` only names it in ``id`` (``"tei:<model>:<dimensions>"``); without it the id
    uses the host (``"tei:<host[:port]>:<dimensions>"``), and moving the server then changes
    the id, which makes retrieval ask for a re-index. Pass ``model=`` to avoid that.
    TEI refuses more than ``--max-client-batch-size`` (default 32) inputs per request, hence
    the default ``batch_size=32``.
    """

    _path = "/embed"

    @keyword_folds((http_fold(*HTTP_KEYWORDS),), name="TeiEmbedder")
    def __init__(
        self,
        base_url: str,
        *,
        dimensions: int,
        model: str | None = None,
        batch_size: int = 32,
        api_key: str | None = None,
        http: HttpOptions | None = None,
    ):
        super().__init__(
            base_url,
            model=model,
            model_required=False,
            dimensions=dimensions,
            api_key=api_key,
            batch_size=batch_size,
            http=http,
        )

    @property
    def id(self) -> str:
        return f"tei:{self._model or self._host}:{self._dimensions}"

    def _payload(self, batch: list[str]) -> dict[str, Any]:
        return {"inputs": batch, "normalize": True, "truncate": False}

    def _parse(self, body: bytes, count: int) -> list[list[float]]:
        doc = self._json(body)
        if not isinstance(doc, list):
            raise _malformed(self._host, "expected a JSON array of embeddings")
        check_count(doc, count, self._malformed)
        return [_row(item, self._dimensions, self._host) for item in doc]
