"""The one error tree of ragport.

Every failure a caller can act on is a subclass of :class:`RagportError`::

    RagportError
    ├── ValidationError          bad input, or a value past a hard ceiling (names the limit)
    │   ├── ScopeError           a scope that is malformed or does not match the caller
    │   └── ForgottenError       a write to an id a deletion propagation forgot (.source_id)
    ├── CapabilityError          the adapter cannot do this safely (no transactions, no ACL, ...)
    ├── StoreError               the storage backend failed (connection lost, schema missing, ...)
    │   └── ReplicaLagError      a read replica had not replayed the caller's write in time
    ├── EmbedderMismatchError    stored vectors come from another embedder or dimension
    ├── EmbedderError            an embedder failed or answered malformed vectors (.retryable)
    ├── RerankError              a reranker failed, timed out, or answered badly (.reason)
    ├── ParseError               a parser hit a byte, page or time cap, or bad bytes (.reason)
    ├── LoadError                a loader could not fetch a document (.reason)
    ├── UrlRejectedError         a URL pointed somewhere ragport refuses to fetch (.reason)
    ├── SyncCursorError          a connector cursor expired or is invalid (.reason)
    ├── AccessDeniedError        a privileged operation without the grant it needs
    ├── PropagationError         one or more deletion handlers failed (tombstones stay)
    ├── LineageChangedError      a derived record's sources changed after the version it read
    └── AbortedError             the caller's abort signal was set

Messages never contain document text, credentials or tokens: they name fields, limits, ids and
counts. Tests (and callers) should match on the type and its attributes, never on message text.

Chains: an error ragport translates at a boundary (a driver, HTTP or reranker failure) is raised
with :func:`raise_unchained`, so its ``__cause__`` and ``__context__`` are both ``None``: the
foreign exception (whose message, parameters, request or diagnostics may quote document text)
is dropped, and what an operator needs is kept as fields (``sqlstate``, ``lost_connection``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

__all__ = [
    "AbortedError",
    "AccessDeniedError",
    "CapabilityError",
    "EmbedderError",
    "EmbedderMismatchError",
    "ForgottenError",
    "LineageChangedError",
    "LoadError",
    "ParseError",
    "PropagationError",
    "RagportError",
    "ReplicaLagError",
    "RerankError",
    "ScopeError",
    "StoreError",
    "SyncCursorError",
    "UrlRejectedError",
    "ValidationError",
    "raise_unchained",
    "reason_code",
]


def raise_unchained(error: BaseException) -> NoReturn:
    """Raise ``error`` with no ``__cause__`` and no ``__context__``.

    ``raise error from None`` only hides the context from tracebacks: ``__context__`` still
    holds the exception being handled, and ``logging``, Sentry-style reporters or a debugger
    reach it (and its arguments) through the chain. Python sets the context at the ``raise``,
    so it is cleared here once the error is in flight and then re-raised unchanged.
    """
    try:
        raise error
    except BaseException:
        error.__cause__ = None
        error.__context__ = None
        error.__suppress_context__ = True
        raise


def reason_code(error: BaseException) -> str:
    """A failure's short reason, safe to report: its ``reason`` (parse, load, URL, cursor,
    store and rerank errors), else the ceiling it crossed (a validation error's ``limit``), else its type
    name. Never the message, so no document text."""
    reason: str | None = None
    if isinstance(
        error,
        StoreError | ParseError | LoadError | UrlRejectedError | SyncCursorError | RerankError,
    ):
        reason = error.reason
    elif isinstance(error, ValidationError):
        reason = error.limit
    return reason or type(error).__name__


class RagportError(Exception):
    """Root of every error ragport raises on purpose."""

    code: str = "ERR_RAG"


class ValidationError(RagportError, ValueError):
    """Input is malformed or past a hard ceiling.

    ``field`` names the argument or attribute at fault; ``limit`` names the ceiling (a
    :class:`~ragport.domain.limits.Limits` field) when a ceiling was crossed; ``sqlstate`` the
    PostgreSQL SQLSTATE when the server refused the value (``None`` otherwise).
    """

    code = "ERR_RAG_VALIDATION"

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        limit: str | None = None,
        sqlstate: str | None = None,
    ):
        super().__init__(message)
        self.field = field
        self.limit = limit
        self.sqlstate = sqlstate


class ScopeError(ValidationError):
    """A scope is malformed, foreign to the caller's tenant, or not among the requested ones."""

    code = "ERR_RAG_SCOPE"


class ForgottenError(ValidationError):
    """A write names an id that a ``forgotten`` tombstone withholds in its scope.

    Whatever were written under that id would never be served to anyone, so nothing is
    written. ``source_id`` is the forgotten id (ids are not secret); ``field`` the argument
    that named it. To write under the id again, re-admit it deliberately first:
    ``ragport.application.readmit_source`` (command line: ``ragport readmit ID``), an audited
    operation that also removes whatever is left of the forgotten content.
    """

    code = "ERR_RAG_FORGOTTEN"

    def __init__(self, source_id: str, *, field: str = "source_id") -> None:
        super().__init__(
            f"{source_id!r} was forgotten in this scope: nothing was written (it would never "
            "be served); re-admit it deliberately first (readmit_source, `ragport readmit`)",
            field=field,
        )
        self.source_id = source_id


class CapabilityError(RagportError):
    """The adapter does not offer what the operation needs, so ragport refuses to pretend."""

    code = "ERR_RAG_CAPABILITY"

    def __init__(self, message: str, *, capability: str | None = None, sqlstate: str | None = None):
        super().__init__(message)
        self.capability = capability
        self.sqlstate = sqlstate


class StoreError(RagportError):
    """The storage backend failed or is not set up (connection lost, schema not migrated).

    Carries no SQL parameters, so no document text or vectors, and chains nothing (the
    driver's exception may quote parameters): ``sqlstate`` keeps the server's SQLSTATE (``None``
    when there was no server answer) and ``lost_connection`` says the connection itself was
    gone (a read may be retried on a fresh one; a write may or may not have committed).
    ``reason`` says why a connection could not be opened: ``database_missing``,
    ``authentication_failed``, ``refused``, ``timeout`` or ``unreachable`` (``None`` for a
    failure that is not about connecting).
    """

    code = "ERR_RAG_STORE"

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        lost_connection: bool = False,
        reason: str | None = None,
    ):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.lost_connection = lost_connection
        self.reason = reason


