"""PostgresStore: the ChunkStore on PostgreSQL + pgvector (SQLAlchemy Core + psycopg 3).

Quirks worth knowing:

- Every statement names the full scope, and so the tenant; nothing joins across tenants.
- A read is one statement, so it sees one snapshot: the scope's pointer and the rows it
  selects come from the same MVCC snapshot, never a mix of two generations.
- A unit of work locks its scope's row (``SELECT ... FOR UPDATE``): writers of one scope are
  serialized, readers never wait.
- Records are written with binary COPY (one round trip per batch, ~4x text parameters).
- One partial HNSW index (cosine) per vector dimension in use, created on first write of that
  dimension. Queries run with iterative scans (``strict_order``; ``relaxed_order`` under
  grants or a filter, for recall) so selective predicates
  (grants, filters, tombstones, generations) still yield ``limit`` rows.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

import numpy as np
import psycopg
from psycopg.rows import namedtuple_row
from psycopg.types.json import Jsonb
from sqlalchemy import Connection, Engine, text

from ragport.adapters.postgres._driver import driver_connection, make_engine, translate_errors
from ragport.adapters.postgres.filters import compile_filter
from ragport.adapters.postgres.schema import (
    LATEST_VERSION,
    current_version,
    quote_schema,
    upgrade,
    validate_schema_name,
    validate_text_search_config,
)
from ragport.domain.errors import CapabilityError, ScopeError, StoreError, ValidationError
from ragport.domain.filters import Filter, parse_filter
from ragport.domain.model import (
    AccessDecision,
    Authorization,
    Capabilities,
    Grant,
    Record,
    Scope,
    Tombstone,
    decide_access,
    strongest_tombstone,
)
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.store import EmbedderKey, GuardedQuery, HybridAnswer, ScoredRecord

__all__ = ["PostgresStore"]

_RECORD_COLUMNS = (
    "id, source_id, kind, text, metadata, embedder_id, dimensions, generation, "
    "retired_generation, content_hash, lineage, roots, chunk_index, start_offset, end_offset"
)
_COPY_COLUMNS = (
    "tenant_id",
    "resource_id",
    "corpus_id",
    "id",
    "generation",
    "source_id",
    "kind",
    "text",
    "metadata",
    "embedding",
    "embedder_id",
    "dimensions",
    "retired_generation",
    "content_hash",
    "lineage",
    "roots",
    "chunk_index",
    "start_offset",
    "end_offset",
)
_COPY_TYPES = [
    "text", "text", "text", "text", "int8", "text", "text", "text", "jsonb", "vector", "text",
    "int4", "int8", "text", "text[]", "text[]", "int4", "int4", "int4",
]  # fmt: skip
_SCOPE = "tenant_id = :t AND resource_id = :r AND corpus_id = :c"
_R_COLUMNS = ", ".join("r." + c.strip() for c in _RECORD_COLUMNS.split(","))
_RSCOPE = "r.tenant_id = :t AND r.resource_id = :r AND r.corpus_id = :c"
_VISIBLE = "r.generation <= sc.pointer AND (r.retired_generation IS NULL OR r.retired_generation > sc.pointer)"


_T = TypeVar("_T")
_BIND = re.compile(r"(?<![:\w]):(\w+)")
_PYFORMAT: dict[str, str] = {}


def _pyformat(sql: str) -> str:
    """``:name`` binds as psycopg's ``%(name)s`` (``::`` casts untouched), memoised."""
    converted = _PYFORMAT.get(sql)
    if converted is None:
        if len(_PYFORMAT) >= 1024:
            _PYFORMAT.clear()
        converted = _PYFORMAT[sql] = _BIND.sub(r"%(\1)s", sql.replace("%", "%%"))
    return converted


def _fetch(
    conn: Connection | _RawRead,
    sql: str,
    params: Mapping[str, Any],
    *,
    prepare: bool | None = None,
) -> list[Any]:
    """Run one read straight on the psycopg connection: rows as named tuples.

    Reads skip SQLAlchemy's statement compilation and result wrapping (measured: a third of
    a vector query's client time). ``prepare=False`` plans the statement for its own
    parameters every time; ``None`` lets psycopg prepare it after a few runs, and PostgreSQL
    then reuse a generic plan.
    """
    with driver_connection(conn).cursor(row_factory=namedtuple_row) as cur:  # type: ignore[arg-type]
        cur.execute(_pyformat(sql), params, prepare=prepare)
        return cur.fetchall()


class _RawRead:
    """A pooled DBAPI connection lent to one read: ``.connection`` mirrors SQLAlchemy's."""

    __slots__ = ("connection",)

    def __init__(self, fairy: Any) -> None:
        self.connection = fairy


@contextmanager
def _one_snapshot(conn: _RawRead) -> Iterator[None]:
    """Run the block's reads in one REPEATABLE READ, READ ONLY transaction (one snapshot).

    The lent connection is in autocommit, so the transaction is opened and closed by hand. If
    the block fails, the session-level HNSW settings it may have changed are rolled back too,
    so their cache on the connection is dropped.
    """
    dbapi = driver_connection(conn)  # type: ignore[arg-type]
    dbapi.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        yield
    except BaseException:
        conn.connection.info.pop("ragport_hnsw", None)
        if not (dbapi.closed or dbapi.broken):
            with suppress(psycopg.Error):
                dbapi.execute("ROLLBACK")
        raise
    dbapi.execute("COMMIT")


def _params(scope: Scope, **extra: Any) -> dict[str, Any]:
    return {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id, **extra}


def _record(scope: Scope, row: Any) -> Record:
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


