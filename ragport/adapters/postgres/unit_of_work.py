"""One PostgreSQL write transaction over one locked scope: the I/O under the engine's unit of
work (``ragport.engine.unit_of_work``), which ``PostgresBackend.write`` opens.

No store rule lives here: the engine checks, merges and decides; ``PostgresBackend``'s writer
and write pushdowns turn its decisions into statements on ``conn``. This class keeps what is
PostgreSQL's own: the scope's numbers as read under the row lock (``set_state`` keeps them,
``save_state`` writes them back once, before the commit), binary COPY of records and their
vectors (``copy_in``: one round trip per batch, ~4x text parameters; most of the vectors of
a large add on a second connection through ``vector_writes.VectorWriter``, the rest here, so
their HNSW inserts run on two server processes; swept if the transaction does not commit), the sole-embedder claim (``embedders.py``), commit with the WAL position
for replicas, the savepoint of a joined view, and the index maintenance a commit schedules.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, NestedTransaction, text
from sqlalchemy.exc import SQLAlchemyError

from ragport.adapters.postgres import embedders, reads, rows, statements
from ragport.adapters.postgres._driver import driver_connection, translate_errors
from ragport.adapters.postgres.background import MaintenanceWorker, fold_retired
from ragport.adapters.postgres.indexes import VectorIndexes
from ragport.adapters.postgres.predicate import scope_params
from ragport.adapters.postgres.vector_writes import VectorWriter, ahead_share, copy_vectors
from ragport.domain.errors import RagportError, ValidationError
from ragport.domain.model import Record, Scope
from ragport.ports.embedder import VectorMatrix

__all__ = ["ScopeTransaction"]

_LOG = logging.getLogger(__name__)


def _batches(records: Sequence[Record], keys: Sequence[int]) -> list[int | None]:
    """Each row's statistics batch (migration 8): in an add of live rows of one generation,
    one batch per source, keyed by the first row key of the source's rows, so deleting or
    replacing one source of a batched write retires its batch whole (one ``lexical_batches``
    row) instead of writing a delta per lexeme; otherwise none."""
    if len({r.generation for r in records}) != 1 or any(
        r.retired_generation is not None for r in records
    ):
        return [None] * len(records)
    first: dict[str, int] = {}
    return [first.setdefault(r.source_id, k) for r, k in zip(records, keys, strict=True)]


class ScopeTransaction:
    """One transaction on ``conn`` over ``scope``, whose row ``state`` was read locked."""

    def __init__(
        self,
        scope: Scope,
        conn: Connection,
        state: Any,
        *,
        s: str,
        indexes: VectorIndexes,
        track_position: bool = False,
        maintenance: MaintenanceWorker | None = None,
        vector_writer: VectorWriter | None = None,
        savepoint: NestedTransaction | None = None,
    ):
        self.scope = scope
        # On a joined view (``PostgresStore.joined``): this unit of work is ``savepoint`` of
        # the host's transaction; commit releases it, and the host's commit publishes.
        self.savepoint = savepoint
        self.track_position = track_position
        # After commit (with ``track_position``): the primary's WAL position at or after it.
        self.position: str | None = None
        self.conn = conn
        self.s = s
        self.indexes = indexes
        # After-commit merges and re-analyses: on this worker's thread, or inline (None).
        self.maintenance = maintenance
        # Adds of many rows write their vectors on a second connection (vector_writes.py):
        # whether one did (its vectors are swept if this unit of work does not commit), and
        # whether a statement of this transaction deleted vector rows (then adds are serial).
        self.vector_writer = vector_writer
        self.wrote_ahead = False
        self.deleted_vectors = False
        # An add failed after its vectors committed and the host went on to commit: the
        # marker stayed, so the commit sweeps (its lock went with the transaction).
        self.unswept = False
        self.counter, self.pointer, self.floor = (
            int(state.counter),
            int(state.pointer),
            int(state.floor),
        )
        # Every row of the scope carries this (embedder id, dimensions), or None: no claim
        # (embedders.py; the scope's row holds it for the vector queries' drift guard).
        self.sole = embedders.key_of(state)
        # The engine's embedder claim (migration 13), read with the lock (``GenerationState.
        # embedders``; ``PostgresBackend``'s ``set_state`` writes it back).
        self.claim = embedders.claim_of(state.embedder_claim)
        # ``set_state`` changed the numbers (and the claim) since they were read: the commit
        # writes them, once (``save_state``), however many generation steps the unit took.
        self.unsaved = False
        self.claim_unsaved = False
        self.done = False
        # The rows whose statements may have written GIN entries (added, retired, restored,
        # re-keyed or re-linked): commit hands them to ``VectorIndexes.merge_pending``, which
        # merges the pending lists once enough have accumulated (``merge_pending_lists``).
        self.gin_rows = 0
        self.rows_written = 0  # records and tombstones added (analyze_after_commit)
        # A retirement may have retired batches whole: fold them after the commit
        # (``background.fold_retired``), off the writer's path.
        self.fold_due = False
        self.created_indexes: set[int] = set()  # HNSW indexes this unit of work created

    def copy_in(self, records: Sequence[Record], matrix: VectorMatrix, stats: str) -> None:
        """Write ``records`` (checked) and their vectors ``matrix``, then count them with
        ``stats`` (``statements.added_stats`` or a statement of its binds and shape)."""
        conn = self.conn
        with translate_errors("add records"):
            dims = int(matrix.shape[1])
            created = self.indexes.ensure(conn, dims)
            if created:
                self.created_indexes.add(dims)
            keys = [
                int(row.k)
                for row in conn.execute(
                    text(statements.allocate_keys(self.s)), {"n": len(records)}
                ).all()
            ]
            batches = _batches(records, keys)
            # Most of the vectors on a second connection, beside the records and the rest of
            # the vectors (vector_writes.py): the HNSW inserts on two server processes at
            # once, unless this add is small, follows a vector delete, or its unit of work
            # created the index (this add or an earlier one: the uncommitted CREATE INDEX holds
            # a lock the second connection would wait on until LOCK_TIMEOUT_MS, every add).
            writer = self.vector_writer
            ahead = ahead_share(len(records))
            job = (
                writer.start(conn, self.scope, keys[:ahead], dims, matrix[:ahead])
                if writer is not None
                and writer.wants(len(records))
                and dims not in self.created_indexes
                and not self.indexes.deferred
                and not self.deleted_vectors
                else None
            )
            own = slice(ahead if job is not None else 0, None)  # this connection's vectors
            # One savepoint for the add: a failure of either connection undoes its records.
            with conn.begin_nested():
                try:
                    dbapi = driver_connection(conn)
                    with dbapi.cursor() as cur:
                        with cur.copy(statements.copy_records(self.s)) as copy:
                            copy.set_types(rows.COPY_TYPES)
                            for record, key, batch in zip(records, keys, batches, strict=True):
                                copy.write_row(rows.copy_row(self.scope, record, key, batch))
                        if keys[own]:
                            copy_vectors(cur, self.s, self.scope, keys[own], dims, matrix[own])
                    conn.execute(
                        text(stats),
                        scope_params(
                            self.scope,
                            ids=[r.id for r in records],
                            gens=[r.generation for r in records],
                        ),
                    )
                    sole = embedders.sole_after_add(
                        conn,
                        self.s,
                        self.scope,
                        self.sole,
                        {(r.embedder_id, r.dimensions) for r in records},
                    )
                finally:
                    if job is not None:
                        self.wrote_ahead = True
                        # Never leave the vectors' connection running past the add; until
                        # the marker is deleted below, a commit would leave them to a sweep.
                        self.unswept = True
                        job.wait()
                if job is not None and writer is not None:
                    job.result()
                    if job.timed_out:  # the second connection gave up a lock wait: serially
                        with driver_connection(conn).cursor() as cur:
                            copy_vectors(
                                cur, self.s, self.scope, keys[:ahead], dims, matrix[:ahead]
                            )
                    else:
                        writer.committed(conn, self.scope, job)
                    self.unswept = False
            self.sole = sole  # the savepoint held: the scope's row says so too
            self.gin_rows += len(records)
            self.rows_written += len(records)

    def deleted(self, count: int) -> int:
        """After ``count`` rows were deleted: a scope without a sole-embedder claim may have
        one now (the last rows of a former embedder went)."""
        if count and self.sole is None:
            with translate_errors("rewrite generations"):
                self.sole = embedders.refresh(self.conn, self.s, self.scope)
        return count

    def _state_update(self) -> tuple[str, dict[str, Any]]:
        """``save_state``'s statement and binds."""
        claim = {"claim": embedders.claim_value(self.claim)} if self.claim_unsaved else {}
        sql = statements.save_generations(self.s, claim=self.claim_unsaved)
        return sql, scope_params(self.scope, n=self.counter, p=self.pointer, f=self.floor, **claim)

    def save_state(self) -> None:
        """Write the scope's numbers, and the claim when it changed, if a step changed them:
        one UPDATE of the locked row before the commit. Nothing in the transaction reads them
        from the table before (its statements take the pointer as a bind)."""
        if not self.unsaved:
            return
        sql, params = self._state_update()
        with translate_errors("save generations"):
            self.conn.execute(text(sql), params)
        self.unsaved = self.claim_unsaved = False

    def _save_and_commit(self) -> None:
        """``save_state``'s UPDATE and the ``COMMIT`` in one pipeline (one round trip), then
        SQLAlchemy's commit (the driver is idle by then: it sends nothing)."""
        if self.unsaved and reads.PIPELINE:
            sql, params = self._state_update()
            dbapi = driver_connection(self.conn)
            with dbapi.pipeline():
                dbapi.execute(reads.pyformat(sql), params)
                dbapi.commit()
            self.unsaved = self.claim_unsaved = False
        else:
            self.save_state()
        self.conn.commit()

    def commit(self) -> None:
        if self.done:
            raise ValidationError("unit of work already finished", field="unit_of_work")
        if self.savepoint is not None:
            self.save_state()
            self._release()
            return
        with translate_errors("commit"):
            self._save_and_commit()
        self.after_commit()

    def after_commit(self) -> None:
        """What follows the commit of this transaction (``commit``'s, or the one a
        ``PostgresBackend.delete_source`` pipeline ended with): the WAL position for
        replicas, the sweep of vectors written ahead, the index maintenance."""
        with translate_errors("commit"):
            if self.track_position:
                # At or after this commit's WAL record: what a replica must replay to show it.
                self.position = str(
                    self.conn.execute(text("SELECT pg_current_wal_lsn()::text")).scalar_one()
                )
                self.conn.commit()
        self.done = True
        if self.unswept:
            self.sweep_vectors()
        tenant, indexes = self.scope.tenant_id, self.indexes
        if self.maintenance is None:  # inline (maintenance_delay=None)
            if self.fold_due:
                fold_retired(self.conn, self.s, tenant)
            if self.gin_rows:
                indexes.merge_pending(self.conn, tenant, self.gin_rows)
            indexes.analyze_after_commit(self.conn, tenant, self.rows_written)
            return
        analyze = False
        if not indexes.analyzed:  # the first ANALYZE stays inline: plans need it at once
            indexes.analyze_after_commit(self.conn, tenant, self.rows_written)
        else:
            analyze = indexes.due_for_analysis(self.rows_written)
        merge = self.gin_rows > 0 and indexes.due_for_merge(tenant, self.gin_rows)
        self.maintenance.schedule(tenant, merge=merge, analyze=analyze, fold=self.fold_due)

    def _release(self) -> None:
        """Commit of a joined unit of work: release its savepoint; no commit, nothing inline.

        The host may still roll back, so the indexes this unit of work created are read from
        the catalog again next time, and its merges and re-analyses go to the maintenance
        thread (which finds nothing to do if the host rolled back)."""
        assert self.savepoint is not None
        with translate_errors("release savepoint"):
            self.savepoint.commit()
        self.done = True
        for dimensions in self.created_indexes:
            self.indexes.forget(dimensions)
        if self.maintenance is not None:
            tenant, indexes = self.scope.tenant_id, self.indexes
            analyze = not indexes.analyzed or indexes.due_for_analysis(self.rows_written)
            merge = self.gin_rows > 0 and indexes.due_for_merge(tenant, self.gin_rows)
            self.maintenance.schedule(tenant, merge=merge, analyze=analyze, fold=self.fold_due)

    def rollback(self) -> None:
        if not self.done and self.savepoint is not None:
            self.done = True
            for dimensions in self.created_indexes:
                self.indexes.forget(dimensions)
            with translate_errors("roll back savepoint"):
                self.savepoint.rollback()
            return
        if not self.done:
            self.conn.rollback()
            self.done = True
            self.sweep_vectors()

    def sweep_vectors(self) -> None:
        """After a rollback (or a commit that followed a failed add): delete the vectors this
        unit of work's adds committed ahead of records that never committed (its advisory
        locks went with the transaction). Logged, not raised, on failure: the vectors are
        invisible, and the next sweep takes them."""
        if not self.wrote_ahead or self.vector_writer is None:
            return
        self.wrote_ahead = False
        try:
            self.vector_writer.sweep(self.conn)
        except RagportError as exc:
            with contextlib.suppress(SQLAlchemyError):
                self.conn.rollback()
            _LOG.warning(
                "ragport: deleting the vectors of a rolled-back write in %s failed (SQLSTATE "
                "%s); they are invisible, and the next sweep deletes them",
                self.vector_writer.schema,
                getattr(exc, "sqlstate", None) or "unknown",
            )
