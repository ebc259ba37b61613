"""In-memory CheckpointStore: versioned cursors behind one lock."""

from __future__ import annotations

import threading

from ragport.adapters._checkpoints import check_cas_args, check_checkpoint_args
from ragport.domain.model import Scope
from ragport.ports.sync import Checkpoint

__all__ = ["InMemoryCheckpointStore"]


class InMemoryCheckpointStore:
    """Process-local checkpoints; a host that needs restarts uses ``PostgresCheckpointStore``."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, Scope], Checkpoint] = {}
        self._lock = threading.Lock()

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

    def delete(self, connector_id: str, scope: Scope) -> bool:
        check_checkpoint_args(connector_id, scope)
        with self._lock:
            return self._items.pop((connector_id, scope), None) is not None
