"""Helpers shared by the HTTP adapters (embedders, rerankers, the web loader, the Drive
connector): URL policy, secrets, checks, the POST itself, and reading its answer.

Not an adapter of its own: the small validation rules every httpx-based adapter applies
before any socket opens, and one function per concern after it: ``post_json`` (the request,
failing with ``HttpFailure``), ``read_body`` (the one capped reader of every streamed answer
body), ``failure_error`` (that failure as the adapter's own error),
``parse_json`` (the body as JSON), ``place_by_index`` (answers that name their input by
``index``, in input order). The adapter passes its error class (or a partial of it that
fills the class's fields) and raises the result with ``raise_unchained``: no error chains
httpx's or json's exception, which hold the request or the body. Messages name the host, the
status and exception type names only: never a key, a URL path or any text.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from types import ModuleType
from typing import Any, Self, TypeVar
from urllib.parse import urlsplit

from ragport.domain.errors import CapabilityError, ValidationError, raise_unchained

__all__ = [
    "MAX_MODEL_CHARS",
    "HttpFailure",
    "OwnedClient",
    "Secret",
    "check_api_key",
    "check_base_url",
    "check_count",
    "check_int",
    "check_model",
    "failure_error",
    "import_httpx",
    "is_loopback",
    "parse_json",
    "place_by_index",
    "post_json",
    "read_body",
    "refuse_constant",
    "run_in_order",
]

_T = TypeVar("_T")
_U = TypeVar("_U")
ErrorFactory = Callable[[str], Exception]
"""Builds an adapter's error from a message: its error class, or a partial of it."""

MAX_MODEL_CHARS = 256


def import_httpx(what: str, capability: str) -> ModuleType:
    """httpx, or a ``CapabilityError`` naming the ``http`` extra."""
    try:
        import httpx
    except ImportError as exc:
        raise CapabilityError(
            f"{what} need the 'http' extra (httpx is not installed): pip install 'ragport[http]'",
            capability=capability,
        ) from exc
    return httpx


