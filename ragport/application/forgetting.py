"""Forgetting and moving: derived records, deletion propagation, re-pointing, batched renames.

index_derived:
1. Validate ids and lineage; resolve each lineage id to root sources (a derived record
   contributes its own roots), refusing cycles and lineage deeper than 8.
2. Redact and embed the text, then in one transaction replace the derived record.

DeletionPropagator.propagate(source_id):
1. Privilege: an authorization is required, its tenant must match, and on an ACL store it must
   hold a grant for the source (``AccessDeniedError`` before anything is written).
2. In one unit of work: expand the lineage closure (the source and every derived record resting
   on it, transitively; depth <= 8, edges <= 4,096, else ``ValidationError`` and nothing is
   written) and tombstone the whole set ``forgotten``; commit.
3. Run every handler in registration order; count each under its ``kind``. A failing handler
   does not stop the others; ``PropagationError`` then names the failed kinds (the tombstones
   stay and already withhold everything). Re-running is idempotent.

repoint_source:
1. Validate ids and cursor (a cursor of another scope or pair is a ``ValidationError``).
2. Authorization: on an ACL store, grants for both ids (``AccessDeniedError``).
3. Read one page of the source's live records (id order, after the cursor); a stale cursor or
   an empty page is a no-op (no transaction, no handler). ``max_records`` refuses sources
   larger than it before any write.
4. In one transaction: refuse destination collisions, re-key the page (``from#0001`` ->
   ``to#0001``; text, vectors, offsets and generations copied verbatim), rewrite lineage edges
   on derived records; commit. Then call each handler once for the page.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, cast

import attrs

from ragport.application._support import (
    NOOP_TELEMETRY,
    Redaction,
    check_abort,
    check_vectors,
    forgotten_ids,
    require_kind,
    require_scope,
    require_transactions,
    resolve_limits,
)
from ragport.application.results import ReplaceResult
from ragport.domain.errors import AccessDeniedError, PropagationError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, Limits
from ragport.domain.model import (
    Authorization,
    Record,
    Rename,
    Scope,
    Tombstone,
    freeze_metadata,
    is_forgotten,
    metadata_bytes,
    validate_id,
    validate_text,
)
from ragport.domain.status import ERROR_MAX
from ragport.ports.derived import DerivedArtifactHandler
from ragport.ports.embedder import Embedder
from ragport.ports.runtime import Abort, Redactor, Telemetry
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore, SupportsPreparation, UnitOfWork, supports

__all__ = [
    "DeletionPropagator",
    "PropagationResult",
    "RagDeletionHandler",
    "RenameBatchResult",
    "RenameEvent",
    "RenameFailure",
    "RepointResult",
    "apply_source_renames",
    "create_deletion_propagator",
    "index_derived",
    "repoint_source",
]

TOMBSTONE_BATCH = 1_024


# -- derived records -----------------------------------------------------------------------------


def _roots(
    uow: UnitOfWork, record_id: str, lineage: Sequence[str], limits: Limits
) -> tuple[str, ...]:
    """Flatten ``lineage`` to root source ids, refusing cycles, lineage deeper than allowed and
    anything that rests on forgotten content.

    A lineage id with derived records contributes their stored roots; walking their own
    lineage (breadth first) proves the new record is not among its ancestors and that no
    ancestor, at any depth, or root is withheld by a ``forgotten`` tombstone.
    """
    roots: dict[str, None] = {}
    for item in lineage:
        derived = [r for r in uow.records.list_by_source(item) if r.kind == "derived"]
        if not derived:
            roots[item] = None
        for record in derived:
            roots.update(dict.fromkeys(record.roots))
    seen: set[str] = set()
    frontier = list(lineage)
    depth = 0
    while frontier:
        depth += 1
        if depth > limits.lineage_depth:
            raise ValidationError(
                f"lineage is deeper than {limits.lineage_depth}",
                field="lineage",
                limit="lineage_depth",
            )
        next_frontier: list[str] = []
        for item in frontier:
            if item == record_id:
                raise ValidationError("lineage would form a cycle", field="lineage")
            if item in seen:
                continue
            seen.add(item)
            for record in uow.records.list_by_source(item):
                if record.kind == "derived":
                    next_frontier.extend(record.lineage)
        frontier = next_frontier
    forgotten = forgotten_ids(uow)
    if forgotten and not forgotten.isdisjoint(seen | roots.keys()):
        raise ValidationError(
            "lineage rests on forgotten content: nothing was written", field="lineage"
        )
    return tuple(roots)


def index_derived(
    *,
    record_id: str,
    text: str,
    lineage: Sequence[str],
    embedder: Embedder,
    store: ChunkStore,
    scope: Scope,
    metadata: Mapping[str, Any] | None = None,
    telemetry: Telemetry | None = None,
    abort: Abort | None = None,
    redactor: Redactor | None = None,
    secrets: Sequence[str] | None = None,
    limits: Limits | None = None,
) -> ReplaceResult:
    """Store a derived artifact (summary, note) with the ids it rests on; replaces an older one."""
    scope = require_scope(scope)
    validate_id(record_id, field="record_id")
    lim = resolve_limits(limits)
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("text must be a non-empty string", field="text")
    validate_text(text, field="text")
    if len(text) > lim.document_chars:
        raise ValidationError("text exceeds document_chars", field="text", limit="document_chars")
    if isinstance(lineage, str) or not lineage:
        raise ValidationError("lineage must be a non-empty sequence of ids", field="lineage")
    ids = list(dict.fromkeys(validate_id(i, field="lineage") for i in lineage))
    frozen = freeze_metadata(metadata)
    if metadata_bytes(frozen) > lim.metadata_bytes:
        raise ValidationError(
            "metadata exceeds metadata_bytes", field="metadata", limit="metadata_bytes"
        )
    require_transactions(store, "index_derived")
    redact = Redaction(redactor, secrets)
    tel = telemetry or NOOP_TELEMETRY
    clean = validate_text(redact(text), field="text")
    check_abort(abort)
    with tel.span("rag.embed"):
        vectors = check_vectors(embedder.embed([clean]), rows=1, dimensions=embedder.dimensions)
    check_abort(abort)
    if supports(store, "preparation"):
        cast(SupportsPreparation, store).prepare(scope, dimensions=embedder.dimensions)
    with store.unit_of_work(scope) as uow:
        require_kind(uow, record_id, "derived", field="record_id")
        roots = _roots(uow, record_id, ids, lim)
        generation = uow.generations.stage()
        deleted = uow.records.retire_source(record_id, generation=generation)
        record = Record(
            id=record_id,
            scope=scope,
            source_id=record_id,
            kind="derived",
            text=clean,
            metadata=frozen,
            embedder_id=embedder.id,
            dimensions=embedder.dimensions,
            generation=generation,
            lineage=tuple(ids),
            roots=roots,
        )
        uow.records.add([record], vectors)
        uow.generations.publish(generation)
        uow.commit()
    return ReplaceResult(record_id, deleted, 1, False, generation)


# -- deletion propagation ------------------------------------------------------------------------


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


def _require_privilege(
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

    def __init__(
        self,
        *,
        scope: Scope,
        store: ChunkStore,
        authorization: Authorization | None,
        handlers: Sequence[DerivedArtifactHandler] = (),
        limits: Limits | None = None,
        redactor: Redactor | None = None,
    ):
        self._scope = require_scope(scope)
        self._store = store
        self._authorization = authorization
        self._handlers: list[DerivedArtifactHandler] = []
        self._limits = resolve_limits(limits)
        self._redact = Redaction(redactor)
        for handler in handlers:
            self.register(handler)

    def register(self, handler: DerivedArtifactHandler) -> None:
        kind = getattr(handler, "kind", None)
        if not isinstance(kind, str) or not kind:
            raise ValidationError("a handler needs a non-empty kind", field="handlers")
        if any(h.kind == kind for h in self._handlers):
            raise ValidationError(
                f"a handler of kind {kind!r} is already registered", field="handlers"
            )
        self._handlers.append(handler)

    def propagate(self, source_id: str) -> PropagationResult:
        validate_id(source_id, field="source_id")
        require_transactions(self._store, "propagate")
        _require_privilege(self._store, self._scope, self._authorization, [source_id])
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
        failed: list[str] = []
        for handler in self._handlers:
            try:
                layers[handler.kind] = int(handler.on_propagate(source_id, tuple(ids), self._scope))
            except Exception:  # one failed layer must not stop the others
                failed.append(handler.kind)
        if failed:
            raise PropagationError(
                f"deletion handlers failed: {', '.join(failed)}; the tombstones stay and "
                "propagate can be called again",
                failed_kinds=tuple(failed),
            )
        return PropagationResult(source_id, tuple(ids), len(ids), layers, batches)


def create_deletion_propagator(
    *,
    scope: Scope,
    store: ChunkStore,
    authorization: Authorization | None,
    handlers: Sequence[DerivedArtifactHandler] = (),
    limits: Limits | None = None,
) -> DeletionPropagator:
    """A propagator for one scope; ``authorization`` is required when it propagates."""
    return DeletionPropagator(
        scope=scope, store=store, authorization=authorization, handlers=handlers, limits=limits
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


# -- re-pointing ---------------------------------------------------------------------------------


@attrs.frozen
class RepointResult:
    """One page moved: chunks re-keyed, lineage edges rewritten, handler counts, next cursor."""

    from_id: str
    to_id: str
    moved_chunks: int
    rewritten_edges: int
    layers: Mapping[str, int]
    batched: int
    cursor: str | None


def _encode_cursor(scope: Scope, from_id: str, to_id: str, last: str) -> str:
    payload = json.dumps(
        ["repoint", scope.tenant_id, scope.resource_id, scope.corpus_id, from_id, to_id, last]
    )
    return base64.urlsafe_b64encode(payload.encode()).decode()


def _decode_cursor(cursor: str, scope: Scope, from_id: str, to_id: str) -> str:
    try:
        parts = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (binascii.Error, ValueError, UnicodeError, AttributeError) as exc:
        raise ValidationError("cursor is malformed", field="cursor") from exc
    if not (isinstance(parts, list) and len(parts) == 7 and all(isinstance(p, str) for p in parts)):
        raise ValidationError("cursor is malformed", field="cursor")
    if parts[:6] != [
        "repoint",
        scope.tenant_id,
        scope.resource_id,
        scope.corpus_id,
        from_id,
        to_id,
    ]:
        raise ValidationError(
            "cursor belongs to another scope or another pair of ids", field="cursor"
        )
    return str(parts[6])


def _new_id(record: Record, from_id: str, to_id: str) -> str:
    """``from#0001`` becomes ``to#0001``; a derived record (id == source id) becomes ``to_id``."""
    if record.kind == "derived" and record.id == from_id:
        return to_id
    prefix = from_id + "#"
    return (
        to_id + record.id[len(from_id) :]
        if record.id.startswith(prefix)
        else to_id + "#" + record.id
    )


