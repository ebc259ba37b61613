"""Synchronisation ports: connectors page through an external system; checkpoints hold cursors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from ragport.domain.model import Scope
from ragport.ports.documents import LoadedDocument

__all__ = ["CheckpointStore", "Connector", "ConnectorPage"]


@attrs.frozen
class ConnectorPage:
    """One page of changes: documents to upsert, source ids to delete, the cursor after it."""

    upserts: Sequence[LoadedDocument]
    deletions: Sequence[str]
    cursor: str | None
    exhausted: bool


@runtime_checkable
class Connector(Protocol):
    """Pages of changes from an external system (Drive is one adapter).

    Promises: ``page(cursor)`` resumes strictly after ``cursor``; every upsert carries a
    stable ``source_id``; a page is never silently partial.
    """

    @property
    def id(self) -> str: ...

    def page(self, cursor: str | None) -> ConnectorPage: ...


@runtime_checkable
class CheckpointStore(Protocol):
    """A compare-and-set cursor per (connector id, scope).

    Promises: ``read`` returns the last committed cursor (``None`` at first);
    ``compare_and_set(expected, new)`` stores ``new`` only if the stored cursor still equals
    ``expected`` and raises ``SyncCursorError`` otherwise.
    """

    def read(self, connector_id: str, scope: Scope) -> str | None: ...

    def compare_and_set(
        self, connector_id: str, scope: Scope, *, expected: str | None, new: str
    ) -> None: ...
