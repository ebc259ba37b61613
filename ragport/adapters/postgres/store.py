"""PostgresStore: the ChunkStore on PostgreSQL + pgvector (SQLAlchemy Core + psycopg 3).

Quirks worth knowing:

- Every statement names the full scope, and so the tenant; nothing joins across tenants.
- A read is one statement, so it sees one snapshot: the scope's pointer and the rows it
  selects come from the same MVCC snapshot, never a mix of two generations.
- A unit of work locks its scope's row (``SELECT ... FOR UPDATE``): writers of one scope are
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
PostgreSQL's SQL for the legs, the look-ups and ``prepare``). The engine answers grants
(``check_source_access``, ``get_source_access``), ``forgotten_among``, ``list_source_ids``,
``generation_history`` and ``prepare`` through those pushdowns; this class keeps the reads
that must stay one statement on an autocommit connection (the legs with their drift guard,
replica routing and a retry on a dead connection: a transaction around them costs about
0.2 ms, 10% of a vector query) and the maintenance of its indexes. Its unit of work is the
engine's (``BackendStore.unit_of_work``) over ``PostgresBackend.write``: the engine decides
every write rule and calls the backend's set-based write pushdowns (PostgreSQL's SQL). The legs' SQL runs through ``legs.py`` for both; the
denial report is the engine's (``ragport.engine.reads.denials``).

It owns its collaborators: ``Connections`` (``connections.py``: the pool, the schema check,
read-replica routing, the host's connection of a joined view), ``VectorIndexes``
(``indexes.py``: HNSW indexes and the first ANALYZE), ``VectorWriter`` (``vector_writes.py``)
and ``MaintenanceWorker`` (``background.py``: GIN merges and re-analyses after commits); its
tuning values are ``settings.py``. The SQL is built by pure functions in ``predicate.py``
(the shared WHERE), ``queries.py`` (the legs, the denial report, the small reads) and
``statements.py`` (the writes); rows become records in ``rows.py``; reads run on psycopg
through ``reads.py``; one write transaction's I/O (COPY, commit, the vectors' sweep) is
``unit_of_work.py``.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

import numpy as np
from sqlalchemy import Connection, Engine, text

from ragport.adapters.postgres import queries, reads
from ragport.adapters.postgres._driver import translate_errors
from ragport.adapters.postgres.backend import PostgresBackend
from ragport.adapters.postgres.background import MaintenanceWorker, validate_maintenance_delay
from ragport.adapters.postgres.connections import Connections, Fallback
from ragport.adapters.postgres.indexes import VectorIndexes, check_build_memory
from ragport.adapters.postgres.legs import VectorLeg, foreign_rows, lexical_leg, query_vector
from ragport.adapters.postgres.pool import wait_for_connection
from ragport.adapters.postgres.predicate import (
    scope_params,
)
from ragport.adapters.postgres.reads import RawRead, one_snapshot
from ragport.adapters.postgres.rows import record
from ragport.adapters.postgres.schema import (
    upgrade,
    validate_partitions,
    validate_text_search_config,
)
from ragport.adapters.postgres.settings import VectorIndexSettings, WriteSettings, from_keywords
from ragport.adapters.postgres.vector_writes import VectorWriter, validate_parallel_vector_rows
from ragport.domain.errors import CapabilityError, ValidationError
from ragport.domain.filters import Filter, parse_filter
from ragport.domain.model import (
    AccessDecision,
    Authorization,
    Record,
    Scope,
    validate_text,
)
from ragport.domain.values import SCOPE_ID_MAX, validate_id
from ragport.engine import BackendStore
from ragport.engine.reads import denials
from ragport.ports.embedder import Vector
from ragport.ports.store import EmbedderKey, GuardedQuery, HybridAnswer, ScoredRecord

__all__ = ["PostgresStore"]

_VectorAnswer = tuple[frozenset[EmbedderKey], tuple[ScoredRecord, ...]]


def _check_mode(mode: str) -> None:
    """``bm25``, the one lexical mode (the name the in-memory store serves too); ``fts``, its
    name until 2026-12, is accepted for one release with a ``DeprecationWarning``."""
    if mode == "fts":
        warnings.warn(
            "the PostgreSQL lexical mode 'fts' is named 'bm25' now (the same BM25 leg); "
            "'fts' will be removed in the next release",
            DeprecationWarning,
            stacklevel=4,  # _lexical_run <- lexical_query / hybrid_query <- the caller
        )
    elif mode != "bm25":
        raise CapabilityError(
            f"the PostgreSQL store offers lexical mode 'bm25', not {mode!r}",
            capability="lexical",
        )


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

    # -- reads -----------------------------------------------------------------------------------
    def current_generation(self, scope: Scope) -> int:
        sql = queries.current_generation_sql(self._s)
        rows = self._db.read(
            "read generation", lambda conn: reads.fetch(conn, sql, scope_params(scope))
        )
        return int(rows[0].pointer) if rows else 0

    def get_by_source(self, scope: Scope, source_id: str) -> Sequence[Record]:
        validate_text(source_id, field="source_id")
        sql = queries.source_sql(self._s)
        params = scope_params(scope, src=source_id)
        rows = self._db.read("read source", lambda conn: reads.fetch(conn, sql, params))
        return [record(scope, row) for row in rows]

    def list_embedders(self, scope: Scope) -> frozenset[EmbedderKey]:
        sql = queries.embedders_sql(self._s)
        rows = self._db.read(
            "list embedders", lambda conn: reads.fetch(conn, sql, scope_params(scope)), replica=True
        )
        return frozenset((row.embedder_id, row.dimensions) for row in rows)

    def foreign_embedders(
        self, scope: Scope, embedder_id: str, dimensions: int
    ) -> frozenset[EmbedderKey]:
        guard = (embedder_id, dimensions)
        return self._db.read(
            "check embedders", lambda conn: self._foreign_rows(conn, scope, guard), replica=True
        )

    def list_invalidated_ids(self, scope: Scope) -> frozenset[str]:
        sql = queries.forgotten_sql(self._s)
        rows = self._db.read(
            "list tombstones",
            lambda conn: reads.fetch(conn, sql, scope_params(scope)),
            replica=True,
        )
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
        run = self._vector_run(
            scope, vector, None, limit, authorization, metadata_filter, on_denied
        )
        _, scored = self._db.read("query", run, replica=True)
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
        guard = (embedder_id, dimensions)
        run = self._vector_run(
            scope, vector, guard, limit, authorization, metadata_filter, on_denied
        )
        foreign, scored = self._db.read("query", run, replica=True)
        return GuardedQuery(foreign_embedders=foreign, records=scored)

    def borrowed_query(
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
        """``SupportsBorrowedQuery``: a guarded query's records are built for the call from
        the rows read and kept nowhere, so the borrowed read is ``self.guarded_query``
        (a subclass's override included)."""
        return self.guarded_query(
            scope,
            vector,
            embedder_id=embedder_id,
            dimensions=dimensions,
            limit=limit,
            authorization=authorization,
            metadata_filter=metadata_filter,
            on_denied=on_denied,
        )

    def _vector_run(
        self,
        scope: Scope,
        vector: Vector,
        guard: tuple[str, int] | None,
        limit: int,
        authorization: Authorization | None,
        metadata_filter: Mapping[str, Any] | Filter | None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None,
    ) -> Callable[[RawRead], _VectorAnswer]:
        """The vector leg (and its drift guard) as a function of one connection
        (``legs.VectorLeg``, the SQL ``PostgresBackend.search_vectors`` runs too)."""
        q = query_vector(vector)
        if not np.all(np.isfinite(q)):
            raise ValidationError("query vector must be finite", field="vector")
        leg = VectorLeg(
            self._s, scope, q, vec=self._db.pgvector, ef_search=self._ef_search, limit=limit,
            authorization=authorization, flt=parse_filter(metadata_filter), guard=guard,
            report=on_denied is not None,
        )  # fmt: skip

        def run(conn: RawRead) -> _VectorAnswer:
            foreign, hits, screened = leg(conn)
            self._tell_denied(conn, scope, screened, authorization, on_denied)
            return foreign, hits

        return run

    def _foreign_rows(
        self, conn: RawRead, scope: Scope, guard: tuple[str, int]
    ) -> frozenset[EmbedderKey]:
        return foreign_rows(conn, self._s, scope, guard)

    def lexical_query(
        self,
        scope: Scope,
        text_query: str,
        *,
        limit: int,
        mode: str = "bm25",
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

        Cost: the statistics are sums of write-time deltas (forgotten rows were taken out
        when their tombstone was written); candidates are the rows holding the query's
        rarer lexemes, plus, for common ones, the rows in impact buckets (``tsv_impact``,
        tf and row length) whose score bound can still reach the top-k, each checked
        against the tombstones by one index probe. See docs/operations.md. The SQL is
        ``queries.bm25_ctes``.
        """
        return self._db.read(
            "lexical query",
            self._lexical_run(
                scope, text_query, limit, mode, authorization, metadata_filter, on_denied
            ),
            replica=True,
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
    ) -> Callable[[RawRead], tuple[ScoredRecord, ...]]:
        """The lexical leg of ``lexical_query`` as a function of one connection
        (``legs.lexical_leg``, the SQL ``PostgresBackend.search_lexical`` runs too)."""
        validate_text(text_query, field="query")
        _check_mode(mode)
        leg = lexical_leg(
            self._s, scope, text_query, ts_config=self._ts_config, limit=limit,
            authorization=authorization, flt=parse_filter(metadata_filter),
            report=on_denied is not None,
        )  # fmt: skip

        def run(conn: RawRead) -> tuple[ScoredRecord, ...]:
            hits, screened = leg(conn)
            self._tell_denied(conn, scope, screened, authorization, on_denied)
            return hits

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

        def run(conn: RawRead) -> HybridAnswer:
            with one_snapshot(conn):
                foreign, vector_records = vector_run(conn)
                lexical_records = lexical_run(conn)
            return HybridAnswer(foreign, vector_records, lexical_records)

        return self._db.read("hybrid query", run, replica=True)

    def _tell_denied(
        self,
        conn: RawRead,
        scope: Scope,
        screened: Sequence[str],
        authorization: Authorization | None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None,
    ) -> None:
        """The engine's denial report (``ragport.engine.reads.denials``: the grant rule over
        the screened sources' grants, read on the leg's own connection)."""
        if on_denied is None or not screened:
            return
        denied = denials(PostgresBackend.reader(conn, scope, self._db), screened, authorization)
        if denied:
            on_denied(denied)

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
