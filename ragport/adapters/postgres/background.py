"""After-commit maintenance on a thread of the store's own: GIN merges and re-analyses.

A write that added rows leaves GIN entries pending (``VectorIndexes.merge_pending``) and may
bring ``records`` to its next re-analysis (``analyze_after_commit``). Both run after the
commit and neither decides what the write did, so with ``PostgresStore(maintenance_delay=
seconds)`` (the default, 2 s) they leave the writer's path: the writer hands the tenant to a
``MaintenanceWorker`` and returns, and the worker merges it, on a connection of its own,
``delay`` seconds after the tenant's first unmerged write. Writes committed meanwhile are
merged at once (one merge of many writes moves each common key's postings once, not once per
write), and the work runs on another server process, beside the next write rather than
before it. ``maintenance_delay=None`` runs both inline after each commit (the behaviour before
the worker). ``finish`` runs what is scheduled now and waits for it.

The thread starts with the first scheduled work and ends after ``IDLE_SECONDS`` without any,
so an idle store holds no thread and no connection. A forked child starts its own. Work
still scheduled when the interpreter exits runs then (``atexit``, bounded by
``EXIT_SECONDS``). A failure is logged with its SQLSTATE (never text) and loses no write: the
rows were committed; autovacuum merges and analyses later.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from ragport.adapters.postgres import reads, statements
from ragport.adapters.postgres._driver import driver_connection
from ragport.adapters.postgres.indexes import VectorIndexes
from ragport.adapters.postgres.schema import quote_schema
from ragport.domain.errors import StoreError, ValidationError

__all__ = [
    "DEFAULT_MAINTENANCE_DELAY",
    "MAX_MAINTENANCE_DELAY",
    "MaintenanceWorker",
    "finish_all",
    "fold_retired",
    "validate_maintenance_delay",
]

_LOG = logging.getLogger(__name__)

DEFAULT_MAINTENANCE_DELAY = 2.0
"""Seconds from a tenant's first unmerged write to the worker's merge (``PostgresStore``)."""
MAX_MAINTENANCE_DELAY = 60.0
IDLE_SECONDS = 2.0
"""The worker's thread ends after this long without work (the next write starts another)."""
EXIT_SECONDS = 10.0
"""At interpreter exit, how long the scheduled work of every worker may take in all."""

_WORKERS: weakref.WeakSet[MaintenanceWorker] = weakref.WeakSet()


def validate_maintenance_delay(delay: object) -> float | None:
    """``None`` (inline maintenance) or seconds in 0..``MAX_MAINTENANCE_DELAY``, else
    ``ValidationError(field="maintenance_delay")``."""
    if delay is None:
        return None
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise ValidationError(
            "maintenance_delay must be None or a number of seconds", field="maintenance_delay"
        )
    value = float(delay)
    if not 0.0 <= value <= MAX_MAINTENANCE_DELAY:  # refuses NaN too
        raise ValidationError(
            f"maintenance_delay must be 0..{MAX_MAINTENANCE_DELAY:g} seconds",
            field="maintenance_delay",
        )
    return value


