"""A fake Google Drive v3 API for the connector tests, served over real HTTP (fake_http).

``FakeDrive`` holds files (id, name, mimeType, parents, trashed, content, driveId,
permissions), a change log, and knobs: ``tokens`` (valid bearer tokens), ``fail_next`` (a
list of ``Reply`` objects answered before the real one: 429 with Retry-After, 503, ...),
``expired_below`` (changes page tokens below it answer 410), ``tamper`` (``(path, query,
reply) -> Reply``: rewrites each authorized answer, for hostile-answer tests). It answers:

- ``GET /drive/v3/files/root``, ``GET /drive/v3/files?q='<id>' in parents and trashed = false``
  (``pageSize``, ``pageToken``; shared-drive items only with ``supportsAllDrives``,
  ``includeItemsFromAllDrives``, ``corpora=drive`` and ``driveId``)
- ``GET /drive/v3/changes/startPageToken``, ``GET /drive/v3/changes?pageToken=N``
- ``GET /drive/v3/files/<id>/export?mimeType=...`` and ``GET /drive/v3/files/<id>?alt=media``
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from fake_http import Reply

__all__ = ["FakeDrive"]

FOLDER = "application/vnd.google-apps.folder"
DOC = "application/vnd.google-apps.document"
SHEET = "application/vnd.google-apps.spreadsheet"
SHORTCUT = "application/vnd.google-apps.shortcut"
FORM = "application/vnd.google-apps.form"
_IN_PARENTS = re.compile(r"^'((?:[^'\\]|\\.)+)' in parents and trashed = false$")


def _error(status: int, reason: str) -> Reply:
    body = {"error": {"code": status, "message": reason, "errors": [{"reason": reason}]}}
    return Reply(status, json.dumps(body).encode())


class FakeDrive:
    def __init__(self) -> None:
        self.files: dict[str, dict[str, Any]] = {}
        self.content: dict[str, bytes] = {}
        self.log: list[str] = []  # file ids, one per change; a page token is an index into it
        self.tokens = {"token-1"}
        self.fail_next: list[Reply] = []
        self.expired_below = 0
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.root = "root-folder"
        self.files[self.root] = {
            "id": self.root,
            "name": "My Drive",
            "mimeType": FOLDER,
            "parents": [],
        }
        self.downloads: list[str] = []
        self.tamper: Callable[[str, dict[str, str], Reply], Reply] | None = None

    # -- building the drive -------------------------------------------------------------------

    def _touch(self, file_id: str) -> None:
        file = self.files[file_id]
        file["version"] = str(int(file.get("version", "0")) + 1)
        file["modifiedTime"] = f"2026-01-01T00:00:{len(self.log) % 60:02d}.000Z"
        if file_id in self.content:
            file["md5Checksum"] = hashlib.md5(self.content[file_id]).hexdigest()
            file["size"] = str(len(self.content[file_id]))
        self.log.append(file_id)

    def add(
        self,
        name: str,
        *,
        parent: str | None = None,
        mime: str = "text/plain",
        data: bytes = b"",
        drive_id: str | None = None,
        permissions: list[dict[str, str]] | None = None,
        file_id: str | None = None,
        **extra: Any,
    ) -> str:
        with self.lock:
            file_id = file_id or f"f{next(self.ids):04d}"
            self.files[file_id] = {
                "id": file_id,
                "name": name,
                "mimeType": mime,
                "parents": [parent or self.root],
                "trashed": False,
                "webViewLink": f"https://drive.example/{file_id}",
                "permissions": permissions
                or [{"type": "user", "role": "reader", "emailAddress": "alice@example.com"}],
                **({"driveId": drive_id} if drive_id else {}),
                **extra,
            }
            if mime != FOLDER:
                self.content[file_id] = data
            self._touch(file_id)
            return file_id

    def folder(
        self, name: str, *, parent: str | None = None, drive_id: str | None = None, file_id=None
    ) -> str:
        return self.add(name, parent=parent, mime=FOLDER, drive_id=drive_id, file_id=file_id)

    def edit(self, file_id: str, data: bytes) -> None:
        with self.lock:
            self.content[file_id] = data
            self._touch(file_id)

    def update(self, file_id: str, **fields: Any) -> None:
        with self.lock:
            self.files[file_id].update(fields)
            self._touch(file_id)

    def trash(self, file_id: str) -> None:
        self.update(file_id, trashed=True)

    def move(self, file_id: str, parent: str) -> None:
        self.update(file_id, parents=[parent])

    def delete(self, file_id: str) -> None:
        with self.lock:
            del self.files[file_id]
            self.content.pop(file_id, None)
            self.log.append(file_id)

    # -- serving ------------------------------------------------------------------------------

    def __call__(self, request: dict[str, Any]) -> Reply:
        with self.lock:
            if self.fail_next:
                return self.fail_next.pop(0)
            auth = request["headers"].get("Authorization", "")
            if not auth.startswith("Bearer ") or auth[7:] not in self.tokens:
                return _error(401, "authError")
            parts = urlsplit(request["path"])
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            path = unquote(parts.path)
            reply = self._route(path, query)
            return reply if self.tamper is None else self.tamper(path, query, reply)

    def _visible(self, file: dict[str, Any], query: dict[str, str]) -> bool:
        drive_id = file.get("driveId")
        if drive_id is None:
            return True
        return (
            query.get("supportsAllDrives") == "true"
            and query.get("includeItemsFromAllDrives", "true") == "true"
            and (query.get("driveId") == drive_id or "driveId" not in query)
        )

    def _route(self, path: str, query: dict[str, str]) -> Reply:
        if path == "/drive/v3/files/root":
            return Reply(200, json.dumps({"id": self.root}).encode())
        if path == "/drive/v3/files":
            return self._list(query)
        if path == "/drive/v3/changes/startPageToken":
            return Reply(200, json.dumps({"startPageToken": str(len(self.log))}).encode())
        if path == "/drive/v3/changes":
            return self._changes(query)
        match = re.fullmatch(r"/drive/v3/files/([^/]+)(/export)?", path)
        if match:
            file = self.files.get(match.group(1))
            if file is None or not self._visible(file, query | {"supportsAllDrives": "true"}):
                return _error(404, "notFound")
            self.downloads.append(file["id"])
            if match.group(2):
                if not file["mimeType"].startswith("application/vnd.google-apps."):
                    return _error(403, "fileNotExportable")
                return Reply(
                    200, self.content[file["id"]], headers={"Content-Type": query["mimeType"]}
                )
            if query.get("alt") != "media" or file["mimeType"].startswith(
                "application/vnd.google-apps."
            ):
                return _error(403, "fileNotDownloadable")
            return Reply(200, self.content[file["id"]], headers={"Content-Type": file["mimeType"]})
        return _error(404, "notFound")

    def _resource(self, file: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in file.items()}

    def _list(self, query: dict[str, str]) -> Reply:
        match = _IN_PARENTS.match(query.get("q", ""))
        if match is None:
            return _error(400, "invalidQuery")
        parent = match.group(1).replace("\\'", "'").replace("\\\\", "\\")
        if query.get("corpora") == "drive" and "driveId" not in query:
            return _error(400, "invalidParameter")
        children = sorted(
            (
                f
                for f in self.files.values()
                if parent in f.get("parents", [])
                and not f.get("trashed")
                and self._visible(f, query)
            ),
            key=lambda f: (f["name"], f["id"]),
        )
        size = int(query.get("pageSize", "100"))
        token = query.get("pageToken")
        start = 0
        if token is not None:
            if not token.startswith(f"list:{parent}:"):
                return _error(400, "invalidParameter")
            start = int(token.rsplit(":", 1)[1])
        page = children[start : start + size]
        body: dict[str, Any] = {"files": [self._resource(f) for f in page]}
        if start + size < len(children):
            body["nextPageToken"] = f"list:{parent}:{start + size}"
        return Reply(200, json.dumps(body).encode())

    def _changes(self, query: dict[str, str]) -> Reply:
        token = query.get("pageToken", "")
        if not token.isdigit() or int(token) > len(self.log):
            return _error(400, "invalidParameter")
        start = int(token)
        if start < self.expired_below:
            return _error(410, "gone")
        size = int(query.get("pageSize", "100"))
        entries = self.log[start : start + size]
        changes = []
        for file_id in entries:
            file = self.files.get(file_id)
            if file is not None and not self._visible(file, query):
                continue
            if file is None:
                changes.append({"fileId": file_id, "removed": True})
            else:
                changes.append({"fileId": file_id, "removed": False, "file": self._resource(file)})
        body: dict[str, Any] = {"changes": changes}
        if start + size < len(self.log):
            body["nextPageToken"] = str(start + size)
        else:
            body["newStartPageToken"] = str(len(self.log))
        return Reply(200, json.dumps(body).encode())
