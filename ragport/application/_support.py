"""Helpers shared by the use cases: abort checks, redaction, embedding, status and clocks."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np

from ragport.domain.errors import (
    AbortedError,
    CapabilityError,
    EmbedderError,
    RagportError,
    ScopeError,
    ValidationError,
    raise_unchained,
)
from ragport.domain.limits import DEFAULT_LIMITS, Limits, check_limit
from ragport.domain.model import RecordKind, Scope
from ragport.domain.status import ERROR_MAX, IngestionState, IngestionStatus
from ragport.engine.rules import forgotten_set
from ragport.ports.embedder import Embedder, VectorMatrix
from ragport.ports.runtime import Abort, Clock, NoopTelemetry, Redactor, Telemetry
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore, UnitOfWork

REDACTED = "[REDACTED]"
NOOP_TELEMETRY = NoopTelemetry()


class SystemClock:
    """Wall-clock UTC time."""

    def now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK = SystemClock()


class EitherAbort:
    """An ``Abort`` set when any of its signals is (``None`` entries are ignored): a call's
    own stop next to its caller's ``abort=``."""

    def __init__(self, *signals: Abort | None) -> None:
        self._signals = tuple(s for s in signals if s is not None)

    def is_set(self) -> bool:
        return any(s.is_set() for s in self._signals)


def check_abort(abort: Abort | None) -> None:
    """Raise ``AbortedError`` when the caller's signal is set."""
    if abort is not None and abort.is_set():
        raise AbortedError("aborted by the caller")


def require_scope(scope: object, *, field: str = "scope") -> Scope:
    if not isinstance(scope, Scope):
        raise ScopeError(f"{field} must be a Scope", field=field)
    return scope


def require_transactions(store: ChunkStore, operation: str) -> None:
    """Refuse stores that cannot do ``operation`` atomically with generations."""
    caps = store.capabilities
    if not caps.transactions:
        raise CapabilityError(
            f"{operation} needs a store with transactions; this store cannot replace atomically",
            capability="transactions",
        )
    if not caps.generations:
        raise CapabilityError(
            f"{operation} needs a store with generations", capability="generations"
        )


class Redaction:
    """``secrets`` (literal strings) replaced by ``[REDACTED]``, then the host ``redactor``."""

    def __init__(self, redactor: Redactor | None = None, secrets: Sequence[str] | None = None):
        if isinstance(secrets, str):
            raise ValidationError("secrets must be a sequence of strings", field="secrets")
        cleaned = sorted({s for s in (secrets or ()) if s}, key=len, reverse=True)
        if any(not isinstance(s, str) for s in cleaned):
            raise ValidationError("secrets must be strings", field="secrets")
        self._secrets = tuple(cleaned)
        self._redactor = redactor

    @property
    def active(self) -> bool:
        return bool(self._secrets) or self._redactor is not None

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        if self._redactor is not None:
            text = self._redactor.redact(text)
        return text

    def error(self, exc: BaseException) -> str:
        """A safe description of ``exc``: our own messages (redacted) or just a type name.

        A foreign exception's message may quote document text, so only its type is kept.
        """
        text = (
            f"{type(exc).__name__}: {exc}" if isinstance(exc, RagportError) else type(exc).__name__
        )
        return self(text)[:ERROR_MAX]


# One ``embedder.embed`` call carries up to this many batches of ``batch_size`` texts (the
# whole list when smaller): an HTTP embedder then has ``embed_concurrency`` (default 4)
# requests to send at once, and a local model full batches. Abort is checked between calls,
# so an abort waits for at most one call of ``batch_size * EMBED_CALL_BATCHES`` texts.
EMBED_CALL_BATCHES = DEFAULT_LIMITS.embed_concurrency


