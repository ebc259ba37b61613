"""Deletion propagation: forget a source and everything resting on it.

DeletionPropagator.propagate(source_id):
1. Privilege: an authorization is required, its tenant must match, and on an ACL store it must
   hold a grant for the source (``AccessDeniedError`` before anything is written). Only a
   propagator created ``as_owner=True`` (the host acting for the data's owner, as the command
   line does without ``--principal``) skips this step.
2. In one unit of work: expand the lineage closure (the source and every derived record resting
   on it, transitively, over every stored version; depth <= 8, edges <= 4,096, else
   ``ValidationError`` and nothing is written) and tombstone the whole set ``forgotten``;
   commit.
3. Run every handler in registration order; count each under its ``kind``. A failing handler
   does not stop the others; ``PropagationError`` then names the failed kinds (the tombstones
   stay and already withhold everything). Re-running is idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from ragport.application._support import (
    require_scope,
    require_transactions,
)
from ragport.application.deprecation import folds_keywords
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.domain.errors import AccessDeniedError, PropagationError, ValidationError
from ragport.domain.limits import Limits
from ragport.domain.model import Authorization, Scope, Tombstone, validate_id
from ragport.ports.derived import DerivedArtifactHandler
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore, UnitOfWork

__all__ = [
    "DeletionPropagator",
    "PropagationResult",
    "RagDeletionHandler",
    "create_deletion_propagator",
    "require_privilege",
]

TOMBSTONE_BATCH = 1_024


@attrs.frozen
class PropagationResult:
    """``ids`` is the lineage closure that was tombstoned (``tombstoned == len(ids)``);
    ``layers`` counts per handler kind; ``batched`` the tombstone batches written."""

    source_id: str
    ids: tuple[str, ...]
    tombstoned: int
    layers: Mapping[str, int]
    batched: int


def _closure(uow: UnitOfWork, source_id: str, limits: Limits) -> list[str]:
    """The source and every derived record resting on it, transitively (breadth first).

    It walks every stored version (``find_dependents`` includes retired and staged rows, which
    a rollback or a publish could make visible) and follows both a dependent's record id and
    its source id, so a lineage edge naming either is followed.
    """
    closure: dict[str, None] = {source_id: None}
    frontier = [source_id]
    edges = 0
    depth = 0
    while frontier:
        dependents = [r for r in uow.records.find_dependents(frontier) if r.id not in closure]
        if not dependents:
            break
        depth += 1
        if depth > limits.lineage_depth:
            raise ValidationError(
                f"lineage deeper than {limits.lineage_depth}: nothing was tombstoned",
                field="source_id",
                limit="lineage_depth",
            )
        frontier = []
        for record in dependents:
            if record.id in closure:  # another stored version of a record already counted
                continue
            edges += sum(1 for i in record.lineage if i in closure)
            for name in (record.id, record.source_id):
                if name not in closure:
                    closure[name] = None
                    frontier.append(name)
        if edges > limits.propagation_edges:
            raise ValidationError(
                f"lineage closure has more than {limits.propagation_edges} edges: nothing was tombstoned",
                field="source_id",
                limit="propagation_edges",
            )
    return list(closure)


def require_privilege(
    store: ChunkStore, scope: Scope, authorization: Authorization | None, ids: Sequence[str]
) -> None:
    if authorization is None or not isinstance(authorization, Authorization):
        raise AccessDeniedError("this operation needs an authorization")
    if authorization.tenant_id != scope.tenant_id:
        raise AccessDeniedError("the authorization belongs to another tenant")
    if store.capabilities.authorization == "acl":
        decisions = store.check_source_access(scope, list(ids), authorization)
        if not all(decisions.get(i) is not None and decisions[i].allowed for i in ids):
            raise AccessDeniedError("the authorization holds no grant for this source")


class DeletionPropagator:
    """Tombstones a source's lineage closure, then lets every registered layer forget it."""

    @folds_keywords(runtime=("limits", "redactor"), name="DeletionPropagator")
    def __init__(
        self,
        *,
        scope: Scope,
        store: ChunkStore,
        authorization: Authorization | None,
        handlers: Sequence[DerivedArtifactHandler] = (),
        runtime: Runtime | None = None,
        as_owner: bool = False,
    ):
        rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
        self._scope = require_scope(scope)
        self._store = store
        if not isinstance(as_owner, bool):
            raise ValidationError("as_owner must be True or False", field="as_owner")
        if as_owner and authorization is not None:
            raise ValidationError(
                "pass an authorization or as_owner=True, not both", field="as_owner"
            )
        self._authorization = authorization
        self._as_owner = as_owner
        self._handlers: list[DerivedArtifactHandler] = []
        self._limits = rt.limits
        self._redact = rt.redaction
        for handler in handlers:
            self.register(handler)

    def register(self, handler: DerivedArtifactHandler) -> None:
        if not isinstance(handler, DerivedArtifactHandler) or not isinstance(handler.kind, str):
            raise ValidationError("a handler needs a non-empty kind", field="handlers")
        kind = handler.kind
        if not kind:
            raise ValidationError("a handler needs a non-empty kind", field="handlers")
        if any(h.kind == kind for h in self._handlers):
            raise ValidationError(
                f"a handler of kind {kind!r} is already registered", field="handlers"
            )
        self._handlers.append(handler)

    def propagate(self, source_id: str) -> PropagationResult:
        validate_id(source_id, field="source_id")
        require_transactions(self._store, "propagate")
        if not self._as_owner:
            require_privilege(self._store, self._scope, self._authorization, [source_id])
        with self._store.unit_of_work(self._scope) as uow:
            ids = _closure(uow, source_id, self._limits)
            batches = 0
            for start in range(0, len(ids), TOMBSTONE_BATCH):
                uow.tombstones.add(
                    [Tombstone(i, "forgotten") for i in ids[start : start + TOMBSTONE_BATCH]]
                )
                batches += 1
            uow.commit()
        layers: dict[str, int] = {}
        failed: dict[str, str] = {}
        for handler in self._handlers:
            try:
                layers[handler.kind] = int(handler.on_propagate(source_id, tuple(ids), self._scope))
            except Exception as exc:  # one failed layer must not stop the others
                failed[handler.kind] = self._redact.error(exc)
        if failed:
            raise PropagationError(
                f"deletion handlers failed: {', '.join(failed)}; the tombstones stay and "
                "propagate can be called again",
                failed_kinds=tuple(failed),
                errors=failed,
            )
        return PropagationResult(
            source_id=source_id, ids=tuple(ids), tombstoned=len(ids), layers=layers, batched=batches
        )


