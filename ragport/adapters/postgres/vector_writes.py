"""Vectors written beside their records: a write's HNSW inserts on a second connection.

Most of a write's time is pgvector inserting its vectors into the HNSW graph (138 of the
180 ms of a 100-row source at m 24 / ef_construction 128). The records' own work (their
COPY, the generated tsvectors, the BM25 statistics, ``live_ids``) does not need the vectors,
so an add of at least ``parallel_vector_rows`` rows (``PostgresStore``, default 4) runs the
COPY of most of its vectors (``ahead_share``: 11 in 20) on a second connection, in a thread,
while the unit of work's connection copies the records and then the rest of the vectors: the
HNSW inserts run on two server processes at once (concurrent inserts are pgvector's own:
each holds the index's update lock in share mode). Measured (600 sources x 10 chunks in
rounds of 100, load ~10 on 2 cores, ABBA): 41.8 -> 65.0 chunks/s, where the vectors wholly
on the second connection had overlapped only the records' COPY, 3% of the vectors' time.

Atomicity is kept by order and invisibility. A vector row is found only through its record
(every read joins ``record_vectors`` to ``records`` by ``row_key``), so vectors committed
without their records are invisible. The second connection commits the vectors together
with a marker row in ``vector_writes`` (migration 11: the scope, the first key, every key);
the unit of work waits for that commit, deletes the marker in its own transaction, and
commits the records (with its own share of the vectors, written in its transaction). So:

- the unit of work commits: records, vectors and the marker's deletion become visible
  together (the vectors had been committed, unseen, a moment before);
- it rolls back, fails, or its process dies: the records were never visible; the marker
  names the vectors left behind, which ``sweep`` deletes (the writer sweeps its own at once
  after a rollback; a killed writer's are swept by the next store's maintenance thread or
  ``PostgresStore.sweep_vector_writes()``). Until then they are dead weight in the HNSW
  graph: a vector query walks them and finds no record.

Before the second connection starts, the unit of work takes a transaction advisory lock on
the write (``lock_sql``), held until it commits or rolls back. ``sweep`` takes only markers
whose lock it can take, and reads them again in a statement that starts after it holds the
locks: a marker it sees then belongs to a unit of work that has ended without deleting it,
which is to say rolled back. The second connection commits with ``synchronous_commit = off``:
the unit of work's own commit flushes the WAL past it, and until then nothing is visible.

An add runs serially (one connection, as before) when it is smaller than the threshold, when
the unit of work has just created the dimension's HNSW index in its own transaction (the
index's lock would block the second connection), when it deleted vector rows earlier in the
transaction, when the indexes are deferred (no HNSW insert to overlap), or when the pool has
no connection to spare (``slots``: at most half the pool's connections wait on a second one).
It also falls back to serial when the second connection waits more than ``LOCK_TIMEOUT_MS``
for a table lock: DDL queued behind the unit of work (``DROP SCHEMA``, a migration) would
otherwise wait on it while it waits on the second connection, a deadlock the server cannot
see; on the unit of work's own connection the server sees it, or the DDL finishes first.
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from collections.abc import Sequence
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, text
from sqlalchemy.pool import NullPool, QueuePool

from ragport.adapters.postgres import reads, rows, statements
from ragport.adapters.postgres._driver import driver_connection, translate_errors
from ragport.adapters.postgres.pool import has_free_connection
from ragport.adapters.postgres.predicate import scope_params
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope
from ragport.ports.embedder import VectorMatrix

__all__ = [
    "DEFAULT_PARALLEL_VECTOR_ROWS",
    "VectorJob",
    "VectorWriter",
    "ahead_share",
    "copy_vectors",
    "validate_parallel_vector_rows",
    "vector_writes_sql",
]

DEFAULT_PARALLEL_VECTOR_ROWS = 4
"""An add of at least this many rows writes its vectors on a second connection."""
MAX_PARALLEL_VECTOR_ROWS = 1_000_000
LOCK_TIMEOUT_MS = 1000
"""How long the second connection waits for a table lock before the add falls back to
writing its vectors on the unit of work's connection (where the server sees any deadlock)."""
_UNBOUNDED = 64
_SCOPE = "tenant_id = :t AND resource_id = :r AND corpus_id = :c"
# Markers whose unit of work has ended: those whose advisory lock this transaction can take.
_TAKE = (
    "SELECT tenant_id, resource_id, corpus_id, first_key FROM {s}.vector_writes "
    "WHERE pg_try_advisory_xact_lock(:ns, CAST(first_key % 2147483648 AS integer)) LIMIT :n"
)
# The vectors of one tenant's taken markers (``:r``, ``:c``, ``:k`` pairwise) that have no
# record, and the markers themselves.
_SWEEP = (
    "WITH m AS (SELECT w.* FROM {s}.vector_writes w JOIN unnest(CAST(:r AS text[]), "
    "CAST(:c AS text[]), CAST(:k AS bigint[])) AS x(r, c, k) ON w.resource_id = x.r "
    "AND w.corpus_id = x.c AND w.first_key = x.k WHERE w.tenant_id = :t), "
    "gone AS (DELETE FROM {s}.record_vectors v USING m WHERE v.tenant_id = m.tenant_id "
    "AND v.resource_id = m.resource_id AND v.corpus_id = m.corpus_id "
    "AND v.row_key = ANY(m.keys) AND NOT EXISTS (SELECT 1 FROM {s}.records r "
    "WHERE r.tenant_id = v.tenant_id AND r.resource_id = v.resource_id "
    "AND r.corpus_id = v.corpus_id AND r.row_key = v.row_key) RETURNING 1), "
    "done AS (DELETE FROM {s}.vector_writes w USING m WHERE w.tenant_id = m.tenant_id "
    "AND w.resource_id = m.resource_id AND w.corpus_id = m.corpus_id "
    "AND w.first_key = m.first_key) SELECT count(*) FROM gone"
)


