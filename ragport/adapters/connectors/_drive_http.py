"""The HTTP half of ``GoogleDriveConnector``: one GET with bounded retries and backoff.

429, 5xx and Drive's 403 rate limits are retried with bounded exponential backoff honouring
``Retry-After``; a 401 asks the token provider for a fresh token once; HTTP 410, or 400/404 on
a page token, is ``SyncCursorError``; bodies are streamed as raw bytes under ``max_bytes``
(``ragport.adapters._http.read_body``: any ``Content-Encoding`` but the identity asked for is
``LoadError(reason="encoding")`` before a byte is decoded); an answer that is not a JSON
object, or nests too deeply to parse, is ``LoadError(reason="malformed")``. The token
travels only in the ``Authorization`` header, and no error is chained (httpx's exceptions
hold the request).

Every JSON request (a ``files.list`` or ``changes.list`` page, the root and start-token
look-ups) counts against ``max_list_requests`` for the run: past it, the request is not sent
and the run fails with ``LoadError(reason="request_budget")``. A run ends at an exhausted
page or at an error (that one or any other); the count then starts again. A server answering
endless pages (folders only, a new token each time) cannot keep one run paging for ever.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from ragport.adapters._http import HttpFailure, read_body
from ragport.domain.errors import LoadError, SyncCursorError, raise_unchained

__all__ = ["DriveHttp"]


_FAILURES = {  # read_body's failure kinds -> the LoadError message (the kind is the reason)
    "too_large": "the answer is over max_bytes={max_bytes}",
    "encoding": "Drive answered with a Content-Encoding other than the identity asked for",
}


class _Unauthorized(Exception):
    pass


class DriveHttp:
    """Mixin of ``GoogleDriveConnector``: the fields below are set by its constructor."""

    _client: Any
    _base: str
    _host: str
    _timeout: float
    _max_bytes: int
    _max_retries: int
    _backoff: float
    _max_backoff: float
    _sleep: Callable[[float], None]
    _token_provider: Callable[[], str]
    _token: str | None
    _drive_id: str | None
    _max_list_requests: int
    _list_requests: int  # JSON requests sent in this run (see the module docstring)

    def _headers(self) -> dict[str, str]:
        if self._token is None:
            token = self._token_provider()
            if not isinstance(token, str) or not token or not all(" " < c < "\x7f" for c in token):
                raise LoadError("token_provider returned no usable token", reason="unauthorized")
            self._token = token
        return {"Authorization": f"Bearer {self._token}", "Accept-Encoding": "identity"}

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        delay = min(self._max_backoff, self._backoff * (2**attempt))
        if retry_after:
            value = retry_after.strip()
            if value.isdigit():
                delay = float(value)
            else:
                try:
                    when = email.utils.parsedate_to_datetime(value)
                    delay = max(0.0, when.timestamp() - time.time())
                except (TypeError, ValueError):
                    pass
        return float(min(self._max_backoff, max(0.0, delay)))

    def _get(
        self, path: str, params: Mapping[str, Any], *, what: str, cursor: bool = False
    ) -> tuple[bytes, str]:
        """GET ``path`` with retries; the body (under ``max_bytes`` for media) and its type."""
        httpx = __import__("httpx")
        refreshed = False
        attempt = 0
        while True:
            try:
                status, headers, body = self._request(httpx, path, params)
            except _Unauthorized:
                if refreshed:
                    raise LoadError(
                        f"Drive refused the token for {what} (401)", reason="unauthorized"
                    ) from None
                refreshed = True
                self._token = None
                continue
            if 200 <= status < 300:
                return body, headers.get("content-type", "")
            if status == 410 or (cursor and status in (400, 404)):
                raise SyncCursorError(
                    f"Drive no longer accepts the page token ({status})",
                    reason="expired" if status == 410 else "invalid",
                )
            retryable = status == 429 or status >= 500 or (status == 403 and _rate_limited(body))
            if retryable and attempt < self._max_retries:
                self._sleep(self._delay(attempt, headers.get("retry-after")))
                attempt += 1
                continue
            raise LoadError(f"Drive answered {status} for {what}", reason="status")

    def _request(
        self, httpx: Any, path: str, params: Mapping[str, Any]
    ) -> tuple[int, Mapping[str, str], bytes]:
        headers = self._headers()
        error: LoadError | None = None
        try:
            with self._client.stream(
                "GET", f"{self._base}{path}", params=params, headers=headers, timeout=self._timeout
            ) as response:
                if response.status_code == 401:
                    raise _Unauthorized
                return (
                    response.status_code,
                    response.headers,
                    read_body(response, max_bytes=self._max_bytes),
                )
        except HttpFailure as failure:
            error = LoadError(
                _FAILURES[failure.kind].format(max_bytes=self._max_bytes), reason=failure.kind
            )
        except _Unauthorized:
            raise
        except httpx.TimeoutException as exc:
            error = LoadError(
                f"Drive at {self._host} timed out ({type(exc).__name__})", reason="timeout"
            )
        except (httpx.HTTPError, httpx.StreamError) as exc:
            error = LoadError(
                f"Drive at {self._host} failed ({type(exc).__name__})", reason="transport"
            )
        raise_unchained(error)

    def _count_request(self, what: str) -> None:
        """Count one JSON request of this run; past ``max_list_requests`` it is not sent."""
        if self._list_requests >= self._max_list_requests:
            raise LoadError(
                f"Drive needed more than max_list_requests={self._max_list_requests} listing "
                f"requests in one run ({what}); the pages committed so far stay and the next "
                "run continues from them; raise max_list_requests (ragport sync drive "
                "--max-list-requests N) for a Drive this large",
                reason="request_budget",
            )
        self._list_requests += 1

    def _end_run(self) -> None:
        """The run is over (an exhausted page, or an error): the count restarts."""
        self._list_requests = 0

    def _json(
        self, path: str, params: Mapping[str, Any], *, what: str, cursor: bool = False
    ) -> dict[str, Any]:
        self._count_request(what)
        body, _ = self._get(path, params, what=what, cursor=cursor)
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's stack
            data = None
        if not isinstance(data, dict):
            raise LoadError(f"Drive answered malformed JSON for {what}", reason="malformed")
        return data

    def _drive_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"supportsAllDrives": "true"}
        if self._drive_id is not None:
            params["driveId"] = self._drive_id
        return params


def _rate_limited(body: bytes) -> bool:
    try:
        data = json.loads(body)
        reasons = {e.get("reason") for e in data["error"]["errors"]}
    except (ValueError, RecursionError, KeyError, TypeError, AttributeError):
        return False
    return bool(reasons & {"rateLimitExceeded", "userRateLimitExceeded"})