@folds_keywords(runtime=("limits", "redactor"))
def create_deletion_propagator(
    *,
    scope: Scope,
    store: ChunkStore,
    authorization: Authorization | None,
    handlers: Sequence[DerivedArtifactHandler] = (),
    runtime: Runtime | None = None,
    as_owner: bool = False,
) -> DeletionPropagator:
    """A propagator for one scope; ``authorization`` is required when it propagates, unless
    ``as_owner=True``: the host itself acting for the data's owner (no grant is checked; never
    derive it from a request's caller).

    ``runtime``: its ``limits`` bound the lineage closure, its ``redactor`` and ``secrets``
    clean the error descriptions a failed handler leaves in ``PropagationError.errors``
    (``limits=`` and ``redactor=`` still work for one release, with a ``DeprecationWarning``).
    """
    return DeletionPropagator(
        scope=scope,
        store=store,
        authorization=authorization,
        handlers=handlers,
        runtime=runtime,
        as_owner=as_owner,
    )


class RagDeletionHandler:
    """The ``rag`` layer: physically removes the source's own chunk rows and its status."""

    kind = "rag"

    def __init__(
        self, *, store: ChunkStore, scope: Scope, status_store: IngestionStatusStore | None = None
    ):
        self._store = store
        self._scope = require_scope(scope)
        self._status = status_store

    def on_propagate(self, source_id: str, ids: Sequence[str], scope: Scope) -> int:
        if scope != self._scope:
            raise ValidationError("the handler serves another scope", field="scope")
        with self._store.unit_of_work(scope) as uow:
            removed = uow.records.purge_source(source_id)
            uow.commit()
        if self._status is not None:
            self._status.delete(scope, source_id)
        return removed

    def on_repoint(self, from_id: str, to_id: str, scope: Scope) -> int:
        return 0  # the chunk rows themselves are moved by repoint_source
