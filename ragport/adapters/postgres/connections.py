"""Connections of the PostgreSQL store: the pool, autocommit reads, read-replica routing.

Read replicas (``read_url``): reads that serve retrieval (the engine's ``retrieval_read``
blocks: the legs, the drift guard, the embedder and tombstone lists) and status reads go to
the replica; writes, every read inside a unit of work,
the reads write paths decide on (``get_by_source``, ``current_generation``,
``forgotten_among``), the access
recheck gate (``check_source_access``: grants where they are freshest) and the probe of the
forgotten tombstones a replica leg's rows name (``PostgresBackend._forgotten_on_primary``)
go to the primary.
Lag is explicit: ``with_min_position(position)`` gives a view whose replica reads first wait
(up to ``replica_wait`` seconds) for the replica to replay ``position``, then fall back to the
primary or raise ``ReplicaLagError`` (``replica_fallback``). The routing lives in
``Connections.read`` (one read) and ``Connections.lend`` (a read block's first statement);
the SQL builders know nothing of it.

``Connections`` is a collaborator ``PostgresStore`` owns (one per store, one per view of it:
``with_min_position`` and ``join`` give the view's own copy, sharing the engines).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal, Self, TypeVar

import psycopg
from sqlalchemy import Connection, Engine, text

from ragport.adapters.postgres import reads
from ragport.adapters.postgres._driver import (
    driver_connection,
    make_engine,
    translate_errors,
    vector_schema,
)
from ragport.adapters.postgres.extension import PgVector
from ragport.adapters.postgres.pool import (
    closed_by_server,
    idle_connection,
    idle_pair,
    server_lost,
    wait_for_connection,
    watch,
)
from ragport.adapters.postgres.reads import RawRead
from ragport.adapters.postgres.schema import (
    LATEST_VERSION,
    MIGRATIONS,
    applied_versions,
    contiguous_version,
    quote_schema,
    validate_schema_name,
)
from ragport.domain.errors import CapabilityError, ReplicaLagError, StoreError, ValidationError

__all__ = ["REPLICA_RETRY_SECONDS", "Connections", "Fallback", "Lent"]

_T = TypeVar("_T")
Fallback = Literal["primary", "raise"]
# After a replica failed to answer, reads skip it for this long (then try it again).
REPLICA_RETRY_SECONDS = 2.0
_REPLAYED = (
    "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
    "ELSE pg_current_wal_lsn() END::text AS lsn, "
    "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
    "ELSE pg_current_wal_lsn() END >= CAST(:pos AS pg_lsn) AS ok"
)


class Lent:
    """A read block's hold on the connection ``Connections.lend`` lent it past its first
    statement: ``close`` gives it back (once)."""

    __slots__ = ("_exit",)

    def __init__(self) -> None:
        self._exit: Callable[[Any, Any, Any], Any] | None = None

    def hold(self, give_back: Callable[[Any, Any, Any], Any]) -> None:
        """Keep the connection until ``close``, which calls ``give_back(None, None, None)``."""
        self._exit = give_back

    def close(self) -> None:
        give_back, self._exit = self._exit, None
        if give_back is not None:
            give_back(None, None, None)


class Connections:
    """A store's engines, schema check, read routing and (on a joined view) the host's
    connection."""

    def __init__(
        self,
        url_or_engine: str | Engine,
        *,
        schema: str,
        read_url: str | Engine | None,
        replica_fallback: Fallback,
        replica_wait: float,
    ):
        self.schema = validate_schema_name(schema)
        self.s = quote_schema(schema)
        if replica_fallback not in ("primary", "raise"):
            raise ValidationError(
                "replica_fallback must be 'primary' or 'raise'", field="replica_fallback"
            )
        if not (isinstance(replica_wait, int | float) and 0 <= replica_wait <= 60):
            raise ValidationError("replica_wait must be 0..60 seconds", field="replica_wait")
        self.engine = make_engine(url_or_engine)
        self.replica = None if read_url is None else make_engine(read_url)
        for engine in (self.engine, self.replica):
            if engine is not None:
                watch(engine)  # who holds what, so an exhausted pool fails fast (pool.py)
        self._fallback: Fallback = replica_fallback
        self._wait = float(replica_wait)
        self._min_position: str | None = None
        self._caught_up = False
        self._replica_down_until = [0.0]  # shared by the views of this store
        self._writes = threading.local()
        self._checked = False
        # A view made by ``join``: every read and write on this host's connection.
        self.joined: Connection | None = None
        # The vector extension's schema (as the first connection prepared found it) and its
        # names: one database, shared by the views of this store.
        self._extension: list[str] = []
        self._vector: list[PgVector] = []

    # -- replica positions -------------------------------------------------------------------------
    @property
    def last_write_position(self) -> str | None:
        """The WAL position (LSN, ``'0/3000148'``) at or after this thread's last commit
        through this store; ``None`` before the first. Hand it to ``with_min_position``."""
        position: str | None = getattr(self._writes, "position", None)
        return position

    def record_position(self, position: str) -> None:
        """This thread's last commit reached WAL ``position`` (``last_write_position``)."""
        self._writes.position = position

    def checked(self) -> None:
        """The schema is known current (a migration just brought it there)."""
        self._checked = True

    def write_position(self) -> str:
        """The primary's current WAL position: at or after every write committed so far."""
        with translate_errors("read WAL position"), self.checkout("read WAL position") as conn:
            return str(conn.execute(text("SELECT pg_current_wal_lsn()::text")).scalar_one())

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
        if position is not None:
            _check_position(position)
        view = copy.copy(self)
        view._min_position = position
        view._caught_up = False
        if fallback is not None:
            if fallback not in ("primary", "raise"):
                raise ValidationError("fallback must be 'primary' or 'raise'", field="fallback")
            view._fallback = fallback
        if wait is not None:
            if not (isinstance(wait, int | float) and 0 <= wait <= 60):
                raise ValidationError("wait must be 0..60 seconds", field="wait")
            view._wait = float(wait)
        return view

    # -- the host's transaction ------------------------------------------------------------------
    def join(self, connection: Connection) -> Self:
        """A copy bound to ``connection``, the host's (``PostgresStore.joined``)."""
        if not isinstance(connection, Connection):
            raise ValidationError(
                "joined() takes a SQLAlchemy Connection (engine.connect())", field="connection"
            )
        if connection.dialect.driver != "psycopg":
            raise ValidationError(
                "joined() needs a connection of the psycopg (3) driver: postgresql+psycopg://...",
                field="connection",
            )
        view = copy.copy(self)
        view.joined = connection
        view.replica = None  # the host's transaction is on the primary, and so are its reads
        return view

    def refuse_joined(self, operation: str) -> None:
        """``CapabilityError`` on a joined view: ``operation`` must commit on its own."""
        if self.joined is not None:
            raise CapabilityError(
                f"{operation} commits on its own: call it on the store, not on a joined view",
                capability="joined transaction",
            )

    def host(self, operation: str) -> Connection:
        """The host's connection, which must be inside a transaction the host began."""
        conn = self.joined
        assert conn is not None
        if conn.closed or not conn.in_transaction():
            raise CapabilityError(
                f"{operation}: the joined connection has no open transaction; begin one "
                "(with connection.begin(): ...) and call ragport inside it",
                capability="joined transaction",
            )
        return conn

    def check_schema(self, conn: Connection) -> None:
        if self._checked:
            return
        applied = applied_versions(conn, self.schema)
        newer = sorted(v for v in applied if v not in MIGRATIONS)
        if newer:
            # A later ragport changed the schema in ways this one does not know how to keep
            # (migration 9, for one, moved the live-id guarantee into a table the writers keep).
            raise StoreError(
                f"schema {self.schema!r} has migrations {newer} that this ragport does not "
                "know; upgrade ragport before writing to or reading from it"
            )
        version = contiguous_version(applied)
        if version != LATEST_VERSION:
            raise StoreError(
                f"schema {self.schema!r} is at version {version}, expected {LATEST_VERSION}; "
                "run `ragport db upgrade` or PostgresStore(..., create=True)"
            )
        self._checked = True

    def pgvector(self) -> PgVector:
        """How SQL names pgvector's objects here: in the schema its extension lives in, read
        from the catalog once, on the first connection ragport takes (``raw_read``,
        ``connect``): a caller that holds one never needs a second for it (a pool of one)."""
        if self._vector:
            return self._vector[0]
        if not self._extension:
            operation = "find the vector extension"
            if self.joined is not None:  # a view: the host's connection, no other
                with translate_errors(operation):
                    self._extension[:] = [vector_schema(self.host(operation))]
            else:  # on a read's connection (retried on a dead one), as any read
                self._extension[:] = [self.read(operation, vector_schema)]
        self._vector[:] = [PgVector.in_schema(self._extension[0])]
        return self._vector[0]

    def _note_extension(self, conn: Any) -> None:
        """``driver_connection(conn)``, and the extension's schema it found kept for
        ``pgvector``: a caller holding this connection never takes a second for it."""
        if self._extension:
            driver_connection(conn)
        else:
            self._extension[:] = [vector_schema(conn)]

    # -- connections -----------------------------------------------------------------------------
    @contextmanager
    def connect(self, operation: str, *, read: bool = False) -> Iterator[Any]:
        """A pooled connection: a SQLAlchemy ``Connection`` for writes, a ``RawRead`` for reads.

        A read connection is in autocommit: a one-statement read (one snapshot) pays no
        BEGIN/ROLLBACK round trip; a read block that needs more than one statement begins its
        own REPEATABLE READ transaction on it (``backend._Snapshot``). They take the pooled DBAPI connection itself
        (no SQLAlchemy ``Connection`` around it) and hand it back in its default mode.
        """
        if read:
            with self.raw_read(operation) as raw:
                yield raw
            return
        if self.joined is not None:
            with translate_errors(operation):
                conn = self.host(operation)
                self.check_schema(conn)
                yield conn
            return
        with translate_errors(operation), self.checkout(operation) as conn:
            dbapi, info = conn.connection.driver_connection, conn.connection.info
            assert isinstance(dbapi, psycopg.Connection)
            try:
                self.check_schema(conn)
                self._note_extension(conn)
                yield conn
            except BaseException:
                # Statements run on psycopg directly (a unit of work's lock) bypass
                # SQLAlchemy's disconnect handling: the connections opened before go too.
                if dbapi.closed or dbapi.broken:
                    server_lost(self.engine, info)
                raise

    def checkout(self, operation: str) -> Connection:
        """``engine.connect()``, or ``StoreError(reason="pool_exhausted")`` rather than a wait
        on a connection the caller holds itself (``pool.wait_for_connection``).

        A connection its server closed while it sat in the pool (``pool.closed_by_server``:
        no round trip) is discarded, with every connection opened before it
        (``pool.server_lost``), and another taken: what runs on it (a write) is not retried.
        """
        wait_for_connection(self.engine, operation)
        conn = self.engine.connect()
        dbapi = conn.connection.driver_connection
        assert isinstance(dbapi, psycopg.Connection)
        if not closed_by_server(dbapi):
            return conn
        server_lost(self.engine, conn.connection.info)
        conn.invalidate()
        conn.close()
        wait_for_connection(self.engine, operation)
        return self.engine.connect()

    @contextmanager
    def raw_read(self, operation: str, engine: Engine | None = None) -> Iterator[RawRead]:
        """An autocommit DBAPI connection of the pool (of ``engine``, default the primary)."""
        if self.joined is not None:
            with self.joined_read(operation) as raw:
                yield raw
            return
        pool = engine or self.engine
        with translate_errors(operation):
            if not self._checked:
                with self.checkout(operation) as conn:
                    self.check_schema(conn)
            wait_for_connection(pool, operation)
            fairy = pool.raw_connection()
            dbapi = fairy.driver_connection
            assert isinstance(dbapi, psycopg.Connection)
            mode = dbapi.autocommit  # False unless the host's Engine is AUTOCOMMIT itself
            try:
                dbapi.autocommit = True
                raw = RawRead(fairy, pool)
                self._note_extension(raw)
                yield raw
            finally:
                if not (dbapi.closed or dbapi.broken):
                    try:
                        dbapi.autocommit = mode  # as the pool lent it, for the next user
                    except psycopg.Error:
                        fairy.invalidate()
                elif fairy.is_valid:
                    # Statements run straight on psycopg bypass SQLAlchemy's disconnect
                    # detection: a connection that lost its server must not go back into the
                    # pool, nor the ones opened before it (pool.server_lost).
                    server_lost(pool, fairy.info)
                    fairy.invalidate()
                fairy.close()  # back to the pool (or discarded if invalidated)

    def second_read(self, first: RawRead, operation: str) -> AbstractContextManager[RawRead] | None:
        """``raw_read`` on the server ``first`` reads from, when its pool holds a connection it
        can lend at once (``pool.idle_connection``); ``None`` otherwise, and on a joined view.

        For a read that shares ``first``'s snapshot (``backend._Companion``): a caller that
        holds one connection never waits for a second, so N such reads on a pool of N run
        one connection each rather than wait on each other."""
        engine = first.engine
        if self.joined is not None or engine is None or not idle_connection(engine):
            return None
        return self.raw_read(operation, engine)

    def may_lend_pair(self, *, replica: bool) -> bool:
        """Whether a read block (on the replica's pool with ``replica``, when there is one)
        could have its connection and ``second_read`` one more, as the pool stands now:
        never on a joined view. A hint (another thread may take them first): a block asks
        it before exporting a snapshot nobody could import."""
        engine = self.replica if replica and self.replica is not None else self.engine
        return self.joined is None and idle_pair(engine)

    @contextmanager
    def joined_read(self, operation: str) -> Iterator[RawRead]:
        """A read on the host's connection, inside its transaction: it sees the host's
        uncommitted writes (ragport's included). It runs in a savepoint that is always rolled
        back: a read changes no data, and so the session settings it made (``hnsw.ef_search``)
        are undone and a failed read leaves the host's transaction usable."""
        with translate_errors(operation):
            conn = self.host(operation)
            self.check_schema(conn)
            fairy = conn.connection
            dbapi = fairy.driver_connection
            assert isinstance(dbapi, psycopg.Connection)
            fairy.info.pop("ragport_hnsw", None)
            dbapi.execute("SAVEPOINT ragport_read")
            try:
                raw = RawRead(fairy)
                yield raw
            finally:
                fairy.info.pop("ragport_hnsw", None)
                if not (dbapi.closed or dbapi.broken):
                    dbapi.execute("ROLLBACK TO SAVEPOINT ragport_read")
                    dbapi.execute("RELEASE SAVEPOINT ragport_read")

    def lend(
        self, operation: str, run: Callable[[RawRead], _T], keep: Lent, *, replica: bool
    ) -> _T:
        """``read``, for the first statement of a read block: the connection ``run`` answered
        on stays lent until ``keep`` closes, for the block's later statements (which are not
        retried: the block may have read something already)."""
        return self._route(operation, run, replica, keep)

    def read(self, operation: str, run: Callable[[RawRead], _T], *, replica: bool = False) -> _T:
        """One read on an autocommit connection, retried once if that connection was dead.

        A pooled connection that lost its server (a restart, an idle timeout) fails its
        first statement; the pool then discards it, and each connection it opened before it
        at its next checkout (``pool.server_lost``: after a restart they are all dead), and
        the read runs again on one opened since. Reads change nothing, so running one twice
        is safe.

        ``replica=True`` reads may run on the read replica (see the class docstring): when it
        is unreachable or behind ``min_position``, the read runs on the primary instead, or
        raises, as configured.
        """
        return self._route(operation, run, replica, None)

    def _joined_first(self, operation: str, run: Callable[[RawRead], _T], keep: Lent) -> _T:
        """``lend`` on the host's connection: the savepoint stays open for the block's later
        statements only once the first answered. A failed first statement goes through
        ``joined_read``'s exit like any joined read: translated (a typed ragport error, no
        driver text) and its savepoint rolled back."""
        lent = self.joined_read(operation)
        conn = lent.__enter__()
        try:
            answer = run(conn)
        except BaseException as error:
            lent.__exit__(type(error), error, error.__traceback__)  # raises it translated
            raise
        keep.hold(lent.__exit__)
        return answer

    def _route(
        self,
        operation: str,
        run: Callable[[RawRead], _T],
        replica: bool,
        keep: Lent | None,
    ) -> _T:
        """``read`` (``keep``: ``lend``)."""
        if self.joined is not None:  # the host's connection: no replica, no retry
            if keep is not None:
                return self._joined_first(operation, run, keep)
            with self.joined_read(operation) as conn:
                return run(conn)
        if replica and self.replica is not None:
            if time.monotonic() >= self._replica_down_until[0]:
                try:
                    return self._read_on(operation, run, keep, replica=True)
                except ReplicaLagError:
                    if self._fallback == "raise":
                        raise
                except StoreError as exc:
                    if not exc.lost_connection:
                        raise
                    self._replica_down_until[0] = time.monotonic() + REPLICA_RETRY_SECONDS
                    if self._fallback == "raise":
                        raise
            elif self._fallback == "raise":
                raise StoreError(
                    f"{operation}: the read replica did not answer recently", lost_connection=True
                )
        return self._read_on(operation, run, keep)

    def _read_on(
        self,
        operation: str,
        run: Callable[[RawRead], _T],
        keep: Lent | None,
        *,
        replica: bool = False,
    ) -> _T:
        try:
            return self._attempt(operation, run, keep, replica)
        except StoreError as exc:
            if not exc.lost_connection:
                raise
        return self._attempt(operation, run, keep, replica)

    def _attempt(
        self, operation: str, run: Callable[[RawRead], _T], keep: Lent | None, replica: bool
    ) -> _T:
        """``run`` on a pooled connection (the replica's with ``replica``), given back after
        it or held by ``keep``: ``with self.raw_read(...)`` written out, as every read takes
        this path (an ``ExitStack`` cost a vector query about 5 us)."""
        lent = self.raw_read(operation, self.replica if replica else None)
        try:
            conn = lent.__enter__()
        except CapabilityError:
            if not replica:
                raise
            # pgvector's type is not on the replica yet: it has not replayed the primary's
            # CREATE EXTENSION (a replica made just before `db upgrade`). Behind, not broken:
            # the primary answers (or ReplicaLagError, as configured).
            raise ReplicaLagError(
                "the read replica has not replayed the pgvector extension yet",
                position=self._min_position or "unknown",
                replayed=None,
                waited=0.0,
            ) from None
        try:
            if replica:
                self._await_position(conn)
            answer = run(conn)
        except BaseException as exc:
            lent.__exit__(type(exc), exc, exc.__traceback__)  # raises it, translated
            raise
        if keep is None:
            lent.__exit__(None, None, None)
        else:  # lent on: ``keep`` gives it back
            keep.hold(lent.__exit__)
        return answer

    def _await_position(self, conn: RawRead) -> None:
        """Wait (up to ``replica_wait``) until the replica has replayed ``min_position``."""
        if self._min_position is None or self._caught_up:
            return
        deadline = time.monotonic() + self._wait
        delay = 0.002
        while True:
            row = reads.fetch(conn, _REPLAYED, {"pos": self._min_position})[0]
            if row.ok:
                self._caught_up = True  # replay only moves forward on one server
                return
            if time.monotonic() >= deadline:
                raise ReplicaLagError(
                    f"the read replica had not replayed WAL position {self._min_position} "
                    f"within {self._wait:g} s",
                    position=self._min_position,
                    replayed=row.lsn,
                    waited=self._wait,
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _check_position(position: object) -> None:
    """A WAL position as PostgreSQL prints it (``X/Y``, hex), checked before it is bound."""
    parts = position.split("/") if isinstance(position, str) else []
    if len(parts) != 2 or not all(0 < len(p) <= 8 for p in parts):
        raise ValidationError("position must be a WAL LSN like '0/3000148'", field="position")
    try:
        int(parts[0], 16), int(parts[1], 16)
    except ValueError:
        raise ValidationError(
            "position must be a WAL LSN like '0/3000148'", field="position"
        ) from None
