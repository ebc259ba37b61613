"""Checkouts from a bounded pool the caller may be holding itself.

A host that hands its own Engine to ``PostgresStore(engine)`` and holds pooled connections
while it calls ragport can empty the pool by itself: SQLAlchemy would then wait
``pool_timeout`` (30 s by default) for a connection that only the waiting caller can give
back, and fail with a bare ``TimeoutError``. So before every checkout ragport looks at the
pool (a ``QueuePool`` with a finite ``max_overflow``; other pools are left alone):

- a connection is free, or the pool may open one more: check out as usual;
- none is, and every lent connection is held by the calling thread: nobody can give one
  back, so fail at once;
- none is, and other threads hold some: wait for one to come back, at most
  ``POOL_WAIT_SECONDS`` (or the pool's own ``timeout`` when shorter), then fail.

The failure is ``StoreError(reason="pool_exhausted")`` naming the pool's size, its overflow
and how many connections the caller holds. Which thread holds which connection is recorded
by ``checkout`` / ``checkin`` listeners on the Engine, from the first ``PostgresStore`` made
on it onward (connections taken before that count as held by other threads).

A connection that lost its server (``server_lost``: a restart, a crash) says the others the
pool opened before it are most likely dead too: each is discarded at its next checkout and a
new one opened in its place (``PoolWatch.generation``), so a read retried once after a lost
connection runs on a live one, not on the next dead one. SQLAlchemy does the same for the
statements it runs itself (a disconnect on a ``Connection`` invalidates the pool's older
connections; its ``pool_pre_ping`` too), but ragport's reads run on psycopg directly.
Writes are never retried (a lost connection may have committed): their checkout looks at
the connection's socket first (``closed_by_server``), so a write after a restart takes a
live connection.
"""

from __future__ import annotations

import select
import threading
import time
import weakref
from collections.abc import MutableMapping
from typing import Any

import psycopg
from sqlalchemy import Engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import QueuePool

from ragport.domain.errors import StoreError

__all__ = [
    "POOL_WAIT_SECONDS",
    "PoolWatch",
    "closed_by_server",
    "has_free_connection",
    "idle_connection",
    "idle_pair",
    "server_lost",
    "wait_for_connection",
    "watch",
]

POOL_WAIT_SECONDS = 2.0
"""The longest a checkout waits for another thread to give a connection back to a pool
that has none free; past it the call fails (``reason="pool_exhausted"``)."""
_POLL_SECONDS = (0.002, 0.05)  # first and longest pause between two looks at the pool
_GENERATION = "ragport_generation"  # in a connection's ``info``: the generation it opened in


class PoolWatch:
    """Which thread holds each connection an Engine's pool has lent, and the pool's
    generation: a connection opened in an earlier one is discarded at checkout."""

    def __init__(self) -> None:
        self._holders: dict[int, int] = {}  # id of the connection record -> thread ident
        self._lock = threading.Lock()
        self.generation = 0  # connections opened before ``watch`` count as generation 0

    def opened(self, info: MutableMapping[str, Any]) -> None:
        info[_GENERATION] = self.generation

    def stale(self, info: MutableMapping[str, Any]) -> bool:
        return bool(info.get(_GENERATION, 0) < self.generation)

    def lost(self, info: MutableMapping[str, Any]) -> None:
        """The connection of ``info`` lost its server: every connection opened so far is
        stale. Once per loss: a stale one failing too (it was opened before) changes
        nothing, so connections opened since are kept."""
        with self._lock:
            if not self.stale(info):
                self.generation += 1

    def lent(self, record: object) -> None:
        with self._lock:
            self._holders[id(record)] = threading.get_ident()

    def returned(self, record: object) -> None:
        with self._lock:
            self._holders.pop(id(record), None)

    def held_here(self) -> int:
        """How many of the pool's lent connections the calling thread holds."""
        me = threading.get_ident()
        with self._lock:
            return sum(1 for holder in self._holders.values() if holder == me)


_WATCHES: weakref.WeakKeyDictionary[Engine, PoolWatch] = weakref.WeakKeyDictionary()
_WATCHES_LOCK = threading.Lock()


def watch(engine: Engine) -> PoolWatch:
    """The ``PoolWatch`` of ``engine``, its listeners added on the first call.

    Listeners on the Engine follow its pool when ``Engine.dispose()`` replaces it.
    """
    with _WATCHES_LOCK:
        found = _WATCHES.get(engine)
        if found is None:
            found = _WATCHES[engine] = PoolWatch()
            w = found

            def opened(dbapi_connection: object, record: Any) -> None:
                w.opened(record.info)

            def lent(dbapi_connection: object, record: Any, proxy: object) -> None:
                if w.stale(record.info):  # SQLAlchemy discards it and opens another
                    raise DisconnectionError("opened before the server was lost")
                w.lent(record)

            def returned(dbapi_connection: object, record: object) -> None:
                w.returned(record)

            event.listen(engine, "connect", opened)
            event.listen(engine, "checkout", lent)
            event.listen(engine, "checkin", returned)
            event.listen(engine, "detach", returned)
        return found


