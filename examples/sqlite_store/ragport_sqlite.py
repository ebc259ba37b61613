"""SqliteStore: a small third-party store on the standard library's sqlite3.

The worked example of docs/adapters.md. It implements only the narrow storage port,
``ragport.ports.backend`` (15 members): rows, vectors, grants, tombstones and three numbers
per scope. ``ragport.engine.BackendStore`` turns it into a full ``ChunkStore``: generations,
retire / restore / rollback, rekeying, lineage, the grant rule, forgetting, the filter, copies,
argument checks and the translation of ``sqlite3.Error`` into ``StoreError`` are ragport's.

One SQLite file holds every scope; vectors are float32 blobs scored by brute-force cosine
(``rank_by_cosine``). Isolation: the file is in WAL mode, and every read and every write opens
its *own* connection. A write is one ``BEGIN IMMEDIATE`` transaction (SQLite allows one writer
at a time, so writers never interleave); a read is one deferred transaction, so all its
statements see one committed snapshot and never wait for a writer.

One pushdown (``ragport.ports.pushdowns``): ``search_vectors``. Every commit bumps the scope's
``stamp``; per (scope, stamp, dimensions) the backend keeps the searchable rows (visible at
the pointer and not forgotten: a SQL ``WHERE``) as one normalised float32 matrix, so a query
is a matrix-vector product with the filter and the grant rule as numpy masks. The lexical leg
(``bm25``) and hybrid search are the engine's own, over ``rows``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from ragport.domain.errors import ValidationError
from ragport.domain.model import Authorization, Grant, Record, Scope, Tombstone, decide_access
from ragport.engine import BackendStore, rank_by_cosine
from ragport.ports.backend import GenerationState, RowKey, StorageBackend
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.pushdowns import Admission, LegAnswer
from ragport.ports.store import ScoredRecord

__all__ = ["SqliteBackend", "SqliteStore", "open_sqlite_store"]

BUSY_TIMEOUT_S = 60.0  # how long a writer waits for the one write lock before StoreError

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    tenant TEXT NOT NULL, resource TEXT NOT NULL, corpus TEXT NOT NULL,
    id TEXT NOT NULL, generation INTEGER NOT NULL, source_id TEXT NOT NULL,
    record TEXT NOT NULL, dimensions INTEGER, vector BLOB NOT NULL,
    PRIMARY KEY (tenant, resource, corpus, id, generation));
CREATE INDEX IF NOT EXISTS records_by_source ON records (tenant, resource, corpus, source_id);
CREATE TABLE IF NOT EXISTS generations (
    tenant TEXT NOT NULL, resource TEXT NOT NULL, corpus TEXT NOT NULL,
    counter INTEGER NOT NULL, pointer INTEGER NOT NULL, floor INTEGER NOT NULL,
    embedders TEXT, PRIMARY KEY (tenant, resource, corpus));
CREATE TABLE IF NOT EXISTS stamps (
    tenant TEXT NOT NULL, resource TEXT NOT NULL, corpus TEXT NOT NULL,
    stamp INTEGER NOT NULL, PRIMARY KEY (tenant, resource, corpus));
CREATE TABLE IF NOT EXISTS grants (
    tenant TEXT NOT NULL, resource TEXT NOT NULL, corpus TEXT NOT NULL, source_id TEXT NOT NULL,
    principal_ids TEXT NOT NULL, group_ids TEXT NOT NULL, access_version INTEGER NOT NULL,
    PRIMARY KEY (tenant, resource, corpus, source_id));
CREATE TABLE IF NOT EXISTS tombstones (
    tenant TEXT NOT NULL, resource TEXT NOT NULL, corpus TEXT NOT NULL,
    id TEXT NOT NULL, reason TEXT NOT NULL, PRIMARY KEY (tenant, resource, corpus, id));
"""
# Exact scope: three columns compared with SQLite's default BINARY collation (case, padding
# and wildcards all count), never one joined string and never LIKE.
IN_SCOPE = "tenant = :t AND resource = :r AND corpus = :c"
FIELDS = (
    *("kind", "text", "metadata", "embedder_id", "dimensions", "retired_generation"),
    *("content_hash", "lineage", "roots", "chunk_index", "start", "end"),
)
# The searchable rows of one dimension at the pointer: visible, and no forgotten tombstone
# names the id, the source or an id of the lineage or roots (the Admission's predicate).
SEARCHABLE = f"""
SELECT id, generation, source_id, record, vector FROM records r
WHERE {IN_SCOPE} AND dimensions = :d AND generation <= :p
  AND coalesce(json_extract(record, '$.retired_generation') > :p, 1)
  AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.tenant = :t AND t.resource = :r
    AND t.corpus = :c AND t.reason = 'forgotten' AND (t.id IN (r.id, r.source_id)
    OR t.id IN (SELECT value FROM json_each(r.record, '$.lineage'))
    OR t.id IN (SELECT value FROM json_each(r.record, '$.roots'))))
ORDER BY id"""


