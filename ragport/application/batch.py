"""replace_sources: many sources replaced in few transactions, each still all-or-nothing.

1. Validate the call: a sequence of ``SourceWrite`` with distinct source ids, the scope, a
   store with transactions.
2. Each source as ``replace_source`` steps 1 to 3 (its id, chunks, content hash and grant;
   a forgotten id refused; skipped when its content hash is stored under this embedder, a
   grant still set). A source that fails here fails alone: it is left out and reported.
3. Group the rest, in input order, into batches of at most ``limits.write_batch`` sources and
   ``limits.write_batch_chunks`` chunks (a larger source is a batch alone).
4. Per batch: record ``pending``, embed its (redacted) texts in calls of ``batch_size``; if
   that call fails, each source is embedded alone, so a text the embedder refuses fails its
   source only.
5. ``write_batch``: ONE unit of work and ONE generation for the batch (or ``shared_generation``'s,
   see ``SharedGeneration``): refuse a forgotten id again, retire each source's rows, add the
   rows of the whole batch in one ``records.add`` call (PostgreSQL COPYs them), set the
   grants, publish, commit. Readers see every source of the batch switch at the commit: a
   source's old version or its new one, never half of it, never none.
6. If that write fails (anything but ``AbortedError``), each source of the batch is written
   alone by ``replace_source`` (its vectors reused: nothing is embedded again), so only the
   bad one fails and keeps its previous version.
7. Record ``indexed`` (or ``failed``); return the results and failures, each in input order.

``write_batch`` and ``write_batched`` (steps 5 and 6) also serve ``ingest_documents``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar, cast

import attrs
import numpy as np

from ragport.application._support import (
    check_abort,
    embed_batches,
    put_status,
    require_kind,
    require_scope,
    require_transactions,
)
from ragport.application.admission import forgotten_among, refuse_forgotten
from ragport.application.indexing import (
    _check_chunks,
    _records,
    check_grant,
    replace_source,
    set_grant,
)
from ragport.application.pinned import retire_pinned_dependents
from ragport.application.results import ReplaceResult
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.application.shared_generation import SharedGeneration, staged_write
from ragport.application.write_options import WriteOptions, check_write_options
from ragport.domain.errors import AbortedError, ForgottenError, ValidationError, reason_code
from ragport.domain.limits import Limits
from ragport.domain.model import (
    Chunk,
    Grant,
    Scope,
    validate_content_hash,
    validate_id,
    validate_text,
)
from ragport.domain.status import IngestionState
from ragport.ports.embedder import Embedder, VectorMatrix
from ragport.ports.runtime import Abort, Telemetry
from ragport.ports.store import ChunkStore, SupportsPreparation, supports

__all__ = [
    "BatchItem",
    "ReplaceBatchResult",
    "SourceFailure",
    "SourceWrite",
    "batch_bounds",
    "replace_sources",
    "write_batch",
    "write_batched",
]

T = TypeVar("T")


def _chunk_tuple(chunks: Sequence[Chunk]) -> tuple[Chunk, ...]:
    if isinstance(chunks, (str, bytes)) or not isinstance(chunks, Sequence):
        raise ValidationError("chunks must be a sequence of Chunk", field="chunks")
    return tuple(chunks)


@attrs.frozen(kw_only=True)
class SourceWrite:
    """One source of ``replace_sources``: its ``chunks`` (all of ``source_id``), its
    ``content_hash`` (skip when stored, as ``replace_source``) and ``grant`` (set with it)."""

    source_id: str
    chunks: tuple[Chunk, ...] = attrs.field(converter=_chunk_tuple)
    content_hash: str | None = None
    grant: Grant | None = None


@attrs.frozen
class SourceFailure:
    """A source ``replace_sources`` did not write: ``reason`` (``reason_code``) and ``error``
    (redacted, at most 256 characters, no document text). Its previous version stays."""

    source_id: str
    reason: str
    error: str


@attrs.frozen
class ReplaceBatchResult:
    """``results``: the sources written or skipped; ``failures``: the others; both in input
    order. ``generations``: the generations the batches wrote (one per batch, or one for all
    with a ``shared_generation``)."""

    results: tuple[ReplaceResult, ...]
    failures: tuple[SourceFailure, ...]
    generations: tuple[int, ...]


@attrs.frozen
class BatchItem:
    """One source ready to write: ``texts`` (as stored, redacted) and ``vectors`` (one row
    each) of its ``chunks``."""

    source_id: str
    chunks: Sequence[Chunk]
    texts: Sequence[str]
    vectors: VectorMatrix
    content_hash: str | None = None
    grant: Grant | None = None


def batch_bounds(limits: Limits) -> tuple[int, int]:
    """(sources, chunks) of one batch under ``limits``."""
    return limits.write_batch, limits.write_batch_chunks


def write_batch(
    items: Sequence[BatchItem],
    *,
    store: ChunkStore,
    scope: Scope,
    embedder: Embedder,
    shared: SharedGeneration | None,
    limits: Limits,
    telemetry: Telemetry,
    abort: Abort | None,
) -> tuple[int, list[int]]:
    """Step 5: ``items`` (distinct source ids) in one unit of work at one generation; the
    generation and how many visible rows each item retired. Raises what the write raised
    (nothing committed)."""
    ids = [i.source_id for i in items]
    if len(set(ids)) != len(ids):
        raise ValidationError("a batch writes each source once", field="source_id")
    vectors = (
        np.concatenate([i.vectors for i in items])
        if items
        else np.empty((0, embedder.dimensions), dtype=np.float32)
    )
    with telemetry.span("rag.replace_batch") as span, store.unit_of_work(scope) as uow:
        for source_id in ids:
            require_kind(uow, source_id, "chunk", field="source_id")
        refuse_forgotten(uow, ids)
        write = staged_write(uow, shared, ids)
        generation = write.generation
        deleted = [uow.records.retire_source(s, generation=generation) for s in ids]
        retire_pinned_dependents(uow, ids, generation=generation, limits=limits)
        records = [
            record
            for i in items
            for record in _records(
                i.chunks,
                i.texts,
                scope=scope,
                embedder=embedder,
                generation=generation,
                content_hash=i.content_hash,
            )
        ]
        uow.records.add(records, vectors)
        grants = [i.grant for i in items if i.grant is not None]
        if grants:
            uow.grants.set(grants)
        write.publish()
        check_abort(abort)
        write.commit()
        span.set_attribute("rag.replace_batch.sources", len(items))
        span.set_attribute("rag.replace_batch.indexed", len(records))
    return generation, deleted


def write_batched(
    items: Sequence[T],
    *,
    batch: Callable[[Sequence[T]], list[ReplaceResult]],
    alone: Callable[[T], ReplaceResult],
    abandoned: Callable[[Sequence[T], BaseException], None],
) -> tuple[list[ReplaceResult | Exception], bool]:
    """Steps 5 and 6: ``batch(items)`` (one unit of work), else each item through ``alone``
    (its own transaction) so only a bad one fails. One result or exception per item, in
    order, and whether the batch wrote them (``False``: ``alone`` did, recording its own
    status). A batch of one goes ``alone`` at once. ``AbortedError`` (or a ``BaseException``
    such as ``KeyboardInterrupt``) raises out after ``abandoned(items, exc)`` is told the items
    left unwritten (their ``pending`` status is the caller's to settle); ``alone`` records the
    failure of the item in flight itself."""
    if len(items) > 1:
        try:
            return list(batch(items)), True
        except AbortedError as exc:
            abandoned(items, exc)
            raise
        except Exception:  # the fall-back below finds the source that fails
            pass
        except BaseException as exc:
            abandoned(items, exc)
            raise
    out: list[ReplaceResult | Exception] = []
    for n, item in enumerate(items):
        try:
            out.append(alone(item))
        except AbortedError as exc:
            abandoned(items[n + 1 :], exc)
            raise
        except Exception as exc:
            out.append(exc)
        except BaseException as exc:
            abandoned(items[n + 1 :], exc)
            raise
    return out, False


@attrs.frozen(kw_only=True)
class _Call:
    """One ``replace_sources`` call's bound arguments and resolved settings."""

    store: ChunkStore
    scope: Scope
    embedder: Embedder
    runtime: Runtime
    options: WriteOptions
    batch_size: int
    shared: SharedGeneration | None

    def failure(self, source_id: str, exc: BaseException) -> SourceFailure:
        return SourceFailure(source_id, reason_code(exc), self.runtime.redaction.error(exc))

    def status(
        self, source_id: str, texts: Sequence[str], state: IngestionState,
        error: BaseException | None = None,
    ) -> None:  # fmt: skip
        """The status ``replace_source`` records: ``pending``, ``indexed`` or ``failed``."""
        n = len(texts)
        put_status(
            self.options.status_store, scope=self.scope, source_id=source_id, state=state,
            clock=self.runtime.effective_clock, size=sum(len(t.encode("utf-8")) for t in texts),
            total=n, indexed=n if state == "indexed" else 0,
            error=None if error is None else self.runtime.redaction.error(error),
        )  # fmt: skip

    def abandoned(self, items: Sequence[BatchItem], exc: BaseException) -> None:
        """``failed`` for items left unwritten by an abort (``replace_source`` records it)."""
        for item in items:
            self.status(item.source_id, item.texts, "failed", exc)

    def check(self, write: SourceWrite) -> tuple[Sequence[Chunk], str | None, Grant | None]:
        """Step 2's checks of one source (``ValidationError``)."""
        if not isinstance(write, SourceWrite):
            raise ValidationError("a batch holds SourceWrite values", field="batch")
        validate_id(write.source_id, field="source_id")
        chunks = _check_chunks(write.chunks, self.runtime.limits, source_id=write.source_id)
        return (
            chunks,
            validate_content_hash(write.content_hash),
            check_grant(write.grant, write.source_id),
        )

    def skipped(self, write: SourceWrite) -> ReplaceResult | None:
        """Step 2's skip: the result when ``write``'s content hash is stored, else ``None``."""
        skip = self.options.skip_if_unchanged
        if write.content_hash is None or skip is False:
            return None
        stored = self.store.get_by_source(self.scope, write.source_id)
        e = self.embedder
        if not stored or not all(
            r.content_hash == write.content_hash
            and r.embedder_id == e.id
            and r.dimensions == e.dimensions
            for r in stored
        ):
            return None
        if write.grant is not None:
            set_grant(self.store, self.scope, write.grant)
        generation = self.store.current_generation(self.scope)
        return ReplaceResult(write.source_id, 0, 0, True, generation)

    def texts(self, chunks: Sequence[Chunk]) -> list[str]:
        redact = self.runtime.redaction
        if not redact.active:
            return [c.text for c in chunks]
        return [validate_text(redact(c.text), field="text") for c in chunks]

    def embed(self, texts: Sequence[str]) -> VectorMatrix:
        rt = self.runtime
        return embed_batches(
            self.embedder, texts, batch_size=self.batch_size, abort=rt.abort,
            telemetry=rt.effective_telemetry,
        )  # fmt: skip

    def write(self, items: Sequence[BatchItem]) -> list[ReplaceResult]:
        rt = self.runtime
        generation, deleted = write_batch(
            items, store=self.store, scope=self.scope, embedder=self.embedder,
            shared=self.shared, limits=rt.limits, telemetry=rt.effective_telemetry,
            abort=rt.abort,
        )  # fmt: skip
        return [
            ReplaceResult(i.source_id, d, len(i.texts), False, generation)
            for i, d in zip(items, deleted, strict=True)
        ]

    def alone(self, item: BatchItem) -> ReplaceResult:
        pairs = zip(item.chunks, item.texts, strict=True)
        reuse = {c.id: (t, item.vectors[n]) for n, (c, t) in enumerate(pairs)}
        return replace_source(
            source_id=item.source_id, chunks=item.chunks, embedder=self.embedder,
            store=self.store, scope=self.scope, content_hash=item.content_hash,
            reuse_embeddings=reuse, runtime=self.runtime,
            write_options=attrs.evolve(self.options, skip_if_unchanged=False),
            grant=item.grant,
        )  # fmt: skip


def _check_batch(batch: object) -> list[SourceWrite]:
    if isinstance(batch, (str, bytes)) or not isinstance(batch, Sequence):
        raise ValidationError("batch must be a sequence of SourceWrite", field="batch")
    writes = list(batch)
    ids = [w.source_id for w in writes if isinstance(w, SourceWrite)]
    if len(ids) != len(writes):
        raise ValidationError("batch must hold SourceWrite values", field="batch")
    if len(set(ids)) != len(ids):
        raise ValidationError("a batch names each source id once", field="batch")
    return writes


def replace_sources(
    batch: Sequence[SourceWrite],
    *,
    embedder: Embedder,
    store: ChunkStore,
    scope: Scope,
    runtime: Runtime | None = None,
    write_options: WriteOptions | None = None,
) -> ReplaceBatchResult:
    """Replace every source of ``batch`` (see the module), each atomically, in batches of
    ``limits.write_batch`` sources at one generation each (``write_options.shared_generation``:
    the batches share one while it stays the scope's newest, so one rollback undoes the call). A source that fails is in ``failures`` and keeps its
    previous version; the others are written. ``AbortedError`` stops the call (batches
    committed before it stay); a malformed call (not ``SourceWrite`` values, a repeated id)
    is a ``ValidationError`` before anything is written."""
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    options = check_write_options(write_options)
    settings = options.settings(rt.limits)
    writes = _check_batch(batch)
    call = _Call(
        store=store, scope=require_scope(scope), embedder=embedder, runtime=rt,
        options=options, batch_size=settings.batch_size,
        shared=settings.shared_generation,
    )  # fmt: skip
    if not settings.advance_generation:
        raise ValidationError(
            "replace_sources always publishes: leave advance_generation at True",
            field="write_options",
        )
    require_transactions(store, "replace_sources")
    check_abort(rt.abort)
    outcomes: dict[str, ReplaceResult | SourceFailure] = {}
    ready: list[tuple[SourceWrite, Sequence[Chunk]]] = []
    forgotten = forgotten_among(store, call.scope, [w.source_id for w in writes])
    for write in writes:  # step 2
        try:
            chunks, digest, _ = call.check(write)
            write = attrs.evolve(write, content_hash=digest)
            if write.source_id in forgotten:
                raise ForgottenError(write.source_id)
            skipped = call.skipped(write)
        except AbortedError:
            raise
        except Exception as exc:
            outcomes[write.source_id] = call.failure(write.source_id, exc)
            continue
        if skipped is not None:
            outcomes[write.source_id] = skipped
        else:
            ready.append((write, chunks))
    if ready and supports(store, "preparation"):
        cast(SupportsPreparation, store).prepare(call.scope, dimensions=embedder.dimensions)
    generations: list[int] = []
    for group in _groups(ready, rt.limits):  # steps 3-7
        _write_group(call, group, outcomes, generations)
    results = [o for w in writes if isinstance(o := outcomes[w.source_id], ReplaceResult)]
    failures = [o for w in writes if isinstance(o := outcomes[w.source_id], SourceFailure)]
    return ReplaceBatchResult(tuple(results), tuple(failures), tuple(dict.fromkeys(generations)))


def _groups(
    ready: list[tuple[SourceWrite, Sequence[Chunk]]], limits: Limits
) -> list[list[tuple[SourceWrite, Sequence[Chunk]]]]:
    """Step 3: consecutive sources up to the batch bounds (a larger source alone)."""
    most, most_chunks = batch_bounds(limits)
    groups: list[list[tuple[SourceWrite, Sequence[Chunk]]]] = []
    group: list[tuple[SourceWrite, Sequence[Chunk]]] = []
    chunks = 0
    for entry in ready:
        n = len(entry[1])
        if group and (len(group) >= most or chunks + n > most_chunks):
            groups.append(group)
            group, chunks = [], 0
        group.append(entry)
        chunks += n
    if group:
        groups.append(group)
    return groups


def _write_group(
    call: _Call,
    group: list[tuple[SourceWrite, Sequence[Chunk]]],
    outcomes: dict[str, ReplaceResult | SourceFailure],
    generations: list[int],
) -> None:
    """Steps 4 to 7 for one batch: embed, write (or fall back), record each outcome."""
    texts = [call.texts(chunks) for _, chunks in group]
    for (write, _), own in zip(group, texts, strict=True):
        call.status(write.source_id, own, "pending")
    parts: list[VectorMatrix | None]
    try:
        matrix = call.embed([t for own in texts for t in own])
        parts = list(np.split(matrix, np.cumsum([len(own) for own in texts])[:-1]))
    except AbortedError:
        raise
    except Exception:  # step 4: which source's text did the embedder refuse?
        parts = []
        for (write, _), own in zip(group, texts, strict=True):
            try:
                parts.append(call.embed(own))
            except AbortedError:
                raise
            except Exception as exc:
                parts.append(None)
                outcomes[write.source_id] = call.failure(write.source_id, exc)
                call.status(write.source_id, own, "failed", exc)
    items = [
        BatchItem(write.source_id, chunks, own, vectors, write.content_hash, write.grant)
        for (write, chunks), own, vectors in zip(group, texts, parts, strict=True)
        if vectors is not None
    ]
    results, batched = write_batched(
        items, batch=call.write, alone=call.alone, abandoned=call.abandoned
    )
    for item, result in zip(items, results, strict=True):
        if isinstance(result, ReplaceResult):
            outcomes[item.source_id] = result
            generations.append(result.generation)
            if batched:  # the fall-back's replace_source records its own status
                call.status(item.source_id, item.texts, "indexed")
        else:
            outcomes[item.source_id] = call.failure(item.source_id, result)
