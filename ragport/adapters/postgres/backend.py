"""``PostgresBackend``: the 15 members of the narrow storage port over ragport's schema.

``BackendStore(PostgresBackend(...))`` is the generation engine over PostgreSQL with no
PostgreSQL-specific rule: the engine decides visibility, grants, tombstones, retirement and
rekeying in Python, row by row; this module only stores and hands back rows, vectors, grants,
tombstones and the scope's three numbers, in the same tables ``PostgresStore`` uses. So a
schema written through either is read correctly by the other, and
``BackendStore(PostgresBackend(...), pushdown=False)`` is the generic path the differential
contract compares PostgreSQL's own SQL against.

What keeps the tables consistent, per member:

- ``insert``: the unit of work's add (binary COPY of rows and vectors, the BM25 statistics of
  the rows, ``live_ids``, the sole-embedder claim, the HNSW index of a new dimension);
- ``update``: the rows leave (their statistics and ``live_ids`` entries with them) and come
  back under their new keys with the same ``row_key``, so their vectors stay where they are
  and a chain of renames never meets itself;
- ``delete``: rows, vectors, statistics and ``live_ids`` in one statement
  (``statements.delete_records``), then the words no stored row holds any more are erased from
  the statistics, as a purge does;
- ``put_tombstones``: ``forgotten`` through ``statements.tombstones_insert`` (which takes the
  named rows out of the statistics), ``corrected`` over a ``forgotten`` one through
  ``tombstones.tombstones_readmit`` (which puts them back);
- ``state`` / ``set_state``: the scope's row, locked by ``write`` (``statements.lock_scope``)
  and written back once, by the commit (``ScopeTransaction.save_state``).

Isolation: a ``read`` (and a ``retrieval_read``, on the replica when there is one) is one
REPEATABLE READ, READ ONLY transaction (one snapshot), begun at its first statement (the
``BEGIN`` in one pipeline with it: no round trip of its own); a read of one statement
(``guarded_search``, ``forgotten_among``, ...) runs with no transaction around it. A ``write`` locks
the scope's row, so writers of one scope are serialized and readers never wait. On a joined
store (``PostgresStore.joined``) both run in savepoints of the host's transaction.
A ``retrieval_read`` on the replica may predate the primary's last forgets: a leg that read
rows there probes the primary's ``forgotten`` tombstones for their ids, sources, lineage and
roots (one statement) and withholds what they name; the guarded query, one snapshot on its
own, is then read again on the primary (``guarded_search``).
``nearest`` streams through a server-side cursor, best first, so the engine reads only as far
as it needs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import text

from ragport.adapters.postgres import embedders, pipelined, queries, reads, rows, statements
from ragport.adapters.postgres._driver import driver_connection, translate_errors
from ragport.adapters.postgres.background import MaintenanceWorker
from ragport.adapters.postgres.connections import Connections, Lent
from ragport.adapters.postgres.history import generation_history
from ragport.adapters.postgres.indexes import DEFAULT_EF_SEARCH, VectorIndexes
from ragport.adapters.postgres.legs import VectorLeg, lexical_leg
from ragport.adapters.postgres.predicate import RSCOPE, SCOPE, VISIBLE, pointer_cte, scope_params
from ragport.adapters.postgres.rows import R_COLUMNS, RECORD_COLUMNS
from ragport.adapters.postgres.settings import DEFAULT_EXACT_ACCESS_ROWS
from ragport.adapters.postgres.tombstones import tombstones_get_sql, tombstones_readmit
from ragport.adapters.postgres.unit_of_work import ScopeTransaction
from ragport.adapters.postgres.vector_writes import VectorWriter
from ragport.domain.filters import Filter
from ragport.domain.model import Authorization, Grant, Record, Scope, Tombstone, is_forgotten
from ragport.ports.backend import GenerationState, RowKey, StorageBackend
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.history import GenerationChange
from ragport.ports.pushdowns import Admission, GuardedAnswer, LegAnswer
from ragport.ports.store import EmbedderKey, ScoredRecord

__all__ = ["PostgresBackend", "transaction_of"]

_T = TypeVar("_T")
_ITERSIZE = 256  # rows per FETCH of ``nearest``'s server-side cursor
_cursor_names = itertools.count()
_IDLE = psycopg.pq.TransactionStatus.IDLE
_KEYS = (
    "(id, generation) IN (SELECT x.i, x.g FROM "
    "unnest(CAST(:ids AS text[]), CAST(:gens AS bigint[])) AS x(i, g))"
)
"""The rows at the keys ``:ids`` / ``:gens`` (pairwise), on ``records`` unaliased."""


def _state(
    counter: int,
    pointer: int,
    floor: int,
    sole: EmbedderKey | None,
    claim: frozenset[EmbedderKey] | None,
) -> GenerationState:
    """The scope's numbers and embedder claim: the engine's stored claim (migration 13), else
    the scope row's sole-embedder claim (``embedders.py``: every stored row carries that key),
    else ``None`` (unknown)."""
    if claim is None and sole is not None:
        claim = frozenset({sole})
    return GenerationState(counter, pointer, floor, embedders=claim)


class _Reader:
    """One transaction's view of one scope (on ``conn``, a unit of work's): the five reading
    members."""

    def __init__(self, conn: Any, scope: Scope, connections: Connections) -> None:
        self._conn = conn
        self.scope = scope
        self._db = connections
        self.s = connections.s

    @property
    def conn(self) -> Any:
        """The connection of the view's transaction."""
        return self._conn

    def once(self, operation: str, run: Callable[[Any], _T]) -> _T:
        """``run(conn)``, a read that needs no transaction of its own (one statement): on
        this view's connection, in its transaction."""
        return self.within(operation, run)

    def within(self, operation: str, run: Callable[[Any], _T]) -> _T:
        """``run(conn)`` in the view's transaction, its statements sent through
        ``reads.fetch`` / ``fetch_generic`` (or sending ``reads.opened(conn)`` first)."""
        with translate_errors(operation):
            return run(self._conn)

    def _fetch(self, operation: str, sql: str, **params: Any) -> list[Any]:
        params = scope_params(self.scope, **params)
        return self.within(operation, lambda conn: reads.fetch(conn, sql, params, prepare=False))

    def state(self) -> GenerationState:
        found = self._fetch(
            "read generations",
            "SELECT counter, pointer, floor, sole_embedder, sole_dimensions, embedder_claim "
            f"FROM {self.s}.scopes WHERE {SCOPE}",
        )
        if not found:
            return GenerationState()
        row = found[0]
        claim = embedders.claim_of(row.embedder_claim)
        sole = embedders.key_of(row)
        return _state(int(row.counter), int(row.pointer), int(row.floor), sole, claim)

    def rows(
        self, *, source_id: str | None = None, ids: Sequence[str] | None = None
    ) -> Iterable[Record]:
        sql = f"SELECT {RECORD_COLUMNS} FROM {self.s}.records WHERE {SCOPE}"
        if source_id is not None:
            sql += " AND source_id = :src"
        if ids is not None:
            sql += " AND id = ANY(CAST(:ids AS text[]))"
        found = self._fetch(
            "read records", sql, src=source_id, ids=None if ids is None else list(ids)
        )
        return [rows.record(self.scope, row) for row in found]

    def nearest(self, vector: Vector) -> Iterable[ScoredRecord]:
        q = np.ascontiguousarray(np.asarray(vector, dtype=np.float32).reshape(-1))
        dims = int(q.shape[0])
        vec = self._db.pgvector()
        distance = f"(v.embedding::{vec.type(dims)} {vec.cosine_distance} :q)"
        # pgvector's cosine distance of a zero vector is NaN: its score is 0.
        score = "CASE WHEN d.distance = 'NaN' THEN 0 ELSE 1 - d.distance END"
        sql = (
            f"SELECT {R_COLUMNS}, {score} AS score FROM {self.s}.records r "
            f"CROSS JOIN LATERAL (SELECT {distance} AS distance FROM {self.s}.record_vectors v "
            "WHERE v.tenant_id = r.tenant_id AND v.resource_id = r.resource_id "
            "AND v.corpus_id = r.corpus_id AND v.row_key = r.row_key) d "
            f"WHERE {RSCOPE} AND r.dimensions = {dims} "
            'ORDER BY score DESC, r.id COLLATE "C", r.generation'
        )
        return self._stream(sql, scope_params(self.scope, q=q))

    def _stream(self, sql: str, params: dict[str, Any]) -> Iterator[ScoredRecord]:
        dbapi = driver_connection(self.conn)
        name = f"ragport_nearest_{next(_cursor_names)}"
        with translate_errors("nearest rows"):
            cursor = dbapi.cursor(name=name, row_factory=namedtuple_row)
            cursor.itersize = _ITERSIZE
            cursor.execute(reads.pyformat(sql), params)
        try:
            while True:
                with translate_errors("nearest rows"):
                    batch: list[Any] = cursor.fetchmany(_ITERSIZE)
                if not batch:
                    return
                for row in batch:
                    yield ScoredRecord(rows.record(self.scope, row), float(row.score))
        finally:
            with suppress(psycopg.Error):
                cursor.close()

    def grants(self, source_ids: Sequence[str] | None = None) -> Mapping[str, Grant]:
        sql = (
            "SELECT source_id, principal_ids, group_ids, access_version "
            f"FROM {self.s}.grants WHERE {SCOPE}"
        )
        if source_ids is not None:
            sql += " AND source_id = ANY(CAST(:ids AS text[]))"
        found = self._fetch(
            "read grants", sql, ids=None if source_ids is None else list(source_ids)
        )
        return {row.source_id: rows.grant(row) for row in found}

    def tombstones(self) -> Sequence[Tombstone]:
        found = self._fetch("read tombstones", statements.tombstones_sql(self.s))
        return [Tombstone(row.id, row.reason) for row in found]


