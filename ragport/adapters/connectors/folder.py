"""``FolderConnector``: a local folder as a ``Connector`` (source ids are relative paths).

The cursor is JSON recording, for every file listed, ``[size, mtime_ns, sha256]`` (a hash
taken more than 2 s after the file's mtime, trusted while size and mtime stay), or
``[size, mtime_ns, sha256 | null, hashed_ns]`` (a racy hash, git's rule: the file may still
change within its mtime tick; or ``null``: the file could not be read at ``hashed_ns``).
``changes`` walks the folder, reads only files whose stat moved or whose record is not
trusted, each at most once per run, and reports an upsert for new or different bytes and a
deletion for a recorded path that is gone. A file that cannot be read when listed (too
large, unreadable, vanished) is an upsert whose ``load()`` raises ``LoadError``, so the sync
counts it failed and keeps its previous version. Hidden files and folders (a name starting
with ``.``) and symlinks are skipped, and every path is opened component by component under
the root's descriptor without following a symlink (``ragport.adapters._files``): nothing
outside the root is ever listed or read, even when a folder is swapped for a symlink
between the listing and ``load()``. A document file whose path no source id can name (a
name whose bytes are not UTF-8, a control character, a path past ``ID_MAX`` characters) is
not listed; ``unlisted`` names each one the last listing met, so a caller reports it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from ragport.adapters._files import FileCaps, open_folder
from ragport.adapters.connectors._cursors import decode_cursor
from ragport.domain.documents import DOCUMENT_SUFFIXES, media_type_for
from ragport.domain.errors import LoadError, SyncCursorError, ValidationError, reason_code
from ragport.domain.limits import DEFAULT_CEILINGS, DEFAULT_LIMITS, Ceilings, check_ceilings
from ragport.domain.model import ID_MAX, validate_id
from ragport.domain.sync import Access
from ragport.ports.documents import LoadedDocument
from ragport.ports.sync import Page, Upsert

__all__ = ["FolderConnector", "FolderFile", "UnlistedFile"]

_VERSION = 1
_RACY_NS = 2_000_000_000  # mtimes this close to the scan may still change within one tick
FileRecord = list[Any]  # [size, mtime_ns, sha256 hex] or [size, mtime_ns, sha | None, hashed_ns]


class FolderFile:
    """What ``resolve_access`` receives for a file: its source id, path and stat values."""

    __slots__ = ("modified_at", "path", "size", "source_id")

    def __init__(self, source_id: str, path: Path, size: int, modified_at: datetime):
        self.source_id = source_id
        self.path = path
        self.size = size
        self.modified_at = modified_at


@attrs.frozen
class UnlistedFile:
    """A document file the listing met but cannot name as a source: ``name`` is its path
    relative to the root as Python decodes it (an undecodable byte is a lone surrogate, as
    ``ragport ingest`` shows it), ``reason`` and ``error`` say why, as ``ingest`` says it."""

    name: str
    reason: str
    error: str


class FolderConnector:
    """Keeps a scope equal to the document files under ``root``.

    ``resolve_access(file) -> Access | None`` maps a ``FolderFile`` to who may see it (default:
    ``Access()``, an empty grant: only trusted callers, ``authorization=None``, see the
    chunks). ``suffixes`` limits the files listed (default: every suffix ragport parses),
    ``page_size`` bounds the upserts per page, ``max_bytes`` the size of a file loaded and
    ``binary_max_bytes`` that of a PDF or DOCX, whose bytes are not its text (default
    ``binary_bytes``, 8 MiB; its parser caps the text at ``parse_bytes``), both up to
    ``ceilings.parse_bytes``: the hard 8 MiB unless an operator's ``Ceilings`` raises it.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        resolve_access: Callable[[FolderFile], Access | None] | None = None,
        suffixes: Iterable[str] | None = DOCUMENT_SUFFIXES,
        page_size: int = 200,
        max_bytes: int = DEFAULT_LIMITS.parse_bytes,
        ceilings: Ceilings = DEFAULT_CEILINGS,
        binary_max_bytes: int = DEFAULT_LIMITS.binary_bytes,
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
        self._caps = FileCaps.of(max_bytes, binary_max_bytes, check_ceilings(ceilings))
        self._unlisted: tuple[UnlistedFile, ...] = ()

    @property
    def id(self) -> str:
        return f"folder:{self._digest}"

    @property
    def root(self) -> Path:
        return self._root

    @property
    def unlisted(self) -> tuple[UnlistedFile, ...]:
        """The document files the last listing (``bootstrap`` or ``changes``) met but could not
        name as a source, by name (see ``UnlistedFile``); empty before the first."""
        return self._unlisted

    # -- walking ----------------------------------------------------------------------------

    def _walk(self) -> list[tuple[str, os.stat_result]]:
        """``(source id, stat)`` of every listed file, ordered by source id (code points).

        Every folder is opened under its parent's descriptor without following a symlink, so
        a folder swapped for a symlink is not walked. A folder that vanished or stopped being
        a folder since its parent was listed holds nothing (its recorded files are deletions);
        a folder that cannot be opened or listed (permissions, I/O) is ``LoadError``, never a
        silently shorter listing that would delete what it holds.
        """
        found: list[tuple[str, os.stat_result]] = []
        unlisted: list[UnlistedFile] = []
        pending: list[tuple[str, ...]] = [()]
        while pending:
            parts = pending.pop()
            try:
                fd = open_folder(self._root, parts)
            except LoadError as exc:
                if parts and exc.reason in ("not_found", "outside_root"):
                    continue
                raise LoadError("the folder cannot be listed", reason=exc.reason) from None
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        self._take(entry, parts, found, pending, unlisted)
            except OSError:
                raise LoadError(
                    "a folder under the root cannot be listed", reason="unreadable"
                ) from None
            finally:
                os.close(fd)
        found.sort(key=lambda item: item[0])
        self._unlisted = tuple(sorted(unlisted, key=lambda u: u.name))
        return found

    def _take(
        self,
        entry: os.DirEntry[str],
        parts: tuple[str, ...],
        found: list[tuple[str, os.stat_result]],
        pending: list[tuple[str, ...]],
        unlisted: list[UnlistedFile],
    ) -> None:
        """Queue a subfolder or keep a document file (``entry.stat`` needs its folder open);
        a document file no source id can name goes to ``unlisted``."""
        if entry.name.startswith("."):
            return
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            return  # gone since the folder was listed
        rel = "/".join((*parts, entry.name))
        if stat.S_ISDIR(info.st_mode):
            if len(rel) < ID_MAX:  # nothing deeper could have a valid source id
                pending.append((*parts, entry.name))
        elif stat.S_ISREG(info.st_mode):
            if self._suffixes is not None and Path(entry.name).suffix.lower() not in self._suffixes:
                return
            try:
                validate_id(rel, field="source_id")
            except ValidationError as exc:
                unlisted.append(UnlistedFile(rel, reason_code(exc), f"{type(exc).__name__}: {exc}"))
                return
            found.append((rel, info))

    def _read(self, source_id: str) -> bytes:
        """The file's bytes, every component opened under the root's descriptor (no symlink
        followed, a FIFO never blocks): ``LoadError`` as ``read_file_under`` raises it."""
        return self._caps.read(self._root, source_id.split("/"), media_type_for(source_id))

    def _hash(self, source_id: str) -> str:
        return hashlib.sha256(self._read(source_id)).hexdigest()

    def _upsert(
        self,
        source_id: str,
        info: os.stat_result,
        sha: str | None,
        failure: LoadError | None = None,
    ) -> Upsert:
        """The upsert for a listed file; with ``failure`` (it could not be read when listed)
        its ``load()`` raises a ``LoadError`` of the same reason, so the item is failed."""
        modified = datetime.fromtimestamp(info.st_mtime_ns / 1e9, UTC)
        path = self._root / source_id

        def load() -> LoadedDocument:
            if failure is not None:
                raise LoadError(str(failure), reason=failure.reason)
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

    def _list(
        self, source_id: str, info: os.stat_result, hashed: int, files: dict[str, FileRecord]
    ) -> tuple[Upsert, str | None]:
        """Hash a file once and record it: ``(upsert, sha)``; a file that cannot be read is
        recorded without a hash (so it is listed again) and its upsert's ``load()`` fails."""
        try:
            sha = self._hash(source_id)
        except LoadError as exc:
            files[source_id] = _record(info.st_size, info.st_mtime_ns, None, hashed)
            return self._upsert(source_id, info, None, exc), None
        files[source_id] = _record(info.st_size, info.st_mtime_ns, sha, hashed)
        return self._upsert(source_id, info, sha), sha

    # -- cursors ----------------------------------------------------------------------------

    def _cursor(self, kind: str, files: dict[str, FileRecord], **extra: Any) -> str:
        body = {"v": _VERSION, "kind": kind, "root": self._digest, "files": files, **extra}
        return json.dumps(body, separators=(",", ":"), sort_keys=True, ensure_ascii=False)

    def _decode(self, cursor: object, kind: str) -> dict[str, Any]:
        bad = SyncCursorError(
            "the cursor was not issued by this folder connector", reason="invalid"
        )
        body = decode_cursor(cursor, bad, version=_VERSION, kind=kind, owner=("root", self._digest))
        if not isinstance(body.get("files"), dict) or not all(
            _valid_record(r) for r in body["files"].values()
        ):
            raise bad
        for key in ("scanned", "run"):
            if key in body and type(body[key]) is not int:
                raise bad
        return body

    # -- the port ---------------------------------------------------------------------------

    def bootstrap(self, cursor: str | None = None) -> Page:
        """Files after the cursor's last path, ``page_size`` at a time, hashed as listed (a
        file that cannot be read is listed with a failing ``load()``)."""
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
            upserts.append(self._list(source_id, info, scanned, files)[0])
        if more:
            return Page(
                upserts,
                (),
                self._cursor("bootstrap", files, after=upserts[-1].source_id, scanned=scanned),
                exhausted=False,
            )
        return Page(upserts, (), self._cursor("changes", files, scanned=scanned), exhausted=True)

    def changes(self, cursor: str) -> Page:
        """New, edited and removed files since the cursor; at most ``page_size`` upserts a page.

        Each file is read at most once per run (a run: the pages from one exhausted cursor to
        the next), except a racy one (mtime within 2 s of its hash), read once more after
        its window has passed. A file that cannot be read is an upsert whose ``load()`` fails,
        once per run, until it can be read.
        """
        body = self._decode(cursor, "changes")
        before: dict[str, FileRecord] = body["files"]
        last_scan: int = body.get("scanned", 0)
        scanned = time.time_ns()
        run: int = body.get("run", scanned)  # a run goes on while its pages say "more"
        after: dict[str, FileRecord] = {}
        upserts: list[Upsert] = []
        present: set[str] = set()
        more = False
        for source_id, info in self._walk():
            present.add(source_id)
            old = before.get(source_id)
            if old is not None:
                hashed = old[3] if len(old) == 4 else last_scan
                if old[0] == info.st_size and old[1] == info.st_mtime_ns:
                    if old[2] is None:
                        keep = hashed >= run  # failed already in this run: once a run is enough
                    elif info.st_mtime_ns < hashed - _RACY_NS:
                        keep = True  # hashed after its last possible same-mtime change
                    else:  # racy: re-read once its window has passed, or in a later run
                        keep = hashed >= run and info.st_mtime_ns >= scanned - _RACY_NS
                    if keep:
                        after[source_id] = _record(old[0], old[1], old[2], hashed)
                        continue
            if len(upserts) == self._page_size:
                more = True  # the next page reads it; nothing after this point is read now
                if old is not None:
                    after[source_id] = _record(old[0], old[1], old[2], hashed)
                continue
            upsert, sha = self._list(source_id, info, scanned, after)
            if sha is not None and old is not None and old[2] == sha:
                continue  # touched, same bytes
            upserts.append(upsert)
        deletions = sorted(s for s in before if s not in present)
        extra = {"run": run} if more else {}
        return Page(
            upserts,
            deletions,
            self._cursor("changes", after, scanned=scanned, **extra),
            exhausted=not more,
        )


def _record(size: int, mtime_ns: int, sha: str | None, hashed: int) -> FileRecord:
    """A file's cursor record: ``[size, mtime_ns, sha]`` when the hash is trusted while the
    stat stays (taken more than 2 s after the mtime), else ``[size, mtime_ns, sha, hashed]``
    (racy, or ``sha`` None: the file could not be read at ``hashed``)."""
    if sha is not None and mtime_ns < hashed - _RACY_NS:
        return [size, mtime_ns, sha]
    return [size, mtime_ns, sha, hashed]


def _valid_record(record: object) -> bool:
    if not isinstance(record, list) or len(record) not in (3, 4):
        return False
    if type(record[0]) is not int or type(record[1]) is not int:
        return False
    if len(record) == 3:
        return isinstance(record[2], str)
    return (record[2] is None or isinstance(record[2], str)) and type(record[3]) is int