class ReplicaLagError(StoreError):
    """A read that must see a write (``min_position``) found the read replica behind it.

    Raised only when the caller chose to raise rather than fall back to the primary: the
    replica had not replayed WAL position ``position`` within ``waited`` seconds (it had
    replayed ``replayed``, ``None`` when unknown). Nothing stale is returned.
    """

    code = "ERR_RAG_REPLICA_LAG"

    def __init__(self, message: str, *, position: str, replayed: str | None, waited: float):
        super().__init__(message)
        self.position = position
        self.replayed = replayed
        self.waited = waited


class EmbedderMismatchError(RagportError):
    """Stored records were embedded by another model or at another dimension.

    Retrieval stops rather than mixing vector spaces. The fix is to re-index the affected
    sources with ``replace_source`` under the active embedder.
    """

    code = "ERR_RAG_EMBEDDER_MISMATCH"

    def __init__(
        self,
        message: str,
        *,
        expected_id: str,
        expected_dimensions: int,
        found_id: str | None,
        found_dimensions: int | None,
        record_ids: tuple[str, ...] = (),
    ):
        super().__init__(message)
        self.expected_id = expected_id
        self.expected_dimensions = expected_dimensions
        self.found_id = found_id
        self.found_dimensions = found_dimensions
        self.record_ids = record_ids