def repoint_source(
    *,
    scope: Scope,
    store: ChunkStore,
    from_id: str,
    to_id: str,
    authorization: Authorization | None = None,
    handlers: Sequence[DerivedArtifactHandler] = (),
    page_size: int = DEFAULT_LIMITS.repoint_page,
    cursor: str | None = None,
    max_records: int | None = None,
) -> RepointResult:
    """Move one page of ``from_id``'s records to ``to_id``; see the module docstring."""
    scope = require_scope(scope)
    validate_id(from_id, field="from_id")
    validate_id(to_id, field="to_id")
    if from_id == to_id:
        raise ValidationError("from_id and to_id must differ", field="to_id")
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValidationError("page_size must be a positive integer", field="page_size")
    if max_records is not None and (
        isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 0
    ):
        raise ValidationError("max_records must be a non-negative integer", field="max_records")
    after = _decode_cursor(cursor, scope, from_id, to_id) if cursor is not None else None
    require_transactions(store, "repoint_source")
    if authorization is not None:
        _require_privilege(store, scope, authorization, [from_id, to_id])
    layers: dict[str, int] = {}
    with store.unit_of_work(scope) as uow:
        if max_records is not None and len(uow.records.list_live(from_id)) > max_records:
            raise ValidationError(
                f"{from_id!r} holds more than max_records={max_records} records; nothing moved",
                field="max_records",
            )
        page = list(uow.records.list_live(from_id, after=after, limit=page_size + 1))
        more = len(page) > page_size
        page = page[:page_size]
        if not page:
            return RepointResult(from_id, to_id, 0, 0, {}, 0, None)
        forgotten = forgotten_ids(uow)
        if to_id in forgotten or any(is_forgotten(r, forgotten) for r in page):
            # Moving withheld rows to a new id would serve forgotten content again; moving
            # rows onto a forgotten id would hide them for good.
            raise ValidationError(
                "a forgotten id cannot be re-pointed from or to: nothing moved", field="from_id"
            )
        require_kind(uow, to_id, page[0].kind, field="to_id")
        moves = {r.id: _new_id(r, from_id, to_id) for r in page}
        moved = uow.records.rekey(moves, to_source_id=to_id)
        edges = uow.records.rewrite_lineage(from_id, to_id)
        uow.commit()
    for handler in handlers:
        layers[handler.kind] = layers.get(handler.kind, 0) + int(
            handler.on_repoint(from_id, to_id, scope)
        )
    next_cursor = _encode_cursor(scope, from_id, to_id, page[-1].id) if more else None
    return RepointResult(from_id, to_id, moved, edges, layers, 1, next_cursor)