class _Snapshot(_Reader):
    """A ``read`` block's view: lazy. It takes its connection at its first statement (from
    ``Connections.lend``: a replica for ``retrieval_read``, a retry on a dead connection),
    and begins its REPEATABLE READ, READ ONLY transaction only when a read needs one
    (``within``, ``conn``): the ``BEGIN`` waits on the connection (``RawRead.opening``) and
    goes out in one pipeline with the next statement, so it costs no round trip of its own.
    A first ``once`` runs in autocommit, without a transaction: one statement is one
    snapshot (the engine reads nothing more after it, or it begins the snapshot first). On
    a joined view the block is a savepoint of the host's transaction, whose isolation level
    decides."""

    def __init__(self, scope: Scope, connections: Connections, *, replica: bool) -> None:
        super().__init__(None, scope, connections)
        self._replica = replica
        self._keep = Lent()  # gives back the lent connection
        self._began = False
        self._export = False  # export the snapshot with the BEGIN (``companion``)

    def __enter__(self) -> _Snapshot:
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        self.close(error is not None)

    @property
    def conn(self) -> Any:
        """The connection, its transaction begun (for statements not sent through
        ``reads.fetch``: a pending ``BEGIN`` goes out alone)."""
        return self.within("read", reads.opened)

    def once(self, operation: str, run: Callable[[Any], _T]) -> _T:
        if self._conn is not None:
            return self.within(operation, run)
        return self._first(operation, run, opening=False)

    def within(self, operation: str, run: Callable[[Any], _T]) -> _T:
        conn = self._conn
        if conn is None:
            return self._first(operation, run, opening=True)
        if not self._began:
            self._began = True
            if self._db.joined is None:
                conn.opening = _BEGIN
        with translate_errors(operation):
            return run(conn)

    def _first(self, operation: str, run: Callable[[Any], _T], *, opening: bool) -> _T:
        """``run`` on a connection lent for the block (retried once on a dead one), the
        block's ``BEGIN`` waiting on it (``opening``, not on a joined view). The connection
        is kept only once ``run`` answered: after a failure it goes back to the pool (its
        transaction, if the ``BEGIN`` went out, rolled back), and ``close`` must not send
        anything on a connection another thread may hold by then."""
        pipelined = opening and self._db.joined is None

        def first(conn: Any) -> _T:
            exporting = pipelined and self._export
            if pipelined:
                conn.opening = _BEGIN
                conn.export = exporting
            try:
                answer = run(conn)
            except BaseException:
                if pipelined:
                    _end(conn, failed=True)
                if not (exporting and conn.refused) or _lost(conn):
                    raise
                # The server refused the export: the block reads on without a companion.
                conn.refused = self._export = False
                return first(conn)
            self._conn = conn
            self._began = self._began or opening
            return answer

        return self._db.lend(operation, first, self._keep, replica=self._replica)

    def companion(self) -> _Companion | None:
        """``ReadsConcurrently``: asked before the block's first read, which then exports
        its snapshot (``pg_export_snapshot()`` in one pipeline with its ``BEGIN``); ``None``
        on a joined view (one connection: the host's), once the block has read, or when its
        pool could not lend a second connection now (``Connections.may_lend_pair``: no
        export that nobody would import)."""
        if self._conn is not None or not self._db.may_lend_pair(replica=self._replica):
            return None
        self._export = True
        return _Companion(self)

    def close(self, failed: bool) -> None:
        """End the transaction (committed: it wrote nothing, and its search's HNSW settings
        stay on the session; rolled back after a failure) and give the connection back."""
        try:
            conn = self._conn
            if self._began and conn is not None and self._db.joined is None:
                _end(conn, failed=failed)
        finally:
            self._keep.close()