class MaintenanceWorker:
    """The GIN merges and re-analyses of one store, ``delay`` seconds after the writes."""

    def __init__(
        self,
        engine: Engine,
        indexes: VectorIndexes,
        delay: float,
        *,
        sweep: Callable[[Connection], int] | None = None,
    ) -> None:
        """``sweep``: run once, at the thread's first work in this process, to delete the
        vectors of writes that never committed (``VectorWriter.sweep``)."""
        self._engine = engine
        self._indexes = indexes
        self.delay = delay
        self._sweep = sweep
        self._reset()
        _WORKERS.add(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        # Per tenant: (monotonic time of its first scheduled write, merge?, re-analyse?,
        # fold the batches retired whole?).
        self._due: dict[str, tuple[float, bool, bool, bool]] = {}
        self._busy = 0  # tenants taken by the thread and not finished yet
        self._hurry = False  # finish(): run what is scheduled without waiting out the delay

    def schedule(self, tenant_id: str, *, merge: bool, analyze: bool, fold: bool = False) -> None:
        """After a commit: merge ``tenant_id``'s pending lists (``merge``; due by
        ``VectorIndexes.due_for_merge``), re-analyse (``analyze``; ``due_for_analysis``) and
        fold its batches retired whole into the running totals (``fold``: ``fold_retired``)."""
        if not merge and not analyze and not fold:
            return
        if os.getpid() != self._pid:  # a forked child: the parent's thread is not here
            self._reset()
        with self._cond:
            first, merging, analysing, folding = self._due.get(
                tenant_id, (time.monotonic(), False, False, False)
            )
            self._due[tenant_id] = (first, merging or merge, analysing or analyze, folding or fold)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"ragport-maintenance-{id(self):x}", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    @property
    def pending(self) -> bool:
        """Whether work is scheduled or running."""
        with self._cond:
            return bool(self._due) or self._busy > 0

    def finish(self, timeout: float = 60.0) -> None:
        """Run every merge and re-analysis scheduled so far now, and wait for them; raises
        ``StoreError`` if they are still running after ``timeout`` seconds. The work runs on
        the maintenance thread, never on the caller's: a merge waiting on a lock or a server
        that stopped answering cannot hold the caller (or the exit hook) past ``timeout``."""
        if os.getpid() != self._pid:
            self._reset()
            return
        deadline = time.monotonic() + timeout
        with self._cond:
            self._hurry = True
            self._cond.notify_all()
            while self._due or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreError(f"background maintenance did not finish within {timeout:g} s")
                self._cond.wait(left)

    def _take(self) -> list[tuple[str, bool, bool, bool]] | None:
        """Wait for due work and take it; ``None`` when idle for ``IDLE_SECONDS``."""
        with self._cond:
            idle_since = time.monotonic()
            while True:
                now = time.monotonic()
                if self._due:
                    first = min(t for t, _, _, _ in self._due.values())
                    wait = 0.0 if self._hurry else first + self.delay - now
                    if wait <= 0:
                        taken = [(t, m, a, f) for t, (_, m, a, f) in self._due.items()]
                        self._due.clear()
                        self._busy += len(taken)
                        return taken
                    self._cond.wait(wait)
                    continue
                self._hurry = False
                if now - idle_since >= IDLE_SECONDS:
                    self._thread = None
                    self._cond.notify_all()
                    return None
                self._cond.wait(IDLE_SECONDS - (now - idle_since))

    def _run(self) -> None:
        while (taken := self._take()) is not None:
            try:
                self._work(taken)
            finally:
                with self._cond:
                    self._busy -= len(taken)
                    self._cond.notify_all()

    def _work(self, taken: list[tuple[str, bool, bool, bool]]) -> None:
        try:
            with self._engine.connect() as conn:
                if self._sweep is not None:
                    sweep, self._sweep = self._sweep, None
                    sweep(conn)  # what killed writers left (vector_writes.py)
                for tenant_id, _, _, fold in taken:
                    if fold:  # first: readers pay for every batch not folded yet
                        fold_retired(conn, quote_schema(self._indexes.schema), tenant_id)
                for tenant_id, merge, _, _ in taken:
                    if merge:
                        self._indexes.merge_now(conn, tenant_id)
                if any(analyze for _, _, analyze, _ in taken):  # one ANALYZE: every tenant
                    self._indexes.reanalyze(conn)
        except Exception as exc:
            # merge_now and reanalyze log their own failures; this is the
            # connection itself (a server gone, a disposed engine).
            _LOG.warning(
                "ragport: background maintenance of %s could not run (%s, SQLSTATE %s); "
                "autovacuum merges and analyses later",
                self._indexes.schema,
                type(exc).__name__,
                _sqlstate(exc),
            )


def fold_retired(conn: Connection, s: str, tenant_id: str) -> int:
    """Fold the batches of ``tenant_id`` retired whole (``statements.fold_retired``), one
    transaction per scope, each under the scope's lock, which a writer holding it makes this
    skip (the next commit that retires, or compaction, folds them; readers are exact either
    way). Answers how many batches were folded; a failure is logged, never raised.

    One round trip finds the scopes, one per scope folds it: [``fold_lock``, the fold
    (``guarded``: nothing unless the lock was got), ``COMMIT``] in one pipeline; the fold's
    snapshot is taken after the lock is held, and it commits without waiting for the WAL
    flush (``fold_lock``)."""
    folded = 0
    try:
        if not conn.in_transaction():
            conn.begin()  # SQLAlchemy's bookkeeping only: the driver begins at the statement
        dbapi = driver_connection(conn)
        find = reads.pyformat(
            f"SELECT DISTINCT b.resource_id, b.corpus_id FROM {s}.lexical_batches b "
            "WHERE b.tenant_id = :t AND b.fold_docs IS NOT NULL"
        )
        with dbapi.pipeline() if reads.PIPELINE else contextlib.nullcontext():
            found = dbapi.execute(find, {"t": tenant_id})
            dbapi.commit()
        lock = reads.pyformat(statements.fold_lock(s))
        fold = reads.pyformat(statements.fold_retired(s, guarded=True))
        for resource_id, corpus_id in found.fetchall():
            binds = {"t": tenant_id, "r": resource_id, "c": corpus_id}
            with dbapi.pipeline() if reads.PIPELINE else contextlib.nullcontext():
                dbapi.execute(lock, binds)
                done = dbapi.execute(fold, binds)
                dbapi.commit()
            row = done.fetchone()
            folded += int(row[0]) if row is not None else 0
        conn.commit()  # SQLAlchemy's bookkeeping: the driver is idle, nothing is sent
    except (SQLAlchemyError, psycopg.Error) as exc:
        with contextlib.suppress(SQLAlchemyError, psycopg.Error):
            conn.rollback()
        _LOG.warning(
            "ragport: folding retired BM25 batches in %s failed (SQLSTATE %s); readers "
            "subtract them until the next fold",
            s,
            _sqlstate(exc),
        )
    return folded


def _sqlstate(exc: BaseException) -> str:
    orig: Any = getattr(exc, "orig", None)
    state = getattr(exc, "sqlstate", None) or getattr(orig, "sqlstate", None)
    return str(state or "unknown")


def finish_all(timeout: float = EXIT_SECONDS) -> None:
    """Run the scheduled work of every store's maintenance thread in this process now and
    wait for it, ``timeout`` seconds in all (then give up quietly: the writes committed).
    Run at interpreter exit; a test suite calls it before dropping a schema."""
    deadline = time.monotonic() + timeout
    for worker in list(_WORKERS):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if worker.pending:
            try:
                worker.finish(timeout=left)
            except StoreError:
                return


atexit.register(finish_all)