# -- batched renames -----------------------------------------------------------------------------


@attrs.frozen
class RenameFailure:
    from_id: str
    to_id: str
    error: str


@attrs.frozen
class RenameEvent:
    """What ``on_renamed`` receives: ids, counts and a redacted error, never rows or text."""

    from_id: str
    to_id: str
    outcome: Literal["moved", "failed"]
    moved_chunks: int = 0
    rewritten_edges: int = 0
    layers: Mapping[str, int] = attrs.field(factory=dict)
    error: str | None = None


@attrs.frozen
class RenameBatchResult:
    results: tuple[RepointResult, ...]
    failures: tuple[RenameFailure, ...]


def _validate_batch(renames: Sequence[Rename]) -> list[Rename]:
    if isinstance(renames, (str, bytes)) or not isinstance(renames, Sequence):
        raise ValidationError("renames must be a sequence of Rename", field="renames")
    checked = list(renames)
    if any(not isinstance(r, Rename) for r in checked):
        raise ValidationError("renames must be Rename objects", field="renames")
    sources = [r.from_id for r in checked]
    targets = [r.to_id for r in checked]
    if any(r.from_id == r.to_id for r in checked):
        raise ValidationError("a rename must change the id", field="renames")
    if len(set(sources)) != len(sources) or len(set(targets)) != len(targets):
        raise ValidationError(
            "an id is renamed twice or two ids are renamed to one", field="renames"
        )
    if set(sources) & set(targets):
        raise ValidationError("renames must not chain or overlap (a->b with b->c)", field="renames")
    return checked


