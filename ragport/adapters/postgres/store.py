"""PostgresStore: the ChunkStore on PostgreSQL + pgvector (SQLAlchemy Core + psycopg 3).

Quirks worth knowing:

- Every statement names the full scope, and so the tenant; nothing joins across tenants.
- A read sees one snapshot: a vector query is one statement (the scope's pointer, the drift
  guard and the rows it selects from the same MVCC snapshot), every other read one
  REPEATABLE READ, READ ONLY transaction; never a mix of two generations.
- A unit of work locks its scope's row (``statements.lock_scope``): writers of one scope are
  serialized, readers never wait.
- Records are written with binary COPY (one round trip per batch, ~4x text parameters); their
  vectors go to ``record_vectors`` (keyed by ``records.row_key``), written once: retiring,
  restoring and re-keying rows update the narrow ``records`` row only.
- One partial HNSW index (cosine) per vector dimension in use, on ``record_vectors``, created
  on first write of that dimension. Queries run with iterative scans (``strict_order``;
  ``relaxed_order`` under grants or a filter, for recall) so selective predicates
  (grants, filters, tombstones, generations) still yield ``limit`` rows.

Where things are: this module is the store, one class, a ``ragport.engine.BackendStore``
over ``PostgresBackend`` (``backend.py``: the narrow port on these tables, and the pushdowns,
PostgreSQL's SQL for the legs, the look-ups, the set-based writes and ``prepare``). Every
read is the engine's method, answered through those pushdowns: a vector query through
``guarded_search`` (the pointer, the drift guard and the hits in one statement,
``legs.VectorLeg``) in a ``retrieval_read`` block, which runs on the read replica when there
is one and begins no transaction for a read of one statement (BEGIN, the state and COMMIT
around a vector query cost about 0.2 ms, 10% of it); the lexical and hybrid legs
(``search_lexical``, ``search_vectors``) in one REPEATABLE READ, READ ONLY transaction. A
read block takes its connection at its first statement and retries that statement once on a
fresh connection if the pooled one was dead (``Connections.lend``). The denial report is the
engine's (``ragport.engine.reads.denials``), and so is the lexical mode check (``_mode``
only maps the deprecated ``fts`` to ``bm25``). Its unit of work is the engine's
(``BackendStore.unit_of_work``) over ``PostgresBackend.write``: the engine decides every
write rule and calls the backend's set-based write pushdowns (PostgreSQL's SQL). This class
keeps the maintenance of its indexes.

It owns its collaborators: ``Connections`` (``connections.py``: the pool, the schema check,
read-replica routing, the host's connection of a joined view), ``VectorIndexes``
(``indexes.py``: HNSW indexes and the first ANALYZE), ``VectorWriter`` (``vector_writes.py``)
and ``MaintenanceWorker`` (``background.py``: GIN merges and re-analyses after commits); its
tuning values are ``settings.py``. The SQL is built by pure functions in ``predicate.py``
(the shared WHERE), ``queries.py`` (the legs, the denial report, the small reads) and
``statements.py`` (the writes); rows become records in ``rows.py``; the legs run through
``legs.py`` and every read on psycopg through ``reads.py``; one write transaction's I/O (COPY, commit, the vectors' sweep) is
``unit_of_work.py``.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Self

from sqlalchemy import Connection, Engine, text

from ragport.adapters.postgres._driver import translate_errors
from ragport.adapters.postgres.backend import PostgresBackend
from ragport.adapters.postgres.background import MaintenanceWorker, validate_maintenance_delay
from ragport.adapters.postgres.connections import Connections, Fallback
from ragport.adapters.postgres.indexes import VectorIndexes, check_build_memory
from ragport.adapters.postgres.pool import wait_for_connection
from ragport.adapters.postgres.schema import (
    upgrade,
    validate_partitions,
    validate_text_search_config,
)
from ragport.adapters.postgres.settings import VectorIndexSettings, WriteSettings, from_keywords
from ragport.adapters.postgres.vector_writes import VectorWriter, validate_parallel_vector_rows
from ragport.domain.values import SCOPE_ID_MAX, validate_id
from ragport.engine import BackendStore

__all__ = ["PostgresStore"]


class PostgresStore(BackendStore):
    """A ChunkStore on PostgreSQL with pgvector: the generation engine (``BackendStore``) over
    ``PostgresBackend``, whose pushdowns are PostgreSQL's SQL.

    ``url_or_engine`` is a ``postgresql://`` URL or a SQLAlchemy Engine (psycopg 3 driver).
    ``create=True`` applies missing migrations now; otherwise the schema must already be at
    the latest version (``ragport db upgrade``), checked on first use.

    ``read_url`` (a streaming replica's URL or Engine) takes retrieval and status reads off
    the primary; a replica down, or behind a view's ``min_position`` for ``replica_wait``
    seconds, falls back to the primary (``replica_fallback="primary"``) or raises
    (``"raise"``: ``StoreError`` with ``lost_connection``, or ``ReplicaLagError``).

    ``partitions=N`` (``create=True``, a new schema): the tenant tables ``PARTITION BY HASH
    (tenant_id)``, N partitions; a query names one tenant, so it reads one partition.

    ``vector_index`` (``VectorIndexSettings``: HNSW ``m`` / ``ef_construction``, ``ef_search``,
    ``deferred``) and ``writes`` (``WriteSettings``: ``merge_pending_lists``,
    ``maintenance_delay``, ``parallel_vector_rows``) tune the store (``settings.py``;
    docs/operations.md, "Bulk loads" and "Sizing", measures each). Their fields were keywords
    of this constructor (``hnsw_m=``, ``ef_search=``, ``defer_vector_indexes=``,
    ``merge_pending_lists=``, ...), which keep working for one release with a
    ``DeprecationWarning``.
    """

    def __init__(
        self,
        url_or_engine: str | Engine,
        *,
        schema: str = "ragport",
        create: bool = False,
        text_search_config: str = "english",
        read_url: str | Engine | None = None,
        replica_fallback: Fallback = "primary",
        replica_wait: float = 1.0,
        partitions: int | None = None,
        vector_index: VectorIndexSettings | None = None,
        writes: WriteSettings | None = None,
        **deprecated: Any,
    ):
        index, write = from_keywords(vector_index, writes, deprecated)
        self._ts_config = validate_text_search_config(text_search_config)
        self._partitions = validate_partitions(partitions)
        self._ef_search = index.ef_search
        self._exact_rows = index.exact_access_rows
        self._db = Connections(
            url_or_engine,
            schema=schema,
            read_url=read_url,
            replica_fallback=replica_fallback,
            replica_wait=replica_wait,
        )
        self._schema, self._s = self._db.schema, self._db.s
        self._indexes = VectorIndexes(
            self._schema,
            self._s,
            merge_pending_lists=write.merge_every,
            deferred=index.deferred,
            build=index.build,
        )
        self._vectors = VectorWriter(
            self._db.engine,
            self._schema,
            self._s,
            validate_parallel_vector_rows(write.parallel_vector_rows),
        )
        delay = validate_maintenance_delay(write.maintenance_delay)
        self._maintenance = (
            None
            if delay is None
            else MaintenanceWorker(self._db.engine, self._indexes, delay, sweep=self._vectors.sweep)
        )
        super().__init__(self._backend_on(self._db))
        if create:
            self.upgrade()

    def _backend_on(self, db: Connections) -> PostgresBackend:
        return PostgresBackend(
            db,
            self._indexes,
            ts_config=self._ts_config,
            ef_search=self._ef_search,
            exact_rows=self._exact_rows,
            maintenance=self._maintenance,
            vector_writer=self._vectors,
        )

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self._schema!r})"

    # -- connections and views -------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        return self._db.engine

    @property
    def read_engine(self) -> Engine | None:
        """The replica's Engine (``None`` without ``read_url``)."""
        return self._db.replica

    @property
    def schema(self) -> str:
        return self._schema

    @property
    def last_write_position(self) -> str | None:
        """The WAL position (LSN, ``'0/3000148'``) at or after this thread's last commit
        through this store; ``None`` before the first. Hand it to ``with_min_position``."""
        return self._db.last_write_position

    def write_position(self) -> str:
        """The primary's current WAL position: at or after every write committed so far."""
        return self._db.write_position()

    def with_min_position(
        self,
        position: str | None,
        *,
        fallback: Fallback | None = None,
        wait: float | None = None,
    ) -> Self:
        """A view of this store whose reads see at least WAL ``position`` (read-your-writes).

        Its replica reads first wait up to ``wait`` seconds (default ``replica_wait``) for the
        replica to replay ``position``; past that they run on the primary (``fallback=
        "primary"``) or raise ``ReplicaLagError`` (``"raise"``). Never a stale answer.
        ``None`` means no requirement. The view shares this store's engines.
        """
        return self._view(self._db.with_min_position(position, fallback=fallback, wait=wait))

    @property
    def joined_connection(self) -> Connection | None:
        """The host's connection this view runs on (``None``: the store's own pool)."""
        return self._db.joined

    def _view(self, db: Connections) -> Self:
        view = copy.copy(self)
        view._db = db
        BackendStore.__init__(view, view._backend_on(db))  # the view's backend, its pushdowns
        return view

    def joined(self, connection: Connection) -> PostgresStore:
        """A view of this store whose every read and write runs on ``connection``, inside the
        transaction its owner (the host) began: the host's commit publishes ragport's writes
        with its own, its rollback discards them (docs/hosts.md, "Joining your transaction").

        A unit of work of the view is a savepoint of the host's transaction: its failure rolls
        back ragport's part only, and the host's transaction stays usable. Reads of the view
        see the host's uncommitted writes. Nothing of a call runs on another connection (large
        adds write their vectors serially), and nothing commits: the maintenance a commit would
        start (GIN merges, re-analyses) goes to the store's maintenance thread, and ``prepare``
        only creates a missing HNSW index in the host's transaction. The methods that must
        commit on their own (``upgrade``, ``build_vector_indexes``, ``merge_pending_lists``)
        refuse with ``CapabilityError``. Calls without an open transaction on ``connection``
        raise ``CapabilityError``; a view is for one thread, as its connection is.
        """
        return self._view(self._db.join(connection))

    # -- reads: the engine's (BackendStore), through PostgresBackend's pushdowns ----------------
    def _mode(self, mode: object) -> str:
        """``bm25``, the one lexical mode (the name the in-memory store serves too); ``fts``,
        its name until 2026-12, is accepted for one release with a ``DeprecationWarning``."""
        if mode == "fts":
            warnings.warn(
                "the PostgreSQL lexical mode 'fts' is named 'bm25' now (the same BM25 leg); "
                "'fts' will be removed in the next release",
                DeprecationWarning,
                stacklevel=3,  # _mode <- lexical_query / hybrid_query <- the caller
            )
            return "bm25"
        return super()._mode(mode)

    # -- schema and index maintenance ------------------------------------------------------------
    def upgrade(self) -> list[int]:
        """Apply missing migrations (idempotent); returns the versions applied."""
        self._db.refuse_joined("upgrade")
        wait_for_connection(self._db.engine, "upgrade")
        with translate_errors("upgrade"), self._db.engine.begin() as conn:
            applied = upgrade(
                conn,
                self._schema,
                text_search_config=self._ts_config,
                partitions=self._partitions,
            )
        self._db.checked()
        return applied

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
        self._db.refuse_joined("build_vector_indexes")
        with self._db.connect("list vector dimensions") as conn:
            stored = conn.execute(
                text(f"SELECT DISTINCT dimensions FROM {self._s}.record_vectors ORDER BY 1")
            ).scalars()
            dimensions = [int(d) for d in stored]
        built: list[int] = []
        for d in dimensions:
            try:
                with self._db.connect("build vector index") as conn:
                    if self._indexes.has(conn, d):
                        continue
                    self._indexes.create(conn, d, build_memory=build_memory)
                    conn.commit()
            except BaseException:
                self._indexes.forget(d)  # rolled back: not built
                raise
            built.append(d)
        if built:
            with self._db.connect("analyze vectors") as conn:
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
        self._db.refuse_joined("merge_pending_lists")
        with self._db.connect("merge GIN pending lists") as conn:
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
        with self._db.connect("sweep vector writes") as conn:
            return self._vectors.sweep(conn)
