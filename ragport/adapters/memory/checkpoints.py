"""In-memory CheckpointStore: versioned cursors behind one lock.

It joins the units of work of one in-memory store (``SupportsCheckpointsInUnitOfWork``): the
first ``InMemoryStore`` whose unit of work it joins, or the one given as ``store=``. Such a unit
of work holds its scope's writer lock from start to commit and its commit cannot fail, so a
compare-and-set checked inside it and written when it commits is atomic with the page. Units
of work of a second store hold another lock, so they are not joined (the sync then takes its
one-worker-per-scope path).
"""

from __future__ import annotations

import threading

from ragport.adapters._checkpoints import check_cas_args, check_checkpoint_args
from ragport.adapters.memory.unit_of_work import SnapshotWriter
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope
from ragport.ports.sync import Checkpoint

__all__ = ["InMemoryCheckpointStore"]


class InMemoryCheckpointStore:
    """Process-local checkpoints; a host that needs restarts uses ``PostgresCheckpointStore``."""

    def __init__(self, *, store: object = None) -> None:
        self._items: dict[tuple[str, Scope], Checkpoint] = {}
        self._lock = threading.Lock()
        # The in-memory backend (of an InMemoryStore) whose units of work this store joins.
        self._backend = getattr(store, "backend", None) if store is not None else None

    def get(self, connector_id: str, scope: Scope) -> Checkpoint:
        check_checkpoint_args(connector_id, scope)
        with self._lock:
            return self._items.get((connector_id, scope), Checkpoint(None, 0))

    def compare_and_set(
        self, connector_id: str, scope: Scope, expected_version: int, cursor: str
    ) -> bool:
        check_checkpoint_args(connector_id, scope)
        check_cas_args(expected_version, cursor)
        with self._lock:
            current = self._items.get((connector_id, scope), Checkpoint(None, 0))
            if current.version != expected_version:
                return False
            self._items[(connector_id, scope)] = Checkpoint(cursor, expected_version + 1)
            return True

    def joins(self, uow: object) -> bool:
        """Whether ``uow`` is an in-memory unit of work (scope-serialized, infallible commit) of
        the one store this checkpoint store joins (the first it is asked about)."""
        owner = _owner(uow)
        if owner is None:
            return False
        with self._lock:
            if self._backend is None:
                self._backend = owner
            return owner is self._backend

    def compare_and_set_in(
        self, uow: object, connector_id: str, scope: Scope, expected_version: int, cursor: str
    ) -> bool:
        """Check the version now; store the cursor when ``uow`` commits (never if it rolls
        back). Another joined call for the same scope cannot run in between: it waits for
        this unit of work's writer lock."""
        check_checkpoint_args(connector_id, scope)
        check_cas_args(expected_version, cursor)
        writer = _writer(uow)
        if writer is None or not self.joins(uow) or writer.scope != scope:
            raise ValidationError(
                "compare_and_set_in needs an in-memory unit of work of the same scope",
                field="uow",
            )
        key = (connector_id, scope)
        with self._lock:
            if self._items.get(key, Checkpoint(None, 0)).version != expected_version:
                return False

        def install() -> None:
            with self._lock:
                # A bare compare_and_set of the same key in between (not a sync worker: those
                # join a unit of work of this scope and wait) wins; the page then replays.
                if self._items.get(key, Checkpoint(None, 0)).version == expected_version:
                    self._items[key] = Checkpoint(cursor, expected_version + 1)

        if getattr(uow, "done", False):
            raise ValidationError("unit of work already finished", field="unit_of_work")
        writer.add_commit_hook(install)
        return True

    def delete(self, connector_id: str, scope: Scope) -> bool:
        check_checkpoint_args(connector_id, scope)
        with self._lock:
            return self._items.pop((connector_id, scope), None) is not None


def _writer(uow: object) -> SnapshotWriter | None:
    """The in-memory writer under ``uow`` (an engine unit of work of an in-memory backend)."""
    writer = getattr(uow, "writer", None)
    return writer if isinstance(writer, SnapshotWriter) else None


def _owner(uow: object) -> object:
    writer = _writer(uow)
    return None if writer is None else writer.owner
