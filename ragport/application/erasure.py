"""``DerivedErasureHandler``: the opt-in layer that erases a forgotten closure physically.

A deletion propagation tombstones the lineage closure of a source (the source and every
derived record resting on it, transitively): from then on nothing of it is served. The rows
themselves stay, though, so a rollback or an operator could still read them, and their text
stays on disk. ``RagDeletionHandler`` deletes the source's own chunk rows; this handler
deletes every stored version (live, retired, staged) of *every* id in the closure, derived
records included, in one unit of work. The tombstones stay, so the ids remain withheld.

It is opt-in because erasure cannot be undone: a rollback to a generation before the
propagation brings nothing of the closure back.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragport.application._support import require_scope, require_transactions
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope
from ragport.ports.store import ChunkStore

__all__ = ["DerivedErasureHandler"]


class DerivedErasureHandler:
    """The ``erase`` layer: physically deletes every version of every record of the closure.

    Register it with ``create_deletion_propagator(..., handlers=[...])``. ``on_propagate``
    returns the rows deleted (0 when called again: idempotent); ``on_repoint`` moves nothing
    (``repoint_source`` moves the rows themselves).
    """

    kind = "erase"

    def __init__(self, *, store: ChunkStore, scope: Scope):
        require_transactions(store, "DerivedErasureHandler")
        self._store = store
        self._scope = require_scope(scope)

    def on_propagate(self, source_id: str, ids: Sequence[str], scope: Scope) -> int:
        if scope != self._scope:
            raise ValidationError("the handler serves another scope", field="scope")
        with self._store.unit_of_work(scope) as uow:
            removed = sum(uow.records.purge_source(i) for i in dict.fromkeys(ids))
            uow.commit()
        return removed

    def on_repoint(self, from_id: str, to_id: str, scope: Scope) -> int:
        return 0  # the rows themselves are moved by repoint_source
