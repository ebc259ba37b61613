"""Index chunks, replace a source atomically, delete a source.

replace_source:
1. Validate the scope, ids, chunk set, ``grant`` and caps; refuse stores without transactions.
2. Refuse a forgotten ``source_id`` (``ForgottenError``, ``failed`` recorded) before embedding.
3. If ``content_hash`` matches the stored version under the same embedder, skip (no embed);
   a ``grant`` is still set, in a unit of work of its own that checks the id again.
4. Redact chunk text, then embed it in bounded batches (reusing vectors whose text matches),
   checking abort between batches. Nothing touches the store yet.
5. In one unit of work: refuse a forgotten ``source_id`` again (the guarantee under a
   concurrent forget), stage a generation, retire the source's rows, add the new rows, set
   ``grant`` (content and access change together), publish (unless
   ``advance_generation=False``), commit.
6. Record ingestion status (``pending`` -> ``indexed`` | ``failed``, errors redacted).

index_chunks embeds and writes batch by batch (each batch its own transaction, visible when
it commits): a failure leaves earlier batches in place and retrying is idempotent. Forgotten
sources are refused before the first batch and again inside each batch's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np

from ragport.application._support import (
    check_abort,
    check_vectors,
    embed_batches,
    put_status,
    require_kind,
    require_scope,
    require_transactions,
)
from ragport.application.admission import first_forgotten, refuse_forgotten
from ragport.application.deprecation import WRITE_KEYWORDS, folds_keywords
from ragport.application.pinned import retire_pinned_dependents
from ragport.application.results import IndexResult, ReplaceResult
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.application.shared_generation import SharedGeneration, staged_write
from ragport.application.write_options import WriteOptions, check_write_options, refuse_unused
from ragport.domain.errors import ForgottenError, ValidationError
from ragport.domain.limits import Limits
from ragport.domain.model import (
    Chunk,
    Grant,
    Record,
    Scope,
    metadata_bytes,
    validate_content_hash,
    validate_id,
    validate_text,
)
from ragport.domain.status import IngestionState
from ragport.engine import BackendStore
from ragport.ports.embedder import Embedder, VectorMatrix
from ragport.ports.runtime import Abort, Telemetry
from ragport.ports.store import ChunkStore, SupportsPreparation, supports
from ragport.ports.unit_of_work import UnitOfWork

__all__ = ["check_grant", "delete_source", "index_chunks", "replace_source", "set_grant"]

ReusableEmbeddings = Mapping[str, tuple[str, Any]]


def _check_chunks(chunks: Sequence[Chunk], limits: Limits, *, source_id: str | None) -> list[Chunk]:
    if isinstance(chunks, (str, bytes)) or not isinstance(chunks, Sequence):
        raise ValidationError("chunks must be a sequence of Chunk", field="chunks")
    checked = list(chunks)
    if len(checked) > limits.chunks_per_source and source_id is not None:
        raise ValidationError(
            f"{len(checked)} chunks exceed chunks_per_source={limits.chunks_per_source}",
            field="chunks",
            limit="chunks_per_source",
        )
    seen: set[str] = set()
    for chunk in checked:
        if not isinstance(chunk, Chunk):
            raise ValidationError("chunks must be Chunk objects", field="chunks")
        if source_id is not None and chunk.source_id != source_id:
            raise ValidationError("every chunk must belong to source_id", field="chunks")
        if chunk.id in seen:
            raise ValidationError("chunk ids must be unique", field="chunks")
        seen.add(chunk.id)
        if metadata_bytes(chunk.metadata) > limits.metadata_bytes:
            raise ValidationError(
                f"chunk metadata exceeds metadata_bytes={limits.metadata_bytes}",
                field="metadata",
                limit="metadata_bytes",
            )
        if len(chunk.text) > limits.document_chars:
            raise ValidationError(
                "chunk text exceeds document_chars", field="chunks", limit="document_chars"
            )
    return checked


def _records(
    chunks: Sequence[Chunk],
    texts: Sequence[str],
    *,
    scope: Scope,
    embedder: Embedder,
    generation: int,
    content_hash: str | None,
) -> list[Record]:
    return [
        Record(
            id=chunk.id,
            scope=scope,
            source_id=chunk.source_id,
            kind="chunk",
            text=text,
            metadata=chunk.metadata,
            embedder_id=embedder.id,
            dimensions=embedder.dimensions,
            generation=generation,
            content_hash=content_hash,
            chunk_index=chunk.index,
            start=chunk.start,
            end=chunk.end,
        )
        for chunk, text in zip(chunks, texts, strict=True)
    ]


def _embed_with_reuse(
    embedder: Embedder,
    chunks: Sequence[Chunk],
    texts: Sequence[str],
    reuse: ReusableEmbeddings | None,
    *,
    batch_size: int,
    abort: Abort | None,
    telemetry: Telemetry,
) -> VectorMatrix:
    dims = embedder.dimensions
    out = np.empty((len(texts), dims), dtype=np.float32)
    missing: list[int] = []
    for i, (chunk, text) in enumerate(zip(chunks, texts, strict=True)):
        entry = reuse.get(chunk.id) if reuse else None
        if entry is not None:
            reused_text, vector = entry
            try:
                array = np.asarray(vector, dtype=np.float32).reshape(-1)
            except (TypeError, ValueError, OverflowError):  # ragged or not numbers: re-embed
                array = np.empty(0, dtype=np.float32)
            # Only an exact text match under this embedder's dimension is reusable.
            if reused_text == text and array.shape == (dims,) and np.all(np.isfinite(array)):
                out[i] = array
                continue
        missing.append(i)
    if missing:
        embedded = embed_batches(
            embedder,
            [texts[i] for i in missing],
            batch_size=batch_size,
            abort=abort,
            telemetry=telemetry,
        )
        out[missing] = embedded
    return out


def check_grant(grant: object, source_id: str) -> Grant | None:
    """``grant`` if it is ``None`` or a ``Grant`` of ``source_id`` (``ValidationError(field=
    "grant")`` otherwise: a write sets the access of the source it writes, no other)."""
    if grant is None:
        return None
    if not isinstance(grant, Grant):
        raise ValidationError("grant must be a Grant or None", field="grant")
    if grant.source_id != source_id:
        raise ValidationError("grant.source_id must be the source being written", field="grant")
    return grant


def set_grant(store: ChunkStore, scope: Scope, grant: Grant) -> None:
    """Set one source's grant in a unit of work of its own (the content was unchanged),
    refusing a forgotten source inside it; writes nothing when the grant is already stored."""
    with store.unit_of_work(scope) as uow:
        refuse_forgotten(uow, [grant.source_id])
        if uow.grants.get([grant.source_id]).get(grant.source_id) != grant:
            uow.grants.set([grant])
            uow.commit()


@folds_keywords(runtime=(), write=WRITE_KEYWORDS)
def replace_source(
    *,
    source_id: str,
    chunks: Sequence[Chunk],
    embedder: Embedder,
    store: ChunkStore,
    scope: Scope,
    content_hash: str | None = None,
    reuse_embeddings: ReusableEmbeddings | None = None,
    runtime: Runtime | None = None,
    write_options: WriteOptions | None = None,
    grant: Grant | None = None,
) -> ReplaceResult:
    """Replace every record of ``source_id`` in ``scope`` with ``chunks``, atomically.

    Embeds first, then swaps old for new in one transaction: a failure anywhere before commit
    leaves the previous version fully visible. See the module docstring for the steps.
    ``write_options`` (``WriteOptions``): ``batch_size``, ``shared_generation`` (write into
    the generation earlier writes through it used, while it is still the scope's newest),
    ``advance_generation``, ``skip_if_unchanged`` and ``status_store``; the old keywords of
    those names still work for one release (``DeprecationWarning``).
    ``grant``: the source's new grant (its ``source_id`` must be ``source_id``), set in the
    same unit of work as the content, so no reader ever sees the new content under the old
    grant or the old content under the new one; a failed replace changes neither. ``None``
    leaves the grant as it is. A ``source_id`` a deletion propagation forgot is refused with
    ``ForgottenError`` (``readmit_source`` lets it in again).
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    abort, lim, redact = rt.abort, rt.limits, rt.redaction
    tel, clk = rt.effective_telemetry, rt.effective_clock
    opts = check_write_options(write_options).settings(lim)
    status_store = opts.status_store
    scope = require_scope(scope)
    validate_id(source_id, field="source_id")
    checked = _check_chunks(chunks, lim, source_id=source_id)
    content_hash = validate_content_hash(content_hash)
    grant = check_grant(grant, source_id)
    require_transactions(store, "replace_source")
    check_abort(abort)
    if first_forgotten(store, scope, [source_id]) is not None:
        refused = ForgottenError(source_id)
        put_status(status_store, scope=scope, source_id=source_id, state="failed", clock=clk,
                   error=redact.error(refused))  # fmt: skip
        raise refused

    skip = content_hash is not None if opts.skip_if_unchanged is None else opts.skip_if_unchanged
    if skip and content_hash is not None:
        stored = store.get_by_source(scope, source_id)
        if stored and all(
            r.content_hash == content_hash
            and r.embedder_id == embedder.id
            and r.dimensions == embedder.dimensions
            for r in stored
        ):
            if grant is not None:
                set_grant(store, scope, grant)
            return ReplaceResult(
                source_id=source_id,
                deleted=0,
                indexed=0,
                skipped=True,
                generation=store.current_generation(scope),
            )

    # A host redactor runs after the chunks were validated: its output is checked again.
    texts = (
        [validate_text(redact(c.text), field="text") for c in checked]
        if redact.active
        else [c.text for c in checked]
    )
    size = sum(len(t.encode("utf-8")) for t in texts)
    put_status(
        status_store,
        scope=scope,
        source_id=source_id,
        state="pending",
        clock=clk,
        size=size,
        total=len(texts),
    )
    try:
        vectors = _embed_with_reuse(
            embedder,
            checked,
            texts,
            reuse_embeddings,
            batch_size=opts.batch_size,
            abort=abort,
            telemetry=tel,
        )
        check_abort(abort)
        if supports(store, "preparation"):
            cast(SupportsPreparation, store).prepare(scope, dimensions=embedder.dimensions)
        with tel.span("rag.replace") as span, store.unit_of_work(scope) as uow:
            require_kind(uow, source_id, "chunk", field="source_id")
            refuse_forgotten(uow, [source_id])
            write = staged_write(uow, opts.shared_generation, [source_id])
            generation = write.generation
            deleted = uow.records.retire_source(source_id, generation=generation)
            retire_pinned_dependents(uow, [source_id], generation=generation, limits=lim)
            records = _records(
                checked,
                texts,
                scope=scope,
                embedder=embedder,
                generation=generation,
                content_hash=content_hash,
            )
            uow.records.add(records, vectors)
            if grant is not None:
                uow.grants.set([grant])
            write.publish(opts.advance_generation)
            check_abort(abort)
            write.commit()
            span.set_attribute("rag.replace.indexed", len(records))
    except BaseException as exc:
        put_status(
            status_store,
            scope=scope,
            source_id=source_id,
            state="failed",
            clock=clk,
            size=size,
            total=len(texts),
            error=redact.error(exc),
        )
        raise
    put_status(
        status_store,
        scope=scope,
        source_id=source_id,
        state="indexed",
        clock=clk,
        size=size,
        total=len(texts),
        indexed=len(texts),
    )
    return ReplaceResult(
        source_id=source_id,
        deleted=deleted,
        indexed=len(records),
        skipped=False,
        generation=generation,
    )


@folds_keywords(runtime=("telemetry", "abort"), write=("status_store", "shared_generation"))
def delete_source(
    *,
    source_id: str,
    store: ChunkStore,
    scope: Scope,
    runtime: Runtime | None = None,
    write_options: WriteOptions | None = None,
) -> ReplaceResult:
    """Retire every record of ``source_id`` in exactly ``scope`` at a new generation
    (or at ``write_options.shared_generation``'s, see ``SharedGeneration``).

    Versioned like a replacement with no chunks: ``rollback_generation`` can bring it back
    until ``compact`` purges it. Its grant is revoked in the same unit of work (replaced by an
    empty grant: grants are not versioned), so a document later written under the same id,
    or the content a rollback brings back, is denied under authorization until granted again.
    To forget a source everywhere (derived records included, rows physically removed), use
    the deletion propagator.
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    opts = check_write_options(write_options)
    refuse_unused(opts, "delete_source", staged=False, shared=True, skip=False)
    status_store = opts.status_store
    scope = require_scope(scope)
    validate_id(source_id, field="source_id")
    require_transactions(store, "delete_source")
    check_abort(rt.abort)
    with rt.effective_telemetry.span("rag.delete"):
        done = None
        if opts.shared_generation is None and isinstance(store, BackendStore):
            # One write of the backend's own when it can (one round trip on PostgreSQL):
            # ``None`` when it wrote nothing (a derived record names the source, ...).
            done = store.delete_source_at_once(scope, source_id)
        if done is None:
            done = _delete_in_steps(store, scope, source_id, rt.limits, opts.shared_generation)
    generation, deleted = done
    if status_store is not None:
        status_store.delete(scope, source_id)
    return ReplaceResult(
        source_id=source_id, deleted=deleted, indexed=0, skipped=False, generation=generation
    )


def _delete_in_steps(
    store: ChunkStore,
    scope: Scope,
    source_id: str,
    limits: Limits,
    shared: SharedGeneration | None,
) -> tuple[int, int]:
    """``delete_source`` in one unit of work, step by step: the generation (``shared``'s, if
    given), the source's rows, its pinned dependents, its grant; answers the generation and
    how many of the source's rows retired."""
    with store.unit_of_work(scope) as uow:
        write = staged_write(uow, shared, [source_id])
        generation = write.generation
        deleted = uow.records.retire_source(source_id, generation=generation)
        retire_pinned_dependents(uow, [source_id], generation=generation, limits=limits)
        _revoke_grant(uow, source_id)
        write.publish()
        write.commit()
    return generation, deleted


def _revoke_grant(uow: UnitOfWork, source_id: str) -> None:
    """Replace the source's grant by an empty one if it names anyone (the port has no
    delete; empty is no grant): through the unit's ``grants.revoke`` when it has one (the
    engine's: one statement on a backend with the ``revoke_grants`` pushdown), else read and
    write."""
    revoke = getattr(uow.grants, "revoke", None)
    if callable(revoke):
        revoke([source_id])
        return
    grant = uow.grants.get([source_id]).get(source_id)
    if grant is not None and not grant.is_empty:
        uow.grants.set([Grant(source_id)])


@folds_keywords(write=("status_store", "batch_size"))
def index_chunks(
    *,
    chunks: Sequence[Chunk],
    embedder: Embedder,
    store: ChunkStore,
    scope: Scope,
    runtime: Runtime | None = None,
    write_options: WriteOptions | None = None,
) -> IndexResult:
    """Embed and upsert ``chunks`` batch by batch; each batch commits (and becomes visible) alone.

    Re-indexing a chunk id replaces its previous row. Not atomic across batches: use
    ``replace_source`` when a source must change all at once. Of ``write_options`` it uses
    ``batch_size`` (the chunks of one batch and one transaction) and ``status_store``.
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    abort, lim, redact = rt.abort, rt.limits, rt.redaction
    tel, clk = rt.effective_telemetry, rt.effective_clock
    options = check_write_options(write_options)
    refuse_unused(options, "index_chunks", staged=False, shared=False, skip=False)
    opts = options.settings(lim)
    status_store, batch_size = opts.status_store, opts.batch_size
    scope = require_scope(scope)
    checked = _check_chunks(chunks, lim, source_id=None)
    require_transactions(store, "index_chunks")
    sources = list(dict.fromkeys(c.source_id for c in checked))
    forgotten = first_forgotten(store, scope, sources)
    if forgotten is not None:
        refused = ForgottenError(forgotten, field="chunks")
        put_status(status_store, scope=scope, source_id=forgotten, state="failed", clock=clk,
                   error=redact.error(refused))  # fmt: skip
        raise refused
    totals = {s: sum(1 for c in checked if c.source_id == s) for s in sources}
    done = dict.fromkeys(sources, 0)
    for s in sources:
        put_status(
            status_store, scope=scope, source_id=s, state="pending", clock=clk, total=totals[s]
        )
    indexed = 0
    try:
        if checked and supports(store, "preparation"):
            cast(SupportsPreparation, store).prepare(scope, dimensions=embedder.dimensions)
        for start in range(0, len(checked), batch_size):
            check_abort(abort)
            batch = checked[start : start + batch_size]
            texts = [redact(c.text) for c in batch]
            with tel.span("rag.embed"):
                vectors = check_vectors(
                    embedder.embed(texts), rows=len(texts), dimensions=embedder.dimensions
                )
            check_abort(abort)
            with store.unit_of_work(scope) as uow:
                batch_sources = list(dict.fromkeys(c.source_id for c in batch))
                for src in batch_sources:
                    require_kind(uow, src, "chunk", field="source_id")
                refuse_forgotten(uow, batch_sources, field="chunks")
                write = staged_write(uow)
                generation = write.generation
                uow.records.retire_ids([c.id for c in batch], generation=generation)
                uow.records.add(
                    _records(
                        batch,
                        texts,
                        scope=scope,
                        embedder=embedder,
                        generation=generation,
                        content_hash=None,
                    ),
                    vectors,
                )
                write.publish()
                write.commit()
            indexed += len(batch)
            for c in batch:
                done[c.source_id] += 1
    except BaseException as exc:
        error = redact.error(exc)
        for s in sources:
            state: IngestionState = (
                "partial"
                if 0 < done[s] < totals[s]
                else ("indexed" if done[s] == totals[s] else "failed")
            )
            put_status(
                status_store,
                scope=scope,
                source_id=s,
                state=state,
                clock=clk,
                total=totals[s],
                indexed=done[s],
                error=None if state == "indexed" else error,
            )
        raise
    for s in sources:
        put_status(
            status_store,
            scope=scope,
            source_id=s,
            state="indexed",
            clock=clk,
            total=totals[s],
            indexed=done[s],
        )
    return IndexResult(indexed=indexed, source_ids=tuple(sources))
