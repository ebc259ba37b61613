"""An add's vectors written on a second connection beside its records (``vector_writes.py``).

The vectors commit first, with a marker in ``vector_writes``; the unit of work deletes the
marker and commits the records. These tests check the promise that makes it safe: nothing
is visible until the unit of work commits, and whatever it leaves behind when it does not
(a rollback, a failure of either connection, a killed process) is invisible and swept, while
a unit of work still running is never swept. ``parallel_vector_rows=4`` puts every add of
these tests on the second connection; a spy proves it was taken.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore, WriteSettings, backend, statements
from ragport.adapters.postgres import vector_writes as vw
from ragport.contract_tests._support import CONTRACT_DIMENSIONS, make_batch, publish_sources
from ragport.domain.errors import StoreError, ValidationError

TEXTS = [f"harbour lantern {w} tide {i}" for i, w in enumerate("abcdefghijkl")]


def _scope(tenant: str = "tenant-1") -> ragport.Scope:
    return ragport.Scope(tenant, "kb", "c" + uuid.uuid4().hex[:12])


def _counts(engine: Any, schema: str) -> tuple[int, int, int, int]:
    """(records, vectors, vectors without a record, markers) of the whole schema."""
    with engine.connect() as conn:
        row = conn.execute(
            text(
                f'SELECT (SELECT count(*) FROM "{schema}".records), '
                f'(SELECT count(*) FROM "{schema}".record_vectors), '
                f'(SELECT count(*) FROM "{schema}".record_vectors v WHERE NOT EXISTS '
                f'(SELECT 1 FROM "{schema}".records r WHERE r.row_key = v.row_key)), '
                f'(SELECT count(*) FROM "{schema}".vector_writes)'
            )
        ).one()
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    made = PostgresStore(
        pg_engine, schema=pg_schema, create=True, text_search_config="simple",
        writes=WriteSettings(parallel_vector_rows=4),
    )  # fmt: skip
    made.prepare(_scope(), dimensions=CONTRACT_DIMENSIONS)  # the HNSW index exists first
    return made


@pytest.fixture
def jobs(monkeypatch) -> list[int]:
    """The first keys of every add that went to a second connection."""
    started: list[int] = []
    real = vw.VectorJob.__init__

    def spy(self: vw.VectorJob, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        started.append(self.first_key)

    monkeypatch.setattr(vw.VectorJob, "__init__", spy)
    return started


def _query(store: PostgresStore, scope: ragport.Scope, vector: np.ndarray) -> list[str]:
    return [hit.record.id for hit in store.query(scope, vector, limit=50)]


def test_a_large_add_commits_its_vectors_with_its_records(store, jobs, pg_engine, pg_schema):
    """Two sources of 12 chunks: both adds take the second connection; every record has its
    vector, no marker is left, and a vector query finds every row."""
    scope = _scope()
    _, batches = publish_sources(store, scope, {"a": TEXTS, "b": TEXTS[:6]})
    assert len(jobs) == 2, "the adds did not go to the second connection"
    assert _counts(pg_engine, pg_schema) == (18, 18, 0, 0)
    hits = _query(store, scope, batches["a"].vectors[0])
    assert set(hits) == {r.id for b in batches.values() for r in b.records}


def test_a_small_add_stays_on_one_connection(pg_engine, pg_schema, jobs):
    """Below the threshold (and with ``None``) the vectors are copied by the unit of work."""
    small = PostgresStore(
        pg_engine, schema=pg_schema, create=True, writes=WriteSettings(parallel_vector_rows=20)
    )
    never = PostgresStore(
        pg_engine, schema=pg_schema, writes=WriteSettings(parallel_vector_rows=None)
    )
    publish_sources(small, _scope(), {"a": TEXTS})
    publish_sources(never, _scope(), {"a": TEXTS})
    assert jobs == []
    assert _counts(pg_engine, pg_schema) == (24, 24, 0, 0)


def test_nothing_is_visible_until_the_unit_of_work_commits(store, jobs, pg_engine, pg_schema):
    """After the add the vectors are committed (the marker names them) but no record is:
    a vector query from another connection finds nothing, and a sweep leaves the running
    unit of work alone (its lock is held). The commit makes all of it visible together.
    If this fails, check the advisory lock in ``VectorWriter.start`` and ``sweep``."""
    scope = _scope()
    with store.unit_of_work(scope) as uow:
        staged = uow.generations.stage()
        batch = make_batch(scope, "a", TEXTS, generation=staged)
        uow.records.add(batch.records, batch.vectors)
        assert jobs, "the add did not go to the second connection"
        records, vectors, orphans, markers = _counts(pg_engine, pg_schema)
        ahead = vw.ahead_share(12)  # the second connection's share; the rest is uncommitted
        assert 0 < ahead < 12
        assert (records, vectors, orphans) == (0, ahead, ahead)  # committed ahead, no records
        assert markers == 1  # its deletion is in the unit of work's uncommitted transaction
        other = PostgresStore(pg_engine, schema=pg_schema)
        assert other.sweep_vector_writes() == 0, "a running unit of work's vectors were swept"
        assert _query(other, scope, batch.vectors[0]) == []
        uow.generations.publish(staged)
        uow.commit()
    assert _counts(pg_engine, pg_schema) == (12, 12, 0, 0)
    assert len(_query(store, scope, batch.vectors[0])) == 12


def test_a_unit_of_work_that_rolls_back_leaves_no_vector(store, jobs, pg_engine, pg_schema):
    """The host raises after the add: the rollback sweeps the vectors at once."""
    scope = _scope()
    with pytest.raises(RuntimeError), store.unit_of_work(scope) as uow:
        staged = uow.generations.stage()
        batch = make_batch(scope, "a", TEXTS, generation=staged)
        uow.records.add(batch.records, batch.vectors)
        raise RuntimeError("the host changed its mind")
    assert jobs
    assert _counts(pg_engine, pg_schema) == (0, 0, 0, 0)


def test_a_records_failure_after_the_vectors_committed_undoes_both(
    store, jobs, pg_engine, pg_schema, monkeypatch
):
    """The statistics statement fails on the unit of work's connection while the vectors
    commit on the other: a typed error, no record, and no vector once the unit of work is
    rolled back. If this fails, check the ``finally`` of ``ScopeTransaction.copy_in``."""
    monkeypatch.setattr(backend, "_counted", lambda s, **_: "SELECT 1 FROM no_such_table")
    scope = _scope()
    with pytest.raises(StoreError) as caught:
        publish_sources(store, scope, {"a": TEXTS})
    assert caught.value.sqlstate == "42P01"
    assert jobs
    assert _counts(pg_engine, pg_schema) == (0, 0, 0, 0)


def test_a_failed_add_leaves_no_vector_of_its_unit_of_work(
    store, jobs, pg_engine, pg_schema, monkeypatch
):
    """The add fails after its vectors committed (the statistics statement): the engine's
    unit of work is rollback-only from then on (a commit is refused), and leaving it sweeps
    the vectors of both its adds. If this fails, check ``ScopeTransaction.rollback`` and
    ``sweep_vectors``."""
    scope = _scope()
    with store.unit_of_work(scope) as uow:
        staged = uow.generations.stage()
        good = make_batch(scope, "good", TEXTS, generation=staged)
        uow.records.add(good.records, good.vectors)
        monkeypatch.setattr(backend, "_counted", lambda s, **_: "SELECT 1 FROM no_such_table")
        bad = make_batch(scope, "bad", TEXTS, generation=staged)
        with pytest.raises(StoreError):
            uow.records.add(bad.records, bad.vectors)
        with pytest.raises(ValidationError):
            uow.commit()
    assert len(jobs) == 2
    assert _counts(pg_engine, pg_schema) == (0, 0, 0, 0)


def test_a_vectors_failure_undoes_the_records(store, jobs, pg_engine, pg_schema, monkeypatch):
    """The second connection fails (its COPY names no table): the add raises its typed
    error in the writer's thread, and the unit of work commits nothing."""
    monkeypatch.setattr(statements, "copy_vectors", lambda s: "COPY no_such_table FROM STDIN")
    scope = _scope()
    with pytest.raises(StoreError) as caught:
        publish_sources(store, scope, {"a": TEXTS})
    assert caught.value.sqlstate == "42P01"
    assert "harbour" not in str(caught.value)
    assert jobs
    assert _counts(pg_engine, pg_schema) == (0, 0, 0, 0)
    assert store.current_generation(scope) == 0


