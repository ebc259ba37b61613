"""Re-pointing: move a source's records to a new id, page by page, and batched renames.

repoint_source:
1. Validate ids and cursor (a cursor of another scope or pair is a ``ValidationError``).
2. Authorization: on an ACL store, grants for both ids (``AccessDeniedError``).
3. Read one page of the source's live records (id order, after the cursor); a stale cursor or
   an empty page is a no-op (no transaction, no handler). ``max_records`` refuses sources
   larger than it before any write.
4. In one transaction: refuse forgotten ids and destination collisions, re-key the page
   (``from#0001`` -> ``to#0001``; a derived record -> ``to``; text, vectors, offsets and
   generations copied verbatim), rewrite lineage edges on derived records; commit. Then call
   each handler once for the page.

apply_source_renames: every rename to the end of its pages; fail fast unless
``continue_on_error``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import attrs

from ragport.application._support import (
    check_abort,
    forgotten_ids,
    require_kind,
    require_scope,
    require_transactions,
)
from ragport.application.deprecation import folds_keywords
from ragport.application.propagation import require_privilege
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.domain.errors import AbortedError, ForgottenError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS
from ragport.domain.model import (
    Authorization,
    Record,
    Rename,
    Scope,
    is_forgotten,
    validate_id,
)
from ragport.domain.status import ERROR_MAX
from ragport.ports.derived import DerivedArtifactHandler
from ragport.ports.store import ChunkStore

__all__ = [
    "RenameBatchResult",
    "RenameEvent",
    "RenameFailure",
    "RepointResult",
    "apply_source_renames",
    "repoint_source",
]


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


@folds_keywords(runtime=("telemetry", "abort"))
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
    runtime: Runtime | None = None,
) -> RepointResult:
    """Move one page of ``from_id``'s records to ``to_id``; see the module docstring.

    ``runtime.abort`` is checked before the transaction opens and again before it commits (an
    abort there rolls the page back); ``runtime.telemetry`` gets a ``rag.repoint`` span with
    the counts. (``telemetry=`` and ``abort=`` still work for one release, deprecated.)
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    abort = rt.abort
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
        require_privilege(store, scope, authorization, [from_id, to_id])
    layers: dict[str, int] = {}
    tel = rt.effective_telemetry
    check_abort(abort)
    with tel.span("rag.repoint") as span, store.unit_of_work(scope) as uow:
        if max_records is not None and len(uow.records.list_live(from_id)) > max_records:
            raise ValidationError(
                f"{from_id!r} holds more than max_records={max_records} records; nothing moved",
                field="max_records",
            )
        page = list(uow.records.list_live(from_id, after=after, limit=page_size + 1))
        more = len(page) > page_size
        page = page[:page_size]
        if not page:
            return RepointResult(
                from_id=from_id,
                to_id=to_id,
                moved_chunks=0,
                rewritten_edges=0,
                layers={},
                batched=0,
                cursor=None,
            )
        forgotten = forgotten_ids(uow)
        if to_id in forgotten:  # moving rows onto a forgotten id would hide them for good
            raise ForgottenError(to_id, field="to_id")
        if any(is_forgotten(r, forgotten) for r in page):
            # Moving withheld rows to a new id would serve forgotten content again.
            raise ValidationError(
                "a forgotten id cannot be re-pointed from or to: nothing moved", field="from_id"
            )
        require_kind(uow, to_id, page[0].kind, field="to_id")
        moves = {r.id: _new_id(r, from_id, to_id) for r in page}
        moved = uow.records.rekey(moves, to_source_id=to_id)
        edges = uow.records.rewrite_lineage(from_id, to_id)
        check_abort(abort)
        uow.commit()
        span.set_attribute("rag.repoint.moved", moved)
        span.set_attribute("rag.repoint.edges", edges)
    for handler in handlers:
        layers[handler.kind] = layers.get(handler.kind, 0) + int(
            handler.on_repoint(from_id, to_id, scope)
        )
    next_cursor = _encode_cursor(scope, from_id, to_id, page[-1].id) if more else None
    return RepointResult(
        from_id=from_id,
        to_id=to_id,
        moved_chunks=moved,
        rewritten_edges=edges,
        layers=layers,
        batched=1,
        cursor=next_cursor,
    )


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


@folds_keywords(runtime=("redactor", "telemetry", "abort"))
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
    runtime: Runtime | None = None,
) -> RenameBatchResult:
    """Apply every rename to the end of its pages; fail fast unless ``continue_on_error``.

    An abort stops the whole batch (``AbortedError``, even with ``continue_on_error``): pages
    that committed before it stay moved and are reported to ``on_renamed``. ``runtime``: its
    ``redactor`` and ``secrets`` clean the failures' error descriptions, its telemetry and
    abort serve each page (``redactor=``, ``telemetry=`` and ``abort=`` still work for one
    release, deprecated).
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    scope = require_scope(scope)
    checked = _validate_batch(renames)
    redact = rt.redaction
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
                    runtime=rt,
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
                        from_id=rename.from_id,
                        to_id=rename.to_id,
                        outcome="failed",
                        moved_chunks=moved,
                        rewritten_edges=edges,
                        layers=dict(layers),
                        error=error,
                    )
                )
            if not continue_on_error or isinstance(exc, AbortedError):
                raise
            failures.append(RenameFailure(from_id=rename.from_id, to_id=rename.to_id, error=error))
            continue
        result = RepointResult(
            from_id=rename.from_id,
            to_id=rename.to_id,
            moved_chunks=moved,
            rewritten_edges=edges,
            layers=layers,
            batched=batched,
            cursor=None,
        )
        results.append(result)
        if on_renamed is not None:
            on_renamed(
                RenameEvent(
                    from_id=rename.from_id,
                    to_id=rename.to_id,
                    outcome="moved",
                    moved_chunks=moved,
                    rewritten_edges=edges,
                    layers=dict(layers),
                )
            )
    return RenameBatchResult(results=tuple(results), failures=tuple(failures))
