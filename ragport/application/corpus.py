"""A corpus's sources as ``ragport sources`` lists them, and re-embedding a corpus.

``list_corpus_sources`` pages through the chunk store's source ids and describes each (chunk
count, generation, content hash, embedder, ingestion state as retrieval sees it);
``reindex_corpus`` re-embeds sources under another embedder and publishes them in one
generation. ``ragport.bootstrap.list_sources`` is the first over a ``Stores``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import attrs

from ragport.application.admission import forgotten_among
from ragport.application.generations import publish_generation
from ragport.application.indexing import replace_source
from ragport.application.runtime import Runtime
from ragport.application.write_options import WriteOptions
from ragport.domain.model import Chunk, Scope
from ragport.domain.status import served_status
from ragport.ports.embedder import Embedder
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

FORGOTTEN = "forgotten"
"""The state ``ragport sources`` and ``ragport status`` show for an id a deletion propagation
forgot, whatever its ingestion status says: no one can read it, so it is never ``indexed``."""


@attrs.frozen
class SourceRow:
    """One source of a corpus as ``ragport sources`` lists it."""

    source_id: str
    state: str
    chunks: int
    generation: int | None
    content_hash: str | None
    embedder: str | None


def list_corpus_sources(
    store: ChunkStore,
    status_store: IngestionStatusStore,
    scope: Scope,
    *,
    start: str | None = None,
    limit: int | None = None,
    counts: bool = True,
) -> Iterator[SourceRow]:
    """Every source visible in ``scope`` (``ChunkStore.list_source_ids``), by id, after ``start``.

    Pages through the store (no cap on the total); with ``counts`` each source's visible
    records are read for its chunk count, generation, content hash and embedder, and its
    ingestion state as retrieval sees it (``served_status``: a source listed here has chunks
    served, so it is ``indexed`` or ``partial`` even when its last attempt failed; ``unknown``
    when the source was written without a status; ``forgotten`` for a source a deletion
    propagation forgot whose rows no handler removed: no one can read it).
    """
    after = start
    shown = 0
    while True:
        page_size = 500 if limit is None else min(500, limit - shown)
        if page_size <= 0:
            return
        ids = store.list_source_ids(scope, after=after, limit=page_size)
        forgotten = forgotten_among(store, scope, ids) if counts else frozenset()
        for source_id in ids:
            records = store.get_by_source(scope, source_id) if counts else ()
            first = records[0] if records else None
            status = status_store.get(scope, source_id) if counts else None
            served = sum(1 for r in records if r.kind == "chunk")
            state = served_status(status, served).state if status is not None else "unknown"
            yield SourceRow(
                source_id=source_id,
                state=FORGOTTEN if source_id in forgotten else state,
                chunks=len(records),
                generation=max((r.generation for r in records), default=None),
                content_hash=first.content_hash if first else None,
                embedder=first.embedder_id if first else None,
            )
            shown += 1
        if len(ids) < page_size:
            return
        after = ids[-1]


@attrs.frozen
class ReindexResult:
    """``sources`` and ``chunks`` re-embedded, visible together at ``generation``."""

    sources: int
    chunks: int
    generation: int
    embedder: str


def reindex_corpus(
    *,
    store: ChunkStore,
    scope: Scope,
    embedder: Embedder,
    sources: Sequence[str],
    status_store: IngestionStatusStore | None = None,
    on_source: Callable[[int, str], None] | None = None,
    runtime: Runtime | None = None,
) -> ReindexResult:
    """Re-embed every chunk of ``sources`` under ``embedder``, published in one generation.

    Each source is staged with ``advance_generation=False`` (readers keep the old vectors),
    then one ``publish_generation`` makes all of them visible at once. Derived records are
    not re-embedded here (re-run whatever built them). ``runtime``: its abort stops the run
    between sources (nothing staged is published), its telemetry, redaction and limits
    serve each write.
    """
    chunks_done = 0
    for n, source_id in enumerate(sources, start=1):
        records = [r for r in store.get_by_source(scope, source_id) if r.kind == "chunk"]
        chunks = [
            Chunk(
                id=r.id,
                source_id=r.source_id,
                index=r.chunk_index if r.chunk_index is not None else i,
                start=r.start if r.start is not None else 0,
                end=r.end if r.end is not None else len(r.text),
                text=r.text,
                metadata=dict(r.metadata),
            )
            for i, r in enumerate(sorted(records, key=lambda r: (r.chunk_index or 0, r.id)))
        ]
        replace_source(
            source_id=source_id,
            chunks=chunks,
            embedder=embedder,
            store=store,
            scope=scope,
            content_hash=records[0].content_hash if records else None,
            write_options=WriteOptions(
                skip_if_unchanged=False, advance_generation=False, status_store=status_store
            ),
            runtime=runtime,
        )
        chunks_done += len(chunks)
        if on_source is not None:
            on_source(n, source_id)
    generation = publish_generation(store=store, scope=scope, runtime=runtime)
    return ReindexResult(len(sources), chunks_done, generation, embedder.id)