class EmbedderError(RagportError):
    """An embedder failed (unreachable, timed out, refused the request) or answered something
    that is not one finite vector of its dimension per text.

    ``retryable`` says whether the same call may succeed later (a timeout, a lost connection,
    HTTP 429 or 5xx) or will fail again until something changes (credentials, the request,
    a malformed answer).
    """

    code = "ERR_RAG_EMBEDDER"

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class RerankError(RagportError):
    """A reranker failed, timed out, was aborted, or returned something other than a permutation.

    ``retryable`` as on ``EmbedderError``. ``reason``, set by the seam (``rerank_hits``):
    ``timeout`` (no answer, or no free slot, within the time budget), ``aborted``, ``too_large``
    (input over the byte cap), ``malformed`` (not a permutation, or a bad score) or ``failed``
    (the reranker raised); ``None`` when an adapter raised it itself.
    """

    code = "ERR_RAG_RERANK"

    def __init__(self, message: str, *, retryable: bool = False, reason: str | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.reason = reason


class ParseError(RagportError):
    """A parser refused its input (byte, page or time cap; undecodable or unsupported bytes).

    ``reason`` names the rule (``too_large``, ``timeout``, ``decode``, ``too_many_pages``,
    ``encrypted``, ``no_text``, ``bomb``, ``too_deep``, ``malformed``, ``unsupported_type``,
    ...; docs/documents.md lists them all). The message never quotes the document, and no
    library exception that could is chained as its cause.
    """

    code = "ERR_RAG_PARSE"

    def __init__(self, message: str, *, reason: str = "malformed", media_type: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.media_type = media_type


class LoadError(RagportError):
    """A loader could not fetch a document: missing, outside its root, too large, refused type,
    an HTTP error status, a transport failure. ``reason`` names which."""

    code = "ERR_RAG_LOAD"

    def __init__(self, message: str, *, reason: str = "failed"):
        super().__init__(message)
        self.reason = reason


class UrlRejectedError(RagportError):
    """A URL points at a scheme or address ragport refuses before any socket opens.

    ``reason`` names the rule: ``scheme``, ``credentials``, ``localhost``, ``ip_literal``,
    ``address`` (resolves to a non-public address), ``unresolvable``, ``redirects``, ``malformed``.
    """

    code = "ERR_RAG_URL_REJECTED"

    def __init__(self, message: str, *, reason: str = "malformed"):
        super().__init__(message)
        self.reason = reason


class SyncCursorError(RagportError):
    """A sync cursor cannot be resumed: the connector's cursor expired (``reason="expired"``,
    e.g. Drive's HTTP 410) or was not one it issued (``"invalid"``), or the stored checkpoint is
    malformed (``"malformed"``). ``sync_knowledge`` answers it with a bootstrap and sweep unless
    ``on_cursor_error="raise"``. A lost compare-and-set is not an error: see ``SyncResult.lost``.
    """

    code = "ERR_RAG_SYNC_CURSOR"

    def __init__(self, message: str, *, reason: str = "invalid"):
        super().__init__(message)
        self.reason = reason


class AccessDeniedError(RagportError):
    """A privileged operation was attempted without the authorization it needs."""

    code = "ERR_RAG_ACCESS_DENIED"


class PropagationError(RagportError):
    """Deletion handlers failed after the tombstones committed; ``failed_kinds`` names them and
    ``errors`` maps each to a safe description (a foreign exception's type name, or ragport's
    own message with secrets redacted), never document text."""

    code = "ERR_RAG_PROPAGATION"

    def __init__(
        self,
        message: str,
        *,
        failed_kinds: tuple[str, ...] = (),
        errors: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.failed_kinds = failed_kinds
        self.errors: Mapping[str, str] = dict(errors or {})


class AbortedError(RagportError):
    """The caller's abort signal was set; work stopped between steps and nothing was committed."""

    code = "ERR_RAG_ABORTED"


class LineageChangedError(RagportError):
    """A derived record was computed from versions that are no longer current: a source of
    its lineage was replaced or deleted after the generation the caller read (``as_of``).
    ``source_ids`` names them (ids, never text); recompute from the current versions."""

    code = "ERR_RAG_LINEAGE_CHANGED"

    def __init__(self, message: str, *, source_ids: tuple[str, ...] = ()):
        super().__init__(message)
        self.source_ids = source_ids