def test_a_killed_writer_leaves_invisible_vectors_that_the_sweep_deletes(
    store, pg_url, pg_engine, pg_schema
):
    """A process killed (SIGKILL) after its add and before its commit: the vectors it
    committed ahead stay, invisible to queries, with their marker; the next store's sweep
    deletes them and leaves the rows of a committed write alone."""
    scope = _scope()
    _, kept = publish_sources(store, scope, {"kept": TEXTS[:6]})
    child = textwrap.dedent(
        f"""
        import sys, time
        import ragport
        from ragport.adapters.postgres import PostgresStore, WriteSettings
        from ragport.contract_tests._support import make_batch
        store = PostgresStore({pg_url!r}, schema={pg_schema!r}, writes=WriteSettings(parallel_vector_rows=4))
        scope = ragport.Scope({scope.tenant_id!r}, {scope.resource_id!r}, {scope.corpus_id!r})
        texts = [f"doomed {{i}} lantern" for i in range(12)]
        with store.unit_of_work(scope) as uow:
            staged = uow.generations.stage()
            batch = make_batch(scope, "doomed", texts, generation=staged)
            uow.records.add(batch.records, batch.vectors)
            print("added", flush=True)
            time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "added"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    deadline = 50
    while _counts(pg_engine, pg_schema)[3] != 1 and deadline:  # the backend notices the kill
        deadline -= 1
        threading.Event().wait(0.1)
    records, vectors, orphans, markers = _counts(pg_engine, pg_schema)
    ahead = vw.ahead_share(12)  # what the second connection committed; the rest rolled back
    assert (records, vectors, orphans, markers) == (6, 6 + ahead, ahead, 1)
    hits = _query(store, scope, kept["kept"].vectors[0])
    assert set(hits) == {r.id for r in kept["kept"].records}  # the orphans are never found
    assert PostgresStore(pg_engine, schema=pg_schema).sweep_vector_writes() == ahead
    assert _counts(pg_engine, pg_schema) == (6, 6, 0, 0)


def test_two_writers_at_once_keep_every_vector_with_its_record(store, jobs, pg_engine, pg_schema):
    """Four threads write 5 sources each into two scopes (two per scope, serialized by the
    scope lock), every add on a second connection: every record has exactly its vector."""
    scopes = [_scope("tenant-1"), _scope("tenant-2")]
    errors: list[BaseException] = []

    def write(scope: ragport.Scope, name: str) -> None:
        try:
            for i in range(5):
                publish_sources(store, scope, {f"{name}-{i}": [f"{t} {name}" for t in TEXTS]})
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=write, args=(scope, f"w{n}")) for scope in scopes for n in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(jobs) == 20
    assert _counts(pg_engine, pg_schema) == (240, 240, 0, 0)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "32", True, 1_000_001])
def test_parallel_vector_rows_is_none_or_a_row_count(bad):
    with pytest.raises(ValidationError) as caught:
        WriteSettings(parallel_vector_rows=bad)
    assert caught.value.field == "parallel_vector_rows"


def test_a_lock_wait_on_the_second_connection_falls_back_to_one(store, jobs, pg_engine, pg_schema):
    """Another session holds ``record_vectors`` locked (as DDL queued behind the unit of
    work would) for longer than ``LOCK_TIMEOUT_MS``: the second connection gives up its wait,
    the unit of work copies the vectors itself once the lock is gone, and the write lands
    whole. If this fails (or hangs), check ``VectorJob._run``'s lock_timeout handling."""
    scope = _scope()
    locked = threading.Event()

    def hold() -> None:
        with pg_engine.begin() as conn:
            conn.execute(text(f'LOCK TABLE "{pg_schema}".record_vectors IN ACCESS EXCLUSIVE MODE'))
            locked.set()
            threading.Event().wait(vw.LOCK_TIMEOUT_MS / 1000 + 1.5)

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(10)
    try:
        publish_sources(store, scope, {"a": TEXTS})
    finally:
        holder.join()
    assert jobs, "the add did not try the second connection"
    assert _counts(pg_engine, pg_schema) == (12, 12, 0, 0)


def test_adds_after_the_index_was_created_in_their_unit_of_work_stay_on_one_connection(
    pg_engine, pg_schema, jobs
):
    """The first add of a fresh store creates the HNSW index in the unit of work's open
    transaction; the second connection would wait on that index's lock until
    ``LOCK_TIMEOUT_MS`` (1 s) for every later add of the same unit of work (300 sources of a
    first load: five minutes). So none of them starts a second connection; the next unit of
    work, after the index committed, does. If this fails, check ``copy_in``'s use of
    ``created_indexes``."""
    fresh = PostgresStore(
        pg_engine, schema=pg_schema, create=True, writes=WriteSettings(parallel_vector_rows=4)
    )
    waited: list[bool] = []
    real = vw.VectorJob.wait

    def spy(self: vw.VectorJob) -> None:
        real(self)
        waited.append(self.timed_out)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vw.VectorJob, "wait", spy)
        publish_sources(fresh, _scope(), {f"s{i}": TEXTS for i in range(3)})
        assert jobs == [] and waited == []
        publish_sources(fresh, _scope(), {"later": TEXTS})
    assert len(jobs) == 1 and waited and not any(waited)  # no lock wait ran out
    assert _counts(pg_engine, pg_schema) == (48, 48, 0, 0)
