"""SqliteStore: a small third-party ChunkStore on the standard library's sqlite3.

The worked example of docs/adapters.md. One SQLite file holds every scope; vectors are float32
blobs scored by brute-force cosine in numpy; the metadata filter, the grant rule and the
tombstone rule run in Python through the domain's own functions, before the limit.

Isolation: the file is in WAL mode, and every unit of work and every read opens its *own*
connection. A unit of work is one ``BEGIN IMMEDIATE`` transaction (SQLite allows one writer
at a time, so writers on a scope, and on every other scope, are serialized and never
interleave); a read is one deferred transaction, so all its statements see one committed
snapshot and never wait for a writer. Nothing is shared between threads but the file path.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from ragport.domain.errors import ScopeError, StoreError, ValidationError, raise_unchained
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
    is_forgotten,
    strongest_tombstone,
    validate_text,
)
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.store import (
    ChunkStore,
    EmbedderKey,
    ScoredRecord,
    check_records_for_add,
    check_stored_ids,
    rekey_collides,
)

__all__ = ["SqliteStore", "open_sqlite_store"]

BUSY_TIMEOUT_S = 60.0  # how long a writer waits for the one write lock before StoreError

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    tenant TEXT NOT NULL, resource TEXT NOT NULL, corpus TEXT NOT NULL,
    id TEXT NOT NULL, generation INTEGER NOT NULL, retired_generation INTEGER,
    source_id TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL, metadata TEXT NOT NULL,
    embedder_id TEXT, dimensions INTEGER, content_hash TEXT,
    lineage TEXT NOT NULL, roots TEXT NOT NULL,
    chunk_index INTEGER, chunk_start INTEGER, chunk_end INTEGER, vector BLOB NOT NULL,
    PRIMARY KEY (tenant, resource, corpus, id, generation));
CREATE INDEX IF NOT EXISTS records_by_source ON records (tenant, resource, corpus, source_id);
CREATE TABLE IF NOT EXISTS generations (
    tenant TEXT NOT NULL, resource TEXT NOT NULL, corpus TEXT NOT NULL,
    counter INTEGER NOT NULL, pointer INTEGER NOT NULL, floor INTEGER NOT NULL,
    PRIMARY KEY (tenant, resource, corpus));
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
VISIBLE = "generation <= :p AND (retired_generation IS NULL OR retired_generation > :p)"


def _record(scope: Scope, row: sqlite3.Row) -> Record:
    """A fresh Record from a row: json.loads builds new objects, so nothing aliases the file."""
    return Record(
        id=row["id"],
        scope=scope,
        source_id=row["source_id"],
        kind=row["kind"],
        text=row["text"],
        metadata=json.loads(row["metadata"]),
        embedder_id=row["embedder_id"],
        dimensions=row["dimensions"],
        generation=row["generation"],
        retired_generation=row["retired_generation"],
        content_hash=row["content_hash"],
        lineage=tuple(json.loads(row["lineage"])),
        roots=tuple(json.loads(row["roots"])),
        chunk_index=row["chunk_index"],
        start=row["chunk_start"],
        end=row["chunk_end"],
    )


def _allowed(record: Record, grants: Mapping[str, Grant], caller: Authorization) -> bool:
    """The grant rule for one record: a derived record needs every root source allowed."""
    sources = record.access_sources
    return bool(sources) and all(decide_access(s, grants.get(s), caller).allowed for s in sources)


class _Db:
    """One connection's view of one scope: every statement of the store goes through ``run``."""

    def __init__(self, conn: sqlite3.Connection, scope: Scope) -> None:
        self.conn = conn
        self.scope = scope
        self._key = {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id}

    def run(self, sql: str, **params: Any) -> sqlite3.Cursor:
        """Execute ``sql`` with the scope bound as ``:t :r :c``; driver errors become StoreError."""
        try:
            return self.conn.execute(sql, {**self._key, **params})
        except sqlite3.Error as exc:  # the one translation point; its message may quote data
            raise_unchained(StoreError(f"sqlite: {type(exc).__name__}"))

    def records(self, where: str, **params: Any) -> list[Record]:
        rows = self.run(f"SELECT * FROM records WHERE {IN_SCOPE} AND {where} ORDER BY id", **params)
        return [_record(self.scope, row) for row in rows]

    def visible(self, where: str = "1", **params: Any) -> list[Record]:
        return self.records(f"{VISIBLE} AND {where}", p=self.pointer(), **params)

    def state(self) -> tuple[int, int, int]:
        """``(counter, pointer, floor)``; a scope never written has ``(0, 0, 0)``."""
        row = self.run(
            f"SELECT counter, pointer, floor FROM generations WHERE {IN_SCOPE}"
        ).fetchone()
        return (0, 0, 0) if row is None else (row[0], row[1], row[2])

    def pointer(self) -> int:
        return self.state()[1]

    def forgotten(self) -> frozenset[str]:
        rows = self.run(f"SELECT id FROM tombstones WHERE {IN_SCOPE} AND reason = 'forgotten'")
        return frozenset(row[0] for row in rows)

    def grants(self) -> dict[str, Grant]:
        rows = self.run(f"SELECT * FROM grants WHERE {IN_SCOPE}")
        return {
            row["source_id"]: Grant(
                row["source_id"],
                json.loads(row["principal_ids"]),
                json.loads(row["group_ids"]),
                row["access_version"],
            )
            for row in rows
        }