def embed_batches(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    batch_size: int,
    abort: Abort | None,
    telemetry: Telemetry,
    on_embedded: Callable[[int], None] | None = None,
) -> VectorMatrix:
    """Embed ``texts`` in calls of at most ``batch_size * EMBED_CALL_BATCHES`` texts.

    Abort is checked before each call and after the last; each answer's shape and values
    are checked. Memory stays bounded by the call size: the embedder splits a call into its
    own batches (an HTTP embedder's ``batch_size`` per request, MiniLM's token budget).
    ``on_embedded(n)`` runs after each checked call with its row count (progress displays).
    """
    check_limit("embed_batch", batch_size)
    dims = embedder.dimensions
    out = np.empty((len(texts), dims), dtype=np.float32)
    step = batch_size * EMBED_CALL_BATCHES
    for start in range(0, len(texts), step):
        check_abort(abort)
        batch = list(texts[start : start + step])
        with telemetry.span("rag.embed") as span:
            span.set_attribute("rag.embed.count", len(batch))
            vectors = check_vectors(embedder.embed(batch), rows=len(batch), dimensions=dims)
        out[start : start + len(batch)] = vectors
        if on_embedded is not None:
            on_embedded(len(batch))
    check_abort(abort)
    return out


_FLOAT32 = np.dtype(np.float32)


def check_vectors(vectors: object, *, rows: int, dimensions: int) -> VectorMatrix:
    """Fail closed on an embedder answer of the wrong shape or with non-finite values:
    ``EmbedderError`` (not retryable). Ragged rows or values numpy cannot turn into float32
    are reported by type only: numpy's message may quote the values.
    """
    try:
        array = (
            vectors  # already what the checks below need: no numpy call to convert nothing
            if type(vectors) is np.ndarray and vectors.dtype is _FLOAT32
            else np.asarray(vectors, dtype=np.float32)
        )
    except (TypeError, ValueError, OverflowError) as exc:
        error = EmbedderError(
            f"embedder returned rows numpy cannot stack as float32 ({type(exc).__name__})"
        )
        raise_unchained(error)
    if array.ndim != 2 or array.shape != (rows, dimensions):
        raise EmbedderError(
            f"embedder returned shape {array.shape}, expected ({rows}, {dimensions})"
        )
    # One BLAS call first: an inf or a nan carries into the sum of squares, so a finite one
    # means every value is finite; a non-finite one may be an overflow of large values, so the
    # elementwise test decides then.
    if not math.isfinite(np.vdot(array, array)) and not np.isfinite(array).all():
        raise EmbedderError("embedder returned non-finite values")
    return array


def put_status(
    status_store: IngestionStatusStore | None,
    *,
    scope: Scope,
    source_id: str,
    state: IngestionState,
    clock: Clock,
    size: int = 0,
    total: int = 0,
    indexed: int = 0,
    error: str | None = None,
) -> None:
    if status_store is None:
        return
    status_store.put(
        IngestionStatus(
            scope=scope,
            source_id=source_id,
            state=state,
            bytes=size,
            chunks_total=total,
            chunks_indexed=indexed,
            error=error,
            updated_at=clock.now(),
        )
    )


def resolve_limits(limits: Limits | None) -> Limits:
    if limits is None:
        return DEFAULT_LIMITS
    if not isinstance(limits, Limits):
        raise ValidationError("limits must be a Limits", field="limits")
    return limits


def require_kind(uow: UnitOfWork, source_id: str, kind: RecordKind, *, field: str) -> None:
    """Refuse to write ``kind`` records under an id whose live records are of the other kind.

    A chunk source and a derived record never share an id: replacing one must not silently
    retire the other (``ValidationError``, nothing written).
    """
    for record in uow.records.list_live(source_id, limit=1):
        if record.kind != kind:
            other = "a derived record" if record.kind == "derived" else "a source of chunks"
            raise ValidationError(f"{field} already names {other} in this scope", field=field)


def forgotten_ids(uow: UnitOfWork) -> frozenset[str]:
    """The ids a ``forgotten`` tombstone withholds in the unit of work's scope."""
    return forgotten_set(uow.tombstones.list())
