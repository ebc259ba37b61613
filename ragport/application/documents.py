"""replace_document: load, parse, chunk and replace one document atomically.

1. Validate the scope, chunking settings, ``source_id`` (when given) and ``grant``; record
   ``pending``.
2. Load the bytes with ``loader.load(uri)``; the source id is ``source_id``, else the
   loader's, else ``uri`` (``pending`` is recorded now if it was not yet).
3. Refuse a source id a deletion propagation forgot (``ForgottenError``). Compute the skip
   key: SHA-256 over the bytes, the embedder id and dimensions, the chunking settings and the
   parser id. If every stored row of the source carries it, stop: unchanged (nothing parsed,
   nothing embedded; a ``grant`` is still set).
4. Parse under the parser's caps (``ParseError`` on any of them; never partial text).
5. Chunk: page by page for a paged document (PDF: a chunk never spans pages and carries
   ``metadata["page"]``, 1-based), ``chunk_markdown`` for Markdown output (Markdown, HTML,
   DOCX, reST), ``chunk_text`` otherwise. Loader and parser metadata (title, url, untrusted,
   lang, ...) and ``media_type`` go onto every chunk.
6. ``replace_source`` with the skip key as content hash (and ``grant``): embed first, then
   swap content and grant in one transaction, so any failure up to the commit leaves the
   previous version and grant fully visible.
7. Record ``indexed`` (bytes, chunks) or ``failed`` with a redacted error of at most 256
   characters, then re-raise.

The application layer does not know the parser adapters: pass ``parser=`` a ``Parser``, or
a selector such as ``ragport.adapters.parsers.parser_for`` that maps a media type or file
name to one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ragport.application._support import (
    SYSTEM_CLOCK,
    Redaction,
    check_abort,
    put_status,
    require_scope,
    require_transactions,
)
from ragport.application.admission import first_forgotten
from ragport.application.deprecation import WRITE_KEYWORDS, folds_keywords
from ragport.application.indexing import (
    ReusableEmbeddings,
    check_grant,
    replace_source,
    set_grant,
)
from ragport.application.results import ReplaceResult
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.application.write_options import WriteOptions, check_write_options
from ragport.domain.chunking import chunk_markdown, chunk_text
from ragport.domain.documents import base_media_type
from ragport.domain.errors import ForgottenError, ParseError, ValidationError
from ragport.domain.limits import Limits
from ragport.domain.model import Chunk, Grant, Scope, validate_id
from ragport.ports.documents import DocumentLoader, LoadedDocument, ParsedDocument, Parser
from ragport.ports.embedder import Embedder
from ragport.ports.runtime import Clock
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

__all__ = [
    "CHUNKER_VERSION",
    "PreparedDocument",
    "document_skip_key",
    "prepare_document",
    "record_failed",
    "replace_document",
    "replace_prepared",
]

CHUNKER_VERSION = "chunk-v2"  # v2: setext headings; bump when the same text chunks differently
ParserSelector = Callable[[str], Parser]


def document_skip_key(
    data: bytes, *, embedder: Embedder, parser_id: str, size: int, overlap: int
) -> str:
    """The content hash ``replace_document`` stores: changes when any input of the result does."""
    digest = hashlib.sha256()
    settings = {
        "embedder": embedder.id,
        "dimensions": embedder.dimensions,
        "parser": parser_id,
        "chunker": CHUNKER_VERSION,
        "size": size,
        "overlap": overlap,
    }
    digest.update(json.dumps(settings, sort_keys=True).encode())
    digest.update(b"\0")
    digest.update(data)
    return digest.hexdigest()


def _pick_parser(
    parser: Parser | ParserSelector | None, loaded: LoadedDocument, uri: str
) -> Parser:
    if parser is None:
        raise ValidationError(
            "replace_document needs parser=: a Parser, or a selector such as "
            "ragport.adapters.parsers.parser_for",
            field="parser",
        )
    if isinstance(parser, Parser):
        return parser
    if callable(parser):
        chosen = parser(loaded.media_type or uri)
        if not isinstance(chosen, Parser):
            raise ValidationError("the parser selector did not return a Parser", field="parser")
        return chosen
    raise ValidationError("parser must be a Parser or a selector", field="parser")


def _chunks(
    parsed: ParsedDocument,
    *,
    source_id: str,
    size: int,
    overlap: int,
    metadata: Mapping[str, Any],
    limits: Limits,
) -> tuple[Chunk, ...]:
    if not parsed.pages:
        chunker = chunk_markdown if parsed.markdown else chunk_text
        return chunker(
            parsed.text,
            source_id=source_id,
            size=size,
            overlap=overlap,
            metadata=metadata,
            limits=limits,
        )
    if len(parsed.text) > limits.document_chars:
        raise ValidationError(
            f"document is longer than {limits.document_chars} characters",
            field="document_chars",
            limit="document_chars",
        )
    out: list[Chunk] = []
    offset = 0
    for number, page in enumerate(parsed.pages, start=1):
        for chunk in chunk_text(
            page,
            source_id=source_id,
            size=size,
            overlap=overlap,
            metadata={**metadata, "page": number},
            limits=limits,
        ):
            out.append(
                Chunk.of(
                    source_id,
                    len(out),
                    chunk.text,
                    start=offset + chunk.start,
                    metadata=chunk.metadata,
                )
            )
        offset += len(page) + 1  # the form feed between pages
    return tuple(out)


@attrs.frozen
class PreparedDocument:
    """A loaded document ready to write: its skip key and chunks, or ``unchanged``.

    ``unchanged`` means every stored row of the source already carries ``skip_key`` under this
    embedder (``stored`` of them); nothing was parsed and ``chunks`` is empty.
    """

    source_id: str
    skip_key: str
    chunks: tuple[Chunk, ...]
    unchanged: bool
    stored: int = 0


@folds_keywords(runtime=("limits", "abort"), write=("size", "overlap"))
def prepare_document(
    loaded: LoadedDocument,
    *,
    source_id: str,
    uri: str,
    parser: Parser | ParserSelector | None,
    embedder: Embedder,
    store: ChunkStore,
    scope: Scope,
    runtime: Runtime | None = None,
    write_options: WriteOptions | None = None,
    pinned_metadata: Mapping[str, Any] | None = None,
) -> PreparedDocument:
    """Steps 3 to 5 of ``replace_document`` for bytes already loaded (``sync_knowledge`` too):
    the skip key against the stored rows, then parse and chunk with ``write_options``' size
    and overlap, under ``runtime``'s limits and abort. ``pinned_metadata`` wins over what the
    parser found (a connector's title, say). Raises ``ParseError`` and ``ValidationError`` as
    those steps do (``ForgottenError`` for a forgotten ``source_id``, before parsing); writes
    nothing."""
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    limits, abort = rt.limits, rt.abort
    opts = check_write_options(write_options).settings(limits)
    size, overlap = opts.size, opts.overlap
    if first_forgotten(store, scope, [source_id]) is not None:
        # Refused before parsing and embedding (replace_source checks again inside its unit of
        # work): sync_knowledge and ingest count it as this item's failure.
        raise ForgottenError(source_id)
    chosen = _pick_parser(parser, loaded, uri)
    key = document_skip_key(
        loaded.data, embedder=embedder, parser_id=chosen.id, size=size, overlap=overlap
    )
    stored = store.get_by_source(scope, source_id)
    if any(r.kind != "chunk" for r in stored):
        # Refused before parsing and embedding (the unit of work checks again, against a
        # racing writer): sync_knowledge counts it as this item's failure, not the page's.
        raise ValidationError(
            "source_id already names a derived record in this scope", field="source_id"
        )
    if (
        opts.skip_if_unchanged is not False
        and stored
        and all(
            r.content_hash == key
            and r.embedder_id == embedder.id
            and r.dimensions == embedder.dimensions
            for r in stored
        )
    ):
        return PreparedDocument(source_id, key, (), True, len(stored))
    check_abort(abort)
    parsed = chosen.parse(loaded.data, media_type=loaded.media_type, abort=abort)
    media_type = base_media_type(parsed.media_type or loaded.media_type or "") or None
    metadata: dict[str, Any] = {**loaded.metadata, **parsed.metadata, **(pinned_metadata or {})}
    metadata.pop("pages", None)
    if media_type:
        metadata["media_type"] = media_type
    chunks = _chunks(
        parsed, source_id=source_id, size=size, overlap=overlap, metadata=metadata, limits=limits
    )
    if not chunks:
        raise ParseError("the document has no text to index", reason="empty")
    return PreparedDocument(source_id, key, chunks, False)


@folds_keywords(write=WRITE_KEYWORDS)
def replace_document(
    *,
    uri: str,
    loader: DocumentLoader,
    parser: Parser | ParserSelector | None = None,
    embedder: Embedder,
    store: ChunkStore,
    scope: Scope,
    source_id: str | None = None,
    runtime: Runtime | None = None,
    write_options: WriteOptions | None = None,
    grant: Grant | None = None,
) -> ReplaceResult:
    """Load ``uri``, parse, chunk and replace its source atomically; see the module steps.

    Returns ``ReplaceResult(skipped=True)`` when the bytes, embedder, chunking settings and
    parser are all unchanged. Raises what the failing step raised (``LoadError``,
    ``UrlRejectedError``, ``ParseError``, ``ValidationError``, ``ForgottenError``, ...) after
    recording ``failed``. ``grant`` (of the source id the document gets) is set with the
    content in one unit of work, as ``replace_source`` does; give ``source_id`` with it.
    ``write_options`` (``WriteOptions``): chunk ``size`` and ``overlap``, ``batch_size``,
    ``shared_generation``, ``status_store`` (the old keywords of those names still work for
    one release, with a ``DeprecationWarning``).
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    abort, lim, redact, clk = rt.abort, rt.limits, rt.redaction, rt.effective_clock
    options = check_write_options(write_options)
    status_store = options.settings(lim).status_store  # checks overlap < size as well
    scope = require_scope(scope)
    if not isinstance(uri, str) or not uri:
        raise ValidationError("uri must be a non-empty string", field="uri")
    if source_id is not None:
        validate_id(source_id, field="source_id")
    if grant is not None:
        if source_id is None:
            raise ValidationError("a grant needs the source_id it is for", field="grant")
        check_grant(grant, source_id)
    require_transactions(store, "replace_document")
    check_abort(abort)

    sid = source_id
    size_bytes = 0
    if sid is not None:
        put_status(status_store, scope=scope, source_id=sid, state="pending", clock=clk)
    try:
        loaded = loader.load(uri)
        if not isinstance(loaded, LoadedDocument):
            raise ValidationError("the loader did not return a LoadedDocument", field="loader")
        size_bytes = len(loaded.data)
        if sid is None:
            sid = validate_id(loaded.source_id or uri, field="source_id")
            put_status(
                status_store,
                scope=scope,
                source_id=sid,
                state="pending",
                clock=clk,
                size=size_bytes,
            )
        prepared = prepare_document(
            loaded,
            source_id=sid,
            uri=uri,
            parser=parser,
            embedder=embedder,
            store=store,
            scope=scope,
            runtime=rt,
            write_options=options,
        )
        return replace_prepared(
            prepared,
            size_bytes=size_bytes,
            embedder=embedder,
            store=store,
            scope=scope,
            vectors=None,
            runtime=rt,
            write_options=options,
            grant=grant,
        )
    except BaseException as exc:
        failed_id = sid if sid is not None else _id_or_none(uri)
        if failed_id is not None:
            record_failed(
                status_store, scope=scope, source_id=failed_id, size_bytes=size_bytes,
                error=exc, redaction=redact, clock=clk,
            )  # fmt: skip
        raise


def record_failed(
    status_store: IngestionStatusStore | None,
    *,
    scope: Scope,
    source_id: str,
    size_bytes: int,
    error: BaseException,
    redaction: Redaction | None = None,
    clock: Clock | None = None,
) -> None:
    """Step 7's ``failed`` status for ``source_id``, its error redacted (no document text)."""
    put_status(
        status_store,
        scope=scope,
        source_id=source_id,
        state="failed",
        clock=clock or SYSTEM_CLOCK,
        size=size_bytes,
        error=(redaction or Redaction()).error(error),
    )


@folds_keywords(write=("status_store", "batch_size", "shared_generation"))
def replace_prepared(
    prepared: PreparedDocument,
    *,
    size_bytes: int,
    embedder: Embedder,
    store: ChunkStore,
    scope: Scope,
    vectors: ReusableEmbeddings | None = None,
    runtime: Runtime | None = None,
    write_options: WriteOptions | None = None,
    grant: Grant | None = None,
) -> ReplaceResult:
    """Steps 6 and 7 of ``replace_document`` for a ``prepare_document`` result.

    ``vectors`` (chunk id -> (text, vector)) are embeddings computed beforehand, e.g. by a
    pipeline that embeds several documents in one call; ``replace_source`` takes them
    through its reuse path (exact text, this embedder's dimension, finite) and embeds
    whatever they miss, with every validation unchanged. Records ``failed`` and re-raises
    on a failure of the write; a failure before this call is the caller's to record.
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    clk = rt.effective_clock
    options = check_write_options(write_options)
    status_store = options.status_store
    sid = prepared.source_id
    check_grant(grant, sid)
    if prepared.unchanged:
        if grant is not None:
            try:
                set_grant(store, scope, grant)
            except BaseException as exc:
                record_failed(
                    status_store, scope=scope, source_id=sid, size_bytes=size_bytes, error=exc,
                    redaction=rt.redaction, clock=clk,
                )  # fmt: skip
                raise
        put_status(
            status_store,
            scope=scope,
            source_id=sid,
            state="indexed",
            clock=clk,
            size=size_bytes,
            total=prepared.stored,
            indexed=prepared.stored,
        )
        return ReplaceResult(sid, 0, 0, True, store.current_generation(scope))
    put_status(
        status_store,
        scope=scope,
        source_id=sid,
        state="pending",
        clock=clk,
        size=size_bytes,
        total=len(prepared.chunks),
    )
    try:
        result = replace_source(
            source_id=sid,
            chunks=prepared.chunks,
            embedder=embedder,
            store=store,
            scope=scope,
            content_hash=prepared.skip_key,
            reuse_embeddings=vectors,
            runtime=rt,
            # the status is this function's to record (bytes of the document, not of its text)
            write_options=attrs.evolve(options, skip_if_unchanged=False, status_store=None),
            grant=grant,
        )
    except BaseException as exc:
        record_failed(
            status_store, scope=scope, source_id=sid, size_bytes=size_bytes, error=exc,
            redaction=rt.redaction, clock=clk,
        )  # fmt: skip
        raise
    put_status(
        status_store,
        scope=scope,
        source_id=sid,
        state="indexed",
        clock=clk,
        size=size_bytes,
        total=result.indexed,
        indexed=result.indexed,
    )
    return result


def _id_or_none(uri: str) -> str | None:
    try:
        return validate_id(uri, field="source_id")
    except ValidationError:
        return None
