"""The PostgreSQL unit of work and its repositories: one locked scope row, one transaction.

The unit of work holds the scope's counter, pointer and floor as read under ``FOR UPDATE``;
the generation repository writes them back on every change. Records are written with binary
COPY (one round trip per batch, ~4x text parameters): the rows into ``records``, their vectors
into ``record_vectors`` under fresh row keys (``statements.allocate_keys``). No later write of
the unit of work touches a vector (see ``statements``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, NestedTransaction, text
from sqlalchemy.exc import SQLAlchemyError

from ragport.adapters.postgres import embedders, reads, rows, statements, tombstones
from ragport.adapters.postgres._driver import driver_connection, translate_errors
from ragport.adapters.postgres.background import MaintenanceWorker
from ragport.adapters.postgres.indexes import VectorIndexes
from ragport.adapters.postgres.predicate import scope_params
from ragport.adapters.postgres.queries import grants_sql
from ragport.adapters.postgres.reads import RawRead
from ragport.adapters.postgres.vector_writes import VectorWriter, copy_vectors
from ragport.domain.errors import RagportError, ValidationError
from ragport.domain.model import (
    Grant,
    Record,
    Scope,
    Tombstone,
    strongest_tombstone,
    validate_text,
)
from ragport.engine.generations import GenerationSteps
from ragport.ports.backend import GenerationState
from ragport.ports.embedder import VectorMatrix
from ragport.ports.store import check_records_for_add, check_rekey_moves, check_stored_ids

__all__ = ["PostgresUnitOfWork", "read_grants"]

_LOG = logging.getLogger(__name__)


class _Records:
    def __init__(self, uow: PostgresUnitOfWork):
        self._uow = uow

    def add(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        uow = self._uow
        matrix = check_records_for_add(uow.scope, records, vectors)
        if not records:
            return
        with translate_errors("add records"):
            owners = uow.conn.execute(
                text(statements.owners_sql(uow.s)),
                scope_params(
                    uow.scope,
                    ids=list(dict.fromkeys(r.id for r in records)),
                    gens=sorted({r.generation for r in records}),
                ),
            ).all()
        check_stored_ids(records, owners)
        self.copy_in(records, matrix, statements.added_stats(uow.s))
        keys = frozenset((r.embedder_id, r.dimensions) for r in records)
        with translate_errors("add records"):  # the engine's claim, if it keeps one
            uow.conn.execute(
                text(embedders.extend_claim_sql(uow.s)),
                scope_params(uow.scope, keys=embedders.claim_value(keys)),
            )

    def copy_in(self, records: Sequence[Record], matrix: VectorMatrix, stats: str) -> None:
        """Write ``records`` (checked) and their vectors ``matrix``, then count them with
        ``stats`` (``statements.added_stats`` or a statement of its binds and shape)."""
        uow = self._uow
        conn = uow.conn
        with translate_errors("add records"):
            dims = int(matrix.shape[1])
            created = uow.indexes.ensure(conn, dims)
            if created:
                uow.created_indexes.add(dims)
            keys = [
                int(row.k)
                for row in conn.execute(
                    text(statements.allocate_keys(uow.s)), {"n": len(records)}
                ).all()
            ]
            # One statistics batch per add of live rows of one generation (migration 8):
            # retiring all of them later retires the batch instead of a delta per lexeme.
            batch = (
                keys[0]
                if len({r.generation for r in records}) == 1
                and all(r.retired_generation is None for r in records)
                else None
            )
            # The vectors on a second connection, beside the records (vector_writes.py),
            # unless this add is small, created the index, or follows a vector delete.
            writer = uow.vector_writer
            job = (
                writer.start(conn, uow.scope, keys, dims, matrix)
                if writer is not None
                and writer.wants(len(records))
                and not created
                and not uow.indexes.deferred
                and not uow.deleted_vectors
                else None
            )
            # One savepoint for the add: a failure of either connection undoes its records.
            with conn.begin_nested():
                try:
                    dbapi = driver_connection(conn)
                    with dbapi.cursor() as cur:
                        with cur.copy(statements.copy_records(uow.s)) as copy:
                            copy.set_types(rows.COPY_TYPES)
                            for record, key in zip(records, keys, strict=True):
                                copy.write_row(rows.copy_row(uow.scope, record, key, batch))
                        if job is None:
                            copy_vectors(cur, uow.s, uow.scope, keys, dims, matrix)
                    conn.execute(
                        text(stats),
                        scope_params(
                            uow.scope,
                            ids=[r.id for r in records],
                            gens=[r.generation for r in records],
                            b=batch,
                        ),
                    )
                    sole = embedders.sole_after_add(
                        conn,
                        uow.s,
                        uow.scope,
                        uow.sole,
                        {(r.embedder_id, r.dimensions) for r in records},
                    )
                finally:
                    if job is not None:
                        uow.wrote_ahead = True
                        # Never leave the vectors' connection running past the add; until
                        # the marker is deleted below, a commit would leave them to a sweep.
                        uow.unswept = True
                        job.wait()
                if job is not None and writer is not None:
                    job.result()
                    if job.timed_out:  # the second connection gave up a lock wait: serially
                        with driver_connection(conn).cursor() as cur:
                            copy_vectors(cur, uow.s, uow.scope, keys, dims, matrix)
                    else:
                        writer.committed(conn, uow.scope, job)
                    uow.unswept = False
            uow.sole = sole  # the savepoint held: the scope's row says so too
            uow.gin_rows += len(records)
            uow.rows_written += len(records)

    def list_by_source(self, source_id: str) -> Sequence[Record]:
        uow = self._uow
        with translate_errors("list records"):
            found = uow.conn.execute(
                text(statements.staged_source_sql(uow.s)),
                scope_params(uow.scope, src=source_id, p=uow.pointer),
            ).all()
        return [rows.record(uow.scope, row) for row in found]

    def _retire(self, where: str, generation: int, **params: Any) -> int:
        uow = self._uow
        with translate_errors("retire records"):
            retired = int(
                uow.conn.execute(
                    text(statements.retire(uow.s, where)),
                    scope_params(uow.scope, g=generation, p=uow.pointer, **params),
                ).scalar_one()
            )
        # Usually a HOT update (no index entry), but not for a row whose page lacks room,
        # such as every row written before migration 9: merge after those too.
        uow.gin_rows += retired
        return retired

    def retire_source(self, source_id: str, *, generation: int) -> int:
        return self._retire("source_id = :src", generation, src=source_id)

    def retire_ids(self, ids: Sequence[str], *, generation: int) -> int:
        return self._retire("id = ANY(:ids)", generation, ids=list(ids))

    def _count(self, sql: str, operation: str = "rewrite generations", **params: Any) -> int:
        uow = self._uow
        with translate_errors(operation):
            return int(uow.conn.execute(text(sql), scope_params(uow.scope, **params)).scalar_one())

    def list_live(
        self, source_id: str, *, after: str | None = None, limit: int | None = None
    ) -> Sequence[Record]:
        return self._records(
            "list live records", statements.live_sql, src=source_id, after=after, n=limit
        )

    def find_dependents(self, ids: Sequence[str]) -> Sequence[Record]:
        return self._records("find dependents", statements.dependents_sql, ids=list(ids))

    def _records(self, operation: str, sql: Any, **params: Any) -> list[Record]:
        uow = self._uow
        with translate_errors(operation):
            found = uow.conn.execute(text(sql(uow.s)), scope_params(uow.scope, **params)).all()
        return [rows.record(uow.scope, row) for row in found]

    def rekey(self, moves: Mapping[str, str], *, to_source_id: str) -> int:
        check_rekey_moves(moves)
        uow = self._uow
        if not moves:
            return 0
        old, new = list(moves), [moves[k] for k in moves]
        with translate_errors("re-key records"):
            clash = uow.conn.execute(
                text(statements.rekey_clash_sql(uow.s)),
                scope_params(uow.scope, new=new, old=old, floor=uow.floor),
            ).scalar_one()
            if clash:
                raise ValidationError(
                    "a destination record id is visible in a restorable snapshot of this scope",
                    field="to_id",
                )
            uow.conn.execute(
                text(statements.rekey_stats(uow.s)),
                scope_params(uow.scope, old=old, new=new, to=to_source_id),
            )
            result = uow.conn.execute(
                text(statements.rekey_update(uow.s)),
                scope_params(uow.scope, old=old, new=new, to=to_source_id),
            )
            uow.gin_rows += int(result.rowcount)  # a re-keyed row is a new tuple in every index
            return int(result.rowcount)

    def rewrite_lineage(self, from_id: str, to_id: str) -> int:
        uow = self._uow
        with translate_errors("rewrite lineage"):
            found = uow.conn.execute(
                text(statements.lineage_rows_sql(uow.s)), scope_params(uow.scope, f=from_id)
            ).all()
            if not found:
                return 0

            def swap(ids: Sequence[str]) -> list[str]:
                return list(dict.fromkeys(to_id if i == from_id else i for i in ids))

            uow.conn.execute(
                text(statements.lineage_stats(uow.s)), scope_params(uow.scope, f=from_id, to=to_id)
            )
            uow.conn.execute(
                text(statements.lineage_update(uow.s)),
                [
                    scope_params(
                        uow.scope,
                        id=row.id,
                        g=row.generation,
                        lineage=swap(row.lineage),
                        roots=swap(row.roots),
                    )
                    for row in found
                ],
            )
            uow.gin_rows += len(found)
        return sum(list(row.lineage).count(from_id) for row in found)

    def deleted(self, count: int) -> int:
        """After ``count`` rows were deleted: a scope without a sole-embedder claim may have
        one now (the last rows of a former embedder went)."""
        uow = self._uow
        if count and uow.sole is None:
            with translate_errors("rewrite generations"):
                uow.sole = embedders.refresh(uow.conn, uow.s, uow.scope)
        return count

    def purge_source(self, source_id: str) -> int:
        uow = self._uow
        uow.deleted_vectors = True
        with translate_errors("purge source"):
            found = uow.conn.execute(
                text(statements.source_lexemes(uow.s)), scope_params(uow.scope, src=source_id)
            )
            lexemes = list(found.scalars())
        sql = statements.delete_records(uow.s, statements.PURGE_SOURCE)
        purged = self.deleted(self._count(sql, "purge source", src=source_id))
        if lexemes:  # the words of the purged text leave the statistics too
            with translate_errors("purge source"):
                uow.conn.execute(
                    text(statements.erase_unused_lexemes(uow.s)),
                    scope_params(uow.scope, lx=lexemes),
                )
        return purged

    def discard_above(self, generation: int) -> int:
        self._uow.deleted_vectors = True
        sql = statements.delete_records(self._uow.s, statements.DISCARD_ABOVE)
        return self.deleted(self._count(sql, g=generation))

    def restore_above(self, generation: int) -> int:
        restored = self._count(statements.restore_above_sql(self._uow.s), g=generation)
        self._uow.gin_rows += restored  # as _retire
        return restored

    def purge_retired(self, through: int) -> int:
        uow = self._uow
        uow.deleted_vectors = True
        sql = statements.delete_records(uow.s, statements.PURGE_RETIRED)
        purged = self.deleted(self._count(sql, g=through))
        fold = min(through, uow.pointer)
        with translate_errors("rewrite generations"):
            for statement in statements.fold_stats(uow.s):
                uow.conn.execute(text(statement), scope_params(uow.scope, g=fold))
        return purged


class _Generations(GenerationSteps):
    def __init__(self, uow: PostgresUnitOfWork):
        self._uow = uow

    def _save(self) -> None:
        uow = self._uow
        with translate_errors("save generations"):
            uow.conn.execute(
                text(statements.save_generations(uow.s)),
                scope_params(uow.scope, n=uow.counter, p=uow.pointer, f=uow.floor),
            )

    def current(self) -> int:
        return self._uow.pointer

    def counter(self) -> int:
        return self._uow.counter

    def _step(self, step: Callable[[GenerationState], GenerationState]) -> GenerationState:
        uow = self._uow
        old = GenerationState(uow.counter, uow.pointer, uow.floor)
        new = step(old)  # the engine's rules (ragport.engine.generations), then one UPDATE
        if new != old:
            uow.counter, uow.pointer, uow.floor = new.counter, new.pointer, new.floor
            self._save()
        return new

    def floor(self) -> int:
        return self._uow.floor


class _Grants:
    def __init__(self, uow: PostgresUnitOfWork):
        self._uow = uow

    def set(self, grants: Sequence[Grant]) -> None:
        uow = self._uow
        latest = {g.source_id: g for g in grants}
        if not latest:
            return
        with translate_errors("set grants"):
            uow.conn.execute(
                text(statements.grants_upsert(uow.s)),
                [
                    scope_params(
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
        return read_grants(uow.conn, uow.s, uow.scope, source_ids)


def read_grants(
    conn: Connection | RawRead, s: str, scope: Scope, source_ids: Sequence[str]
) -> dict[str, Grant]:
    """The grants of ``source_ids`` in ``scope`` (absent sources are absent)."""
    with translate_errors("read grants"):
        found = reads.fetch(
            conn, grants_sql(s), scope_params(scope, ids=list(dict.fromkeys(source_ids)))
        )
    return {row.source_id: rows.grant(row) for row in found}


class _Tombstones:
    def __init__(self, uow: PostgresUnitOfWork):
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
                text(statements.tombstones_insert(uow.s)),
                scope_params(
                    uow.scope,
                    ids=list(merged),
                    reasons=[t.reason for t in merged.values()],
                ),
            ).all()
        added = sum(1 for row in inserted if row.inserted)
        uow.rows_written += added
        return added

    def list(self) -> Sequence[Tombstone]:
        uow = self._uow
        with translate_errors("list tombstones"):
            found = uow.conn.execute(
                text(statements.tombstones_sql(uow.s)), scope_params(uow.scope)
            ).all()
        return [Tombstone(row.id, row.reason) for row in found]

    def get(self, ids: Sequence[str]) -> Mapping[str, Tombstone]:
        uow = self._uow
        wanted = list(dict.fromkeys(validate_text(i, field="ids") for i in _id_list(ids)))
        if not wanted:
            return {}
        with translate_errors("look up tombstones"):
            found = uow.conn.execute(
                text(tombstones.tombstones_get_sql(uow.s)), scope_params(uow.scope, ids=wanted)
            ).all()
        by_id = {row.id: Tombstone(row.id, row.reason) for row in found}
        return {i: by_id[i] for i in wanted if i in by_id}

    def readmit(self, ids: Sequence[str]) -> int:
        uow = self._uow
        wanted = list(dict.fromkeys(validate_text(i, field="ids") for i in _id_list(ids)))
        if not wanted:
            return 0
        with translate_errors("readmit tombstones"):
            changed = uow.conn.execute(
                text(tombstones.tombstones_readmit(uow.s)), scope_params(uow.scope, ids=wanted)
            ).all()
        return len(changed)


def _id_list(ids: Sequence[str]) -> Sequence[str]:
    if isinstance(ids, str):
        raise ValidationError("ids must be a sequence of ids, not one string", field="ids")
    return ids


class PostgresUnitOfWork:
    """One transaction on ``conn`` over ``scope``, whose row ``state`` was read FOR UPDATE."""

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
        # The engine's embedder claim (migration 13), read with the lock by PostgresBackend.
        self.claim: frozenset[tuple[str | None, int | None]] | None = None
        self.done = False
        # The rows whose statements may have written GIN entries (added, retired, restored,
        # re-keyed or re-linked): commit hands them to ``VectorIndexes.merge_pending``, which
        # merges the pending lists once enough have accumulated (``merge_pending_lists``).
        self.gin_rows = 0
        self.rows_written = 0  # records and tombstones added (analyze_after_commit)
        self.created_indexes: set[int] = set()  # HNSW indexes this unit of work created
        self.records = _Records(self)
        self.generations = _Generations(self)
        self.grants = _Grants(self)
        self.tombstones = _Tombstones(self)

    def commit(self) -> None:
        if self.done:
            raise ValidationError("unit of work already finished", field="unit_of_work")
        if self.savepoint is not None:
            self._release()
            return
        with translate_errors("commit"):
            self.conn.commit()
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
        self.maintenance.schedule(tenant, merge=merge, analyze=analyze)

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
            self.maintenance.schedule(tenant, merge=merge, analyze=analyze)

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