class _Imported(_Reader):
    """A companion's view: ``_Reader`` on a second connection whose transaction imports the
    block's snapshot (its ``BEGIN`` and ``SET TRANSACTION SNAPSHOT`` wait on the connection
    and go out in one pipeline with its first statement)."""

    @property
    def conn(self) -> Any:
        return self.within("read", reads.opened)

    def last(self) -> None:
        """The next statement is the view's last: its ``COMMIT`` goes with it."""
        self._conn.closing = True


class _Companion:
    """``with snapshot.companion() as second``: a reader in the block's snapshot on a second
    pooled connection, for another thread, or ``None`` (read on the block's own connection)
    when the export did not happen or no connection is idle in the pool (never waited for).
    Its exit ends that transaction (``COMMIT``; ``ROLLBACK`` after a failure) and gives the
    connection back; the block's own transaction must stay open until then (an imported
    snapshot must be imported while its exporter is open)."""

    __slots__ = ("_block", "_raw", "_snapshot")

    def __init__(self, snapshot: _Snapshot) -> None:
        self._snapshot = snapshot
        self._block: Any = None
        self._raw: Any = None

    def __enter__(self) -> _Imported | None:
        of = self._snapshot
        first = of._conn
        exported = None if first is None else first.exported
        if exported is None:
            return None
        block = of._db.second_read(first, "hybrid query")
        if block is None:
            return None
        raw = block.__enter__()
        raw.opening, raw.snapshot = _BEGIN, exported
        self._block, self._raw = block, raw
        return _Imported(raw, of.scope, of._db)

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        block, raw, self._block, self._raw = self._block, self._raw, None, None
        if block is None:
            return
        try:
            _end(raw, failed=error is not None)
        finally:
            block.__exit__(None, None, None)  # back to the pool (or discarded if broken)


_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def _lost(conn: Any) -> bool:
    dbapi = driver_connection(conn)
    return bool(dbapi.closed or dbapi.broken)


def _end(conn: Any, *, failed: bool) -> None:
    """End the read transaction on ``conn`` if one began (a ``BEGIN`` still pending is
    dropped: nothing to end): ``COMMIT``, or after a failure ``ROLLBACK`` (the session's
    HNSW settings roll back with it, so their cache goes too)."""
    conn.opening = None
    dbapi = driver_connection(conn)
    if failed:
        conn.connection.info.pop("ragport_hnsw", None)
        if not (dbapi.closed or dbapi.broken) and dbapi.info.transaction_status != _IDLE:
            with suppress(psycopg.Error):
                dbapi.execute("ROLLBACK")
    elif dbapi.info.transaction_status != _IDLE:
        with translate_errors("read"):
            dbapi.execute("COMMIT")