class _Records:
    """``RecordRepository``: every method is one or a few statements on the unit's connection."""

    def __init__(self, db: _Db) -> None:
        self._db = db

    def add(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        # The port's own checks, all before the first write: a refused add writes nothing.
        matrix = check_records_for_add(self._db.scope, records, vectors)
        ids = json.dumps([r.id for r in records])
        check_stored_ids(
            records, self._db.records("id IN (SELECT value FROM json_each(:i))", i=ids)
        )
        for record, vector in zip(records, matrix, strict=True):
            self._db.run(
                "INSERT INTO records VALUES (:t, :r, :c, :id, :generation,"
                " :retired_generation, :source_id, :kind, :text, :metadata, :embedder_id,"
                " :dimensions, :content_hash, :lineage, :roots, :chunk_index, :start, :end, :vector)",
                id=record.id,
                generation=record.generation,
                retired_generation=record.retired_generation,
                source_id=record.source_id,
                kind=record.kind,
                text=record.text,
                metadata=json.dumps(record.metadata, allow_nan=False),
                embedder_id=record.embedder_id,
                dimensions=record.dimensions,
                content_hash=record.content_hash,
                lineage=json.dumps(record.lineage),
                roots=json.dumps(record.roots),
                chunk_index=record.chunk_index,
                start=record.start,
                end=record.end,
                vector=np.asarray(vector, dtype="<f4").tobytes(),
            )

    def list_by_source(self, source_id: str) -> Sequence[Record]:
        return self._db.visible("source_id = :s", s=source_id)

    def retire_source(self, source_id: str, *, generation: int) -> int:
        return self._retire("source_id = :s", generation, s=source_id)

    def retire_ids(self, ids: Sequence[str], *, generation: int) -> int:
        return sum(self._retire("id = :id", generation, id=i) for i in dict.fromkeys(ids))

    def _retire(self, where: str, generation: int, **params: Any) -> int:
        db, live = self._db, "retired_generation IS NULL AND generation < :g"
        counted = db.run(
            f"SELECT COUNT(*) FROM records WHERE {IN_SCOPE} AND {where} AND {live}"
            " AND generation <= :p",
            g=generation,
            p=db.pointer(),
            **params,
        ).fetchone()[0]
        db.run(
            f"DELETE FROM records WHERE {IN_SCOPE} AND {where} AND generation = :g",
            g=generation,
            **params,
        )
        db.run(
            f"UPDATE records SET retired_generation = :g WHERE {IN_SCOPE} AND {where} AND {live}",
            g=generation,
            **params,
        )
        return int(counted)

    def discard_above(self, generation: int) -> int:
        return self._delete("generation > :g", g=generation)

    def list_live(
        self, source_id: str, *, after: str | None = None, limit: int | None = None
    ) -> Sequence[Record]:
        live = self._db.records(
            "source_id = :s AND retired_generation IS NULL AND (:a IS NULL OR id > :a)",
            s=source_id,
            a=after,
        )
        return live if limit is None else live[:limit]

    def find_dependents(self, ids: Sequence[str]) -> Sequence[Record]:
        wanted = set(ids)
        return [r for r in self._db.records("kind = 'derived'") if wanted.intersection(r.lineage)]

    def rekey(self, moves: Mapping[str, str], *, to_source_id: str) -> int:
        db = self._db
        floor = db.state()[2]
        rows = db.run(
            f"SELECT * FROM records WHERE {IN_SCOPE} AND retired_generation IS NULL"
            " AND id IN (SELECT value FROM json_each(:ids))",
            ids=json.dumps(list(moves)),
        ).fetchall()
        moving = {(row["id"], row["generation"]) for row in rows}
        for row in rows:
            for existing in db.records("id = :id", id=moves[row["id"]]):
                if (existing.id, existing.generation) not in moving and rekey_collides(
                    row["generation"], existing, floor
                ):
                    raise ValidationError(
                        "a destination id is visible in a restorable snapshot", field="to_id"
                    )
        for row in rows:  # delete all, then insert all: a chain of moves never meets itself
            db.run(
                f"DELETE FROM records WHERE {IN_SCOPE} AND id = :id AND generation = :g",
                id=row["id"],
                g=row["generation"],
            )
        for row in rows:
            values = {**dict(row), "id": moves[row["id"]], "source_id": to_source_id}
            db.run(
                f"INSERT INTO records ({', '.join(values)}) VALUES ({', '.join(':' + k for k in values)})",
                **values,
            )
        return len(rows)

    def rewrite_lineage(self, from_id: str, to_id: str) -> int:
        edges = 0
        for r in self._db.records("kind = 'derived'"):
            if from_id not in r.lineage and from_id not in r.roots:
                continue
            edges += r.lineage.count(from_id)
            lineage = list(dict.fromkeys(to_id if i == from_id else i for i in r.lineage))
            roots = list(dict.fromkeys(to_id if i == from_id else i for i in r.roots))
            self._db.run(
                f"UPDATE records SET lineage = :l, roots = :o WHERE {IN_SCOPE} AND id = :id AND generation = :g",
                l=json.dumps(lineage),
                o=json.dumps(roots),
                id=r.id,
                g=r.generation,
            )
        return edges

    def purge_source(self, source_id: str) -> int:
        return self._delete("source_id = :s", s=source_id)

    def restore_above(self, generation: int) -> int:
        cursor = self._db.run(
            f"UPDATE records SET retired_generation = NULL WHERE {IN_SCOPE} AND retired_generation > :g",
            g=generation,
        )
        return cursor.rowcount

    def purge_retired(self, through: int) -> int:
        return self._delete("retired_generation <= :g", g=through)

    def _delete(self, where: str, **params: Any) -> int:
        return self._db.run(f"DELETE FROM records WHERE {IN_SCOPE} AND {where}", **params).rowcount


class _Generations:
    """``GenerationRepository`` on one row per scope: ``(counter, pointer, floor)``."""

    def __init__(self, db: _Db) -> None:
        self._db = db

    def _set(self, counter: int, pointer: int, floor: int) -> None:
        self._db.run(
            "INSERT OR REPLACE INTO generations VALUES (:t, :r, :c, :counter, :pointer, :floor)",
            counter=counter,
            pointer=pointer,
            floor=floor,
        )

    def current(self) -> int:
        return self._db.state()[1]

    def counter(self) -> int:
        return self._db.state()[0]

    def stage(self) -> int:
        counter, pointer, floor = self._db.state()
        if counter == pointer:
            counter += 1
            self._set(counter, pointer, floor)
        return counter

    def publish(self, generation: int) -> None:
        counter, pointer, floor = self._db.state()
        if not pointer <= generation <= counter:
            raise ValidationError(
                "publish needs pointer <= generation <= counter", field="generation"
            )
        self._set(counter, generation, floor)

    def reset(self, generation: int) -> None:
        if generation < 0:
            raise ValidationError("generation must be non-negative", field="generation")
        self._set(generation, generation, self._db.state()[2])

    def floor(self) -> int:
        return self._db.state()[2]

    def raise_floor(self, generation: int) -> None:
        counter, pointer, floor = self._db.state()
        self._set(counter, pointer, max(floor, generation))


class _Grants:
    def __init__(self, db: _Db) -> None:
        self._db = db

    def set(self, grants: Sequence[Grant]) -> None:
        for g in grants:
            self._db.run(
                "INSERT OR REPLACE INTO grants VALUES (:t, :r, :c, :s, :p, :g, :v)",
                s=g.source_id,
                p=json.dumps(g.principal_ids),
                g=json.dumps(g.group_ids),
                v=g.access_version,
            )

    def get(self, source_ids: Sequence[str]) -> Mapping[str, Grant]:
        grants = self._db.grants()
        return {s: grants[s] for s in source_ids if s in grants}


class _Tombstones:
    def __init__(self, db: _Db) -> None:
        self._db = db

    def add(self, tombstones: Sequence[Tombstone]) -> int:
        existing = {t.id: t for t in self.list()}
        new = 0
        for t in tombstones:
            new += t.id not in existing
            existing[t.id] = kept = strongest_tombstone(existing.get(t.id), t)
            self._db.run(
                "INSERT OR REPLACE INTO tombstones VALUES (:t, :r, :c, :id, :reason)",
                id=kept.id,
                reason=kept.reason,
            )
        return new

    def list(self) -> Sequence[Tombstone]:
        rows = self._db.run(f"SELECT id, reason FROM tombstones WHERE {IN_SCOPE} ORDER BY id")
        return [Tombstone(row[0], row[1]) for row in rows]


class _UnitOfWork:
    """One ``BEGIN IMMEDIATE`` transaction on a connection of its own."""

    def __init__(self, db: _Db) -> None:
        self.scope = db.scope
        self.records = _Records(db)
        self.generations = _Generations(db)
        self.grants = _Grants(db)
        self.tombstones = _Tombstones(db)
        self._db = db
        self.finished = False

    def commit(self) -> None:
        if self.finished:
            raise ValidationError("unit of work already finished", field="unit_of_work")
        self.finished = True
        self._db.run("COMMIT")

    def rollback(self) -> None:
        if not self.finished:
            self.finished = True
            self._db.run("ROLLBACK")


class SqliteStore:
    """A transactional, generation-versioned ChunkStore with grants, in one SQLite file."""

    provider = "sqlite"
    capabilities = Capabilities(authorization="acl", generations=True, transactions=True)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        with closing(self._connect()) as conn:
            conn.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
            conn.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.row_factory = sqlite3.Row
        return conn

    @contextmanager
    def _transaction(self, scope: Scope, begin: str) -> Iterator[_Db]:
        if not isinstance(scope, Scope):
            raise ScopeError("scope must be a Scope", field="scope")
        with closing(self._connect()) as conn:
            db = _Db(conn, scope)
            db.run(begin)
            try:
                yield db
            finally:
                if conn.in_transaction:
                    conn.rollback()

    @contextmanager
    def unit_of_work(self, scope: Scope) -> Iterator[_UnitOfWork]:
        with self._transaction(scope, "BEGIN IMMEDIATE") as db:
            yield _UnitOfWork(db)  # leaving without commit(): _transaction rolls back

    def _read(self, scope: Scope) -> AbstractContextManager[_Db]:
        """One deferred transaction: every statement in it reads the same committed snapshot."""
        return self._transaction(scope, "BEGIN")

    # -- reads ------------------------------------------------------------------------------
    def current_generation(self, scope: Scope) -> int:
        with self._read(scope) as db:
            return db.pointer()

    def get_by_source(self, scope: Scope, source_id: str) -> Sequence[Record]:
        validate_text(source_id, field="source_id")  # NUL or a lone surrogate: refused, not "none"
        with self._read(scope) as db:
            return list(db.visible("source_id = :s", s=source_id))

    def list_embedders(self, scope: Scope) -> frozenset[EmbedderKey]:
        with self._read(scope) as db:
            rows = db.run(
                f"SELECT DISTINCT embedder_id, dimensions FROM records WHERE {IN_SCOPE} AND {VISIBLE}",
                p=db.pointer(),
            )
            return frozenset((row[0], row[1]) for row in rows)

    def foreign_embedders(
        self, scope: Scope, embedder_id: str, dimensions: int
    ) -> frozenset[EmbedderKey]:
        return frozenset(k for k in self.list_embedders(scope) if k != (embedder_id, dimensions))

    def list_invalidated_ids(self, scope: Scope) -> frozenset[str]:
        with self._read(scope) as db:
            return frozenset(db.forgotten())

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
        flt = parse_filter(metadata_filter)
        q = np.asarray(vector, dtype=np.float64).reshape(-1)
        with self._read(scope) as db:  # pointer, rows, tombstones and grants: one snapshot
            rows = db.run(
                f"SELECT * FROM records WHERE {IN_SCOPE} AND {VISIBLE} AND dimensions = :d",
                p=db.pointer(),
                d=q.shape[0],
            ).fetchall()
            forgotten, grants = db.forgotten(), db.grants()
        if limit <= 0 or not rows:
            return []
        matrix = np.stack([np.frombuffer(row["vector"], dtype="<f4") for row in rows])
        norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(q) or 1.0)
        scores = ((matrix @ q) / np.where(norms == 0, 1.0, norms)).tolist()

        # Best first (ties by id), the whole predicate applied to each row *before* it counts
        # toward the limit; rows are turned into Records only as far as the walk goes.
        hits: list[ScoredRecord] = []
        unfiltered: list[Record] = []  # the top `limit` before the grant rule, for on_denied
        for i in sorted(range(len(rows)), key=lambda i: (-scores[i], rows[i]["id"])):
            record = _record(scope, rows[i])
            if is_forgotten(record, forgotten) or (
                flt is not None and not flt.matches(record.metadata)
            ):
                continue
            if len(unfiltered) < limit:
                unfiltered.append(record)
            if authorization is None or _allowed(record, grants, authorization):
                hits.append(ScoredRecord(record, scores[i]))
                if len(hits) == limit:
                    break
        if authorization is not None and on_denied is not None:
            sources = dict.fromkeys(
                s for r in unfiltered for s in r.access_sources or (r.source_id,)
            )
            decisions = (decide_access(s, grants.get(s), authorization) for s in sources)
            denied = [d for d in decisions if not d.allowed]
            if denied:
                on_denied(denied)
        return hits

    # -- grants -----------------------------------------------------------------------------
    def set_source_access(self, scope: Scope, grants: Sequence[Grant]) -> None:
        with self.unit_of_work(scope) as uow:
            uow.grants.set(list(grants))
            uow.commit()

    def check_source_access(
        self, scope: Scope, source_ids: Sequence[str], authorization: Authorization
    ) -> Mapping[str, AccessDecision]:
        wanted = [validate_text(s, field="source_ids") for s in dict.fromkeys(source_ids)]
        with self._read(scope) as db:
            grants = db.grants()
        return {s: decide_access(s, grants.get(s), authorization) for s in wanted}

    def get_source_access(self, scope: Scope, source_ids: Sequence[str]) -> Mapping[str, Grant]:
        wanted = [validate_text(s, field="source_ids") for s in dict.fromkeys(source_ids)]
        with self._read(scope) as db:
            grants = db.grants()
        return {s: grants[s] for s in wanted if s in grants}

    def list_source_ids(
        self, scope: Scope, *, after: str | None = None, limit: int = 1_000
    ) -> Sequence[str]:
        with self._read(scope) as db:
            ids = sorted({r.source_id for r in db.visible("kind = 'chunk'")})
        return [s for s in ids if after is None or s > after][:limit]


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
    _port: type[ChunkStore] = SqliteStore
