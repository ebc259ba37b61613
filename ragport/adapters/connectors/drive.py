"""``GoogleDriveConnector``: a Drive folder (with its subfolders) or a shared drive as a Connector.

Drive v3 over httpx:

- bootstrap: ``changes/startPageToken`` first (so nothing changed during the listing is
  missed), then ``files.list`` folder by folder (``q="'<id>' in parents and trashed = false"``,
  ``fields``, ``pageSize``, ``pageToken``; ``supportsAllDrives``/``includeItemsFromAllDrives``
  and ``corpora=drive&driveId=`` for a shared drive), breadth first from the root folder.
- changes: ``changes.list`` from the cursor's page token. The cursor also records the folder
  tree and the parent of every file listed, so a change is judged against the tree: in a
  known folder it is an upsert (new, edited, renamed, moved in), a trashed, removed or moved
  out file is a deletion, a folder moved in is listed whole, a folder moved out or trashed
  takes its files with it.
- content: Google Docs exported as ``text/html`` (headings survive), Sheets as CSV and Slides
  as plain text; other Google types and types ragport cannot parse fail that item with
  ``ParseError(reason="unsupported_type")`` without a download; other files with
  ``alt=media``, streamed under ``max_bytes``. Shortcuts are never followed (the target, when
  it is inside the folder, is listed on its own).
- HTTP 410, or 400 on a page token, is ``SyncCursorError``, and so is a page token a listing
  has already followed (files.list of one folder, a folder moved in, or a run of changes.list
  pages up to the exhausted one: the cursor remembers short digests of them), since it would
  page forever; an answer that is not a JSON object, nests too deeply, or whose ``files`` or
  ``changes`` is not a list is ``LoadError(reason="malformed")``; any ``Content-Encoding``
  but identity is ``LoadError(reason="encoding")``; 429, 5xx and Drive's 403 rate
  limits are retried with bounded exponential backoff honouring ``Retry-After``; a 401 asks
  ``token_provider`` for a fresh token once. The token travels only in the ``Authorization``
  header: no error, cursor or log line holds it, and nothing is chained (httpx's exceptions
  hold the request).
- at most ``max_list_requests`` JSON requests (listing pages and look-ups) per run (a run
  ends at an exhausted page or an error); past the budget,
  ``LoadError(reason="request_budget")`` ends it, so a server answering endless pages with new
  tokens cannot page one run for ever.

Permissions come only from the host's ``resolve_access(file)``: the Drive file resource (a
mapping with ``id``, ``name``, ``mimeType``, ``parents``, ``permissions`` when listed) in,
``Access`` or ``None`` (withhold) out. A change notification is never authorization.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import attrs

from ragport.adapters._http import HttpFailure, OwnedClient, check_base_url, check_int, read_body
from ragport.adapters.connectors._cursors import decode_cursor
from ragport.adapters.http_options import HttpOptions, check_http, http_fold
from ragport.domain.deprecation import Fold, evolve_or_default, keyword_folds
from ragport.domain.documents import MEDIA_TYPES, base_media_type
from ragport.domain.errors import (
    LoadError,
    ParseError,
    SyncCursorError,
    ValidationError,
    raise_unchained,
)
from ragport.domain.limits import DEFAULT_CEILINGS, DEFAULT_LIMITS, Ceilings, check_ceilings
from ragport.domain.model import validate_id
from ragport.domain.sync import Access
from ragport.ports.documents import LoadedDocument
from ragport.ports.sync import Page, Upsert

__all__ = ["DriveOptions", "GoogleDriveConnector", "drive_permissions_access"]

FOLDER = "application/vnd.google-apps.folder"
SHORTCUT = "application/vnd.google-apps.shortcut"
GOOGLE_APPS = "application/vnd.google-apps."
EXPORTS = {  # Google type -> (export mime type, media type handed to the parser)
    "application/vnd.google-apps.document": ("text/html", "text/html"),
    "application/vnd.google-apps.spreadsheet": ("text/csv", "text/plain"),
    "application/vnd.google-apps.presentation": ("text/plain", "text/plain"),
}
PARSEABLE = frozenset(MEDIA_TYPES.values())
FILE_FIELDS = (
    "id,name,mimeType,parents,trashed,modifiedTime,md5Checksum,version,size,webViewLink,"
    "driveId,shortcutDetails,permissions(type,role,emailAddress,domain)"
)
_PERMISSION_FIELDS = ("type", "role", "emailAddress", "domain")
_VERSION = 1
_MAX_PATH = 1024
MAX_LIST_REQUESTS = 10_000  # per run: about a million items at the default page size
MAX_LIST_REQUESTS_CEILING = 1_000_000


_FAILURES = {  # read_body's failure kinds -> the LoadError message (the kind is the reason)
    "too_large": "the answer is over max_bytes={max_bytes}",
    "encoding": "Drive answered with a Content-Encoding other than the identity asked for",
}


class _Unauthorized(Exception):
    pass


def drive_permissions_access(file: Mapping[str, Any]) -> Access | None:
    """A simple host mapping: users with a listed permission become principals (their email),
    groups become group ids; ``anyone`` and ``domain`` permissions grant nobody in particular.
    Files whose permissions were not listed get ``Access()`` (trusted callers only).

    Fails closed on a malformed answer: ``permissions`` that is not a list, an entry that is
    not an object, or a ``type``, ``role``, ``emailAddress`` or ``domain`` that is present but
    not a string withholds the file (``None``: not indexed, its rows retired), rather than
    granting from the part that could be read."""
    permissions = file.get("permissions")
    if permissions is None:
        return Access()
    if not isinstance(permissions, list) or not all(
        isinstance(p, dict) and all(isinstance(p.get(k, ""), str) for k in _PERMISSION_FIELDS)
        for p in permissions
    ):
        return None
    users: list[str] = []
    groups: list[str] = []
    for permission in permissions:
        address = permission.get("emailAddress")
        if not isinstance(address, str) or not address:
            continue
        if permission.get("type") == "user":
            users.append(address.lower())
        elif permission.get("type") == "group":
            groups.append(address.lower())
    return Access(principal_ids=tuple(dict.fromkeys(users)), group_ids=tuple(dict.fromkeys(groups)))


@attrs.frozen(kw_only=True)
class DriveOptions:
    """The Drive connector's paging, size, budget and retry settings, as one value.

    - ``page_size`` (files per ``files.list`` page, 1..1000, default 100);
    - ``max_bytes`` (a download's byte cap, default ``Limits.parse_bytes``, at most
      ``ceilings.parse_bytes``) and ``ceilings`` (``DEFAULT_CEILINGS``);
    - ``max_list_requests`` (JSON requests per run, default ``MAX_LIST_REQUESTS``);
    - ``max_retries`` (0..10, default 5), ``backoff_s`` (0.5) and ``max_backoff_s`` (30): the
      bounded exponential backoff of 429, 5xx and rate-limit answers; ``sleep`` waits it out
      (``time.sleep``; tests pass their own).

    The connector checks every number when it is built (``ValidationError`` naming the
    field). The transport (``client``, ``transport``, ``allow_loopback``, ``timeout_s``)
    is ``http=HttpOptions(...)``.
    """

    page_size: int = 100
    max_bytes: int = DEFAULT_LIMITS.parse_bytes
    ceilings: Ceilings = DEFAULT_CEILINGS
    max_list_requests: int = MAX_LIST_REQUESTS
    max_retries: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    sleep: Callable[[float], None] = time.sleep


DEFAULT_DRIVE_OPTIONS = DriveOptions()
_OPTION_KEYWORDS = (
    "page_size",
    "max_bytes",
    "ceilings",
    "max_list_requests",
    "max_retries",
    "backoff_s",
    "max_backoff_s",
    "sleep",
)


def _fold_options(given: object, old: Mapping[str, Any], args: tuple[Any, ...]) -> Any:
    return evolve_or_default(given, old, DEFAULT_DRIVE_OPTIONS, DriveOptions, "options")


class GoogleDriveConnector(OwnedClient):
    """Google Drive v3 as a ``Connector``; see the module docstring.

    ``http`` (``HttpOptions``): ``client`` or ``transport``, ``allow_loopback``, ``timeout_s``
    (default 30, at most 600). ``options`` (``DriveOptions``): paging, size, budget and
    retries. The keywords of those fields still work for one release, with a
    ``DeprecationWarning`` (docs/deprecations.md).
    """

    @keyword_folds(
        (
            http_fold("client", "transport", "allow_loopback", "timeout_s"),
            Fold("options", _OPTION_KEYWORDS, _fold_options, "options=DriveOptions(...)"),
        ),
        name="GoogleDriveConnector",
    )
    def __init__(
        self,
        *,
        token_provider: Callable[[], str],
        resolve_access: Callable[[Mapping[str, Any]], Access | None],
        folder_id: str | None = None,
        shared_drive_id: str | None = None,
        base_url: str = "https://www.googleapis.com",
        http: HttpOptions | None = None,
        options: DriveOptions | None = None,
    ):
        web = check_http(http)
        if web.max_response_bytes is not None or web.max_concurrency is not None:
            raise ValidationError(
                "the Drive connector takes no max_response_bytes or max_concurrency "
                "(options.max_bytes caps a download; it sends one request at a time)",
                field="http",
            )
        o = _fold_options(options, {}, ())
        if not callable(token_provider):
            raise ValidationError("token_provider must be callable", field="token_provider")
        if not callable(resolve_access):
            raise ValidationError("resolve_access must be callable", field="resolve_access")
        for name, value in (("folder_id", folder_id), ("shared_drive_id", shared_drive_id)):
            if value is not None:
                validate_id(value, field=name)
        self._base, self._host = check_base_url(base_url, web.allow_loopback)
        self._page_size = check_int(o.page_size, "page_size", 1, 1000)
        self._max_retries = check_int(o.max_retries, "max_retries", 0, 10)
        self._max_list_requests = check_int(
            o.max_list_requests, "max_list_requests", 1, MAX_LIST_REQUESTS_CEILING
        )
        self._list_requests = 0
        self._max_bytes = check_ceilings(o.ceilings).check("parse_bytes", o.max_bytes)
        timeout_s = 30.0 if web.timeout_s is None else web.timeout_s
        if not (0 < float(timeout_s) <= 600):
            raise ValidationError("timeout_s must be in (0, 600]", field="timeout_s")
        self._timeout = float(timeout_s)
        self._backoff = float(o.backoff_s)
        self._max_backoff = float(o.max_backoff_s)
        self._sleep = o.sleep
        self._token_provider = token_provider
        self._resolve_access = resolve_access
        self._folder_id = folder_id
        self._drive_id = shared_drive_id
        self._token: str | None = None
        key = json.dumps([self._host, folder_id, shared_drive_id])
        self._id = "drive:" + hashlib.sha256(key.encode()).hexdigest()[:16]
        self._init_client(
            web.client, web.transport, what="the Google Drive connector", capability="drive"
        )

    @property
    def id(self) -> str:
        return self._id

    # -- HTTP: one GET with bounded retries and backoff --------------------------------------

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

    # -- listing ------------------------------------------------------------------------------

    def _root(self) -> str:
        if self._folder_id is not None:
            return self._folder_id
        if self._drive_id is not None:
            return self._drive_id  # a shared drive's root folder has the drive's id
        data = self._json("/drive/v3/files/root", {"fields": "id"}, what="the root folder")
        return _str(data.get("id"), "root id")

    def _list(self, folder: str, token: str | None) -> dict[str, Any]:
        params = {
            **self._drive_params(),
            "q": f"'{_quote(folder)}' in parents and trashed = false",
            "fields": f"nextPageToken,files({FILE_FIELDS})",
            "pageSize": self._page_size,
            "includeItemsFromAllDrives": "true",
            "orderBy": "name",
        }
        if self._drive_id is not None:
            params["corpora"] = "drive"
        if token is not None:
            params["pageToken"] = token
        return self._json("/drive/v3/files", params, what="files.list", cursor=token is not None)

    def _start_token(self) -> str:
        data = self._json(
            "/drive/v3/changes/startPageToken",
            self._drive_params(),
            what="changes.getStartPageToken",
        )
        return _str(data.get("startPageToken"), "startPageToken")

    def _upsert(self, file: Mapping[str, Any], path: str) -> Upsert:
        file_id = _str(file.get("id"), "file id")
        mime = str(file.get("mimeType") or "")
        name = str(file.get("name") or file_id)
        access = self._resolve_access(file)
        metadata = {
            "title": name,
            "name": name,
            "path": path,
            "mime_type": mime,
            "url": file.get("webViewLink"),
            "drive_modified_time": file.get("modifiedTime"),
        }
        revision = file.get("md5Checksum") or file.get("version") or file.get("modifiedTime")
        size = file.get("size")

        def load() -> LoadedDocument:
            if mime in EXPORTS:
                export, media_type = EXPORTS[mime]
                data, _ = self._get(
                    f"/drive/v3/files/{_quote_path(file_id)}/export",
                    {"mimeType": export},
                    what="files.export",
                )
                return LoadedDocument(
                    data, media_type, file_id, {k: v for k, v in metadata.items() if v}
                )
            if mime.startswith(GOOGLE_APPS) or base_media_type(mime) not in PARSEABLE:
                raise ParseError(
                    "this Drive file type is not indexed",
                    reason="unsupported_type",
                    media_type=mime[:100],
                )
            if isinstance(size, str) and size.isdigit() and int(size) > self._max_bytes:
                raise LoadError(f"the file is over max_bytes={self._max_bytes}", reason="too_large")
            data, _ = self._get(
                f"/drive/v3/files/{_quote_path(file_id)}",
                {"alt": "media", "supportsAllDrives": "true"},
                what="files.get media",
            )
            return LoadedDocument(
                data, base_media_type(mime), file_id, {k: v for k, v in metadata.items() if v}
            )

        modified = _time(file.get("modifiedTime"))
        return Upsert(
            file_id,
            load,
            media_type=mime or None,
            revision=str(revision) if revision is not None else None,
            modified_at=modified,
            access=access,
            metadata={k: v for k, v in metadata.items() if v},
        )

    # -- cursors ------------------------------------------------------------------------------

    def _cursor(self, kind: str, **body: Any) -> str:
        return json.dumps(
            {"v": _VERSION, "kind": kind, "id": self._id, **body},
            separators=(",", ":"),
            sort_keys=True,
        )

    def _decode(self, cursor: object, kind: str) -> dict[str, Any]:
        bad = SyncCursorError("the cursor was not issued by this Drive connector", reason="invalid")
        body = decode_cursor(cursor, bad, version=_VERSION, kind=kind, owner=("id", self._id))
        folders, files = body.get("folders"), body.get("files")
        if not isinstance(folders, dict) or not isinstance(files, dict):
            raise bad
        if not all(isinstance(v, list) and len(v) == 2 for v in folders.values()):
            raise bad
        return body

    # -- the port -----------------------------------------------------------------------------

    def bootstrap(self, cursor: str | None = None) -> Page:
        """One ``files.list`` page of the folder being walked (breadth first)."""
        return self._in_run(lambda: self._bootstrap(cursor))

    def changes(self, cursor: str) -> Page:
        """One ``changes.list`` page judged against the folder tree the cursor records."""
        return self._in_run(lambda: self._changes(cursor))

    def _in_run(self, fetch: Callable[[], Page]) -> Page:
        """``fetch()``; a run ends at an exhausted page or an error (``max_list_requests``)."""
        try:
            page = fetch()
        except BaseException:
            self._end_run()
            raise
        if page.exhausted:
            self._end_run()
        return page

    def _bootstrap(self, cursor: str | None) -> Page:
        if cursor is None:
            start = self._start_token()
            root = self._root()
            body: dict[str, Any] = {
                "start": start,
                "root": root,
                "queue": [root],
                "token": None,
                "folders": {root: ["", ""]},
                "files": {},
            }
        else:
            body = self._decode(cursor, "bootstrap")
            queue_ok = isinstance(body.get("queue"), list) and all(
                isinstance(q, str) for q in body["queue"]
            )
            token_ok = body.get("token") is None or isinstance(body.get("token"), str)
            if not (queue_ok and token_ok and isinstance(body.get("start"), str)):
                raise SyncCursorError("the cursor was not issued by this Drive connector")
        seen = _seen(body)  # digests of the page tokens followed in this folder's listing
        folders: dict[str, list[str]] = body["folders"]
        files: dict[str, str] = body["files"]
        queue: list[str] = list(body["queue"])
        upserts: list[Upsert] = []
        while queue and not upserts:
            folder = queue[0]
            data = self._list(folder, body.get("token"))
            for file in _files(data):
                upsert = self._take(file, folder, folders, files, queue)
                if upsert is not None:
                    upserts.append(upsert)
            token = data.get("nextPageToken")
            if isinstance(token, str) and token:
                seen.append(_follow(token, seen, "files.list"))
                body["token"] = token
            else:
                body["token"] = None
                seen = []  # the next folder's listing starts afresh
                queue.pop(0)
            if upserts or not queue:
                break
        body["queue"] = queue
        body["seen"] = seen
        if not queue:
            return Page(
                upserts,
                (),
                self._cursor(
                    "changes", token=body["start"], root=body["root"], folders=folders, files=files
                ),
                exhausted=True,
            )
        return Page(
            upserts,
            (),
            self._cursor(
                "bootstrap", **{k: v for k, v in body.items() if k not in ("v", "kind", "id")}
            ),
            exhausted=False,
        )

    def _take(
        self,
        file: Mapping[str, Any],
        parent: str,
        folders: dict[str, list[str]],
        files: dict[str, str],
        queue: list[str] | None,
    ) -> Upsert | None:
        """Record a listed item under ``parent``; its upsert, or None for folders and shortcuts."""
        file_id = file.get("id")
        if not isinstance(file_id, str) or not file_id or file.get("trashed"):
            return None
        name = str(file.get("name") or file_id)
        path = _child_path(folders, parent, name)
        mime = file.get("mimeType")
        if mime == FOLDER:
            if file_id not in folders:
                folders[file_id] = [parent, path]
                if queue is not None:
                    queue.append(file_id)
            return None
        if mime == SHORTCUT:
            return None  # never followed: a target inside the folder is listed on its own
        files[file_id] = parent
        return self._upsert(file, path)

    def _changes(self, cursor: str) -> Page:
        body = self._decode(cursor, "changes")
        token = body.get("token")
        if not isinstance(token, str) or not token:
            raise SyncCursorError("the cursor was not issued by this Drive connector")
        folders: dict[str, list[str]] = dict(body["folders"])
        files: dict[str, str] = dict(body["files"])
        params = {
            **self._drive_params(),
            "pageToken": token,
            "pageSize": self._page_size,
            "includeRemoved": "true",
            "includeItemsFromAllDrives": "true",
            "fields": f"nextPageToken,newStartPageToken,changes(fileId,removed,file({FILE_FIELDS}))",
        }
        data = self._json("/drive/v3/changes", params, what="changes.list", cursor=True)
        # Tokens followed since this run of changes pages began (reset once one is exhausted).
        seen = [*_seen(body), _digest(token)]
        nxt = data.get("nextPageToken")
        exhausted = not (isinstance(nxt, str) and nxt)
        if isinstance(nxt, str) and nxt:
            _follow(nxt, seen, "changes.list")
        changes = data.get("changes")
        if changes is None:
            changes = []
        if not isinstance(changes, list):
            raise LoadError("Drive answered changes.list without a list", reason="malformed")
        upserts: dict[str, Upsert] = {}
        deletions: dict[str, None] = {}
        for change in changes:
            if not isinstance(change, dict):
                continue
            file_id = change.get("fileId")
            if not isinstance(file_id, str):
                continue
            file = change.get("file") if isinstance(change.get("file"), dict) else None
            gone = bool(change.get("removed")) or file is None or bool(file.get("trashed"))
            parents = [] if gone or file is None else _parents(file)
            inside = next((p for p in parents if p in folders), None)
            is_folder = file is not None and file.get("mimeType") == FOLDER
            if file_id in folders or (is_folder and inside is not None):
                self._folder_change(file_id, file, inside, folders, files, upserts, deletions)
                continue
            if inside is not None and file is not None:
                upsert = self._take(file, inside, folders, files, None)
                if upsert is not None:
                    upserts[file_id] = upsert
                    deletions.pop(file_id, None)
                elif file_id in files:  # became a shortcut or similar
                    files.pop(file_id)
                    deletions[file_id] = None
            elif file_id in files:
                files.pop(file_id)
                upserts.pop(file_id, None)
                deletions[file_id] = None
        new_token = data.get("newStartPageToken") if exhausted else nxt
        if not isinstance(new_token, str) or not new_token:
            raise LoadError("Drive answered changes.list without a page token", reason="malformed")
        return Page(
            list(upserts.values()),
            list(deletions),
            self._cursor(
                "changes",
                token=new_token,
                root=body.get("root"),
                folders=folders,
                files=files,
                seen=[] if exhausted else seen,
            ),
            exhausted=exhausted,
        )

    def _folder_change(
        self,
        folder_id: str,
        file: Mapping[str, Any] | None,
        inside: str | None,
        folders: dict[str, list[str]],
        files: dict[str, str],
        upserts: dict[str, Upsert],
        deletions: dict[str, None],
    ) -> None:
        if folder_id in folders and (inside is None or file is None) and folders[folder_id][0]:
            # Trashed, removed or moved out (never the root): its subtree leaves with it.
            subtree = {folder_id}
            grew = True
            while grew:
                grew = False
                for fid, (parent, _) in folders.items():
                    if fid not in subtree and parent in subtree:
                        subtree.add(fid)
                        grew = True
            for fid in subtree:
                folders.pop(fid, None)
            for file_id, parent in list(files.items()):
                if parent in subtree:
                    files.pop(file_id)
                    upserts.pop(file_id, None)
                    deletions[file_id] = None
            return
        if folder_id not in folders and file is not None and inside is not None:
            # Moved in (or created): list it whole.
            self._take(file, inside, folders, files, None)
            queue = [folder_id]
            while queue:
                current = queue.pop(0)
                token: str | None = None
                followed: list[str] = []
                while True:
                    data = self._list(current, token)
                    for child in _files(data):
                        upsert = self._take(child, current, folders, files, queue)
                        if upsert is not None:
                            upserts[upsert.source_id] = upsert
                            deletions.pop(upsert.source_id, None)
                    nxt = data.get("nextPageToken")
                    if not (isinstance(nxt, str) and nxt):
                        break
                    followed.append(_follow(nxt, followed, "files.list"))
                    token = nxt
            return
        if file is not None and inside is not None and folders.get(folder_id, [""])[0]:
            # Renamed or moved inside the tree (files keep their old path until they change).
            folders[folder_id] = [
                inside,
                _child_path(folders, inside, str(file.get("name") or folder_id)),
            ]


def _child_path(folders: Mapping[str, list[str]], parent: str, name: str) -> str:
    base = folders.get(parent, ["", ""])[1]
    return f"{base}/{name}".lstrip("/")[:_MAX_PATH]


def _digest(token: str) -> str:
    """A page token as the cursor remembers it: short, and not the token itself."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _follow(token: str, seen: list[str], what: str) -> str:
    """``token``'s digest, or ``SyncCursorError`` when this listing has followed it already:
    a page token seen twice would page forever."""
    digest = _digest(token)
    if digest in seen:
        raise SyncCursorError(f"Drive repeated a page token within one {what}", reason="invalid")
    return digest


def _seen(body: Mapping[str, Any]) -> list[str]:
    seen = body.get("seen", [])
    if not isinstance(seen, list) or not all(isinstance(d, str) for d in seen):
        raise SyncCursorError("the cursor was not issued by this Drive connector")
    return list(seen)


def _parents(file: Mapping[str, Any]) -> list[str]:
    """The parents listed as strings; ``parents`` that is not a list names none (the file is
    then judged outside the folder, which fails closed: a known file is deleted)."""
    parents = file.get("parents")
    return [p for p in parents if isinstance(p, str)] if isinstance(parents, list) else []


def _files(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    files = data.get("files")
    if not isinstance(files, list):
        raise LoadError("Drive answered files.list without files", reason="malformed")
    return [f for f in files if isinstance(f, dict)]


def _str(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise LoadError(f"Drive answered without {what}", reason="malformed")
    return value


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _quote_path(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _rate_limited(body: bytes) -> bool:
    try:
        data = json.loads(body)
        reasons = {e.get("reason") for e in data["error"]["errors"]}
    except (ValueError, RecursionError, KeyError, TypeError, AttributeError):
        return False
    return bool(reasons & {"rateLimitExceeded", "userRateLimitExceeded"})
