"""Helpers shared by the HTTP adapters (embedders, rerankers): URL policy, secrets, checks.

Not an adapter of its own: the small validation rules every httpx-based adapter applies
before any socket opens.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Self
from urllib.parse import urlsplit

from ragport.domain.errors import CapabilityError, ValidationError

__all__ = [
    "MAX_MODEL_CHARS",
    "HttpFailure",
    "OwnedClient",
    "Secret",
    "check_api_key",
    "check_base_url",
    "check_int",
    "check_model",
    "import_httpx",
    "is_loopback",
    "post_json",
    "refuse_constant",
]

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
    ceiling), ``timeout`` or ``transport``; ``detail`` is an exception type name at most.
    Carries no URL path, key, request or response text.
    """

    def __init__(self, kind: str, *, status: int | None = None, detail: str = ""):
        super().__init__(kind)
        self.kind = kind
        self.status = status
        self.detail = detail


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
    """POST ``payload`` as JSON and return the 2xx body, read under ``max_bytes`` by streaming.

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
    chunks: list[bytes] = []
    try:
        with client.stream(
            "POST", url, content=content, headers=headers, timeout=timeout_s
        ) as response:
            if not 200 <= response.status_code < 300:
                raise HttpFailure("status", status=response.status_code)
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise HttpFailure("too_large")
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise HttpFailure("too_large")
                if time.monotonic() > deadline:
                    raise HttpFailure("timeout")
                chunks.append(chunk)
    except httpx.TimeoutException as exc:
        raise HttpFailure("timeout", detail=type(exc).__name__) from exc
    except (httpx.HTTPError, httpx.StreamError) as exc:
        raise HttpFailure("transport", detail=type(exc).__name__) from exc
    return b"".join(chunks)