def ahead_share(rows_: int) -> int:
    """How many of an add's ``rows_`` vectors go to the second connection (the first ones):
    11 in 20, rounded up; the unit of work's connection inserts the rest after its records,
    whose COPY and statistics are the smaller part of its work."""
    return rows_ - rows_ * 9 // 20


def validate_parallel_vector_rows(rows_: object) -> int | None:
    """``None`` (never) or a row count of 1..``MAX_PARALLEL_VECTOR_ROWS``, else
    ``ValidationError(field="parallel_vector_rows")``."""
    if rows_ is None:
        return None
    if isinstance(rows_, bool) or not isinstance(rows_, int):
        raise ValidationError(
            "parallel_vector_rows must be None or a row count", field="parallel_vector_rows"
        )
    if not 1 <= rows_ <= MAX_PARALLEL_VECTOR_ROWS:
        raise ValidationError(
            f"parallel_vector_rows must be 1..{MAX_PARALLEL_VECTOR_ROWS:,}",
            field="parallel_vector_rows",
        )
    return rows_


def vector_writes_sql(s: str) -> Sequence[str]:
    """Migration 11: ``vector_writes``, one row per add whose vectors were committed ahead of
    its records and whose unit of work has not committed (yet, or ever)."""
    return (
        f"""CREATE TABLE IF NOT EXISTS {s}.vector_writes (
            tenant_id text NOT NULL, resource_id text NOT NULL, corpus_id text NOT NULL,
            first_key bigint NOT NULL,
            keys bigint[] NOT NULL,
            written_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT vector_writes_pkey PRIMARY KEY (tenant_id, resource_id, corpus_id, first_key)
        )""",
    )


def copy_vectors(
    cur: psycopg.Cursor[Any], s: str, scope: Scope, keys: Sequence[int], dims: int, matrix: Any
) -> None:
    """The binary COPY of an add's vectors into ``record_vectors`` under ``keys``, on
    ``cur``'s connection (the second connection's, or the unit of work's when serial)."""
    with cur.copy(statements.copy_vectors(s)) as copy:
        copy.set_types(rows.VECTOR_COPY_TYPES)
        for key, vector in zip(keys, matrix, strict=True):
            copy.write_row(rows.vector_row(scope, key, dims, vector))


def _lock_space(schema: str) -> int:
    """The first half of the two-int advisory lock key of this schema's vector writes."""
    value = zlib.crc32(f"ragport:{schema}:vector-writes".encode())
    return value - (1 << 32) if value >= (1 << 31) else value


def _lock_key(first_key: int) -> int:
    return first_key % (1 << 31)


