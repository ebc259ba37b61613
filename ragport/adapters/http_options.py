"""``HttpOptions``: how an HTTP adapter reaches its server, as one value (issue 42).

The HTTP embedders (``OpenAICompatibleEmbedder``, ``TeiEmbedder``) and the Google Drive
connector take ``http=HttpOptions(...)`` instead of the transport keywords each took
(``client=``, ``allow_loopback=``, ``timeout_s=``, ``max_response_bytes=``,
``max_concurrency=``); those keywords still work for one release, with a
``DeprecationWarning`` (docs/deprecations.md).

- ``client``: an ``httpx.Client`` of your own (retries, proxies, mTLS); ragport never closes
  it. ``transport``: an ``httpx.BaseTransport`` for the client ragport builds (not both).
- ``allow_loopback``: plain ``http://`` to a loopback host (127.0.0.0/8, ::1, localhost) is
  refused unless this is ``True``; ``https://`` is always required elsewhere.
- ``timeout_s`` (seconds), ``max_response_bytes`` and ``max_concurrency``: ``None`` takes the
  adapter's own default; a number given is checked by the adapter against its floor and
  ceiling (``ValidationError`` naming the field). An adapter refuses a field it has no use for
  (the Drive connector streams downloads under ``max_bytes`` and sends one request at a
  time: ``max_response_bytes`` and ``max_concurrency`` are a ``ValidationError`` there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ragport.domain.deprecation import Fold, evolve_or_default
from ragport.domain.errors import ValidationError

if TYPE_CHECKING:
    import httpx

__all__ = ["DEFAULT_HTTP_OPTIONS", "HTTP_KEYWORDS", "HttpOptions", "http_fold"]


def _flag(value: bool) -> bool:
    if not isinstance(value, bool):
        raise ValidationError("allow_loopback must be True or False", field="allow_loopback")
    return value


def _seconds(value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError("timeout_s must be a finite number of seconds", field="timeout_s")
    if value <= 0:
        raise ValidationError("timeout_s must be above 0", field="timeout_s")
    return float(value)


def _count(field: str) -> Callable[[int | None], int | None]:
    def check(value: int | None) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValidationError(f"{field} must be a positive integer", field=field)
        return value

    return check


def _response_bytes(value: int | None) -> int | None:
    return _count("max_response_bytes")(value)


def _concurrency(value: int | None) -> int | None:
    return _count("max_concurrency")(value)


@attrs.frozen(kw_only=True)
class HttpOptions:
    """How an HTTP adapter reaches its server (see the module docstring)."""

    client: httpx.Client | None = None
    transport: httpx.BaseTransport | None = None
    allow_loopback: bool = attrs.field(default=False, converter=_flag)
    timeout_s: float | None = attrs.field(default=None, converter=_seconds)
    max_response_bytes: int | None = attrs.field(default=None, converter=_response_bytes)
    max_concurrency: int | None = attrs.field(default=None, converter=_concurrency)

    def __repr__(self) -> str:  # the client may carry credentials in its headers: not shown
        client = None if self.client is None else "<client>"
        return (
            f"HttpOptions(client={client}, allow_loopback={self.allow_loopback}, "
            f"timeout_s={self.timeout_s}, max_response_bytes={self.max_response_bytes}, "
            f"max_concurrency={self.max_concurrency})"
        )


DEFAULT_HTTP_OPTIONS = HttpOptions()

HTTP_KEYWORDS = (
    "client",
    "transport",
    "allow_loopback",
    "timeout_s",
    "max_response_bytes",
    "max_concurrency",
)


def check_http(value: object) -> HttpOptions:
    """``value`` if it is an ``HttpOptions`` (the default for ``None``)."""
    return evolve_or_default(value, {}, DEFAULT_HTTP_OPTIONS, HttpOptions, "http")  # type: ignore[no-any-return]


def http_fold(*names: str) -> Fold:
    """The fold of the old transport keywords ``names`` into ``http=``."""

    def fold(given: object, old: Mapping[str, Any], args: tuple[Any, ...]) -> Any:
        return evolve_or_default(given, old, DEFAULT_HTTP_OPTIONS, HttpOptions, "http")

    return Fold("http", names, fold, "http=HttpOptions(...)")