class _Records:
    def __init__(self, uow: _UnitOfWork):
        self._uow = uow

    def add(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        uow = self._uow
        matrix = np.asarray(vectors)
        if matrix.ndim != 2 or matrix.shape[0] != len(records):
            raise ValidationError("vectors must have one row per record", field="vectors")
        if not np.all(np.isfinite(matrix)):
            raise ValidationError("vectors must be finite", field="vectors")
        if not records:
            return
        matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        seen: set[str] = set()
        for record in records:
            if record.scope != uow.scope:
                raise ScopeError(
                    "record scope differs from the unit of work's scope", field="scope"
                )
            if record.dimensions != matrix.shape[1]:
                raise ValidationError(
                    "record dimensions differ from its vector", field="dimensions"
                )
            if record.id in seen:
                raise ValidationError("duplicate record id in one write", field="id")
            seen.add(record.id)
        conn = uow.conn
        with translate_errors("add records"):
            owners = conn.execute(
                text(
                    f"SELECT id, source_id, generation, retired_generation FROM {uow.s}.records "
                    f"WHERE {_SCOPE} AND id = ANY(:ids) "
                    "AND (retired_generation IS NULL OR generation = ANY(:gens))"
                ),
                _params(uow.scope, ids=list(seen), gens=sorted({r.generation for r in records})),
            ).all()
            by_id = {r.id: r for r in records}
            for row in owners:
                mine = by_id[row.id]
                if row.source_id != mine.source_id:
                    raise ValidationError(
                        "record id is live for another source in this scope", field="id"
                    )
                if row.retired_generation is None or row.generation == mine.generation:
                    raise ValidationError("record id is already live in this scope", field="id")
            uow.store._ensure_vector_index(conn, int(matrix.shape[1]))
            with conn.begin_nested():
                dbapi = driver_connection(conn)
                t, r_, c = uow.scope.tenant_id, uow.scope.resource_id, uow.scope.corpus_id
                with (
                    dbapi.cursor() as cur,
                    cur.copy(
                        f"COPY {uow.s}.records ({', '.join(_COPY_COLUMNS)}) FROM STDIN WITH (FORMAT BINARY)"
                    ) as copy,
                ):
                    copy.set_types(_COPY_TYPES)
                    for record, vector in zip(records, matrix, strict=True):
                        copy.write_row(
                            (
                                t, r_, c, record.id, record.generation, record.source_id,
                                record.kind, record.text, Jsonb(record.metadata), vector,
                                record.embedder_id, record.dimensions, record.retired_generation,
                                record.content_hash, list(record.lineage), list(record.roots),
                                record.chunk_index, record.start, record.end,
                            )
                        )  # fmt: skip

    def list_by_source(self, source_id: str) -> Sequence[Record]:
        uow = self._uow
        with translate_errors("list records"):
            rows = uow.conn.execute(
                text(
                    f"SELECT {_RECORD_COLUMNS} FROM {uow.s}.records r WHERE {_SCOPE} "
                    "AND source_id = :src AND generation <= :p "
                    'AND (retired_generation IS NULL OR retired_generation > :p) ORDER BY id COLLATE "C"'
                ),
                _params(uow.scope, src=source_id, p=uow.pointer),
            ).all()
        return [_record(uow.scope, row) for row in rows]

    def _retire(self, where: str, generation: int, **params: Any) -> int:
        uow = self._uow
        with translate_errors("retire records"):
            uow.conn.execute(
                text(f"DELETE FROM {uow.s}.records WHERE {_SCOPE} AND {where} AND generation = :g"),
                _params(uow.scope, g=generation, **params),
            )
            return int(
                uow.conn.execute(
                    text(
                        f"WITH ret AS (UPDATE {uow.s}.records SET retired_generation = :g "
                        f"WHERE {_SCOPE} AND {where} AND retired_generation IS NULL "
                        "AND generation < :g RETURNING generation) "
                        "SELECT count(*) FILTER (WHERE generation <= :p) FROM ret"
                    ),
                    _params(uow.scope, g=generation, p=uow.pointer, **params),
                ).scalar_one()
            )

    def retire_source(self, source_id: str, *, generation: int) -> int:
        return self._retire("source_id = :src", generation, src=source_id)

    def retire_ids(self, ids: Sequence[str], *, generation: int) -> int:
        return self._retire("id = ANY(:ids)", generation, ids=list(ids))

    def _count(self, sql: str, **params: Any) -> int:
        uow = self._uow
        with translate_errors("rewrite generations"):
            result = uow.conn.execute(text(sql), _params(uow.scope, **params))
            return int(result.rowcount)

    def list_live(
        self, source_id: str, *, after: str | None = None, limit: int | None = None
    ) -> Sequence[Record]:
        uow = self._uow
        with translate_errors("list live records"):
            rows = uow.conn.execute(
                text(
                    f"SELECT {_RECORD_COLUMNS} FROM {uow.s}.records WHERE {_SCOPE} "
                    "AND source_id = :src AND retired_generation IS NULL "
                    'AND (CAST(:after AS text) IS NULL OR id COLLATE "C" > :after) '
                    'ORDER BY id COLLATE "C" LIMIT :n'
                ),
                _params(uow.scope, src=source_id, after=after, n=limit),
            ).all()
        return [_record(uow.scope, row) for row in rows]

    def find_dependents(self, ids: Sequence[str]) -> Sequence[Record]:
        uow = self._uow
        with translate_errors("find dependents"):
            rows = uow.conn.execute(
                text(
                    f"SELECT {_RECORD_COLUMNS} FROM {uow.s}.records WHERE {_SCOPE} "
                    "AND kind = 'derived' "
                    'AND lineage && CAST(:ids AS text[]) ORDER BY id COLLATE "C", generation'
                ),
                _params(uow.scope, ids=list(ids)),
            ).all()
        return [_record(uow.scope, row) for row in rows]

    def rekey(self, moves: Mapping[str, str], *, to_source_id: str) -> int:
        uow = self._uow
        if not moves:
            return 0
        old, new = list(moves), [moves[k] for k in moves]
        with translate_errors("re-key records"):
            # rekey_collides in SQL: a stored row of a destination id, other than a live row
            # being moved, that shares a moved row's generation or could be visible at a
            # pointer where the moved row is (live, staged, or retired above both the moved
            # row's generation and the floor).
            clash = uow.conn.execute(
                text(
                    f"SELECT count(*) FROM {uow.s}.records d "
                    "JOIN unnest(CAST(:old AS text[]), CAST(:new AS text[])) AS x(old_id, new_id) "
                    f"ON d.id = x.new_id JOIN {uow.s}.records m "
                    "ON m.tenant_id = d.tenant_id AND m.resource_id = d.resource_id "
                    "AND m.corpus_id = d.corpus_id AND m.id = x.old_id "
                    "AND m.retired_generation IS NULL "
                    "WHERE d.tenant_id = :t AND d.resource_id = :r AND d.corpus_id = :c "
                    "AND NOT (d.id = ANY(:old) AND d.retired_generation IS NULL) "
                    "AND (d.generation = m.generation OR d.retired_generation IS NULL "
                    "OR d.retired_generation > greatest(m.generation, :floor))"
                ),
                _params(uow.scope, new=new, old=old, floor=uow.floor),
            ).scalar_one()
            if clash:
                raise ValidationError(
                    "a destination record id is visible in a restorable snapshot of this scope",
                    field="to_id",
                )
            result = uow.conn.execute(
                text(
                    f"UPDATE {uow.s}.records r SET id = m.new_id, source_id = :to "
                    "FROM unnest(CAST(:old AS text[]), CAST(:new AS text[])) AS m(old_id, new_id) "
                    f"WHERE {_RSCOPE} AND r.id = m.old_id AND r.retired_generation IS NULL"
                ),
                _params(uow.scope, old=old, new=new, to=to_source_id),
            )
            return int(result.rowcount)

    def rewrite_lineage(self, from_id: str, to_id: str) -> int:
        uow = self._uow
        with translate_errors("rewrite lineage"):
            rows = uow.conn.execute(
                text(
                    f"SELECT id, generation, lineage, roots FROM {uow.s}.records WHERE {_SCOPE} "
                    "AND kind = 'derived' "
                    "AND (lineage && ARRAY[CAST(:f AS text)] OR roots && ARRAY[CAST(:f AS text)])"
                ),
                _params(uow.scope, f=from_id),
            ).all()
            if not rows:
                return 0

            def swap(ids: Sequence[str]) -> list[str]:
                return list(dict.fromkeys(to_id if i == from_id else i for i in ids))

            uow.conn.execute(
                text(
                    f"UPDATE {uow.s}.records SET lineage = :lineage, roots = :roots "
                    f"WHERE {_SCOPE} AND id = :id AND generation = :g"
                ),
                [
                    _params(
                        uow.scope,
                        id=row.id,
                        g=row.generation,
                        lineage=swap(row.lineage),
                        roots=swap(row.roots),
                    )
                    for row in rows
                ],
            )
        return sum(list(row.lineage).count(from_id) for row in rows)

    def purge_source(self, source_id: str) -> int:
        uow = self._uow
        with translate_errors("purge source"):
            result = uow.conn.execute(
                text(f"DELETE FROM {uow.s}.records WHERE {_SCOPE} AND source_id = :src"),
                _params(uow.scope, src=source_id),
            )
        return int(result.rowcount)

    def discard_above(self, generation: int) -> int:
        return self._count(
            f"DELETE FROM {self._uow.s}.records WHERE {_SCOPE} AND generation > :g", g=generation
        )

    def restore_above(self, generation: int) -> int:
        return self._count(
            f"UPDATE {self._uow.s}.records SET retired_generation = NULL "
            f"WHERE {_SCOPE} AND retired_generation > :g",
            g=generation,
        )

    def purge_retired(self, through: int) -> int:
        return self._count(
            f"DELETE FROM {self._uow.s}.records WHERE {_SCOPE} AND retired_generation <= :g",
            g=through,
        )


class _Generations:
    def __init__(self, uow: _UnitOfWork):
        self._uow = uow

    def _save(self) -> None:
        uow = self._uow
        with translate_errors("save generations"):
            uow.conn.execute(
                text(
                    f"UPDATE {uow.s}.scopes SET counter = :n, pointer = :p, floor = :f WHERE {_SCOPE}"
                ),
                _params(uow.scope, n=uow.counter, p=uow.pointer, f=uow.floor),
            )

    def current(self) -> int:
        return self._uow.pointer

    def counter(self) -> int:
        return self._uow.counter

    def stage(self) -> int:
        uow = self._uow
        if uow.counter == uow.pointer:
            uow.counter += 1
            self._save()
        return uow.counter

    def publish(self, generation: int) -> None:
        uow = self._uow
        if not uow.pointer <= generation <= uow.counter:
            raise ValidationError(
                "publish needs pointer <= generation <= counter", field="generation"
            )
        uow.pointer = generation
        self._save()

    def reset(self, generation: int) -> None:
        uow = self._uow
        if generation < uow.floor:
            raise ValidationError("cannot reset below the compaction floor", field="generation")
        uow.pointer = uow.counter = generation
        self._save()

    def floor(self) -> int:
        return self._uow.floor

    def raise_floor(self, generation: int) -> None:
        uow = self._uow
        uow.floor = max(uow.floor, min(generation, uow.pointer))
        self._save()


class _Grants:
    def __init__(self, uow: _UnitOfWork):
        self._uow = uow

    def set(self, grants: Sequence[Grant]) -> None:
        uow = self._uow
        latest = {g.source_id: g for g in grants}
        if not latest:
            return
        with translate_errors("set grants"):
            uow.conn.execute(
                text(
                    f"INSERT INTO {uow.s}.grants (tenant_id, resource_id, corpus_id, source_id, "
                    "principal_ids, group_ids, access_version) VALUES (:t, :r, :c, :src, :p, :g, :v) "
                    "ON CONFLICT (tenant_id, resource_id, corpus_id, source_id) DO UPDATE SET "
                    "principal_ids = EXCLUDED.principal_ids, group_ids = EXCLUDED.group_ids, "
                    "access_version = EXCLUDED.access_version"
                ),
                [
                    _params(
                        uow.scope,
                        src=g.source_id,
                        p=list(g.principal_ids),
                        g=list(g.group_ids),
                        v=g.access_version,
                    )
                    for g in latest.values()
                ],
            )

    def get(self, source_ids: Sequence[str]) -> Mapping[str, Grant]:
        uow = self._uow
        return _read_grants(uow.conn, uow.s, uow.scope, source_ids)


def _read_grants(
    conn: Connection | _RawRead, s: str, scope: Scope, source_ids: Sequence[str]
) -> dict[str, Grant]:
    with translate_errors("read grants"):
        rows = _fetch(
            conn,
            f"SELECT source_id, principal_ids, group_ids, access_version FROM {s}.grants "
            f"WHERE {_SCOPE} AND source_id = ANY(:ids)",
            _params(scope, ids=list(dict.fromkeys(source_ids))),
        )
    return {
        row.source_id: Grant(
            row.source_id,
            principal_ids=tuple(row.principal_ids),
            group_ids=tuple(row.group_ids),
            access_version=row.access_version,
        )
        for row in rows
    }


class _Tombstones:
    def __init__(self, uow: _UnitOfWork):
        self._uow = uow

    def add(self, tombstones: Sequence[Tombstone]) -> int:
        uow = self._uow
        merged: dict[str, Tombstone] = {}
        for t in tombstones:
            merged[t.id] = strongest_tombstone(merged.get(t.id), t)
        if not merged:
            return 0
        with translate_errors("add tombstones"):
            inserted = uow.conn.execute(
                text(
                    f"INSERT INTO {uow.s}.tombstones AS old (tenant_id, resource_id, corpus_id, id, reason) "
                    "SELECT :t, :r, :c, x.id, x.reason "
                    "FROM unnest(CAST(:ids AS text[]), CAST(:reasons AS text[])) AS x(id, reason) "
                    "ON CONFLICT (tenant_id, resource_id, corpus_id, id) DO UPDATE "
                    "SET reason = EXCLUDED.reason "
                    "WHERE old.reason = 'corrected' AND EXCLUDED.reason = 'forgotten' "
                    "RETURNING (xmax = 0) AS inserted"
                ),
                _params(
                    uow.scope,
                    ids=list(merged),
                    reasons=[t.reason for t in merged.values()],
                ),
            ).all()
        return sum(1 for row in inserted if row.inserted)

    def list(self) -> Sequence[Tombstone]:
        uow = self._uow
        with translate_errors("list tombstones"):
            rows = uow.conn.execute(
                text(
                    f'SELECT id, reason FROM {uow.s}.tombstones WHERE {_SCOPE} ORDER BY id COLLATE "C"'
                ),
                _params(uow.scope),
            ).all()
        return [Tombstone(row.id, row.reason) for row in rows]


class _UnitOfWork:
    def __init__(self, store: PostgresStore, scope: Scope, conn: Connection, state: Any):
        self.store = store
        self.scope = scope
        self.conn = conn
        self.s = store._s
        self.counter, self.pointer, self.floor = (
            int(state.counter),
            int(state.pointer),
            int(state.floor),
        )
        self.done = False
        self.records = _Records(self)
        self.generations = _Generations(self)
        self.grants = _Grants(self)
        self.tombstones = _Tombstones(self)

    def commit(self) -> None:
        if self.done:
            raise ValidationError("unit of work already finished", field="unit_of_work")
        with translate_errors("commit"):
            self.conn.commit()
        self.done = True

    def rollback(self) -> None:
        if not self.done:
            self.conn.rollback()
            self.done = True


class PostgresStore:
    """A ChunkStore on PostgreSQL with pgvector.

    ``url_or_engine`` is a ``postgresql://`` URL or a SQLAlchemy Engine (psycopg 3 driver).
    ``create=True`` applies missing migrations now; otherwise the schema must already be at
    the latest version (``ragport db upgrade``), checked on first use.
    """

    provider = "postgres"

    def __init__(
        self,
        url_or_engine: str | Engine,
        *,
        schema: str = "ragport",
        create: bool = False,
        text_search_config: str = "english",
    ):
        self._schema = validate_schema_name(schema)
        self._s = quote_schema(schema)
        self._ts_config = validate_text_search_config(text_search_config)
        self._engine = make_engine(url_or_engine)
        self._vector_indexes: set[int] = set()
        self._analyzed = False
        self._checked = False
        if create:
            self.upgrade()

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def schema(self) -> str:
        return self._schema

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            lexical_modes=("fts",),
            authorization="acl",
            generations=True,
            transactions=True,
            guarded_query=True,
            preparation=True,
        )

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self._schema!r})"

    # -- schema ----------------------------------------------------------------------------------
    def upgrade(self) -> list[int]:
        """Apply missing migrations (idempotent); returns the versions applied."""
        with translate_errors("upgrade"), self._engine.begin() as conn:
            applied = upgrade(conn, self._schema, text_search_config=self._ts_config)
        self._checked = True
        return applied

    def _check_schema(self, conn: Connection) -> None:
        if self._checked:
            return
        version = current_version(conn, self._schema)
        if version != LATEST_VERSION:
            raise StoreError(
                f"schema {self._schema!r} is at version {version}, expected {LATEST_VERSION}; "
                "run `ragport db upgrade` or PostgresStore(..., create=True)"
            )
        self._checked = True

    @contextmanager
    def _connect(self, operation: str, *, read: bool = False) -> Iterator[Any]:
        """A pooled connection: a SQLAlchemy ``Connection`` for writes, a ``_RawRead`` for reads.

        Reads are single statements (one snapshot each), so they run in autocommit: no
        BEGIN/ROLLBACK round trips around them. They take the pooled DBAPI connection itself
        (no SQLAlchemy ``Connection`` around it) and hand it back in its default mode.
        """
        if read:
            with self._raw_read(operation) as raw:
                yield raw
            return
        with translate_errors(operation), self._engine.connect() as conn:
            self._check_schema(conn)
            driver_connection(conn)
            yield conn

    @contextmanager
    def _raw_read(self, operation: str) -> Iterator[_RawRead]:
        with translate_errors(operation):
            if not self._checked:
                with self._engine.connect() as conn:
                    self._check_schema(conn)
            fairy = self._engine.raw_connection()
            dbapi = fairy.driver_connection
            assert isinstance(dbapi, psycopg.Connection)
            mode = dbapi.autocommit  # False unless the host's Engine is AUTOCOMMIT itself
            try:
                dbapi.autocommit = True
                raw = _RawRead(fairy)
                driver_connection(raw)  # type: ignore[arg-type]
                yield raw
            except psycopg.Error:
                # Statements run straight on psycopg bypass SQLAlchemy's disconnect detection:
                # a connection that lost its server must not go back into the pool.
                if dbapi.closed or dbapi.broken:
                    fairy.invalidate()
                raise
            finally:
                if not (dbapi.closed or dbapi.broken):
                    try:
                        dbapi.autocommit = mode  # as the pool lent it, for the next user
                    except psycopg.Error:
                        fairy.invalidate()
                fairy.close()  # back to the pool (or discarded if invalidated)

    def _read(self, operation: str, run: Callable[[_RawRead], _T]) -> _T:
        """One read on an autocommit connection, retried once if that connection was dead.

        A pooled connection that lost its server (a restart, an idle timeout) fails its
        first statement; the pool then discards it and the read runs again on a fresh one.
        Reads change nothing, so running one twice is safe.
        """
        try:
            with self._connect(operation, read=True) as conn:
                return run(conn)
        except StoreError as exc:
            if not exc.lost_connection:
                raise
        with self._connect(operation, read=True) as conn:
            return run(conn)

    def _has_vector_index(self, conn: Connection, dimensions: int) -> bool:
        if dimensions in self._vector_indexes:
            return True
        found = conn.execute(
            text("SELECT to_regclass(:name) IS NOT NULL"),
            {"name": f"{self._s}.records_hnsw_{dimensions}"},
        ).scalar_one()
        if found:
            self._vector_indexes.add(dimensions)
        return bool(found)

    def _create_vector_index(self, conn: Connection, dimensions: int) -> None:
        if not 1 <= dimensions <= 2000:
            raise ValidationError("HNSW indexes support 1..2000 dimensions", field="dimensions")
        # Serialize creators of one index; IF NOT EXISTS alone races on the catalog.
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:k)"),
            {"k": zlib.crc32(f"ragport:{self._schema}:hnsw:{dimensions}".encode())},
        )
        conn.execute(text("SET LOCAL maintenance_work_mem = '1GB'"))
        conn.execute(
            text(
                f"CREATE INDEX IF NOT EXISTS records_hnsw_{dimensions} ON {self._s}.records "
                f"USING hnsw ((embedding::vector({dimensions})) vector_cosine_ops) "
                f"WHERE dimensions = {dimensions}"
            )
        )
        self._vector_indexes.add(dimensions)

    def prepare(self, scope: Scope, *, dimensions: int) -> None:
        """Create the HNSW index for ``dimensions`` if missing, outside any write transaction.

        Creating an index takes a lock that conflicts with open writers; doing it here, before
        a unit of work touches ``records``, means two first writers never deadlock.
        """
        with self._connect("prepare") as conn:
            if not self._has_vector_index(conn, dimensions):
                self._create_vector_index(conn, dimensions)
            conn.commit()
            self._analyze_once(conn)

    def _analyze_once(self, conn: Connection) -> None:
        """ANALYZE ``records`` the first time it holds data but was never analysed.

        A never-analysed table makes the planner assume one row per scope, so per-source
        lookups scan the whole scope until autovacuum catches up (measured: half the load time
        of a fresh 100k-row corpus).
        """
        if self._analyzed:
            return
        row = conn.execute(
            text(
                "SELECT coalesce(n_live_tup, 0) AS live, last_analyze IS NOT NULL "
                "OR last_autoanalyze IS NOT NULL AS analysed FROM pg_stat_user_tables "
                "WHERE relid = to_regclass(:name)"
            ),
            {"name": f"{self._s}.records"},
        ).one_or_none()
        if row is not None and row.analysed:
            self._analyzed = True
        elif row is not None and row.live >= 1_000:
            conn.execute(text(f"ANALYZE {self._s}.records"))
            conn.commit()
            self._analyzed = True

    def _ensure_vector_index(self, conn: Connection, dimensions: int) -> None:
        # Fallback for units of work opened without prepare(): inside the write transaction.
        if not self._has_vector_index(conn, dimensions):
            self._create_vector_index(conn, dimensions)

    # -- unit of work ----------------------------------------------------------------------------
    @contextmanager
    def unit_of_work(self, scope: Scope) -> Iterator[_UnitOfWork]:
        if not isinstance(scope, Scope):
            raise ScopeError("scope must be a Scope", field="scope")
        # SQLAlchemy "commit as you go": the connection's transaction begins with the first
        # statement and ends with uow.commit() or the rollback below.
        with self._connect("unit of work") as conn:
            uow: _UnitOfWork | None = None
            try:
                with translate_errors("lock scope"):
                    conn.execute(
                        text(
                            f"INSERT INTO {self._s}.scopes (tenant_id, resource_id, corpus_id) "
                            "VALUES (:t, :r, :c) ON CONFLICT DO NOTHING"
                        ),
                        _params(scope),
                    )
                    state = conn.execute(
                        text(
                            f"SELECT counter, pointer, floor FROM {self._s}.scopes WHERE {_SCOPE} "
                            "FOR UPDATE"
                        ),
                        _params(scope),
                    ).one()
                uow = _UnitOfWork(self, scope, conn, state)
                yield uow
            finally:
                if uow is None or not uow.done:
                    conn.rollback()

    # -- reads -----------------------------------------------------------------------------------
    def current_generation(self, scope: Scope) -> int:
        sql = f"SELECT pointer FROM {self._s}.scopes WHERE {_SCOPE}"
        rows = self._read("read generation", lambda conn: _fetch(conn, sql, _params(scope)))
        return int(rows[0].pointer) if rows else 0

    def _pointer_cte(self) -> str:
        return (
            f"WITH sc AS (SELECT coalesce((SELECT pointer FROM {self._s}.scopes WHERE {_SCOPE}), 0) "
            "AS pointer) "
        )

    def get_by_source(self, scope: Scope, source_id: str) -> Sequence[Record]:
        sql = (
            self._pointer_cte() + f"SELECT {_RECORD_COLUMNS} FROM {self._s}.records r, sc "
            f'WHERE {_RSCOPE} AND r.source_id = :src AND {_VISIBLE} ORDER BY r.id COLLATE "C"'
        )
        params = _params(scope, src=source_id)
        rows = self._read("read source", lambda conn: _fetch(conn, sql, params))
        return [_record(scope, row) for row in rows]

    def list_embedders(self, scope: Scope) -> frozenset[EmbedderKey]:
        sql = (
            self._pointer_cte() + f"SELECT DISTINCT r.embedder_id, r.dimensions "
            f"FROM {self._s}.records r, sc WHERE {_RSCOPE} AND {_VISIBLE}"
        )
        rows = self._read("list embedders", lambda conn: _fetch(conn, sql, _params(scope)))
        return frozenset((row.embedder_id, row.dimensions) for row in rows)

    def foreign_embedders(
        self, scope: Scope, embedder_id: str, dimensions: int
    ) -> frozenset[EmbedderKey]:
        guard = (embedder_id, dimensions)
        return self._read("check embedders", lambda conn: self._foreign_rows(conn, scope, guard))

    def _foreign_sql(self) -> str:
        """Distinct (embedder_id, dimensions) of visible rows other than (:e, :ed); needs ``sc``.

        Written as ranges so the (scope, embedder_id, dimensions) index answers it: on a
        consistent scope no heap row is visited at all.
        """
        return (
            "SELECT DISTINCT y.embedder_id, y.dimensions FROM ("
            f"SELECT r.embedder_id, r.dimensions FROM {self._s}.records r, sc "
            f"WHERE {_RSCOPE} AND {_VISIBLE} AND (r.embedder_id IS NULL "
            "OR r.embedder_id < :e OR r.embedder_id > :e "
            "OR (r.embedder_id = :e AND (r.dimensions < :ed OR r.dimensions > :ed))) "
            "LIMIT 64) y"
        )

    def list_invalidated_ids(self, scope: Scope) -> frozenset[str]:
        sql = f"SELECT id FROM {self._s}.tombstones WHERE {_SCOPE} AND reason = 'forgotten'"
        rows = self._read("list tombstones", lambda conn: _fetch(conn, sql, _params(scope)))
        return frozenset(row.id for row in rows)

    def query(
        self,
        scope: Scope,
        vector: Vector,
        *,
        limit: int,
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None = None,
    ) -> Sequence[ScoredRecord]:
        _, scored = self._vector_leg(
            scope, vector, None, limit, authorization, metadata_filter, on_denied
        )
        return scored

    def guarded_query(
        self,
        scope: Scope,
        vector: Vector,
        *,
        embedder_id: str,
        dimensions: int,
        limit: int,
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None = None,
    ) -> GuardedQuery:
        """``foreign_embedders`` and ``query`` in one statement (one snapshot, one round trip)."""
        foreign, scored = self._vector_leg(
            scope,
            vector,
            (embedder_id, dimensions),
            limit,
            authorization,
            metadata_filter,
            on_denied,
        )
        return GuardedQuery(foreign_embedders=foreign, records=scored)

    def _vector_leg(
        self,
        scope: Scope,
        vector: Vector,
        guard: tuple[str, int] | None,
        limit: int,
        authorization: Authorization | None,
        metadata_filter: Mapping[str, Any] | Filter | None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None,
    ) -> tuple[frozenset[EmbedderKey], tuple[ScoredRecord, ...]]:
        run = self._vector_run(
            scope, vector, guard, limit, authorization, metadata_filter, on_denied
        )
        return self._read("query", run)

    def _vector_run(
        self,
        scope: Scope,
        vector: Vector,
        guard: tuple[str, int] | None,
        limit: int,
        authorization: Authorization | None,
        metadata_filter: Mapping[str, Any] | Filter | None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None,
    ) -> Callable[[_RawRead], tuple[frozenset[EmbedderKey], tuple[ScoredRecord, ...]]]:
        """The vector leg (and its drift guard) as a function of one connection."""
        q = np.ascontiguousarray(np.asarray(vector, dtype=np.float32).reshape(-1))
        if not np.all(np.isfinite(q)):
            raise ValidationError("query vector must be finite", field="vector")
        if limit <= 0 or q.size == 0:

            def guard_only(conn: _RawRead) -> tuple[frozenset[EmbedderKey], tuple[()]]:
                if guard is None:
                    return frozenset(), ()
                return self._foreign_rows(conn, scope, guard), ()

            return guard_only
        dims = int(q.shape[0])
        # Dimensions and limit are integers written into the statement: a cached generic plan
        # must still see that the partial HNSW index (WHERE dimensions = N) applies.
        params = _params(scope, q=q)
        # The pointer and the tombstones enter as scalar subqueries (InitPlans), not joins, so
        # the HNSW scan filters and projects each row itself (measured: 0.3 ms per query).
        where = self._predicate(params, authorization, metadata_filter, scalar=True)
        order = f"ORDER BY r.embedding::vector({dims}) <=> :q LIMIT {int(limit)}"
        leg = (
            f"SELECT {_R_COLUMNS}, (r.embedding::vector({dims}) <=> :q) AS distance "
            f"FROM {self._s}.records r WHERE r.dimensions = {dims} AND {where} {order}"
        )
        if guard is None:
            sql = self._predicate_ctes() + leg
        else:
            # The drift guard rides along as two index probes: the first and the last
            # (embedder_id, dimensions) of every row of the scope, in index order (NULL ids
            # sort last, so a legacy row without one is the last). Both equal to the active
            # pair: no row of the scope, visible or not, can be foreign. Otherwise the exact
            # check over visible rows runs as a second statement.
            params.update(e=guard[0], ed=int(guard[1]))
            probe = (
                "(SELECT r.embedder_id IS NOT DISTINCT FROM :e AND r.dimensions = :ed "
                f"FROM {self._s}.records r WHERE {_RSCOPE} "
                "ORDER BY r.embedder_id {o}, r.dimensions {o} LIMIT 1)"
            )
            sql = (
                self._predicate_ctes() + f", ek AS (SELECT {probe.format(o='ASC')} AS first_ok, "
                f"{probe.format(o='DESC')} AS last_ok) "
                f"SELECT ek.first_ok, ek.last_ok, v.* FROM ek LEFT JOIN LATERAL ({leg}) v ON true"
            )
        # Filters and grants thin the graph walk out: search wider then (measured at 100k
        # rows: recall@10 with grants alone 0.954 at ef_search 400; with grants and a 0.5%
        # filter 0.90 at 40, 0.941 at 400, so both together get 800), and let the iterative
        # scan return rows slightly out of distance order (relaxed_order: 0.944 -> 0.960 with
        # grants and the 0.5% filter at 800, same latency; the rows are sorted here anyway).
        # The settings are session-level on the connections ragport uses, sent only when
        # they change.
        predicates = (authorization is not None) + bool(metadata_filter)
        ef = str(max((200, 400, 800)[predicates], min(1000, int(limit))))
        scan = "relaxed_order" if predicates else "strict_order"

        def run(conn: _RawRead) -> tuple[frozenset[EmbedderKey], tuple[ScoredRecord, ...]]:
            info = conn.connection.info
            if info.get("ragport_hnsw") != (ef, scan):
                _fetch(
                    conn,
                    "SELECT set_config('hnsw.ef_search', :ef, false) AS ef, "
                    "set_config('hnsw.iterative_scan', :scan, false) AS scan",
                    {"ef": ef, "scan": scan},
                )
                info["ragport_hnsw"] = (ef, scan)
            # A statement with grants or a filter is planned for its own values (how selective
            # they are decides the plan); the plain one may settle on a cached generic plan.
            rows = _fetch(conn, sql, params, prepare=False if predicates else None)
            if on_denied is not None and authorization is not None:
                self._report_denied(
                    conn,
                    dict(params),
                    metadata_filter,
                    authorization,
                    on_denied,
                    top=lambda where: (
                        ", top AS (SELECT r.source_id, r.kind, r.roots "
                        f"FROM {self._s}.records r, sc, tb "
                        f"WHERE r.dimensions = {dims} AND {where} {order})"
                    ),
                )
            foreign: frozenset[EmbedderKey] = frozenset()
            if guard is not None and rows and False in (rows[0].first_ok, rows[0].last_ok):
                foreign = self._foreign_rows(conn, scope, guard)
            scored = []
            for row in rows:
                if row.id is None:  # the guard's row when the leg found nothing
                    continue
                distance = float(row.distance)
                score = 1.0 - distance if math.isfinite(distance) else 0.0
                scored.append(ScoredRecord(_record(scope, row), score))
            scored.sort(key=lambda s: (-s.score, s.record.id))
            return foreign, tuple(scored)

        return run

    def _foreign_rows(
        self, conn: _RawRead, scope: Scope, guard: tuple[str, int]
    ) -> frozenset[EmbedderKey]:
        sql = self._pointer_cte() + f"SELECT * FROM ({self._foreign_sql()}) x"
        rows = _fetch(conn, sql, _params(scope, e=guard[0], ed=int(guard[1])))
        return frozenset((row.embedder_id, row.dimensions) for row in rows)

    def _predicate_ctes(self) -> str:
        """The scope's pointer and its forgotten ids, read in the same statement (one snapshot)."""
        return (
            self._pointer_cte()
            + f", tb AS (SELECT coalesce(array_agg(id), '{{}}') AS ids FROM {self._s}.tombstones "
            f"WHERE {_SCOPE} AND reason = 'forgotten') "
        )

    def _predicate(
        self,
        params: dict[str, Any],
        authorization: Authorization | None,
        metadata_filter: Mapping[str, Any] | Filter | None,
        *,
        scalar: bool = False,
    ) -> str:
        """The shared WHERE of both legs: scope, visibility, tombstones, grants, filter.

        It reads the ``sc`` and ``tb`` CTEs of ``_predicate_ctes``: joined into the FROM list
        by default, or (``scalar=True``) as scalar subqueries, with no join at all.
        """
        pointer, ids = ("(SELECT pointer FROM sc)", "CAST((SELECT ids FROM tb) AS text[])")
        if not scalar:
            pointer, ids = "sc.pointer", "tb.ids"
        where = [
            _RSCOPE,
            _VISIBLE.replace("sc.pointer", pointer),
            f"NOT (r.id = ANY({ids}) OR r.source_id = ANY({ids}) OR r.lineage && {ids} OR r.roots && {ids})",
        ]
        if authorization is not None:
            params.update(
                principal=authorization.principal_id,
                groups=list(authorization.group_ids),
                av=authorization.access_version,
            )
            where.append(self._acl_predicate(authorization))
        flt = parse_filter(metadata_filter)
        if flt is not None:
            clause, bound = compile_filter(flt, column="r.metadata", prefix="mf")
            params.update(bound)
            where.append(clause)
        return " AND ".join(where)

    def lexical_query(
        self,
        scope: Scope,
        text_query: str,
        *,
        limit: int,
        mode: str = "fts",
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None = None,
    ) -> Sequence[ScoredRecord]:
        """Full-text search over the generated tsvector, ranked by BM25 computed in SQL.

        The query is parsed by ``websearch_to_tsquery`` (quoted phrases, ``or``, ``-word``);
        its plain terms are then OR-ed instead of AND-ed, so a question matches documents that
        share some of its words. A query with an exclusion (``-word``) keeps websearch's AND
        semantics, where the exclusion is meaningful. Candidates are the rows matching that
        tsquery that pass the shared WHERE (scope, visibility, tombstones, grants, filter).

        Each candidate ``d`` scores, over the distinct non-excluded lexemes ``t`` of the tsquery
        that occur in ``d``::

            idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
            idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))    k1 = 1.2, b = 0.75

        (Lucene's always-positive idf; the in-memory store's ``Bm25Index`` follows rank_bm25's
        BM25Okapi with k1 = 1.5, so scores differ between the stores, rankings mostly not.)
        ``tf`` is the number of positions of ``t`` in the row's tsvector (PostgreSQL keeps at
        most 256 per lexeme); ``dl`` is the row's number of distinct lexemes (``length(tsv)``),
        not its token count: summing positions means unnesting every visible row's tsvector,
        4x the cost of the whole statistics pass (measured at 10k rows). ``N``, ``avgdl`` and
        ``df`` are exact, over the rows visible in the scope at its pointer generation minus
        forgotten (tombstoned) ones, read in the same statement: one snapshot. Grants and the
        metadata filter only thin the candidates and never change the statistics, so a score
        reveals nothing about which sources a caller may not read.

        Cost: one pass over every visible row of the scope, however few match, reading each
        tsvector once (most are TOASTed next to the inline embedding). Measured at 10k rows:
        1.1-1.4x ``ts_rank_cd`` when most rows match, 2.8x for a term in a third of them.
        """
        return self._read(
            "lexical query",
            self._lexical_run(
                scope, text_query, limit, mode, authorization, metadata_filter, on_denied
            ),
        )

    def _lexical_run(
        self,
        scope: Scope,
        text_query: str,
        limit: int,
        mode: str,
        authorization: Authorization | None,
        metadata_filter: Mapping[str, Any] | Filter | None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None,
    ) -> Callable[[_RawRead], tuple[ScoredRecord, ...]]:
        """The lexical leg of ``lexical_query`` as a function of one connection."""
        if mode != "fts":
            raise CapabilityError(
                f"the PostgreSQL store offers lexical mode 'fts', not {mode!r}",
                capability="lexical",
            )
        if limit <= 0 or not text_query.strip():
            return lambda conn: ()
        params = _params(scope, k=int(limit), query=text_query)
        where = self._predicate(params, authorization, metadata_filter)
        sql = (
            self._predicate_ctes()
            + self._bm25_ctes(where)
            + f"SELECT {_R_COLUMNS}, x.rank FROM ranked x JOIN {self._s}.records r "
            f"ON {_RSCOPE} AND r.id = x.id AND r.generation = x.generation "
            'ORDER BY x.rank DESC, r.id COLLATE "C"'
        )

        def run(conn: _RawRead) -> tuple[ScoredRecord, ...]:
            # Planned for its own tsquery every time: a cached generic plan cannot see how
            # common the query's terms are (measured: a 4x slower lexical leg).
            rows = _fetch(conn, sql, params, prepare=False)
            if on_denied is not None and authorization is not None:
                self._report_denied(
                    conn,
                    dict(params),
                    metadata_filter,
                    authorization,
                    on_denied,
                    top=self._bm25_top,
                )
            return tuple(ScoredRecord(_record(scope, row), float(row.rank)) for row in rows)

        return run

    def hybrid_query(
        self,
        scope: Scope,
        vector: Vector,
        text_query: str,
        *,
        embedder_id: str,
        dimensions: int,
        limit: int,
        mode: str,
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None = None,
    ) -> HybridAnswer:
        """Both legs and the drift guard in one REPEATABLE READ, READ ONLY transaction: every
        statement reads the same snapshot (one pointer, one set of tombstones and grants)."""
        guard = (embedder_id, dimensions)
        vector_run = self._vector_run(
            scope, vector, guard, limit, authorization, metadata_filter, on_denied
        )
        lexical_run = self._lexical_run(
            scope, text_query, limit, mode, authorization, metadata_filter, on_denied
        )

        def run(conn: _RawRead) -> HybridAnswer:
            with _one_snapshot(conn):
                foreign, vector_records = vector_run(conn)
                lexical_records = lexical_run(conn)
            return HybridAnswer(foreign, vector_records, lexical_records)

        return self._read("hybrid query", run)

    def _report_denied(
        self,
        conn: _RawRead,
        params: dict[str, Any],
        metadata_filter: Mapping[str, Any] | Filter | None,
        authorization: Authorization,
        on_denied: Callable[[Sequence[AccessDecision]], None],
        *,
        top: Callable[[str], str],
    ) -> None:
        """One extra statement: the sources the grant predicate withheld from this leg's top.

        The same leg runs without the grant predicate: ``top``, given that WHERE, returns the
        leg's ranking as CTEs after ``_predicate_ctes()`` (``", name AS (...)"``), the last one
        named ``top`` with the columns ``source_id``, ``kind`` and ``roots``. The access
        sources of those rows are joined with their grants and judged by the domain's access
        rule.
        """
        rows = _fetch(
            conn,
            self._predicate_ctes()
            + top(self._predicate(params, None, metadata_filter))
            + ", srcs AS (SELECT DISTINCT unnest(CASE WHEN kind = 'derived' THEN roots "
            "ELSE ARRAY[source_id] END) AS source_id FROM top) "
            "SELECT s.source_id, g.principal_ids, g.group_ids, g.access_version "
            f"FROM srcs s LEFT JOIN {self._s}.grants g ON g.tenant_id = :t "
            "AND g.resource_id = :r AND g.corpus_id = :c AND g.source_id = s.source_id",
            params,
            prepare=False,
        )
        decisions = [
            decide_access(
                row.source_id,
                None
                if row.principal_ids is None
                else Grant(
                    row.source_id,
                    principal_ids=tuple(row.principal_ids),
                    group_ids=tuple(row.group_ids),
                    access_version=row.access_version,
                ),
                authorization,
            )
            for row in rows
        ]
        denied = sorted((d for d in decisions if not d.allowed), key=lambda d: d.source_id)
        if denied:
            on_denied(denied)

    def _tsquery(self) -> str:
        web = f"websearch_to_tsquery('{self._ts_config}'::regconfig, :query)"
        return (
            f"(CASE WHEN strpos(CAST({web} AS text), '!') > 0 THEN {web} "
            f"ELSE CAST(replace(CAST({web} AS text), ' & ', ' | ') AS tsquery) END)"
        )

    def _bm25_ctes(self, where: str) -> str:
        """CTEs after ``_predicate_ctes()``, the last, ``ranked``, the top ``:k`` candidates.

        ``ranked`` has (id, generation, rank): rows matching the tsquery that pass ``where``,
        by the BM25 of ``lexical_query``'s docstring. ``ql``: the tsquery's lexemes minus the
        excluded ones, read from its text form (a negated phrase with nested parentheses, which
        websearch syntax cannot produce, would count as included).
        ``p``: one pass over the statistics population (visible, not forgotten); the inner
        subquery, kept apart by ``OFFSET 0``, reads each tsvector once and marks the query's
        lexemes with weight A, so ``length`` (dl), ``@@`` (candidate) and ``ts_filter`` (the
        query lexemes present, with positions) share that one in-memory copy. ``h``: a row per
        (row, query lexeme present) with tf. ``st``/``w``: N, avgdl and idf per lexeme. A
        candidate without any query lexeme (``a or -b``) scores 0.
        """
        k1, b = 1.2, 0.75
        population = self._predicate({}, None, None)
        # In the tsquery's text form: a negated operand (a lexeme or a parenthesised phrase),
        # skipped, or a quoted lexeme ('' and \\ escaped), kept. (querytree cannot do this: it
        # turns any OR with a negated branch, 'a' | !'b', into T.)
        quoted = r"'(?:[^'\\]|''|\\.)*'"
        operands = rf"(!\s*(?:{quoted}|\((?:{quoted}|[^()'])*\)))|'((?:[^'\\]|''|\\.)*)'"
        return (
            f", q AS (SELECT {self._tsquery()} AS query), "
            "ql AS (SELECT coalesce(array_agg(DISTINCT "
            r"replace(replace(m[2], '''''', ''''), '\\', '\')), '{}') AS lexemes "
            "FROM q, regexp_matches(CAST(q.query AS text), '"
            + operands.replace("'", "''")
            + "', 'g') m WHERE m[1] IS NULL), "
            "p AS (SELECT length(r.sw) AS dl, nullif(ts_filter(r.sw, '{a}'), '') AS hit, "
            f"CASE WHEN r.sw @@ q.query AND {where} THEN r.id END AS id, r.generation "
            "FROM (SELECT r.*, setweight(r.tsv, 'A', ql.lexemes) AS sw "
            f"FROM {self._s}.records r, sc, tb, ql WHERE {population} OFFSET 0) r, sc, tb, q), "
            "h AS (SELECT x.id, x.generation, x.dl, (x.u).lexeme, "
            "cardinality((x.u).positions) AS tf FROM (SELECT p.id, p.generation, p.dl, "
            "unnest(p.hit) AS u FROM p WHERE p.hit IS NOT NULL) x), "
            "st AS (SELECT CAST(count(*) AS float8) AS n, CAST(avg(p.dl) AS float8) AS avgdl "
            "FROM p), "
            "w AS (SELECT h.lexeme, ln(1 + (st.n - count(*) + 0.5) / (count(*) + 0.5)) AS idf "
            "FROM h, st GROUP BY h.lexeme, st.n), "
            "ranked AS (SELECT s.* FROM ("
            f"SELECT h.id, h.generation, sum(w.idf * h.tf * {k1 + 1} "
            f"/ (h.tf + {k1} * ({1 - b} + {b} * h.dl / st.avgdl))) AS rank "
            "FROM h JOIN w ON w.lexeme = h.lexeme, st WHERE h.id IS NOT NULL "
            "GROUP BY h.id, h.generation "
            "UNION ALL SELECT p.id, p.generation, 0 FROM p WHERE p.id IS NOT NULL AND p.hit IS NULL"
            ') s ORDER BY s.rank DESC, s.id COLLATE "C" LIMIT :k) '
        )

    def _bm25_top(self, where: str) -> str:
        """``_bm25_ctes`` for ``_report_denied``: its ``top`` CTE of the ranked rows."""
        return self._bm25_ctes(where) + (
            f", top AS (SELECT r.source_id, r.kind, r.roots FROM ranked x JOIN {self._s}.records r "
            f"ON {_RSCOPE} AND r.id = x.id AND r.generation = x.generation)"
        )

    def _acl_predicate(self, authorization: Authorization) -> str:
        version = "" if authorization.access_version is None else " AND g.access_version = :av"
        grant = (
            f"SELECT 1 FROM {self._s}.grants g WHERE g.tenant_id = :t AND g.resource_id = :r "
            "AND g.corpus_id = :c AND g.source_id = {src} "
            "AND (:principal = ANY(g.principal_ids) OR g.group_ids && CAST(:groups AS text[]))"
            + version
        )
        return (
            "((r.kind = 'chunk' AND EXISTS (" + grant.format(src="r.source_id") + ")) "
            "OR (r.kind = 'derived' AND cardinality(r.roots) > 0 AND NOT EXISTS ("
            "SELECT 1 FROM unnest(r.roots) AS root(id) WHERE NOT EXISTS ("
            + grant.format(src="root.id")
            + "))))"
        )

    # -- grants ----------------------------------------------------------------------------------
    def set_source_access(self, scope: Scope, grants: Sequence[Grant]) -> None:
        with self.unit_of_work(scope) as uow:
            uow.grants.set(list(grants))
            uow.commit()

    def check_source_access(
        self, scope: Scope, source_ids: Sequence[str], authorization: Authorization
    ) -> Mapping[str, AccessDecision]:
        wanted = list(dict.fromkeys(source_ids))
        if not wanted:
            return {}
        grants = self._read("check access", lambda conn: _read_grants(conn, self._s, scope, wanted))
        return {s: decide_access(s, grants.get(s), authorization) for s in wanted}
