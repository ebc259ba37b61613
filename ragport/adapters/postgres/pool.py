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
"""

from __future__ import annotations

import threading
import time
import weakref

from sqlalchemy import Engine, event
from sqlalchemy.pool import QueuePool

from ragport.domain.errors import StoreError

__all__ = [
    "POOL_WAIT_SECONDS",
    "PoolWatch",
    "has_free_connection",
    "idle_connection",
    "wait_for_connection",
    "watch",
]

POOL_WAIT_SECONDS = 2.0
"""The longest a checkout waits for another thread to give a connection back to a pool
that has none free; past it the call fails (``reason="pool_exhausted"``)."""
_POLL_SECONDS = (0.002, 0.05)  # first and longest pause between two looks at the pool


class PoolWatch:
    """Which thread holds each connection an Engine's pool has lent."""

    def __init__(self) -> None:
        self._holders: dict[int, int] = {}  # id of the connection record -> thread ident
        self._lock = threading.Lock()

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

            def lent(dbapi_connection: object, record: object, proxy: object) -> None:
                w.lent(record)

            def returned(dbapi_connection: object, record: object) -> None:
                w.returned(record)

            event.listen(engine, "checkout", lent)
            event.listen(engine, "checkin", returned)
            event.listen(engine, "detach", returned)
        return found


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