class _Writer(_Reader):
    """One unit of work's transaction over one scope: the reading members and the writing ones.
    ``tx`` is the transaction (``unit_of_work.ScopeTransaction``: its connection, the scope's
    numbers read under the lock, the COPY of records and vectors, commit)."""

    def __init__(self, tx: ScopeTransaction, connections: Connections) -> None:
        super().__init__(tx.conn, tx.scope, connections)
        self.tx = tx
        # Ids no derived row names (``PostgresBackend.retire`` found none), until this unit
        # of work writes a row or a lineage (``rows_written``): ``dependents`` answers them.
        self.no_dependents: frozenset[str] = frozenset()

    def rows_written(self) -> None:
        """A row was added or re-linked: what ``no_dependents`` knew may have changed."""
        self.no_dependents = frozenset()

    def _run(self, operation: str, sql: str, **params: Any) -> Any:
        with translate_errors(operation):
            return self.conn.execute(text(sql), scope_params(self.scope, **params))

    def _count(self, operation: str, sql: str, **params: Any) -> int:
        return int(self._run(operation, sql, **params).scalar_one())

    def state(self) -> GenerationState:
        tx = self.tx
        return _state(tx.counter, tx.pointer, tx.floor, tx.sole, tx.claim)

    def insert(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        self.rows_written()
        if records:
            self.tx.copy_in(records, vectors, _counted(self.s, batch=True))

    def update(self, changes: Mapping[RowKey, Record]) -> None:
        self.rows_written()
        if not changes:
            return
        keys = list(changes)
        # The rows leave with their statistics and live ids, keeping their row keys ...
        left = self._run(
            "update records",
            _leave(self.s, "SELECT chg.id, chg.generation, chg.row_key FROM chg"),
            ids=[k[0] for k in keys],
            gens=[k[1] for k in keys],
        ).all()
        row_keys = {(row.id, int(row.generation)): int(row.row_key) for row in left}
        # ... and come back under their new keys, their vectors untouched.
        new = [changes[key] for key in keys]
        with translate_errors("update records"):
            dbapi = driver_connection(self.conn)
            with dbapi.cursor() as cur, cur.copy(statements.copy_records(self.s)) as copy:
                copy.set_types(rows.COPY_TYPES)
                for key, record in zip(keys, new, strict=True):
                    copy.write_row(rows.copy_row(self.scope, record, row_keys[key]))
        self._run(
            "update records",
            _counted(self.s),
            ids=[r.id for r in new],
            gens=[r.generation for r in new],
        )
        self.tx.gin_rows += len(new)

    def delete(self, keys: Sequence[RowKey]) -> None:
        if not keys:
            return
        ids, gens = [k[0] for k in keys], [k[1] for k in keys]
        lexemes = list(
            self._run("delete records", _key_lexemes(self.s), ids=ids, gens=gens).scalars()
        )
        self.tx.deleted_vectors = True
        self._run("delete records", statements.delete_records(self.s, _KEYS), ids=ids, gens=gens)
        self.tx.deleted(len(keys))
        if lexemes:  # no word of the deleted text stays in the statistics
            self._run("delete records", statements.erase_unused_lexemes(self.s), lx=lexemes)

    def set_state(self, state: GenerationState) -> None:
        """The three numbers and the engine's embedder claim (``scopes.embedder_claim``),
        kept in the transaction and written once, by its commit (``save_state``)."""
        tx = self.tx
        tx.counter, tx.pointer, tx.floor = state.counter, state.pointer, state.floor
        if state.embedders != tx.claim:
            tx.claim = state.embedders
            tx.claim_unsaved = True
        tx.unsaved = True

    def put_grants(self, grants: Sequence[Grant]) -> None:
        latest = {g.source_id: g for g in grants}
        if not latest:
            return
        with translate_errors("set grants"):
            self.conn.execute(
                text(statements.grants_upsert(self.s)),
                [
                    scope_params(
                        self.scope,
                        src=g.source_id,
                        p=list(g.principal_ids),
                        g=list(g.group_ids),
                        v=g.access_version,
                    )
                    for g in latest.values()
                ],
            )

    def put_tombstones(self, tombstones: Sequence[Tombstone]) -> None:
        latest = {t.id: t for t in tombstones}
        if not latest:
            return
        corrected = [i for i, t in latest.items() if t.reason == "corrected"]
        if corrected:  # a forgotten one becomes corrected: its rows count again
            self._run("readmit tombstones", tombstones_readmit(self.s), ids=corrected)
        added = self._run(
            "add tombstones",
            statements.tombstones_insert(self.s),
            ids=list(latest),
            reasons=[t.reason for t in latest.values()],
        ).all()
        self.tx.rows_written += sum(1 for row in added if row.inserted)

    def commit(self) -> None:
        self.tx.commit()


def _alone(view: _Reader, operation: str, sql: str, **params: Any) -> list[Any]:
    """``view._fetch`` for the only statement of the engine's read block (``once``: on a
    fresh ``read`` block it runs with no transaction around it, one round trip)."""
    bound = scope_params(view.scope, **params)
    return view.once(operation, lambda conn: reads.fetch(conn, sql, bound, prepare=False))


def _live_insert(s: str) -> str:
    """A CTE ``li``: the live rows of ``chg`` have their id in ``live_ids``. The narrow port
    may store two live rows of one id (the engine never does), so an id already there stays
    as it is."""
    return (
        f"li AS (INSERT INTO {s}.live_ids (tenant_id, resource_id, corpus_id, id) "
        "SELECT DISTINCT :t, :r, :c, chg.id FROM chg WHERE chg.minus IS NULL "
        f"AND NOT EXISTS (SELECT 1 FROM {s}.live_ids l WHERE l.tenant_id = :t "
        "AND l.resource_id = :r AND l.corpus_id = :c AND l.id = chg.id)), "
    )


def _live_delete(s: str) -> str:
    """A CTE ``ld``: the ids of the live rows ``chg`` removed leave ``live_ids``, unless
    another live row of the id stays (the statement's snapshot still sees the removed rows:
    they are left out by their keys)."""
    return (
        f"ld AS (DELETE FROM {s}.live_ids l WHERE l.tenant_id = :t AND l.resource_id = :r "
        "AND l.corpus_id = :c AND l.id = ANY(ARRAY(SELECT chg.id FROM chg WHERE chg.plus IS NULL)) "
        f"AND NOT EXISTS (SELECT 1 FROM {s}.records r WHERE {RSCOPE} AND r.id = l.id "
        "AND r.retired_generation IS NULL "
        "AND (r.id, r.generation) NOT IN (SELECT chg.id, chg.generation FROM chg))), "
    )


def _leave(s: str, final: str) -> str:
    """Delete the rows at (``:ids``, ``:gens``), with their statistics and live ids; ``final``
    reads ``chg`` (``id``, ``generation``, ``row_key`` per row) and may add CTEs first."""
    return statements.with_stats(
        s,
        f"DELETE FROM {s}.records WHERE {SCOPE} AND {_KEYS} "
        "RETURNING retired_generation AS plus, generation AS minus, tsv, row_key, "
        f"stats_batch AS batch, generation, {statements.NAMED_BY}",
        final,
        after=_live_delete(s),
    )


def _counted(s: str, *, batch: bool = False) -> str:
    """The rows at (``:ids``, ``:gens``) counted into the statistics and ``live_ids``: as
    ``statements.added_stats`` with ``batch`` (an insert; ``:b`` the batch), as row deltas
    without (a rewritten row belongs to no batch)."""
    return statements.with_stats(
        s,
        "SELECT r.generation AS plus, r.retired_generation AS minus, r.tsv, "
        "r.stats_batch AS batch, r.id, r.source_id, r.lineage, r.roots "
        f"FROM {s}.records r JOIN unnest(CAST(:ids AS text[]), CAST(:gens AS bigint[])) "
        f"AS x(id, generation) ON r.id = x.id AND r.generation = x.generation WHERE {RSCOPE}",
        "SELECT count(*) FROM chg",
        after=_live_insert(s),
        batch=batch,
    )


def _key_lexemes(s: str) -> str:
    """The distinct lexemes of the rows at (``:ids``, ``:gens``)."""
    return (
        "SELECT DISTINCT l.lexeme FROM "
        f"{s}.records r CROSS JOIN LATERAL unnest(tsvector_to_array(r.tsv)) AS l(lexeme) "
        f"WHERE {RSCOPE} AND (r.id, r.generation) IN (SELECT x.i, x.g FROM "
        "unnest(CAST(:ids AS text[]), CAST(:gens AS bigint[])) AS x(i, g))"
    )


def _retire(
    conn: Any, s: str, sql: str, bound: dict[str, Any], named: Sequence[str]
) -> tuple[int, bool]:
    """Run ``statements.retire`` (``sql``) with its generic plan (prepared once per
    connection: a custom plan of its ~20 CTEs took ~1 ms to plan on every call; the
    transaction's ``plan_cache_mode`` restored after it, ``reads.GENERIC_LOCAL``), then
    whether a derived row of any generation names an id of ``named`` in its lineage; in one
    pipeline (one round trip)."""
    dbapi = driver_connection(conn)
    probe = (
        f"SELECT EXISTS (SELECT 1 FROM {s}.records WHERE {SCOPE} AND kind = 'derived' "
        "AND lineage && CAST(:ids AS text[])) AS derived"
    )
    query, names = statements.numbered(sql)  # parsed once (``numbered`` says why)
    with psycopg.RawCursor(dbapi) as cur, dbapi.cursor() as found:
        with dbapi.pipeline() if reads.PIPELINE else nullcontext():
            dbapi.execute(reads.GENERIC_LOCAL[0])
            cur.execute(query, [bound[n] for n in names], prepare=True)
            dbapi.execute(reads.GENERIC_LOCAL[1])
            found.execute(reads.pyformat(probe), {**bound, "ids": list(named)})
        retired, derived = cur.fetchone(), found.fetchone()
    assert retired is not None and derived is not None
    return int(retired[0]), bool(derived[0])


def _delete_at_once(conn: Any, s: str, params: dict[str, Any]) -> tuple[Any, Any]:
    """``PostgresBackend.delete_source``'s round trip on ``conn`` (a SQLAlchemy ``Connection``):
    ``BEGIN``, ``statements.lock_scope`` (which also sets the transaction's
    ``plan_cache_mode`` for a generic plan: ``generic``), ``statements.delete_source``
    (prepared, so run with its generic plan) and ``COMMIT`` (which ends the setting), in one
    pipeline (``pipelined.transaction``: libpq's, below psycopg's); the scope's row as locked
    and the statement's answer."""
    if not conn.in_transaction():
        conn.begin()  # SQLAlchemy's bookkeeping only: the driver begins at the statement
    dbapi = driver_connection(conn)
    query, names = statements.numbered(statements.delete_source(s))
    if reads.PIPELINE:
        lock, lock_names = statements.numbered(statements.lock_scope(s, generic=True))
        state, done = pipelined.transaction(
            dbapi,
            [
                pipelined.Step(lock, [params[n] for n in lock_names]),
                pipelined.Step(query, [params[n] for n in names], prepared=True),
            ],
        )
    else:  # a libpq without pipeline mode: one statement after the other
        with (
            dbapi.cursor(row_factory=namedtuple_row) as locked,
            psycopg.RawCursor(dbapi, row_factory=namedtuple_row) as cur,
        ):
            locked.execute(reads.pyformat(statements.lock_scope(s, generic=True)), params)
            cur.execute(query, [params[n] for n in names], prepare=True)
            dbapi.commit()
            state, done = locked.fetchone(), cur.fetchone()
    conn.commit()  # SQLAlchemy's bookkeeping: the driver is idle, nothing is sent
    assert state is not None and done is not None
    return state, done


class PostgresBackend:
    """The narrow storage port on ragport's PostgreSQL schema (see the module docstring).

    ``PostgresBackend(connections, indexes)`` shares a ``PostgresStore``'s collaborators (its
    pool, schema check and joined connection; its HNSW index manager); ``PostgresBackend.
    of(store)`` builds one over a store. Writes and ``read`` run on the primary; ``retrieval_read``
    may run on the read replica (``Connections.lend``: its routing, lag rules and fallback).
    """

    provider = "postgres"
    lexical_modes = ("bm25",)
    """The BM25 leg of ``PostgresStore`` (PostgreSQL's text search, its own statistics)."""

    def __init__(
        self,
        connections: Connections,
        indexes: VectorIndexes,
        *,
        ts_config: str = "english",
        ef_search: int = DEFAULT_EF_SEARCH,
        exact_rows: int = DEFAULT_EXACT_ACCESS_ROWS,
        maintenance: MaintenanceWorker | None = None,
        vector_writer: VectorWriter | None = None,
    ) -> None:
        self._db = connections
        self._indexes = indexes
        self._ts_config = ts_config
        self._ef_search = ef_search
        self._search = (ef_search, exact_rows)  # VectorLeg's search
        self._maintenance = maintenance  # after-commit merges and re-analyses (None: inline)
        self._vectors = vector_writer  # large adds' vectors on a second connection (or None)

    @classmethod
    def of(cls, store: Any) -> PostgresBackend:
        """The backend over ``store``'s (a ``PostgresStore``) connections and indexes, whose
        writes go as the store's own do: after-commit maintenance on its worker, large adds'
        vectors through its vector writer."""
        return cls(
            store._db,
            store._indexes,
            ts_config=store._ts_config,
            ef_search=store._ef_search,
            exact_rows=store._exact_rows,
            maintenance=store._maintenance,
            vector_writer=store._vectors,
        )

    @property
    def connections(self) -> Connections:
        return self._db

    # -- pushdowns (ragport.ports.pushdowns): today's SQL ----------------------------------
    def guarded_search(
        self,
        view: _Reader,
        vector: Vector,
        *,
        embedder: EmbedderKey | None,
        authorization: Authorization | None,
        metadata_filter: Filter | None,
        report_denied: bool,
        limit: int,
    ) -> GuardedAnswer:
        """``legs.VectorLeg``: the pointer, the drift guard and the hits in one statement
        (``view.once``: no transaction on a fresh read block). When the answer needs more
        statements (the denial report's; the exact foreign embedders when the guard's probes
        found a row that may be foreign), they run in the view's snapshot, the search again
        with them."""
        leg = VectorLeg(
            self._db.s, view.scope, vector, vec=self._db.pgvector, search=self._search,
            limit=limit, authorization=authorization, flt=metadata_filter,
            guard=cast("tuple[str, int] | None", embedder), report=report_denied,
        )  # fmt: skip
        # A report needs two statements (one snapshot): no lone statement first.
        found = None if leg.report else view.once("query", leg.alone)
        if found is None:
            found = view.within("query", leg)
        foreign, hits, screened = found
        on_replica = bool(hits or screened) and self._on_replica(view)
        if on_replica and self._forgotten_on_primary(view.scope, hits, screened):
            # The replica's snapshot predates a forget committed on the primary: the primary
            # answers instead, from one snapshot of its own (its full limit, its report).
            with self.read(view.scope) as fresh:
                return self.guarded_search(
                    fresh, vector, embedder=embedder, authorization=authorization,
                    metadata_filter=metadata_filter, report_denied=report_denied, limit=limit,
                )  # fmt: skip
        return GuardedAnswer(foreign, LegAnswer(hits, screened))

    def search_vectors(
        self, view: _Reader, vector: Vector, *, admission: Admission, limit: int
    ) -> LegAnswer:
        """``legs.VectorLeg``: the HNSW walk with the whole admission predicate in SQL."""
        leg = VectorLeg(
            self._db.s, view.scope, vector, vec=self._db.pgvector, search=self._search,
            limit=limit, authorization=admission.authorization, flt=admission.metadata_filter,
            report=admission.report_denied,
        )  # fmt: skip
        _, hits, screened = view.within("query", leg)
        return self._unforgotten(view, hits, screened)

    def search_lexical(
        self, view: _Reader, text: str, *, mode: str, admission: Admission, limit: int
    ) -> LegAnswer:
        """``legs.lexical_leg``: BM25 over PostgreSQL's text search (its docstring says how
        it scores), the admission predicate in SQL."""
        leg = lexical_leg(
            self._db.s, view.scope, text, ts_config=self._ts_config, limit=limit,
            authorization=admission.authorization, flt=admission.metadata_filter,
            report=admission.report_denied,
        )  # fmt: skip
        if type(view) is _Imported and not (
            admission.report_denied and admission.authorization is not None
        ):
            view.last()  # a companion's one statement: its COMMIT in one pipeline with it
        hits, screened = view.within("lexical query", leg)
        return self._unforgotten(view, hits, screened)

    # -- a replica's answer checked against the primary's forgets ----------------------------
    def _on_replica(self, view: _Reader) -> bool:
        """Whether ``view`` reads on the read replica (a ``retrieval_read`` block that was not
        routed to the primary): its snapshot may predate the primary's last commits."""
        replica = self._db.replica
        return replica is not None and getattr(view._conn, "engine", None) is replica

    def _forgotten_on_primary(
        self, scope: Scope, hits: Sequence[ScoredRecord], screened: Sequence[str] = ()
    ) -> frozenset[str]:
        """The ids among the hits' ids, sources, lineage and roots, and the denial report's
        ``screened`` source ids, that a ``forgotten`` tombstone names on the primary now: one
        probe of the tombstones' primary key per id, one round trip, on a primary connection
        of its own."""
        named = set[str](screened)
        for hit in hits:
            r = hit.record
            named.update((r.id, r.source_id, *r.lineage, *r.roots))
        sql = queries.forgotten_sql(self._db.s) + " AND id = ANY(CAST(:ids AS text[]))"
        params = scope_params(scope, ids=sorted(named))
        found = self._db.read("look up tombstones", lambda conn: reads.fetch(conn, sql, params))
        return frozenset(row.id for row in found)

    def _unforgotten(
        self, view: _Reader, hits: tuple[ScoredRecord, ...], screened: tuple[str, ...]
    ) -> LegAnswer:
        """A hybrid leg's answer, less the hits and the denial report's sources a forget
        committed on the primary withholds when the leg read on the replica (the legs share
        one snapshot: none is read again)."""
        if not (hits or screened) or not self._on_replica(view):
            return LegAnswer(hits, screened)
        forgotten = self._forgotten_on_primary(view.scope, hits, screened)
        if not forgotten:
            return LegAnswer(hits, screened)
        kept = tuple(h for h in hits if not is_forgotten(h.record, forgotten))
        return LegAnswer(kept, tuple(s for s in screened if s not in forgotten))

    def embedders(self, view: _Reader) -> frozenset[EmbedderKey]:
        """The visible rows' keys, from the (scope, embedder_id, dimensions) index."""
        rows = view._fetch("list embedders", queries.embedders_sql(self._db.s))
        return frozenset((row.embedder_id, row.dimensions) for row in rows)

    def source_id_page(self, view: _Reader, *, after: str | None, limit: int) -> Sequence[str]:
        s = self._db.s
        sql = (
            pointer_cte(s) + f'SELECT DISTINCT r.source_id COLLATE "C" AS source_id '
            f"FROM {s}.records r, sc WHERE {RSCOPE} AND {VISIBLE} AND r.kind = 'chunk' "
            + ('AND r.source_id COLLATE "C" > :after ' if after is not None else "")
            + "ORDER BY 1 LIMIT :limit"
        )
        rows = _alone(view, "list sources", sql, after=after, limit=limit)
        return [str(row.source_id) for row in rows]

    def history(self, view: _Reader, *, limit: int, max_ids: int) -> Sequence[GenerationChange]:
        """``history.generation_history``: one statement over the generations' rows."""

        return generation_history(view.once, self._db.s, view.scope, limit=limit, max_ids=max_ids)

    def forgotten_among(self, view: _Reader, ids: Sequence[str]) -> frozenset[str]:
        """One probe of the tombstones' primary key per id."""
        sql = queries.forgotten_sql(self._db.s) + " AND id = ANY(:ids)"
        return frozenset(row.id for row in _alone(view, "look up tombstones", sql, ids=list(ids)))

    def tombstones_among(self, view: _Reader, ids: Sequence[str]) -> Sequence[Tombstone]:
        """One probe of the tombstones' primary key per id."""
        rows = _alone(view, "look up tombstones", tombstones_get_sql(self._db.s), ids=list(ids))
        return [Tombstone(row.id, row.reason) for row in rows]

    def dependents(self, view: _Reader, ids: Sequence[str]) -> Sequence[Record]:
        """The derived rows naming ``ids`` in their lineage (the GIN index on lineage); none,
        without a statement, when this unit of work's last retirement found that no derived
        row names them (``_retire``) and it has written no row since."""
        if isinstance(view, _Writer) and view.no_dependents.issuperset(ids):
            return []
        found = view._fetch("find dependents", statements.dependents_sql(self._db.s), ids=list(ids))
        return [rows.record(view.scope, row) for row in found]

    # -- set-based writes: the statements of the engine's decisions (it checked the rule) -----
    def retire(
        self,
        view: _Writer,
        *,
        source_id: str | None = None,
        ids: Sequence[str] | None = None,
        generation: int,
    ) -> int:
        """``statements.retire``: one statement, statistics and live ids with it."""
        params: dict[str, Any]
        if source_id is not None:
            where, params = "source_id = :src", {"src": source_id}
        else:
            where, params = "id = ANY(:ids)", {"ids": list(ids or ())}
        tx, s = view.tx, self._db.s
        named = [source_id] if source_id is not None else list(ids or ())
        bound = scope_params(view.scope, g=generation, p=tx.pointer, **params)
        with translate_errors("retire records"):
            retired, derived = _retire(view.conn, s, statements.retire(s, where), bound, named)
        # The engine reads the rows' dependents next (pinned records retire with them): when
        # no derived row names them, ``dependents`` answers that without a statement.
        view.no_dependents = frozenset() if derived else frozenset(named)
        # Usually a HOT update (no index entry), but not for a row whose page lacks room,
        # such as every row written before migration 9: merge after those too.
        tx.gin_rows += retired
        tx.fold_due = True  # it may have retired batches whole: fold them after the commit
        return retired

    def delete_where(
        self,
        view: _Writer,
        *,
        source_id: str | None = None,
        above: int | None = None,
        retired_through: int | None = None,
    ) -> int:
        """``statements.delete_records`` by source, above a generation, or retired through
        one (compaction folds the statistics too)."""
        tx, s = view.tx, self._db.s
        tx.deleted_vectors = True
        # First the batches retired whole and not folded yet (under this writer's scope lock):
        # their stored amounts must leave the totals before compaction drops the batches or a
        # purge erases their lexemes' totals.
        view._run("fold statistics", statements.fold_retired(s))
        if source_id is not None:
            return self._purge_source(view, source_id)
        if above is not None:
            sql = statements.delete_records(s, statements.DISCARD_ABOVE)
            return tx.deleted(view._count("rewrite generations", sql, g=above))
        assert retired_through is not None
        sql = statements.delete_records(s, statements.PURGE_RETIRED)
        purged = tx.deleted(view._count("rewrite generations", sql, g=retired_through))
        fold = min(retired_through, tx.pointer)
        for statement in statements.fold_stats(s):
            view._run("rewrite generations", statement, g=fold)
        return purged

    def _purge_source(self, view: _Writer, source_id: str) -> int:
        s = self._db.s
        found = view._run("purge source", statements.source_lexemes(s), src=source_id)
        lexemes = list(found.scalars())
        sql = statements.delete_records(s, statements.PURGE_SOURCE)
        purged = view.tx.deleted(view._count("purge source", sql, src=source_id))
        if lexemes:  # the words of the purged text leave the statistics too
            view._run("purge source", statements.erase_unused_lexemes(s), lx=lexemes)
        return purged

    def restore_above(self, view: _Writer, generation: int) -> int:
        sql = statements.restore_above_sql(self._db.s)
        restored = view._count("rewrite generations", sql, g=generation)
        view.tx.gin_rows += restored  # as retire
        return restored

    def move(self, view: _Writer, moves: Mapping[str, str], *, to_source_id: str) -> int:
        """``statements.rekey_update`` with its statistics (the engine checked the collision
        rule: nothing is checked again here)."""
        view.rows_written()
        if not moves:
            return 0
        old, new = list(moves), [moves[k] for k in moves]
        view._run(
            "re-key records", statements.rekey_stats(self._db.s), old=old, new=new, to=to_source_id
        )
        moved = int(
            view._run(
                "re-key records",
                statements.rekey_update(self._db.s),
                old=old,
                new=new,
                to=to_source_id,
            ).rowcount
        )
        view.tx.gin_rows += moved  # a re-keyed row is a new tuple in every index
        return moved

    def rename_lineage(self, view: _Writer, from_id: str, to_id: str) -> int:
        """``statements.lineage_stats`` then ``lineage_update`` of each derived row naming
        ``from_id``; answers the lineage edges renamed."""
        view.rows_written()
        s = self._db.s
        found = view._run("rewrite lineage", statements.lineage_rows_sql(s), f=from_id).all()
        if not found:
            return 0

        def swap(ids: Sequence[str]) -> list[str]:
            return list(dict.fromkeys(to_id if i == from_id else i for i in ids))

        view._run("rewrite lineage", statements.lineage_stats(s), f=from_id, to=to_id)
        with translate_errors("rewrite lineage"):
            view.conn.execute(
                text(statements.lineage_update(s)),
                [
                    scope_params(
                        view.scope,
                        id=row.id,
                        g=row.generation,
                        lineage=swap(row.lineage),
                        roots=swap(row.roots),
                    )
                    for row in found
                ],
            )
        view.tx.gin_rows += len(found)
        return sum(list(row.lineage).count(from_id) for row in found)

    def revoke_grants(self, view: _Writer, source_ids: Sequence[str]) -> int:
        """``statements.grants_revoke``: the grants of ``source_ids`` that name anyone made
        empty, read and written in one statement."""
        params = scope_params(view.scope, ids=list(source_ids))
        sql = reads.pyformat(statements.grants_revoke(self._db.s))
        with translate_errors("set grants"):
            return int(driver_connection(view.conn).execute(sql, params).rowcount)

    def delete_source(self, scope: Scope, source_id: str) -> tuple[int, int] | None:
        """``DeletesSource``: the scope lock, then ``statements.delete_source`` (the
        generation from the locked row, the retirement, the grant revoke and the publish in
        one statement, with its generic plan), in one pipeline with the ``BEGIN`` and the
        ``COMMIT``: one round trip. ``None`` on a joined view (nothing sent: the host's
        transaction is not this one's to commit), and when a derived row names the source
        (the statement wrote nothing; its transaction committed empty)."""
        if self._db.joined is not None:
            return None
        s = self._db.s
        with self._db.connect("unit of work") as conn:
            committed = False
            try:
                with translate_errors("delete source"):
                    state, done = _delete_at_once(conn, s, scope_params(scope, src=source_id))
                committed = True
                if done.g is None:
                    return None
                tx = self._transaction(scope, conn, state, None)
                tx.gin_rows, tx.fold_due = int(done.retired), True  # as ``retire``
                tx.after_commit()
                if tx.position is not None:
                    self._db.record_position(tx.position)
                return int(done.g), int(done.retired)
            finally:
                if not committed:
                    conn.rollback()

    def merge_tombstones(self, view: _Writer, tombstones: Sequence[Tombstone]) -> int:
        """``statements.tombstones_insert``: a ``forgotten`` one is never downgraded, and the
        rows it names leave the statistics in the same statement."""
        if not tombstones:
            return 0
        added = view._run(
            "add tombstones",
            statements.tombstones_insert(self._db.s),
            ids=[t.id for t in tombstones],
            reasons=[t.reason for t in tombstones],
        ).all()
        count = sum(1 for row in added if row.inserted)
        view.tx.rows_written += count
        return count

    def prepare(self, scope: Scope, *, dimensions: int) -> None:
        """Create the HNSW index for ``dimensions`` if missing, before any write transaction
        (``PostgresStore.prepare`` says why); on a joined store, inside the host's."""
        if self._db.joined is not None:  # in the host's transaction: no commit, no ANALYZE
            with self._db.connect("prepare") as conn:
                self._indexes.ensure(conn, dimensions)
            self._indexes.forget(dimensions)  # the host may still roll it back: read it again
            return
        with self._db.connect("prepare") as conn:
            self._indexes.ensure(conn, dimensions)
            conn.commit()
            self._indexes.analyze_once(conn, scope.tenant_id)

    def read(self, scope: Scope) -> _Snapshot:
        """One REPEATABLE READ, READ ONLY transaction on the primary (``_Snapshot``: begun
        at the first read that needs it), committed at the end (it wrote nothing; committing
        keeps the session's HNSW settings its search made); a savepoint rolled back on a
        joined store."""
        return _Snapshot(scope, self._db, replica=False)

    def retrieval_read(self, scope: Scope) -> _Snapshot:
        """``read`` on the read replica when the store has one (``Connections``: its lag
        rules and fallback); a read of one statement (``guarded_search``) runs with no
        transaction around it (measured: BEGIN, the state and COMMIT around a vector query
        cost about 0.2 ms, 10% of it). The legs' rows read there are checked against the
        primary's forgets (``_forgotten_on_primary``)."""
        return _Snapshot(scope, self._db, replica=True)

    @contextmanager
    def write(self, scope: Scope) -> Iterator[_Writer]:
        """Lock the scope's row (``statements.lock_scope``) in one transaction (a savepoint of the host's
        on a joined store); the engine's commit commits it, leaving the block without one rolls
        it back (and sweeps the vectors its adds wrote ahead)."""
        with self._db.connect("unit of work") as conn:
            tx: ScopeTransaction | None = None
            savepoint = None
            try:
                with translate_errors("lock scope"):
                    lock = statements.lock_scope(self._db.s)
                    if self._db.joined is not None:
                        savepoint = conn.begin_nested()
                        state = conn.execute(text(lock), scope_params(scope)).one()
                    else:
                        state = _locked(conn, lock, scope_params(scope))
                tx = self._transaction(scope, conn, state, savepoint)
                yield _Writer(tx, self._db)
                if tx.done and tx.position is not None:
                    self._db.record_position(tx.position)
            finally:
                if tx is None:
                    if savepoint is not None:
                        savepoint.rollback()
                    elif self._db.joined is None:
                        conn.rollback()
                elif not tx.done:
                    tx.rollback()

    def _transaction(self, scope: Scope, conn: Any, state: Any, savepoint: Any) -> ScopeTransaction:
        return ScopeTransaction(
            scope,
            conn,
            state,
            s=self._db.s,
            indexes=self._indexes,
            track_position=self._db.replica is not None,
            maintenance=self._maintenance,
            # A joined view writes on the host's one connection: large adds stay serial.
            vector_writer=None if savepoint is not None else self._vectors,
            savepoint=savepoint,
        )


def _locked(conn: Any, sql: str, params: dict[str, Any]) -> Any:
    """The scope's row, locked by ``sql`` (``statements.lock_scope``) at the start of the
    transaction on ``conn`` (a SQLAlchemy ``Connection``, in a transaction from here on, so
    its commit commits): the driver's ``BEGIN`` goes in one pipeline with it (one round trip,
    not two)."""
    if not conn.in_transaction():
        conn.begin()  # SQLAlchemy's bookkeeping only: the driver begins at the statement
    dbapi = driver_connection(conn)
    with dbapi.cursor(row_factory=namedtuple_row) as cur:
        with dbapi.pipeline() if reads.PIPELINE else nullcontext():
            cur.execute(reads.pyformat(sql), params)
        return cur.fetchone()


def transaction_of(uow: object) -> ScopeTransaction | None:
    """The PostgreSQL transaction under ``uow``, a unit of work of a store over a
    ``PostgresBackend`` (``PostgresStore``'s): ``None`` for any other object."""
    writer = getattr(uow, "writer", None)
    return writer.tx if isinstance(writer, _Writer) else None


if TYPE_CHECKING:  # mypy proves the structural match with the port; nothing runs here
    _port: type[StorageBackend] = PostgresBackend
