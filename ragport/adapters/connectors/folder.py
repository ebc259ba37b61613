"""``FolderConnector``: a local folder as a ``Connector`` (source ids are relative paths).

The cursor is JSON recording, for every file listed, ``[size, mtime_ns, sha256]``; ``changes``
walks the folder, hashes only files whose size or mtime moved (or whose mtime is too close to
the last scan to be trusted, git's "racy" rule), and reports an upsert for new or different
bytes and a deletion for a recorded path that is gone. Hidden files and folders (a name
starting with ``.``) and symlinks are skipped: nothing outside the root is ever read.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ragport.adapters._files import read_regular_file
from ragport.adapters.connectors._cursors import decode_cursor
from ragport.domain.documents import DOCUMENT_SUFFIXES, media_type_for
from ragport.domain.errors import LoadError, SyncCursorError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.domain.model import validate_id
from ragport.domain.sync import Access
from ragport.ports.documents import LoadedDocument
from ragport.ports.sync import Page, Upsert

__all__ = ["FolderConnector", "FolderFile"]

_VERSION = 1
_RACY_NS = 2_000_000_000  # mtimes this close to the scan may still change within one tick
FileRecord = list[Any]  # [size, mtime_ns, sha256 hex]


class FolderFile:
    """What ``resolve_access`` receives for a file: its source id, path and stat values."""

    __slots__ = ("modified_at", "path", "size", "source_id")

    def __init__(self, source_id: str, path: Path, size: int, modified_at: datetime):
        self.source_id = source_id
        self.path = path
        self.size = size
        self.modified_at = modified_at


class FolderConnector:
    """Keeps a scope equal to the document files under ``root``.

    ``resolve_access(file) -> Access | None`` maps a ``FolderFile`` to who may see it (default:
    ``Access()``, an empty grant: only trusted callers, ``authorization=None``, see the
    chunks). ``suffixes`` limits the files listed (default: every suffix ragport parses),
    ``page_size`` bounds the upserts per page, ``max_bytes`` the size of a file loaded.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        resolve_access: Callable[[FolderFile], Access | None] | None = None,
        suffixes: Iterable[str] | None = DOCUMENT_SUFFIXES,
        page_size: int = 200,
        max_bytes: int = DEFAULT_LIMITS.parse_bytes,
    ):
        try:
            resolved = Path(root).resolve(strict=True)
        except OSError:
            raise ValidationError("root does not exist", field="root") from None
        if not resolved.is_dir():
            raise ValidationError("root is not a folder", field="root")
        if (
            isinstance(page_size, bool)
            or not isinstance(page_size, int)
            or not 1 <= page_size <= 10_000
        ):
            raise ValidationError("page_size must be an integer in 1..10000", field="page_size")
        self._root = resolved
        self._digest = hashlib.sha256(str(resolved).encode("utf-8", "surrogatepass")).hexdigest()[
            :16
        ]
        self._resolve_access = resolve_access
        self._suffixes = None if suffixes is None else frozenset(s.lower() for s in suffixes)
        self._page_size = page_size
        self._max_bytes = check_limit("parse_bytes", max_bytes)

    @property
    def id(self) -> str:
        return f"folder:{self._digest}"

    @property
    def root(self) -> Path:
        return self._root

    # -- walking ----------------------------------------------------------------------------

    def _walk(self) -> Iterator[tuple[str, os.stat_result]]:
        """``(source id, stat)`` of every listed file, ordered by source id (code points)."""
        found: list[tuple[str, os.stat_result]] = []
        stack = [(self._root, "")]
        while stack:
            folder, prefix = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue  # unreadable folder: its files are neither listed nor deleted by it
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                rel = f"{prefix}{entry.name}"
                if stat.S_ISDIR(info.st_mode):
                    stack.append((Path(entry.path), rel + "/"))
                elif stat.S_ISREG(info.st_mode):
                    if (
                        self._suffixes is not None
                        and Path(entry.name).suffix.lower() not in self._suffixes
                    ):
                        continue
                    try:
                        validate_id(rel, field="source_id")
                    except ValidationError:
                        continue
                    found.append((rel, info))
        found.sort(key=lambda item: item[0])
        return iter(found)

    def _read(self, source_id: str) -> bytes:
        path = self._root / source_id
        return read_regular_file(path, self._max_bytes)

    def _hash(self, source_id: str) -> str | None:
        try:
            return hashlib.sha256(self._read(source_id)).hexdigest()
        except LoadError:
            return None

    def _upsert(self, source_id: str, info: os.stat_result, sha: str) -> Upsert:
        modified = datetime.fromtimestamp(info.st_mtime_ns / 1e9, UTC)
        path = self._root / source_id

        def load() -> LoadedDocument:
            return LoadedDocument(
                self._read(source_id), media_type_for(source_id), source_id, {"path": source_id}
            )

        access: Access | None = Access()
        if self._resolve_access is not None:
            access = self._resolve_access(FolderFile(source_id, path, info.st_size, modified))
        return Upsert(
            source_id,
            load,
            media_type=media_type_for(source_id),
            revision=sha,
            modified_at=modified,
            access=access,
            metadata={"path": source_id},
        )

    # -- cursors ----------------------------------------------------------------------------

    def _cursor(self, kind: str, files: dict[str, FileRecord], **extra: Any) -> str:
        body = {"v": _VERSION, "kind": kind, "root": self._digest, "files": files, **extra}
        return json.dumps(body, separators=(",", ":"), sort_keys=True, ensure_ascii=False)

    def _decode(self, cursor: object, kind: str) -> dict[str, Any]:
        bad = SyncCursorError(
            "the cursor was not issued by this folder connector", reason="invalid"
        )
        body = decode_cursor(cursor, bad, version=_VERSION, kind=kind, owner=("root", self._digest))
        if not isinstance(body.get("files"), dict):
            raise bad
        for record in body["files"].values():
            if not (isinstance(record, list) and len(record) == 3):
                raise bad
        return body

    # -- the port ---------------------------------------------------------------------------

    def bootstrap(self, cursor: str | None = None) -> Page:
        """Files after the cursor's last path, ``page_size`` at a time, hashed as listed."""
        after: str | None = None
        files: dict[str, FileRecord] = {}
        scanned = time.time_ns()
        if cursor is not None:
            body = self._decode(cursor, "bootstrap")
            got_after, got_scanned = body.get("after"), body.get("scanned")
            if not isinstance(got_after, str) or not isinstance(got_scanned, int):
                raise SyncCursorError("the cursor was not issued by this folder connector")
            after, files, scanned = got_after, dict(body["files"]), got_scanned
        upserts: list[Upsert] = []
        more = False
        for source_id, info in self._walk():
            if after is not None and source_id <= after:
                continue
            if len(upserts) == self._page_size:
                more = True
                break
            sha = self._hash(source_id)
            if sha is None:
                continue  # vanished or too large since the walk; the next changes() sees it
            files[source_id] = [info.st_size, info.st_mtime_ns, sha]
            upserts.append(self._upsert(source_id, info, sha))
        if more:
            return Page(
                upserts,
                (),
                self._cursor("bootstrap", files, after=upserts[-1].source_id, scanned=scanned),
                exhausted=False,
            )
        return Page(upserts, (), self._cursor("changes", files, scanned=scanned), exhausted=True)

    def changes(self, cursor: str) -> Page:
        """New, edited and removed files since the cursor; at most ``page_size`` upserts a page."""
        body = self._decode(cursor, "changes")
        before: dict[str, FileRecord] = body["files"]
        got_scan = body.get("scanned")
        last_scan: int = got_scan if isinstance(got_scan, int) else 0
        scanned = time.time_ns()
        after: dict[str, FileRecord] = {}
        upserts: list[Upsert] = []
        present: set[str] = set()
        more = False
        for source_id, info in self._walk():
            present.add(source_id)
            old = before.get(source_id)
            same_stat = old is not None and old[0] == info.st_size and old[1] == info.st_mtime_ns
            racy = info.st_mtime_ns >= last_scan - _RACY_NS
            if old is not None and same_stat and not racy:
                after[source_id] = old
                continue
            sha = self._hash(source_id)
            if sha is None:
                if old is not None:
                    after[source_id] = old
                continue
            if old is not None and old[2] == sha:
                after[source_id] = [info.st_size, info.st_mtime_ns, sha]
                continue
            if len(upserts) == self._page_size:
                more = True
                if old is not None:
                    after[source_id] = old
                continue
            after[source_id] = [info.st_size, info.st_mtime_ns, sha]
            upserts.append(self._upsert(source_id, info, sha))
        deletions = sorted(s for s in before if s not in present)
        # A page that stopped early must not advance the scan time past files it did not hash.
        return Page(
            upserts,
            deletions,
            self._cursor("changes", after, scanned=last_scan if more else scanned),
            exhausted=not more,
        )