def server_lost(engine: Engine, info: MutableMapping[str, Any]) -> None:
    """A connection of ``engine``'s pool (its ``info``) lost its server: the connections the
    pool opened before are discarded at their next checkout (the module docstring)."""
    watch(engine).lost(info)


def closed_by_server(dbapi: psycopg.Connection[Any]) -> bool:
    """Whether the server has most likely closed this idle pooled connection, without a
    round trip: it is broken, or its socket has something to read while no statement is
    out. A server process that ends (a restart, a crash, ``pg_terminate_backend``,
    ``idle_session_timeout``) sends its last message (57P01 admin_shutdown, ...) and hangs
    up; what else the server may send an idle connection (a ``LISTEN`` notification)
    is rare on a pool ragport uses, and such a connection is only reopened."""
    if dbapi.closed or dbapi.broken:
        return True
    try:
        fd = dbapi.fileno()
    except psycopg.Error:
        return True
    poller = select.poll()  # not select.select: it refuses descriptors of 1024 and above
    poller.register(fd, select.POLLIN | select.POLLPRI)
    try:
        return bool(poller.poll(0))
    except OSError:
        return False


def _bounded(engine: Engine) -> QueuePool | None:
    pool = engine.pool
    if isinstance(pool, QueuePool) and pool._max_overflow >= 0:
        return pool
    return None


def _exhausted(pool: QueuePool) -> bool:
    return pool.checkedout() >= pool.size() + pool._max_overflow


def has_free_connection(engine: Engine) -> bool:
    """Whether a checkout from ``engine`` would get a connection without waiting (now)."""
    pool = _bounded(engine)
    return pool is None or not _exhausted(pool)


def idle_connection(engine: Engine) -> bool:
    """Whether ``engine``'s pool (a ``QueuePool``; any other pool: no) would lend a
    connection now without waiting and keep it afterwards: one is idle in the pool, or the
    pool has opened fewer than ``pool_size``. Overflow connections (opened, then closed on
    return) do not count: opening one costs more than most reads. Another thread may take
    the idle one first; the checkout then waits only for a connection that thread gives
    back (never for one the caller holds)."""
    pool = engine.pool
    if not isinstance(pool, QueuePool):
        return False
    idle = pool.checkedin()
    return idle > 0 or idle + pool.checkedout() < pool.size()


def idle_pair(engine: Engine) -> bool:
    """Whether ``engine``'s pool would lend two connections now as ``idle_connection`` lends
    one: idle ones, or room under ``pool_size`` to open them."""
    pool = engine.pool
    if not isinstance(pool, QueuePool):
        return False
    idle = pool.checkedin()
    return idle + max(0, pool.size() - idle - pool.checkedout()) >= 2


def wait_for_connection(engine: Engine, operation: str) -> None:
    """Return once ``engine``'s pool can lend a connection; raise instead of waiting on one
    the caller holds itself (see the module docstring)."""
    pool = _bounded(engine)
    if pool is None or not _exhausted(pool):
        return
    held = watch(engine).held_here()
    if held < pool.checkedout():
        deadline = time.monotonic() + min(POOL_WAIT_SECONDS, float(pool.timeout()))
        pause = _POLL_SECONDS[0]
        while time.monotonic() < deadline:
            time.sleep(pause)
            if not _exhausted(pool):
                return
            pause = min(pause * 2, _POLL_SECONDS[1])
        held = watch(engine).held_here()
    raise _exhausted_error(operation, pool, held)


def _exhausted_error(operation: str, pool: QueuePool, held: int) -> StoreError:
    lent = pool.checkedout()
    if held >= lent:
        whose = f"this thread holds all {lent} of its connections"
    else:
        whose = (
            f"this thread holds {held} of its {lent} lent connections and no other thread "
            f"gave one back within {min(POOL_WAIT_SECONDS, float(pool.timeout())):g} s"
        )
    return StoreError(
        f"{operation}: the connection pool (pool_size {pool.size()}, max_overflow "
        f"{pool._max_overflow}) is exhausted: {whose}; hold fewer connections while calling "
        "ragport, or raise pool_size / max_overflow",
        reason="pool_exhausted",
    )