def _dump(record: Record) -> str:
    """Every field but the scope, id, generation and source (columns of their own), as JSON."""
    fields = {name: getattr(record, name) for name in FIELDS}
    return json.dumps(fields, allow_nan=False)


def _load(scope: Scope, row: sqlite3.Row) -> Record:
    fields = json.loads(row["record"])
    fields["lineage"], fields["roots"] = tuple(fields["lineage"]), tuple(fields["roots"])
    return Record(
        id=row["id"],
        scope=scope,
        source_id=row["source_id"],
        generation=row["generation"],
        **fields,
    )


class _Db:
    """One connection's view of one scope: the reads and, inside a write, the writes."""

    def __init__(self, conn: sqlite3.Connection, scope: Scope) -> None:
        self.conn = conn
        self.scope = scope
        self._key = {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id}

    def run(self, sql: str, **params: Any) -> sqlite3.Cursor:
        """``sql`` with the scope bound as ``:t :r :c`` (the engine translates its errors)."""
        return self.conn.execute(sql, {**self._key, **params})

    # -- BackendReader ----------------------------------------------------------------------
    def state(self) -> GenerationState:
        row = self.run(
            f"SELECT counter, pointer, floor, embedders FROM generations WHERE {IN_SCOPE}"
        ).fetchone()
        if row is None:
            return GenerationState()
        claim = None if row[3] is None else [tuple(k) for k in json.loads(row[3])]
        return GenerationState(row[0], row[1], row[2], embedders=claim)

    def rows(
        self, *, source_id: str | None = None, ids: Sequence[str] | None = None
    ) -> Iterable[Record]:
        found = self.run(
            f"SELECT id, generation, source_id, record FROM records WHERE {IN_SCOPE}"
            " AND (:s IS NULL OR source_id = :s)"
            " AND (:i IS NULL OR id IN (SELECT value FROM json_each(:i)))",
            s=source_id,
            i=None if ids is None else json.dumps(list(ids)),
        )
        return [_load(self.scope, row) for row in found]

    def nearest(self, vector: Vector) -> Iterable[ScoredRecord]:
        found = self.run(
            f"SELECT id, generation, source_id, record, vector FROM records"
            f" WHERE {IN_SCOPE} AND dimensions = :d",
            d=len(vector),
        )
        scored = ((_load(self.scope, row), np.frombuffer(row["vector"], "<f4")) for row in found)
        return rank_by_cosine(scored, vector)

    def grants(self, source_ids: Sequence[str] | None = None) -> Mapping[str, Grant]:
        found = self.run(
            f"SELECT * FROM grants WHERE {IN_SCOPE}"
            " AND (:i IS NULL OR source_id IN (SELECT value FROM json_each(:i)))",
            i=None if source_ids is None else json.dumps(list(source_ids)),
        )
        return {
            row["source_id"]: Grant(
                row["source_id"],
                json.loads(row["principal_ids"]),
                json.loads(row["group_ids"]),
                row["access_version"],
            )
            for row in found
        }

    def tombstones(self) -> Sequence[Tombstone]:
        found = self.run(f"SELECT id, reason FROM tombstones WHERE {IN_SCOPE}")
        return [Tombstone(row[0], row[1]) for row in found]

    # -- BackendWriter ----------------------------------------------------------------------
    def insert(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        for record, vector in zip(records, vectors, strict=True):
            self.run(
                "INSERT INTO records VALUES (:t, :r, :c, :id, :g, :s, :record, :d, :vector)",
                id=record.id,
                g=record.generation,
                s=record.source_id,
                record=_dump(record),
                d=record.dimensions,
                vector=np.asarray(vector, dtype="<f4").tobytes(),
            )

    def update(self, changes: Mapping[RowKey, Record]) -> None:
        # Each row moves out to a temporary table and is rewritten there (found by its rowid),
        # then all come back: a chain of renames (a to b, b to c) never meets itself.
        self.run("CREATE TEMP TABLE IF NOT EXISTS moving AS SELECT * FROM records WHERE 0")
        for (old_id, generation), new in changes.items():
            key = f"{IN_SCOPE} AND id = :id AND generation = :g"
            copied = self.run(
                f"INSERT INTO moving SELECT * FROM records WHERE {key}", id=old_id, g=generation
            )
            self.run(
                "UPDATE moving SET id = :new, source_id = :s, record = :record WHERE rowid = :row",
                new=new.id,
                s=new.source_id,
                record=_dump(new),
                row=copied.lastrowid,
            )
            self.run(f"DELETE FROM records WHERE {key}", id=old_id, g=generation)
        self.run("INSERT INTO records SELECT * FROM moving")
        self.run("DELETE FROM moving")

    def delete(self, keys: Sequence[RowKey]) -> None:
        for record_id, generation in keys:
            self.run(
                f"DELETE FROM records WHERE {IN_SCOPE} AND id = :id AND generation = :g",
                id=record_id,
                g=generation,
            )

    def set_state(self, state: GenerationState) -> None:
        claim = None if state.embedders is None else json.dumps(sorted(state.embedders, key=repr))
        self.run(
            "INSERT OR REPLACE INTO generations"
            " VALUES (:t, :r, :c, :counter, :pointer, :floor, :claim)",
            counter=state.counter,
            pointer=state.pointer,
            floor=state.floor,
            claim=claim,
        )

    def put_grants(self, grants: Sequence[Grant]) -> None:
        for g in grants:
            self.run(
                "INSERT OR REPLACE INTO grants VALUES (:t, :r, :c, :s, :p, :g, :v)",
                s=g.source_id,
                p=json.dumps(g.principal_ids),
                g=json.dumps(g.group_ids),
                v=g.access_version,
            )

    def put_tombstones(self, tombstones: Sequence[Tombstone]) -> None:
        for t in tombstones:
            self.run(
                "INSERT OR REPLACE INTO tombstones VALUES (:t, :r, :c, :id, :reason)",
                id=t.id,
                reason=t.reason,
            )

    def commit(self) -> None:
        self.run(
            "INSERT INTO stamps VALUES (:t, :r, :c, 1) ON CONFLICT DO UPDATE SET stamp = stamp + 1"
        )
        self.run("COMMIT")


class _Matrix:
    """The searchable rows of one scope, stamp and dimension: records in id order, their unit
    vectors, the stamp's grants, and per row the position of its first access source."""

    def __init__(self, db: _Db, dimensions: int, pointer: int) -> None:
        rows = db.run(SEARCHABLE, d=dimensions, p=pointer).fetchall()
        self.records = [_load(db.scope, row) for row in rows]
        blob = b"".join(row["vector"] for row in rows)
        matrix = np.frombuffer(blob, "<f4").reshape(len(rows), dimensions).astype(np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        self.matrix = np.ascontiguousarray(matrix / np.where(norms == 0, 1, norms))
        self.grants = db.grants()
        self.sources = sorted({s for r in self.records for s in r.access_sources})
        at = {s: i for i, s in enumerate(self.sources)}
        self.first = np.array(
            [at[r.access_sources[0]] if r.access_sources else -1 for r in self.records],
            dtype=np.int64,
        )
        self.derived = [i for i, r in enumerate(self.records) if len(r.access_sources) != 1]

    def granted(self, caller: Authorization) -> np.ndarray:
        allowed = [decide_access(s, self.grants.get(s), caller).allowed for s in self.sources]
        mask: np.ndarray = np.array([*allowed, False])[self.first]  # -1: no source, denied
        for i in self.derived:  # a derived row needs every source it rests on
            sources = self.records[i].access_sources
            mask[i] = bool(sources) and all(allowed[self.sources.index(s)] for s in sources)
        return mask


def _top(scores: np.ndarray, mask: np.ndarray | None, limit: int) -> list[int]:
    """Positions of the best ``limit`` scores allowed by ``mask``, ties by position (id)."""
    positions = np.arange(len(scores)) if mask is None else np.flatnonzero(mask)
    kept = scores[positions]
    if len(kept) > limit:
        kth = np.partition(kept, len(kept) - limit)[len(kept) - limit]
        positions, kept = positions[kept >= kth], kept[kept >= kth]
    return [int(i) for i in positions[np.argsort(-kept, kind="stable")[:limit]]]


class SqliteBackend:
    """The narrow storage port on one SQLite file, with a vector search pushdown."""

    provider = "sqlite"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        self._lock = threading.Lock()
        self._matrices: dict[tuple[Scope, int], tuple[int, _Matrix]] = {}
        with closing(self._connect()) as conn:
            conn.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
            conn.executescript(SCHEMA)
            columns = [row[1] for row in conn.execute("PRAGMA table_info(generations)")]
            if "embedders" not in columns:  # a file written before the embedder claim
                conn.execute("ALTER TABLE generations ADD COLUMN embedders TEXT")
        self._readers = threading.local()  # one read connection per thread, kept open

    def _matrix(self, db: _Db, dimensions: int, pointer: int) -> _Matrix:
        """The cached matrix of the view's committed stamp (built afresh for a write that has
        changed rows: each block has a connection of its own, so its changes are its block's)."""
        if db.conn.total_changes:
            return _Matrix(db, dimensions, pointer)
        row = db.run(f"SELECT stamp FROM stamps WHERE {IN_SCOPE}").fetchone()
        stamp, key = (0 if row is None else row[0]), (db.scope, dimensions)
        with self._lock:
            cached = self._matrices.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        built = _Matrix(db, dimensions, pointer)
        with self._lock:
            self._matrices[key] = (stamp, built)
        return built

    def search_vectors(
        self, view: _Db, vector: Vector, *, admission: Admission, limit: int
    ) -> LegAnswer:
        """The admitted rows nearest ``vector``: visibility and tombstones in SQL (cached
        per stamp), the filter and the grant rule as masks before the top ``limit``."""
        found = self._matrix(view, int(vector.shape[0]), admission.pointer)
        if not found.records:
            return LegAnswer(())
        q = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(q))
        scores = found.matrix @ (q / norm if norm > 0 else q)
        flt, caller = admission.metadata_filter, admission.authorization
        matching = None
        if flt is not None:
            matching = np.array([flt.matches(r.metadata) for r in found.records], dtype=bool)
        mask = matching
        if caller is not None:
            granted = found.granted(caller)
            mask = granted if matching is None else granted & matching
        hits = [ScoredRecord(found.records[i], float(scores[i])) for i in _top(scores, mask, limit)]
        screened: tuple[str, ...] = ()
        if admission.report_denied and caller is not None:
            top = [found.records[i] for i in _top(scores, matching, limit)]
            screened = tuple(
                dict.fromkeys(s for r in top for s in r.access_sources or (r.source_id,))
            )
        return LegAnswer(tuple(hits), screened)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.row_factory = sqlite3.Row
        return conn

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        """This thread's read connection, opened once (a read opening and closing its own
        costs system calls, and the last close of a WAL file checkpoints it); a new one when
        it is busy with another read of the thread."""
        conn: sqlite3.Connection | None = getattr(self._readers, "conn", None)
        if conn is None:
            conn = self._readers.conn = self._connect()
        if conn.in_transaction:
            with closing(self._connect()) as other:
                yield other
        else:
            yield conn

    @contextmanager
    def _transaction(self, scope: Scope, begin: str) -> Iterator[_Db]:
        opened = self._reader() if begin == "BEGIN" else closing(self._connect())
        with opened as conn:
            db = _Db(conn, scope)
            db.run(begin)
            try:
                yield db
            finally:
                if conn.in_transaction:  # left without commit: nothing it wrote stays
                    conn.rollback()

    def read(self, scope: Scope) -> AbstractContextManager[_Db]:
        """One deferred transaction: every statement in it reads the same committed snapshot."""
        return self._transaction(scope, "BEGIN")

    def write(self, scope: Scope) -> AbstractContextManager[_Db]:
        """One ``BEGIN IMMEDIATE`` transaction: it takes the file's one write lock first."""
        return self._transaction(scope, "BEGIN IMMEDIATE")


class SqliteStore(BackendStore):
    """The full ``ChunkStore`` on one SQLite file: the engine over ``SqliteBackend``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(SqliteBackend(path))


def open_sqlite_store(url: str) -> SqliteStore:
    """The ``ragport.stores`` entry point ``sqlite`` (see pyproject.toml): ``sqlite://PATH``.

    ``sqlite:///tmp/x.db`` is the file ``/tmp/x.db``, ``sqlite://x.db`` one in the current
    folder. ragport adds in-memory ingestion-status and checkpoint stores beside it.
    """
    scheme, sep, path = url.partition("://")
    if scheme.lower() != "sqlite" or not sep or not path or "?" in path or "\x00" in path:
        raise ValidationError("a SQLite store URL is sqlite://PATH", field="store")
    return SqliteStore(path)


if TYPE_CHECKING:  # mypy proves the structural match with the port; nothing runs here
    _port: type[StorageBackend] = SqliteBackend
