"""Row conversion: the ``records`` columns read back as a ``Record``, and the COPY row layouts
(``records`` and ``record_vectors``)."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from psycopg.types.json import Jsonb

from ragport.domain.model import Grant, Record, Scope
from ragport.ports.embedder import Vector

__all__ = [
    "COPY_COLUMNS",
    "COPY_TYPES",
    "RECORD_COLUMNS",
    "RECORD_FIELDS",
    "R_COLUMNS",
    "VECTOR_COPY_COLUMNS",
    "VECTOR_COPY_TYPES",
    "checked_record",
    "copy_row",
    "grant",
    "record",
    "vector_row",
]

RECORD_COLUMNS = (
    "id, source_id, kind, text, metadata, embedder_id, dimensions, generation, "
    "retired_generation, content_hash, lineage, roots, chunk_index, start_offset, end_offset"
)
"""What ``record`` reads, unqualified; ``R_COLUMNS`` is the same list qualified by ``r.``."""
R_COLUMNS = ", ".join("r." + c.strip() for c in RECORD_COLUMNS.split(","))
COPY_COLUMNS = (
    "tenant_id",
    "resource_id",
    "corpus_id",
    "id",
    "generation",
    "source_id",
    "kind",
    "text",
    "metadata",
    "row_key",
    "embedder_id",
    "dimensions",
    "retired_generation",
    "content_hash",
    "lineage",
    "roots",
    "chunk_index",
    "start_offset",
    "end_offset",
    "stats_batch",
)
"""The binary COPY of ``records.add``: these columns, with ``COPY_TYPES``, as ``copy_row``."""
COPY_TYPES = [
    "text", "text", "text", "text", "int8", "text", "text", "text", "jsonb", "int8", "text",
    "int4", "int8", "text", "text[]", "text[]", "int4", "int4", "int4", "int8",
]  # fmt: skip
VECTOR_COPY_COLUMNS = (
    "tenant_id",
    "resource_id",
    "corpus_id",
    "row_key",
    "dimensions",
    "embedding",
)
"""The binary COPY into ``record_vectors``, with ``VECTOR_COPY_TYPES``, as ``vector_row``."""
VECTOR_COPY_TYPES = ["text", "text", "text", "int8", "int4", "vector"]


RECORD_FIELDS = (
    "id", "scope", "source_id", "kind", "text", "metadata", "embedder_id", "dimensions",
    "generation", "retired_generation", "content_hash", "lineage", "roots", "chunk_index",
    "start", "end",
)  # fmt: skip
"""The ``Record`` fields ``record`` sets (a test holds this to ``attrs.fields(Record)``, so a
field added to ``Record`` fails it rather than going unset)."""
_columns = attrgetter(*(c.strip() for c in RECORD_COLUMNS.split(",")))
_new = object.__new__
_set = object.__setattr__


def record(scope: Scope, row: Any) -> Record:
    """A ``Record`` of ``scope`` from a row holding ``RECORD_COLUMNS``, built without running
    the constructor's checks and copies again.

    Every value in ``records`` entered through a ``Record`` (validated then, and PostgreSQL
    refuses NUL in text and lone surrogates in jsonb), and ``metadata`` is the dict psycopg
    just decoded from jsonb, shared with nothing. The checks and the deep copy cost 3 of the
    4.5 us a row took (20 rows per vector query: 0.06 ms of the 0.15 ms the store added to the
    raw statement at 20k rows). ``checked_record`` is the constructor's path, for a row of
    unknown origin.
    """
    (id_, source_id, kind, text, metadata, embedder_id, dimensions, generation, retired,
     content_hash, lineage, roots, chunk_index, start, end) = _columns(row)  # fmt: skip
    r = _new(Record)
    _set(r, "id", id_)
    _set(r, "scope", scope)
    _set(r, "source_id", source_id)
    _set(r, "kind", kind)
    _set(r, "text", text)
    _set(r, "metadata", metadata)
    _set(r, "embedder_id", embedder_id)
    _set(r, "dimensions", dimensions)
    _set(r, "generation", generation)
    _set(r, "retired_generation", retired)
    _set(r, "content_hash", content_hash)
    _set(r, "lineage", tuple(lineage))
    _set(r, "roots", tuple(roots))
    _set(r, "chunk_index", chunk_index)
    _set(r, "start", start)
    _set(r, "end", end)
    return r


def checked_record(scope: Scope, row: Any) -> Record:
    """``record`` through ``Record``'s constructor: every value checked, metadata copied."""
    return Record(
        id=row.id,
        scope=scope,
        source_id=row.source_id,
        kind=row.kind,
        text=row.text,
        metadata=dict(row.metadata),
        embedder_id=row.embedder_id,
        dimensions=row.dimensions,
        generation=row.generation,
        retired_generation=row.retired_generation,
        content_hash=row.content_hash,
        lineage=tuple(row.lineage),
        roots=tuple(row.roots),
        chunk_index=row.chunk_index,
        start=row.start_offset,
        end=row.end_offset,
    )


def grant(row: Any) -> Grant:
    """A ``Grant`` from a row with ``source_id, principal_ids, group_ids, access_version``."""
    return Grant(
        row.source_id,
        principal_ids=tuple(row.principal_ids),
        group_ids=tuple(row.group_ids),
        access_version=row.access_version,
    )


def copy_row(
    scope: Scope, record: Record, row_key: int, batch: int | None = None
) -> tuple[Any, ...]:
    """The values of ``record`` (its vector under ``row_key``, its statistics in ``batch``)
    in ``COPY_COLUMNS`` order."""
    return (
        scope.tenant_id, scope.resource_id, scope.corpus_id, record.id, record.generation,
        record.source_id, record.kind, record.text, Jsonb(record.metadata), row_key,
        record.embedder_id, record.dimensions, record.retired_generation,
        record.content_hash, list(record.lineage), list(record.roots),
        record.chunk_index, record.start, record.end, batch,
    )  # fmt: skip


def vector_row(scope: Scope, row_key: int, dimensions: int, vector: Vector) -> tuple[Any, ...]:
    """The ``record_vectors`` row of ``row_key`` in ``VECTOR_COPY_COLUMNS`` order."""
    return (scope.tenant_id, scope.resource_id, scope.corpus_id, row_key, dimensions, vector)
