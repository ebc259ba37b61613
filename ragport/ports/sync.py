"""Synchronisation ports: connectors page through an external system; checkpoints hold cursors.

A ``Connector`` lists an external system (a folder, a Drive) as pages of upserts and
deletions; a ``CheckpointStore`` keeps, per (connector id, scope), the cursor the last
committed page ended at, behind a version that only a compare-and-set moves. ``sync_knowledge``
(``ragport.application.sync``) joins them: each page and its checkpoint commit or fail
together. A checkpoint store that ``SupportsCheckpointsInUnitOfWork`` for the chunk store's
unit of work compare-and-sets inside it (PostgreSQL: the same transaction; in memory: under
the scope's writer lock, right before a commit that cannot fail), so a second worker that
loses the race writes nothing and stops, and a crash replays the page. ``ConnectorContract`` and ``CheckpointStoreContract``
(``ragport.contract_tests``) check the promises below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol, runtime_checkable

import attrs

from ragport.domain.model import Scope, validate_id
from ragport.domain.sync import Access
from ragport.ports.documents import LoadedDocument

__all__ = [
    "Checkpoint",
    "CheckpointStore",
    "Connector",
    "Page",
    "SupportsCheckpointsInUnitOfWork",
    "Upsert",
]


def _source_id(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    validate_id(value, field="source_id")


def _tuple(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(values)


@attrs.frozen
class Upsert:
    """One item a connector lists: what to index under ``source_id`` and who may see it.

    ``load()`` fetches the bytes (a ``LoadedDocument``) only when the use case needs them (the
    content is new or changed); it may raise ``LoadError`` or ``ParseError`` (e.g.
    ``reason="unsupported"`` for a type the connector will not export), which fails that item
    only. ``revision`` is the connector's content hash or revision id, ``modified_at`` the
    upstream modification time, ``metadata`` goes onto every chunk and wins over what the
    parser found (name as title, path, link, ...).
    ``access`` is what the host's mapping returned: an ``Access``, or ``None`` when it withheld
    the item (then it is not indexed and a previous version loses visibility).
    """

    source_id: str = attrs.field(validator=_source_id)
    load: Callable[[], LoadedDocument] = attrs.field(eq=False, repr=False)
    media_type: str | None = None
    revision: str | None = None
    modified_at: datetime | None = None
    access: Access | None = attrs.field(factory=Access)
    metadata: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Page:
    """One page of a listing: upserts, deleted source ids, the cursor after it, and whether
    the listing is exhausted (a bootstrap's last page; an incremental page with nothing more
    to read now). ``cursor`` resumes strictly after this page."""

    upserts: tuple[Upsert, ...] = attrs.field(default=(), converter=_tuple)
    deletions: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    cursor: str | None = None
    exhausted: bool = True


class Checkpoint(NamedTuple):
    """What a ``CheckpointStore`` holds for one (connector id, scope): ``(cursor, version)``.

    ``cursor`` is ``None`` and ``version`` 0 until the first compare-and-set succeeds.
    """

    cursor: str | None
    version: int


@runtime_checkable
class Connector(Protocol):
    """Pages of changes from an external system (a folder, Google Drive, ...).

    Promises (checked by ``ConnectorContract``):

    - ``id`` is stable across processes for the same configuration (it keys the checkpoint).
    - ``bootstrap(None)`` starts a full listing; ``bootstrap(page.cursor)`` continues it, until
      a page says ``exhausted``; the union of its upserts is every item the system holds now,
      each source id once. The exhausted page's ``cursor`` is where ``changes`` starts.
    - ``changes(cursor)`` returns what changed since ``cursor``: upserts for new, edited or
      moved-in items, deletions for removed, trashed or moved-out ones; the same cursor gives
      the same answer while nothing changes upstream (replays are idempotent), and an
      ``exhausted`` page with nothing in it when nothing changed.
    - A cursor the connector cannot resume (expired, foreign, malformed) is
      ``SyncCursorError``, never a silently empty or partial page.
    - Source ids are stable non-secret ids (a relative path, a Drive file id); no token or
      credential appears in a page, a cursor, an error or a log line.
    """

    @property
    def id(self) -> str:
        """A stable name for this connector and its configuration (e.g. ``folder:<digest>``)."""
        ...

    def bootstrap(self, cursor: str | None = None) -> Page:
        """The next page of a full listing (``None`` starts one)."""
        ...

    def changes(self, cursor: str) -> Page:
        """The next page of changes after ``cursor`` (``SyncCursorError`` if it cannot resume)."""
        ...


@runtime_checkable
class CheckpointStore(Protocol):
    """A compare-and-set cursor per (connector id, exact scope).

    Promises (checked by ``CheckpointStoreContract``):

    - ``get`` returns the last cursor stored and its version; ``(None, 0)`` at first. Scopes
      and connector ids are exact: nothing is shared by prefix.
    - ``compare_and_set(connector_id, scope, expected_version, cursor)`` stores ``cursor`` and
      moves the version to ``expected_version + 1`` only when the stored version still equals
      ``expected_version``; it returns whether it did. Of several concurrent calls with the
      same expected version exactly one returns True.
    - Durable adapters keep checkpoints across processes; a cursor is opaque text of
      any length (a folder cursor grows with the folder), stored verbatim (``""`` included).
    - ``compare_and_set`` checks its arguments before storing anything, each failure a
      ``ValidationError`` naming the argument, and then stores nothing: ``connector_id`` not a
      non-empty printable ``str`` of at most 512 characters (``field="connector_id"``),
      ``scope`` not a ``Scope`` (``"scope"``), ``expected_version`` not a non-negative int or
      a bool (``"expected_version"``), ``cursor`` not a ``str`` or holding a NUL (``"cursor"``).
    """

    def get(self, connector_id: str, scope: Scope) -> Checkpoint:
        """The stored ``(cursor, version)`` of ``connector_id`` in ``scope``."""
        ...

    def compare_and_set(
        self, connector_id: str, scope: Scope, expected_version: int, cursor: str
    ) -> bool:
        """Store ``cursor`` at ``expected_version + 1`` if the version is still ``expected_version``.

        A bad connector id, scope, version or cursor (``None``, or holding a NUL) is
        ``ValidationError(field=...)`` naming it, and nothing is stored."""
        ...

    def delete(self, connector_id: str, scope: Scope) -> bool:
        """Forget the checkpoint (the next sync bootstraps); whether one existed."""
        ...


@runtime_checkable
class SupportsCheckpointsInUnitOfWork(Protocol):
    """A checkpoint store whose compare-and-set can join a chunk store's unit of work.

    Promises (checked by ``CheckpointInUnitOfWorkContract``):

    - ``joins(uow)`` says whether ``compare_and_set_in(uow, ...)`` makes the checkpoint
      commit exactly when ``uow`` commits: the same database transaction, or (a process-local
      store) a unit of work that serializes the scope's writers and whose commit cannot fail.
      It is False for a unit of work of another backend, database or schema.
    - ``compare_and_set_in(uow, connector_id, scope, expected_version, cursor)`` has the
      semantics of ``compare_and_set`` but its effect is part of ``uow``: rolled back with it,
      visible to ``get`` only once it commits. Of two workers whose units of work race with
      the same expected version, exactly one returns True (the other waits for the first
      to finish, then sees the new version).
    """

    def joins(self, uow: object) -> bool:
        """Whether ``compare_and_set_in`` commits and rolls back with ``uow``."""
        ...

    def compare_and_set_in(
        self, uow: object, connector_id: str, scope: Scope, expected_version: int, cursor: str
    ) -> bool:
        """``compare_and_set`` as part of ``uow`` (which ``joins`` must accept)."""
        ...
