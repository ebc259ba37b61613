"""Derived records: summaries, notes and answers stored with the ids they rest on.

index_derived:
1. Validate ids, text, metadata and lineage.
2. Redact and embed the text.
3. In one transaction: refuse an id that names a source of chunks, and a forgotten one
   (``ForgottenError``: it would never be served); resolve each lineage id to root sources
   (a derived record contributes its own roots), refusing an id with no live record in the
   scope (neither a source of chunks nor a derived record), cycles, lineage deeper than 8 and
   anything resting on forgotten content (``ForgottenError``, field ``lineage``); replace the
   derived record and publish.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from ragport.application._support import (
    check_abort,
    check_vectors,
    forgotten_ids,
    require_kind,
    require_scope,
    require_transactions,
)
from ragport.application.admission import refuse_forgotten
from ragport.application.pinned import (
    pinned_metadata,
    require_unchanged,
    retire_pinned_dependents,
)
from ragport.application.results import ReplaceResult
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.application.shared_generation import staged_write
from ragport.domain.errors import ForgottenError, ValidationError
from ragport.domain.limits import Limits
from ragport.domain.model import (
    Record,
    Scope,
    freeze_metadata,
    metadata_bytes,
    validate_id,
    validate_text,
)
from ragport.ports.embedder import Embedder
from ragport.ports.store import ChunkStore, SupportsPreparation, UnitOfWork, supports

__all__ = ["index_derived"]


def _roots(
    uow: UnitOfWork, record_id: str, lineage: Sequence[str], limits: Limits
) -> tuple[str, ...]:
    """Flatten ``lineage`` to root source ids, refusing unknown ids, cycles, lineage deeper than
    allowed and anything that rests on forgotten content.

    Every lineage id must have live rows in the scope: a source of chunks (a root) or a derived
    record, which contributes its stored roots; walking their own
    lineage (breadth first) proves the new record is not among its ancestors and that no
    ancestor, at any depth, or root is withheld by a ``forgotten`` tombstone.
    """
    roots: dict[str, None] = {}
    for item in lineage:
        # Live rows (staged ones included: this unit publishes the staged generation).
        live = uow.records.list_live(item, limit=1)
        if not live:
            raise ValidationError(
                "lineage names an id that is neither a source with records nor a derived "
                "record in this scope: nothing was written",
                field="lineage",
            )
        if live[0].kind == "derived":
            roots.update(dict.fromkeys(live[0].roots))
        else:
            roots[item] = None
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
        raise ForgottenError(min(forgotten & (seen | roots.keys())), field="lineage")
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
    runtime: Runtime | None = None,
    pinned: bool = False,
    as_of: int | None = None,
) -> ReplaceResult:
    """Store a derived artifact (summary, note) with the ids it rests on; replaces an older one.

    ``pinned=True``: the record rests on the versions of ``lineage`` current now; replacing or
    deleting any of them retires it in the same unit of work (``ragport.application.pinned``).
    ``as_of``: the generation the text was computed from (``store.current_generation`` read
    before reading the sources); if a source of ``lineage`` was written, replaced or deleted
    after it, nothing is written and ``LineageChangedError`` names those ids (checked inside
    the unit of work, so a concurrent replace cannot slip between the check and the write).
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    abort, lim, redact, tel = rt.abort, rt.limits, rt.redaction, rt.effective_telemetry
    scope = require_scope(scope)
    validate_id(record_id, field="record_id")
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("text must be a non-empty string", field="text")
    validate_text(text, field="text")
    if len(text) > lim.document_chars:
        raise ValidationError("text exceeds document_chars", field="text", limit="document_chars")
    if isinstance(lineage, str) or not lineage:
        raise ValidationError("lineage must be a non-empty sequence of ids", field="lineage")
    ids = list(dict.fromkeys(validate_id(i, field="lineage") for i in lineage))
    frozen = freeze_metadata(pinned_metadata(freeze_metadata(metadata), pinned))
    if metadata_bytes(frozen) > lim.metadata_bytes:
        raise ValidationError(
            "metadata exceeds metadata_bytes", field="metadata", limit="metadata_bytes"
        )
    require_transactions(store, "index_derived")
    clean = validate_text(redact(text), field="text")
    check_abort(abort)
    with tel.span("rag.embed"):
        vectors = check_vectors(embedder.embed([clean]), rows=1, dimensions=embedder.dimensions)
    check_abort(abort)
    if supports(store, "preparation"):
        cast(SupportsPreparation, store).prepare(scope, dimensions=embedder.dimensions)
    with store.unit_of_work(scope) as uow:
        require_kind(uow, record_id, "derived", field="record_id")
        refuse_forgotten(uow, [record_id], field="record_id")
        roots = _roots(uow, record_id, ids, lim)
        if as_of is not None:
            require_unchanged(uow, ids, as_of)
        write = staged_write(uow)
        generation = write.generation
        deleted = uow.records.retire_source(record_id, generation=generation)
        retire_pinned_dependents(uow, [record_id], generation=generation, limits=lim)
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
        write.publish()
        write.commit()
    return ReplaceResult(
        source_id=record_id, deleted=deleted, indexed=1, skipped=False, generation=generation
    )
