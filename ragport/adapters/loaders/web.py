"""``WebFetchDocumentLoader``: http(s) documents, refused before any socket opens when they
point inward (SSRF), fetched from the very address that was checked.

Per hop: the URL is parsed once (httpx.URL) and checked (scheme, credentials, ``localhost``,
IP literals); the host is resolved once with ``resolver``; every address must be public
(IPv4-mapped IPv6 unwrapped first); the request then goes to that address, with the original
``Host`` header and, for https, the original name as TLS SNI and certificate name (the
``sni_hostname`` extension of httpcore), so no second DNS lookup can rebind it; no connection
is kept alive, since the pool would reuse one verified for another name on the same address.
Redirects are followed by hand (at most ``max_redirects``), each hop checked again. The body
streams as raw bytes under ``max_bytes`` (``ragport.adapters._http.read_body``); the request
asks for ``Accept-Encoding: identity`` and any other ``Content-Encoding`` in the answer is
``LoadError(reason="encoding")`` before a byte is decoded; no proxy from the environment is
used.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from ragport.adapters._http import HttpFailure, read_body
from ragport.domain.documents import DOCX, base_media_type, media_type_for
from ragport.domain.errors import LoadError, UrlRejectedError, ValidationError, raise_unchained
from ragport.domain.limits import DEFAULT_CEILINGS, DEFAULT_LIMITS, Ceilings, check_ceilings
from ragport.ports.documents import LoadedDocument

__all__ = ["DEFAULT_MEDIA_TYPES", "WebFetchDocumentLoader", "check_address", "system_resolver"]

DEFAULT_MEDIA_TYPES = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "text/plain",
        "text/markdown",
        "text/x-markdown",
        "text/x-rst",
        "application/pdf",
        DOCX,
    }
)
Resolver = Callable[[str], Iterable[str]]
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_NUMERIC_HOST = re.compile(r"[0-9a-fx.]+", re.I)  # 2130706433, 0x7f.1, 127.1: inet_aton forms
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_FAILURES = {  # read_body's failure kinds -> the LoadError message (the kind is the reason)
    "too_large": "the body is over max_bytes={max_bytes}",
    "encoding": "the server answered with a Content-Encoding other than the identity asked for",
    "timeout": "the download took too long",
}


def system_resolver(host: str) -> list[str]:
    """Every address the system resolver gives for ``host``."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def check_address(value: str, *, allow_loopback: bool = False) -> IPAddress:
    """``value`` as an address if it is public; ``UrlRejectedError(reason="address")`` if not.

    Refused: private, loopback, link-local, multicast, unspecified, reserved and every other
    non-global range, IPv4 and IPv6, with IPv4-mapped IPv6 unwrapped first (on Python 3.11
    ``IPv6Address('::ffff:127.0.0.1').is_loopback`` is False). ``allow_loopback`` lets
    loopback addresses through, for tests against a local server only.
    """
    try:
        address: IPAddress = ipaddress.ip_address(value)
    except ValueError:
        raise UrlRejectedError(
            "the host resolved to an unusable address", reason="address"
        ) from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if allow_loopback and address.is_loopback:
        return address
    if (
        not address.is_global
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_unspecified
        or address.is_reserved
    ):
        raise UrlRejectedError(
            "the host resolves to a private, loopback, link-local, multicast, unspecified or "
            "reserved address",
            reason="address",
        )
    return address


