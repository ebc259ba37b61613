"""The IngestionStatusStore port."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ragport.domain.model import Scope
from ragport.domain.status import IngestionStatus, StatusPage

__all__ = ["IngestionStatusStore"]


@runtime_checkable
class IngestionStatusStore(Protocol):
    """Per (exact scope, source id) ingestion status.

    Promises (checked by ``IngestionStatusStoreContract``):

    - ``put`` replaces the status of ``(status.scope, status.source_id)``; other scopes are
      untouched, even for the same source id.
    - ``list_page`` returns at most ``limit`` items of exactly ``scope``, ordered by source id,
      with an opaque ``cursor`` for the next page (``None`` on the last). A cursor from another
      scope (corpus, tenant, prefix corpus), or one the store did not issue, is
      ``ValidationError(field="cursor")``; the empty string is such a malformed cursor, not
      "no cursor" (pass ``None``). ``limit`` outside 1..200 is a ``ValidationError``, above 200
      with ``limit="status_page"`` (``ragport.domain.limits.check_limit("status_page", limit)``
      raises both; ``ragport.domain.status`` encodes and decodes scope-bound cursors).
    - ``delete`` removes one status and reports whether it existed.
    """

    def put(self, status: IngestionStatus) -> None:
        """Replace the status of ``(status.scope, status.source_id)``."""
        ...

    def get(self, scope: Scope, source_id: str) -> IngestionStatus | None:
        """The status of ``source_id`` in exactly ``scope``, or ``None``."""
        ...

    def list_page(self, scope: Scope, *, limit: int, cursor: str | None = None) -> StatusPage:
        """At most ``limit`` statuses of ``scope`` by source id, and the next cursor.

        A foreign or malformed ``cursor`` (``""`` included) is
        ``ValidationError(field="cursor")``; ``limit`` outside 1..200 a ``ValidationError``,
        above 200 with ``limit="status_page"``."""
        ...

    def delete(self, scope: Scope, source_id: str) -> bool:
        """Remove one status; whether it existed."""
        ...