class OwnedClient:
    """The adapter's ``httpx.Client``: its own (closed by ``close``) or the host's (left open).

    ``client=`` hands one in (retries, proxies, mTLS stay the host's); ``transport=`` builds
    ragport's client on the host's transport. Redirects are never followed and proxy
    environment variables never read.
    """

    _client: Any
    _owns_client: bool

    def _init_client(self, client: Any, transport: Any, *, what: str, capability: str) -> None:
        httpx = import_httpx(what, capability)
        if client is not None and not isinstance(client, httpx.Client):
            raise ValidationError("client must be an httpx.Client", field="client")
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            raise ValidationError("transport must be an httpx.BaseTransport", field="transport")
        if client is not None and transport is not None:
            raise ValidationError(
                "pass either client= or transport=, not both (the client has its transport)",
                field="transport",
            )
        self._owns_client = client is None
        self._client = client or httpx.Client(
            transport=transport, follow_redirects=False, trust_env=False
        )

    def close(self) -> None:
        """Close the HTTP client if ragport created it (an injected client stays open)."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Secret:
    """Holds an API key so that no repr, vars() dump or error can show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_base_url(base_url: object, allow_loopback: bool) -> tuple[str, str]:
    """Return ``(base_url without trailing slash, host[:port])`` or raise ValidationError.

    https only, or plain http to a loopback host (127.0.0.0/8, ::1, localhost) when
    ``allow_loopback`` is set; no credentials, query or fragment in the URL.
    """
    bad = ValidationError(
        "base_url must be an https:// URL (or http:// to a loopback host with "
        "allow_loopback=True) without credentials, query or fragment",
        field="base_url",
    )
    if not isinstance(base_url, str) or not base_url or len(base_url) > 2048:
        raise bad
    try:
        parts = urlsplit(base_url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        raise bad from None
    if (
        parts.scheme not in ("http", "https")
        or not host
        or parts.username is not None
        or parts.password is not None
        or parts.query
        or parts.fragment
        or "?" in base_url
        or "#" in base_url
        or any(ch.isspace() or not ch.isprintable() for ch in base_url)
    ):
        raise bad
    if parts.scheme == "http" and not (allow_loopback and is_loopback(host)):
        raise bad
    shown = f"[{host}]" if ":" in host else host
    if port is not None:
        shown = f"{shown}:{port}"
    return base_url.rstrip("/"), shown


def check_int(value: object, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{field} must be an integer in {low}..{high}", field=field)
    return value


def check_model(value: object, required: bool) -> str | None:
    if value is None and not required:
        return None
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_MODEL_CHARS
        or not value.isprintable()
    ):
        raise ValidationError(
            f"model must be a non-empty printable string of at most {MAX_MODEL_CHARS} chars",
            field="model",
        )
    return value


def check_api_key(value: object, required: bool = False) -> Secret | None:
    if value is None and not required:
        return None
    # Printable ASCII only: anything else could split the header or be echoed by httpx.
    if not isinstance(value, str) or not value or not all(" " < ch < "\x7f" for ch in value):
        raise ValidationError(
            "api_key must be a non-empty string of printable ASCII without spaces",
            field="api_key",
        )
    return Secret(value)


def refuse_constant(token: str) -> float:
    """``json.loads(parse_constant=...)``: NaN and Infinity are not JSON numbers."""
    raise ValueError("non-finite JSON constant")


class HttpFailure(Exception):
    """What went wrong with one POST, for the calling adapter to map to its own error.

    ``kind`` is ``status`` (non-2xx; ``status`` set), ``too_large`` (body past the byte
    ceiling), ``encoding`` (a ``Content-Encoding`` other than identity, which was never asked
    for), ``timeout`` or ``transport``; ``detail`` is an exception type name at most.
    Carries no URL path, key, request or response text.
    """

    def __init__(self, kind: str, *, status: int | None = None, detail: str = ""):
        super().__init__(kind)
        self.kind = kind
        self.status = status
        self.detail = detail

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later: a timeout, a transport failure, or an
        HTTP 408, 425, 429 or 5xx answer."""
        if self.kind == "status":
            return self.status is not None and (
                self.status in (408, 425, 429) or self.status >= 500
            )
        return self.kind in ("timeout", "transport")


def post_json(
    client: Any,
    url: str,
    payload: Mapping[str, Any],
    *,
    api_key: Secret | None,
    timeout_s: float,
    deadline: float,
    max_bytes: int,
) -> bytes:
    """POST ``payload`` as JSON and return the 2xx body, read by :func:`read_body` (raw bytes
    under ``max_bytes``; any ``Content-Encoding`` but identity refused).

    The deadline is checked between body chunks too (httpx's timeout is per read). Raises
    :class:`HttpFailure`; never follows redirects (the clients are built without them).
    """
    httpx = import_httpx("HTTP adapters", "http")
    headers = {
        "Accept": "application/json",
        "Accept-Encoding": "identity",  # the byte ceiling counts what arrives on the wire
        "Content-Type": "application/json",
    }
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key.reveal()}"
    # ensure_ascii: lone surrogates in a text are escaped rather than failing to encode.
    content = json.dumps(payload, ensure_ascii=True, allow_nan=False).encode("ascii")
    try:
        with client.stream(
            "POST", url, content=content, headers=headers, timeout=timeout_s
        ) as response:
            if not 200 <= response.status_code < 300:
                raise HttpFailure("status", status=response.status_code)
            return read_body(response, max_bytes=max_bytes, deadline=deadline)
    except httpx.TimeoutException as exc:
        raise HttpFailure("timeout", detail=type(exc).__name__) from exc
    except (httpx.HTTPError, httpx.StreamError) as exc:
        raise HttpFailure("transport", detail=type(exc).__name__) from exc


def read_body(response: Any, *, max_bytes: int, deadline: float | None = None) -> bytes:
    """The body of a streamed httpx ``response`` as the bytes that arrived, under ``max_bytes``.

    Raw bytes only (``iter_raw``): httpx's ``iter_bytes``/``read`` decode each raw chunk whole
    before a caller can count it, so a 50 kB zstd answer could become a 1 GiB allocation.
    ragport always sends ``Accept-Encoding: identity``, so any other ``Content-Encoding``
    (gzip, deflate, br, zstd, or one httpx does not know) was never asked for and is refused
    on the header: ``HttpFailure("encoding")``, before a byte of the body is read. A declared
    ``Content-Length`` past ``max_bytes`` is refused unread, a body growing past it as soon as
    it does (``too_large``); ``deadline`` (``time.monotonic()``) is checked between chunks
    (``timeout``). httpx's own exceptions pass through for the caller to map.
    """
    encodings = response.headers.get_list("content-encoding", split_commas=True)
    if any(value.strip().lower() not in ("", "identity") for value in encodings):
        raise HttpFailure("encoding")
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise HttpFailure("too_large")
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_raw():
        size += len(chunk)
        if size > max_bytes:
            raise HttpFailure("too_large")
        if deadline is not None and time.monotonic() > deadline:
            raise HttpFailure("timeout")
        chunks.append(chunk)
    return b"".join(chunks)


def failure_error(
    failure: HttpFailure,
    *,
    service: str,
    host: str,
    within: str,
    max_bytes: int,
    error: ErrorFactory,
    too_large: ErrorFactory | None = None,
) -> Exception:
    """The adapter's error for a failed POST, by ``failure.kind`` only.

    ``service`` names the server in the message (``"embedding"``, ``"rerank"``), ``within``
    the deadline (``"30 s"``), ``max_bytes`` the byte ceiling. ``error`` builds the error of
    a status, timeout or transport failure, ``too_large`` (default ``error``) that of a body
    past the ceiling. The caller raises the result with ``raise_unchained``.
    """
    if failure.kind == "too_large":
        return (too_large or error)(
            f"{service} response from {host} is larger than max_response_bytes={max_bytes}"
        )
    if failure.kind == "status":
        return error(f"{service} server {host} answered HTTP {failure.status}")
    if failure.kind == "encoding":
        return error(
            f"{service} server {host} answered with a Content-Encoding other than the identity "
            "ragport asked for"
        )
    if failure.kind == "timeout":
        detail = f" ({failure.detail})" if failure.detail else ""
        return error(f"{service} server {host} did not answer within {within}{detail}")
    return error(f"{service} request to {host} failed ({failure.detail})")


def parse_json(body: bytes, malformed: ErrorFactory) -> object:
    """``body`` as strict JSON (no ``NaN``/``Infinity``), or ``malformed("not valid JSON")``
    raised unchained: json's errors hold the body (``JSONDecodeError.doc``), which may echo
    the request's text."""
    try:
        return json.loads(body, parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        raise_unchained(malformed("not valid JSON"))


def check_count(items: Sequence[object], count: int, malformed: ErrorFactory) -> None:
    """One answer per input, or ``malformed``."""
    if len(items) != count:
        raise malformed(f"{len(items)} answers for {count} inputs")


def place_by_index(
    items: Sequence[object],
    count: int,
    read: Callable[[dict[str, Any]], _T],
    malformed: ErrorFactory,
) -> list[_T]:
    """Answers that name their input by ``"index"``, placed in input order.

    ``items`` must be ``count`` JSON objects whose ``index`` (an int, not a bool) is in
    ``0..count-1`` and appears once; ``read`` turns each object into its answer (and raises
    the adapter's own error for a bad one). Anything else raises ``malformed(...)``.
    """
    check_count(items, count, malformed)
    placed: dict[int, _T] = {}
    for item in items:
        if not isinstance(item, dict):
            raise malformed("an answer is not a JSON object")
        index = item.get("index")
        if type(index) is not int or not 0 <= index < count:
            raise malformed("an answer has a missing, non-integer or out-of-range index")
        if index in placed:
            raise malformed(f"index {index} appears more than once")
        placed[index] = read(item)
    # count matched and no index repeated, so every index in 0..count-1 was placed.
    return [placed[i] for i in range(count)]


def run_in_order(
    calls: Sequence[Callable[[], _T]],
    finish: Callable[[int, _T], _U],
    max_concurrency: int,
    *,
    thread_name: str,
) -> list[_U]:
    """Run ``calls`` (one HTTP request each) on up to ``max_concurrency`` worker threads and
    return ``finish(i, result of calls[i])`` for every ``i``, in the order of ``calls``.

    ``finish`` (parsing an answer, say) runs on the calling thread, in input order, as soon as
    a result and all before it have arrived; the workers meanwhile go on sending, so a parse
    that holds the GIL never keeps the next request waiting behind it. One call or
    ``max_concurrency == 1``: call, finish, call, finish, ... on the calling thread, as a
    plain loop. When a call or a ``finish`` raises, the calls not yet started are cancelled,
    those running are waited for (no worker thread outlives this function) and the first
    failure in input order is raised: never a partial list. Workers share whatever the calls
    close over (an ``httpx.Client`` is safe to share between threads).
    """
    if max_concurrency <= 1 or len(calls) <= 1:
        return [finish(i, call()) for i, call in enumerate(calls)]
    results: list[_U] = []
    failure: tuple[int, BaseException] | None = None
    with ThreadPoolExecutor(
        max_workers=min(max_concurrency, len(calls)), thread_name_prefix=thread_name
    ) as pool:
        futures = [pool.submit(call) for call in calls]
        pending = set(futures)
        try:
            while len(results) < len(futures):
                _, pending = wait(pending, return_when=FIRST_COMPLETED)
                failed = _first_failure(futures)
                if failed is not None:
                    failure = failed
                    break
                while len(results) < len(futures) and futures[len(results)].done():
                    index = len(results)
                    results.append(finish(index, futures[index].result()))
        except BaseException as exc:  # a finish failed, or the caller was interrupted
            failure = (len(results), exc)
        if failure is not None:
            for future in futures:
                future.cancel()
        # Leaving the block waits for the calls still running.
    if failure is None:
        return results
    if not isinstance(failure[1], Exception):
        raise failure[1]  # an interrupt (KeyboardInterrupt, SystemExit) stays what it is
    later = _first_failure(futures)  # every future is now finished or cancelled
    first = failure if later is None or later[0] >= failure[0] else later
    raise first[1]


def _first_failure(futures: Sequence[Future[_T]]) -> tuple[int, BaseException] | None:
    """``(index, exception)`` of the first finished-and-failed future in input order."""
    for index, future in enumerate(futures):
        if future.done() and not future.cancelled():
            error = future.exception()
            if error is not None:
                return index, error
    return None