class WebFetchDocumentLoader:
    """Fetches one http(s) document; see the module docstring for the rules.

    ``LoadedDocument.metadata`` is ``{"url": final_url, "citation": final_url, "untrusted":
    True}``; ``media_type`` is the response's ``Content-Type`` (with its charset), which must
    be in ``allowed_media_types`` (else ``LoadError(reason="media_type")``).
    """

    def __init__(
        self,
        *,
        client: Any = None,
        resolver: Resolver | None = None,
        max_bytes: int = DEFAULT_LIMITS.parse_bytes,
        allowed_media_types: Iterable[str] = DEFAULT_MEDIA_TYPES,
        max_redirects: int = 5,
        timeout_s: float = 30.0,
        allow_loopback: bool = False,
        ceilings: Ceilings = DEFAULT_CEILINGS,
    ) -> None:
        self._max_bytes = check_ceilings(ceilings).check("parse_bytes", max_bytes)
        self._allowed = frozenset(base_media_type(t) for t in allowed_media_types)
        if (
            isinstance(max_redirects, bool)
            or not isinstance(max_redirects, int)
            or not (0 <= max_redirects <= 5)
        ):
            raise ValidationError("max_redirects must be 0..5", field="max_redirects")
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, (int, float))
            or not (0 < timeout_s <= 300)
        ):
            raise ValidationError("timeout_s must be above 0 and at most 300", field="timeout_s")
        self._max_redirects = max_redirects
        self._timeout_s = float(timeout_s)
        self._resolver = resolver or system_resolver
        self._allow_loopback = bool(allow_loopback)
        self._owned = client is None
        if client is None:
            import httpx

            client = httpx.Client(
                timeout=self._timeout_s,
                trust_env=False,
                follow_redirects=False,
                limits=httpx.Limits(max_keepalive_connections=0),
            )
        self._client = client

    def close(self) -> None:
        if self._owned:
            self._client.close()

    def __enter__(self) -> WebFetchDocumentLoader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def load(self, uri: str) -> LoadedDocument:
        import httpx

        deadline = time.monotonic() + self._timeout_s
        url = self._parse(uri)
        for _hop in range(self._max_redirects + 1):
            host, address = self._check(url)
            target = url.copy_with(host=str(address))
            # Connection: close, because the pool keys connections by (scheme, address, port):
            # a kept-alive TLS connection verified for one host name would otherwise carry
            # the next request for another name on the same address, unverified.
            headers = {
                "Host": url.netloc.decode("ascii"),
                "Accept-Encoding": "identity",
                "Connection": "close",
            }
            extensions: dict[str, Any] = {}
            if url.scheme == "https":
                extensions["sni_hostname"] = host
            request = self._client.build_request(
                "GET", target, headers=headers, extensions=extensions
            )
            try:
                response = self._client.send(request, stream=True, follow_redirects=False)
            except httpx.TimeoutException as exc:
                raise LoadError("the server did not answer in time", reason="timeout") from exc
            except httpx.HTTPError as exc:
                raise LoadError(
                    f"the fetch failed ({type(exc).__name__})", reason="transport"
                ) from exc
            try:
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    url = self._parse(str(url.join(response.headers["location"])))
                    continue
                return self._read(response, url, deadline)
            finally:
                response.close()
        raise UrlRejectedError(f"more than {self._max_redirects} redirects", reason="redirects")

    def _parse(self, uri: str) -> Any:
        import httpx

        if not isinstance(uri, str) or not uri.strip():
            raise UrlRejectedError("the URL is empty", reason="malformed")
        try:
            url = httpx.URL(uri.strip())
        except (httpx.InvalidURL, ValueError, TypeError):
            raise UrlRejectedError("the URL cannot be parsed", reason="malformed") from None
        if url.scheme not in ("http", "https"):
            raise UrlRejectedError("only http and https URLs are fetched", reason="scheme")
        if url.userinfo:
            raise UrlRejectedError("the URL carries credentials", reason="credentials")
        if not url.host:
            raise UrlRejectedError("the URL has no host", reason="malformed")
        return url.copy_with(fragment=None)  # never sent; the final URL is what was fetched

    def _check(self, url: Any) -> tuple[str, IPAddress]:
        host = url.raw_host.decode("ascii").lower().rstrip(".")
        if host == "localhost" or host.endswith(".localhost"):
            raise UrlRejectedError("localhost is never fetched", reason="localhost")
        try:
            ipaddress.ip_address(host.strip("[]"))
            literal = True
        except ValueError:
            literal = bool(_NUMERIC_HOST.fullmatch(host)) and _inet_aton(host)
        if literal:
            raise UrlRejectedError("IP-literal hosts are not fetched", reason="ip_literal")
        try:
            answers = [str(a) for a in self._resolver(host)]
        except (OSError, UnicodeError):
            raise UrlRejectedError("the host does not resolve", reason="unresolvable") from None
        if not answers:
            raise UrlRejectedError("the host does not resolve", reason="unresolvable")
        checked = [check_address(a, allow_loopback=self._allow_loopback) for a in answers]
        return host, checked[0]

    def _read(self, response: Any, url: Any, deadline: float) -> LoadedDocument:
        import httpx

        if not 200 <= response.status_code < 300:
            raise LoadError(
                f"the server answered HTTP {response.status_code}", reason="http_status"
            )
        header = response.headers.get("content-type", "")
        media_type = base_media_type(header) if header else media_type_for(url.path)
        if not media_type or media_type not in self._allowed:
            raise LoadError(
                f"media type {str(media_type)[:80]!r} is not allowed", reason="media_type"
            )
        try:
            body = read_body(response, max_bytes=self._max_bytes, deadline=deadline)
        except HttpFailure as failure:
            message = _FAILURES[failure.kind].format(max_bytes=self._max_bytes)
            raise_unchained(LoadError(message, reason=failure.kind))
        except httpx.TimeoutException as exc:
            raise LoadError("the server did not answer in time", reason="timeout") from exc
        except (httpx.HTTPError, httpx.StreamError) as exc:
            raise LoadError(
                f"the download failed ({type(exc).__name__})", reason="transport"
            ) from exc
        final = str(url)
        return LoadedDocument(
            body,
            header or media_type,
            None,
            {"url": final, "citation": final, "untrusted": True},
        )


def _inet_aton(host: str) -> bool:
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True
