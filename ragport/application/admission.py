"""Which ids a write may name, and re-admitting a forgotten one.

A ``forgotten`` tombstone (deletion propagation) withholds an id everywhere, so whatever were
written under it would never be served to anyone. Every write use case refuses such an id with
``ForgottenError``: first from the committed state, before anything is embedded
(``first_forgotten``), then inside the write's own unit of work (``refuse_forgotten``). The
second is the guarantee: writers of a scope are serialized, so a concurrent forget commits
wholly before the write (which is then refused) or after it (and forgets what it wrote).

readmit_source:
1. Validate the scope and the id; refuse stores without transactions.
2. In one unit of work, only if a ``forgotten`` tombstone names the id: purge every record of
   the source (every generation, so no forgotten text comes back, not even by a rollback),
   revoke its grant (an empty grant, as ``delete_source`` does), turn the tombstone into a
   ``corrected`` one (``TombstoneRepository.readmit``: the row stays as the record that the id
   was forgotten once), commit. An id that is not forgotten writes nothing.
3. Drop the id's ingestion status (with ``status_store``), then audit: a ``rag.readmit`` span
   and counter, and one INFO line on the ``ragport.audit`` logger naming the scope, the id and
   the counts (never text).

Derived records that rested on the id keep their own tombstones: they stay forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

import attrs

from ragport.application._support import check_abort, require_scope, require_transactions
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.domain.errors import ForgottenError
from ragport.domain.model import Grant, Scope, validate_id
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore, SupportsForgottenLookup, UnitOfWork, supports

__all__ = [
    "ReadmitResult",
    "first_forgotten",
    "forgotten_among",
    "readmit_source",
    "refuse_forgotten",
]

AUDIT = logging.getLogger("ragport.audit")


@attrs.frozen
class ReadmitResult:
    """``readmitted`` when a ``forgotten`` tombstone named the id (else nothing was written);
    ``purged`` how many stored records of the source (every generation) were removed."""

    source_id: str
    readmitted: bool
    purged: int


def forgotten_among(store: ChunkStore, scope: Scope, ids: Sequence[str]) -> frozenset[str]:
    """The ``ids`` a ``forgotten`` tombstone withholds in ``scope``'s committed state (looked up
    by id where the store offers ``forgotten_among``, else from every forgotten id)."""
    if not ids:
        return frozenset()
    if supports(store, "forgotten_lookup"):
        return cast(SupportsForgottenLookup, store).forgotten_among(scope, list(ids))
    return store.list_invalidated_ids(scope).intersection(ids)


def first_forgotten(store: ChunkStore, scope: Scope, ids: Sequence[str]) -> str | None:
    """The first of ``ids`` a ``forgotten`` tombstone withholds in ``scope``'s committed state,
    else ``None``: the early refusal, before anything is embedded. Not the guarantee: see
    ``refuse_forgotten``."""
    found = forgotten_among(store, scope, ids)
    return next((i for i in ids if i in found), None)


def refuse_forgotten(uow: UnitOfWork, ids: Sequence[str], *, field: str = "source_id") -> None:
    """``ForgottenError`` for the first of ``ids`` a ``forgotten`` tombstone withholds, read
    inside the write's unit of work, before it writes anything."""
    found = uow.tombstones.get(list(dict.fromkeys(ids)))
    for i in ids:
        tombstone = found.get(i)
        if tombstone is not None and tombstone.reason == "forgotten":
            raise ForgottenError(i, field=field)


def readmit_source(
    *,
    source_id: str,
    store: ChunkStore,
    scope: Scope,
    status_store: IngestionStatusStore | None = None,
    runtime: Runtime | None = None,
) -> ReadmitResult:
    """Let writes name ``source_id`` again after a deletion propagation forgot it, deliberately
    and audited; nothing of the forgotten content comes back. See the module steps.

    A trusted host call (like ``delete_source``): it takes no authorization. Idempotent: an id
    that is not forgotten (never was, or already re-admitted) writes nothing.
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    tel = rt.effective_telemetry
    scope = require_scope(scope)
    validate_id(source_id, field="source_id")
    require_transactions(store, "readmit_source")
    check_abort(rt.abort)
    purged = 0
    with tel.span("rag.readmit") as span, store.unit_of_work(scope) as uow:
        found = uow.tombstones.get([source_id]).get(source_id)
        readmitted = found is not None and found.reason == "forgotten"
        if readmitted:
            purged = uow.records.purge_source(source_id)
            grant = uow.grants.get([source_id]).get(source_id)
            if grant is not None and not grant.is_empty:
                uow.grants.set([Grant(source_id)])  # the port has no delete; empty is no grant
            uow.tombstones.readmit([source_id])
            check_abort(rt.abort)
            uow.commit()
        span.set_attribute("rag.readmit.source_id", source_id)  # an id, never text
        span.set_attribute("rag.readmit.readmitted", readmitted)
        span.set_attribute("rag.readmit.purged", purged)
    if readmitted:
        if status_store is not None:
            status_store.delete(scope, source_id)
        tel.count("rag.readmit")
        AUDIT.info(
            "readmitted forgotten id %r in scope (%r, %r, %r): %d stored record(s) purged, "
            "grant revoked",
            source_id,
            scope.tenant_id,
            scope.resource_id,
            scope.corpus_id,
            purged,
        )
    return ReadmitResult(source_id=source_id, readmitted=readmitted, purged=purged)