def _pool_slots(engine: Engine) -> int:
    """How many adds may hold a second connection at once without starving the pool."""
    pool = engine.pool
    if isinstance(pool, NullPool):
        return _UNBOUNDED
    if isinstance(pool, QueuePool):
        overflow = int(getattr(pool, "_max_overflow", 0))
        capacity = _UNBOUNDED * 2 if overflow < 0 else pool.size() + overflow
        return max(0, capacity // 2 - 1)
    return 0  # a single-connection pool: always serial


class VectorJob:
    """One add's vectors, being written on a second connection (``VectorWriter.start``)."""

    def __init__(
        self, writer: VectorWriter, scope: Scope, keys: Sequence[int], dims: int, matrix: Any
    ) -> None:
        self.first_key = int(keys[0])
        self._writer = writer
        self._scope = scope
        self._keys = [int(k) for k in keys]
        self._dims = dims
        self._matrix = matrix
        self._error: BaseException | None = None
        self.timed_out = False  # its lock wait ran past LOCK_TIMEOUT_MS: nothing committed
        self._thread = threading.Thread(target=self._run, name="ragport-vectors", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        writer, scope = self._writer, self._scope
        try:
            with translate_errors("add vectors"), writer.engine.connect() as conn:
                conn.begin()  # SQLAlchemy's bookkeeping (its commit below commits)
                dbapi = driver_connection(conn)
                try:
                    # BEGIN, the settings and the marker in one round trip, then the COPY.
                    with dbapi.pipeline() if reads.PIPELINE else contextlib.nullcontext():
                        dbapi.execute("SET LOCAL synchronous_commit = off")
                        # A lock request that waits on the unit of work (DDL queued behind it:
                        # DROP SCHEMA, a migration) would wait forever: the unit of work waits
                        # here, out of the server's deadlock detector. So give up soon and let
                        # it write serially.
                        dbapi.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
                        dbapi.execute(
                            reads.pyformat(
                                f"INSERT INTO {writer.s}.vector_writes (tenant_id, resource_id, "
                                "corpus_id, first_key, keys) VALUES (:t, :r, :c, :k, :keys)"
                            ),
                            scope_params(scope, k=self.first_key, keys=self._keys),
                        )
                    with dbapi.cursor() as cur:
                        copy_vectors(cur, writer.s, scope, self._keys, self._dims, self._matrix)
                except psycopg.Error:
                    # Straight on psycopg, past SQLAlchemy's disconnect detection: a
                    # connection that lost its server must not go back into the pool.
                    if dbapi.closed or dbapi.broken:
                        conn.invalidate()
                    raise
                conn.commit()
        except BaseException as exc:  # handed to the unit of work's thread by ``result``
            if getattr(exc, "sqlstate", None) == "55P03":
                self.timed_out = True  # rolled back: nothing committed, write serially
            else:
                self._error = exc
        finally:
            self._matrix = None
            writer.release()

    def wait(self) -> None:
        """Wait until the vectors are committed or have failed (never leaves them running)."""
        self._thread.join()

    def result(self) -> None:
        """``wait``, then raise the second connection's error (a typed ``RagportError``)."""
        self.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class VectorWriter:
    """The second connections of one store's adds, and the sweep of what rolled back."""

    def __init__(self, engine: Engine, schema: str, s: str, threshold: int | None) -> None:
        self.engine = engine
        self.schema = schema
        self.s = s
        self._space = _lock_space(schema)
        slots = _pool_slots(engine)
        self._slots = threading.BoundedSemaphore(max(1, slots))
        self._threshold = threshold if slots > 0 else None  # no slot ever: always serial

    def wants(self, rows_: int) -> bool:
        """Whether an add of ``rows_`` rows should write its vectors beside its records."""
        return self._threshold is not None and rows_ >= self._threshold

    def start(
        self, conn: Connection, scope: Scope, keys: Sequence[int], dims: int, matrix: VectorMatrix
    ) -> VectorJob | None:
        """Lock the write in ``conn``'s transaction and start its vectors' COPY on a second
        connection; ``None`` (write them serially) when no pool slot is free."""
        if not has_free_connection(self.engine):
            return None  # the host holds the rest: a second connection would wait for it
        if not self._slots.acquire(blocking=False):
            return None
        try:
            with translate_errors("add vectors"):
                conn.execute(
                    text("SELECT pg_advisory_xact_lock(:ns, :k)"),
                    {"ns": self._space, "k": _lock_key(int(keys[0]))},
                )
            return VectorJob(self, scope, keys, dims, matrix)
        except BaseException:
            self._slots.release()
            raise

    def release(self) -> None:
        self._slots.release()

    def committed(self, conn: Connection, scope: Scope, job: VectorJob) -> None:
        """After ``job``'s vectors committed: delete its marker in ``conn``'s transaction."""
        with translate_errors("add vectors"):
            conn.execute(
                text(f"DELETE FROM {self.s}.vector_writes WHERE {_SCOPE} AND first_key = :k"),
                scope_params(scope, k=job.first_key),
            )

    def sweep(self, conn: Connection, limit: int = 1000) -> int:
        """Delete the vectors of adds whose unit of work ended without committing (rolled
        back, failed, or its process died), and their markers; returns the vectors deleted.
        Markers of units of work still running are skipped (their lock is held). Commits."""
        with translate_errors("sweep vector writes"):
            taken = conn.execute(
                text(_TAKE.format(s=self.s)), {"ns": self._space, "n": limit}
            ).all()
            if not taken:
                conn.commit()
                return 0
            # A new statement, so a new snapshot: taken after the locks, it sees every unit of
            # work that held one as ended; a marker still there is one that never committed.
            # One statement per tenant, each naming it (Citus routes it to one shard).
            gone = 0
            for tenant_id in sorted({row.tenant_id for row in taken}):
                mine = [row for row in taken if row.tenant_id == tenant_id]
                gone += int(
                    conn.execute(
                        text(_SWEEP.format(s=self.s)),
                        {
                            "t": tenant_id,
                            "r": [row.resource_id for row in mine],
                            "c": [row.corpus_id for row in mine],
                            "k": [int(row.first_key) for row in mine],
                        },
                    ).scalar_one()
                )
            conn.commit()
        return int(gone)