def apply_source_renames(
    *,
    scope: Scope,
    store: ChunkStore,
    renames: Sequence[Rename],
    authorization: Authorization | None = None,
    handlers: Sequence[DerivedArtifactHandler] = (),
    continue_on_error: bool = False,
    on_renamed: Callable[[RenameEvent], None] | None = None,
    page_size: int = DEFAULT_LIMITS.repoint_page,
    redactor: Redactor | None = None,
) -> RenameBatchResult:
    """Apply every rename to the end of its pages; fail fast unless ``continue_on_error``."""
    scope = require_scope(scope)
    checked = _validate_batch(renames)
    redact = Redaction(redactor)
    results: list[RepointResult] = []
    failures: list[RenameFailure] = []
    for rename in checked:
        moved = edges = batched = 0
        layers: dict[str, int] = {}
        try:
            cursor: str | None = None
            while True:
                page = repoint_source(
                    scope=scope,
                    store=store,
                    from_id=rename.from_id,
                    to_id=rename.to_id,
                    authorization=authorization,
                    handlers=handlers,
                    page_size=page_size,
                    cursor=cursor,
                )
                moved += page.moved_chunks
                edges += page.rewritten_edges
                batched += page.batched
                for kind, count in page.layers.items():
                    layers[kind] = layers.get(kind, 0) + count
                cursor = page.cursor
                if cursor is None:
                    break
        except Exception as exc:
            error = redact.error(exc)[:ERROR_MAX]
            if on_renamed is not None:
                # Pages that committed before the failure stay moved: report them.
                on_renamed(
                    RenameEvent(
                        rename.from_id, rename.to_id, "failed", moved, edges, dict(layers), error
                    )
                )
            if not continue_on_error:
                raise
            failures.append(RenameFailure(rename.from_id, rename.to_id, error))
            continue
        result = RepointResult(rename.from_id, rename.to_id, moved, edges, layers, batched, None)
        results.append(result)
        if on_renamed is not None:
            on_renamed(
                RenameEvent(rename.from_id, rename.to_id, "moved", moved, edges, dict(layers))
            )
    return RenameBatchResult(tuple(results), tuple(failures))
