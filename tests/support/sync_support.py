"""A scriptable in-memory Connector for the sync tests.

``DictConnector`` lists a dict of items (source id -> bytes) in pages of ``page_size`` sorted
ids; its cursor records every item's revision, so ``changes`` is the difference between the
upstream now and the cursor. Knobs: ``access`` (per id: an ``Access`` or None to withhold),
``fail_load`` (ids whose ``load()`` raises ``LoadError``), ``expire`` (the next ``changes``
raises ``SyncCursorError``), ``change_page_size``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import attrs

import ragport
from ragport.domain.errors import LoadError, SyncCursorError
from ragport.ports.documents import LoadedDocument
from ragport.ports.sync import Page, Upsert

__all__ = ["DictConnector", "Stores", "sync_options", "sync_stores"]

SYNC_FIELDS = ("workers", "adopt", "on_cursor_error", "on_progress", "restart")
WRITE_FIELDS = ("size", "overlap", "batch_size", "shared_generation")


def sync_options(**kwargs: Any) -> dict[str, Any]:
    """``kwargs`` with the ``SyncOptions`` fields (and the write options it carries) folded
    into ``options=``, as ``sync_knowledge`` takes them."""
    from ragport.application import SyncOptions, WriteOptions

    write = {k: kwargs.pop(k) for k in WRITE_FIELDS if k in kwargs}
    run = {k: kwargs.pop(k) for k in SYNC_FIELDS if k in kwargs}
    if write or run:
        kwargs["options"] = SyncOptions(write=WriteOptions(**write), **run)
    return kwargs


def _rev(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


class DictConnector:
    def __init__(
        self, items: dict[str, bytes] | None = None, *, page_size: int = 3, id: str = "dict"
    ):
        self.items: dict[str, bytes] = dict(items or {})
        self.access: dict[str, ragport.domain.Access | None] = {}
        self.fail_load: set[str] = set()
        self.expire = False
        self.page_size = page_size
        self.loads: list[str] = []
        self._id = id

    @property
    def id(self) -> str:
        return self._id

    # -- harness ------------------------------------------------------------------------------
    def add(self, name: str, data: bytes) -> str:
        self.items[name] = data
        return name

    def edit(self, source_id: str, data: bytes) -> None:
        self.items[source_id] = data

    def remove(self, source_id: str) -> None:
        del self.items[source_id]

    # -- connector ----------------------------------------------------------------------------
    def _upsert(self, source_id: str) -> Upsert:
        data = self.items[source_id]

        def load() -> LoadedDocument:
            self.loads.append(source_id)
            if source_id in self.fail_load:
                raise LoadError("the item could not be fetched", reason="failed")
            return LoadedDocument(data, "text/markdown", metadata={"title": source_id})

        access = self.access.get(source_id, ragport.domain.Access(principal_ids=("alice",)))
        return Upsert(
            source_id, load, media_type="text/markdown", revision=_rev(data), access=access
        )

    @staticmethod
    def _encode(kind: str, value: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps([kind, value]).encode()).decode()

    @staticmethod
    def _decode(cursor: str, kind: str) -> Any:
        try:
            got, value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        except (ValueError, TypeError):
            raise SyncCursorError("cursor is not one this connector issued") from None
        if got != kind:
            raise SyncCursorError("cursor is not one this connector issued")
        return value

    def _snapshot(self) -> dict[str, str]:
        return {k: _rev(v) for k, v in self.items.items()}

    def bootstrap(self, cursor: str | None = None) -> Page:
        after = None if cursor is None else self._decode(cursor, "boot")
        ids = sorted(i for i in self.items if after is None or i > after)
        page = ids[: self.page_size]
        if len(ids) <= self.page_size:
            return Page(
                [self._upsert(i) for i in page], [], self._encode("chg", self._snapshot()), True
            )
        return Page([self._upsert(i) for i in page], [], self._encode("boot", page[-1]), False)

    def changes(self, cursor: str) -> Page:
        before = self._decode(cursor, "chg")
        if not isinstance(before, dict):
            raise SyncCursorError("cursor is not one this connector issued")
        if self.expire:
            self.expire = False
            raise SyncCursorError("cursor expired", reason="expired")
        now = self._snapshot()
        upserts = [i for i in sorted(now) if before.get(i) != now[i]]
        deletions = [i for i in sorted(before) if i not in now]
        return Page([self._upsert(i) for i in upserts], deletions, self._encode("chg", now), True)


@attrs.define
class Stores:
    """A chunk store with its checkpoint and status stores (one backend)."""

    store: object
    checkpoints: object
    status: object


def sync_stores(request: Any) -> Stores:
    """The ``Stores`` of ``request.param``: ``memory``; ``sqlite`` (the docs' example store,
    ``BackendStore`` over ``SqliteBackend``, in ``tmp_path``); or ``postgres`` on the session
    server (``pg_engine``) in a fresh schema (``pg_schema``, dropped after the test)."""
    from ragport.adapters.memory import (
        InMemoryCheckpointStore,
        InMemoryStatusStore,
        InMemoryStore,
    )

    if request.param == "memory":
        return Stores(InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore())
    if request.param == "sqlite":  # the engine over the narrow port, one SQLite file
        from ragport_sqlite import SqliteStore

        path = request.getfixturevalue("tmp_path") / "sync.sqlite3"
        return Stores(SqliteStore(path), InMemoryCheckpointStore(), InMemoryStatusStore())
    from ragport.adapters.postgres import (
        PostgresCheckpointStore,
        PostgresStatusStore,
        PostgresStore,
    )

    engine = request.getfixturevalue("pg_engine")
    schema = request.getfixturevalue("pg_schema")
    return Stores(
        PostgresStore(engine, schema=schema, create=True),
        PostgresCheckpointStore(engine, schema=schema),
        PostgresStatusStore(engine, schema=schema),
    )
