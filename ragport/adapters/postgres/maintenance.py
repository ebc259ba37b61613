"""The store's schema and index maintenance: migrations, HNSW indexes before a write, and
the bulk-load mode that builds them after the load instead (``PostgresStore`` builds on it).
"""

from __future__ import annotations

from sqlalchemy import text

from ragport.adapters.postgres._driver import translate_errors
from ragport.adapters.postgres.background import MaintenanceWorker, validate_maintenance_delay
from ragport.adapters.postgres.connections import StoreConnections
from ragport.adapters.postgres.indexes import VectorIndexes, check_build_memory
from ragport.adapters.postgres.pool import wait_for_connection
from ragport.adapters.postgres.schema import upgrade
from ragport.adapters.postgres.vector_writes import VectorWriter, validate_parallel_vector_rows
from ragport.domain.errors import CapabilityError
from ragport.domain.model import Scope
from ragport.domain.values import SCOPE_ID_MAX, validate_id

__all__ = ["StoreMaintenance"]


class StoreMaintenance(StoreConnections):
    """``upgrade``, ``prepare``, ``build_vector_indexes`` and ``merge_pending_lists`` of
    ``PostgresStore``."""

    _indexes: VectorIndexes
    _maintenance: MaintenanceWorker | None
    _vectors: VectorWriter
    _ts_config: str
    _partitions: int | None

    def _set_up_writes(
        self, indexes: VectorIndexes, *, maintenance_delay: object, parallel_vector_rows: object
    ) -> None:
        """The index manager, the second connections of large adds (``vector_writes``) and
        the maintenance thread (``background``; ``None`` delay: inline maintenance), with
        both settings validated (``ValidationError`` naming the field)."""
        delay = validate_maintenance_delay(maintenance_delay)
        parallel = validate_parallel_vector_rows(parallel_vector_rows)
        self._indexes = indexes
        self._vectors = VectorWriter(self._engine, self._schema, self._s, parallel)
        self._maintenance = (
            None
            if delay is None
            else MaintenanceWorker(self._engine, indexes, delay, sweep=self._vectors.sweep)
        )

    def _refuse_joined(self, operation: str) -> None:
        if self._joined is not None:
            raise CapabilityError(
                f"{operation} commits on its own: call it on the store, not on a joined view",
                capability="joined transaction",
            )

    def upgrade(self) -> list[int]:
        """Apply missing migrations (idempotent); returns the versions applied."""
        self._refuse_joined("upgrade")
        wait_for_connection(self._engine, "upgrade")
        with translate_errors("upgrade"), self._engine.begin() as conn:
            applied = upgrade(
                conn,
                self._schema,
                text_search_config=self._ts_config,
                partitions=self._partitions,
            )
        self._checked = True
        return applied

    def prepare(self, scope: Scope, *, dimensions: int) -> None:
        """Create the HNSW index for ``dimensions`` if missing, outside any write transaction
        (unless the store defers its vector indexes: see ``build_vector_indexes``).

        Creating an index takes a lock that conflicts with open writers; doing it here, before
        a unit of work touches ``records``, means two first writers never deadlock.
        """
        if self._joined is not None:  # in the host's transaction: no commit, no ANALYZE
            with self._connect("prepare") as conn:
                self._indexes.ensure(conn, dimensions)
            self._indexes.forget(dimensions)  # the host may still roll it back: read it again
            return
        with self._connect("prepare") as conn:
            self._indexes.ensure(conn, dimensions)
            conn.commit()
            self._indexes.analyze_once(conn, scope.tenant_id)

    def build_vector_indexes(self, *, build_memory: str = "1GB") -> list[int]:
        """Build the HNSW index of every vector dimension stored but not yet indexed, with
        ``maintenance_work_mem = build_memory`` (about 2 GB per million 384-dimension rows:
        docs/operations.md, "Sizing"); returns the dimensions built, in order.

        The second half of the bulk-load mode (``PostgresStore(defer_vector_indexes=True)``):
        writes then skip creating the index, and every HNSW insert into it, until this call
        builds it once over all rows. Each dimension is built and committed on its own, so a
        failure (memory, a cancel) keeps the ones already built and raises; call it again to
        finish. It blocks writes to ``record_vectors`` while it runs (reads go on; a vector
        query without its index scans exactly: correct, slower). On any store it builds what
        is missing (nothing, unless indexes were deferred or dropped).
        """
        check_build_memory(build_memory)
        self._refuse_joined("build_vector_indexes")
        with self._connect("list vector dimensions") as conn:
            stored = conn.execute(
                text(f"SELECT DISTINCT dimensions FROM {self._s}.record_vectors ORDER BY 1")
            ).scalars()
            dimensions = [int(d) for d in stored]
        built: list[int] = []
        for d in dimensions:
            try:
                with self._connect("build vector index") as conn:
                    if self._indexes.has(conn, d):
                        continue
                    self._indexes.create(conn, d, build_memory=build_memory)
                    conn.commit()
            except BaseException:
                self._indexes.forget(d)  # rolled back: not built
                raise
            built.append(d)
        if built:
            with self._connect("analyze vectors") as conn:
                conn.execute(text(f"ANALYZE {self._s}.record_vectors"))
                conn.commit()
        return built

    def merge_pending_lists(self, tenant_id: str) -> int:
        """Merge the GIN pending lists of ``records`` (of ``tenant_id``'s partition, on a
        partitioned schema) into their indexes now; returns the pages merged.

        The end of a bulk load through a store with ``merge_pending_lists=N`` or ``False``:
        what its last writes left pending, which lexical queries would otherwise read entry
        by entry until autovacuum merges it. Unlike the writer's own merge, which only logs,
        a failure raises: ``CapabilityError`` (SQLSTATE 42501) for a role without EXECUTE on
        the schema's ``merge_pending_lists`` function (docs/operations.md), ``StoreError``
        with its SQLSTATE otherwise.
        """
        validate_id(tenant_id, field="tenant_id", max_length=SCOPE_ID_MAX)
        self._refuse_joined("merge_pending_lists")
        with self._connect("merge GIN pending lists") as conn:
            merged = conn.execute(
                text(f"SELECT {self._s}.merge_pending_lists(:t)"), {"t": tenant_id}
            ).scalar_one()
            conn.commit()
        self._indexes.merged(tenant_id)
        return int(merged)

    def finish_maintenance(self, timeout: float = 60.0) -> None:
        """Run the GIN merges and re-analyses that earlier writes scheduled on this store's
        maintenance thread now (without waiting out ``maintenance_delay``), and wait for them:
        afterwards no entry this store wrote is pending. A no-op with inline maintenance
        (``maintenance_delay=None``). ``StoreError`` if they run past ``timeout`` seconds.
        Their own failures are logged, as after any commit, not raised."""
        if self._maintenance is not None:
            self._maintenance.finish(timeout)

    def sweep_vector_writes(self) -> int:
        """Delete the vectors that adds wrote ahead of their records in units of work that
        never committed (rolled back, failed, or their process was killed); returns how many.
        A writer sweeps its own after a rollback and each store's maintenance thread sweeps
        once when it first runs, so this is for a host that wants it now (after a crash).
        Units of work still running are left alone. docs/operations.md, "The write path"."""
        with self._connect("sweep vector writes") as conn:
            return self._vectors.sweep(conn)
