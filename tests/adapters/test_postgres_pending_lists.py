"""The writer merges GIN pending lists after it commits (``VectorIndexes.merge_pending``).

A GIN index with ``fastupdate`` (PostgreSQL's default) keeps new entries in a pending list
that every scan reads whole until a vacuum merges it: a lexical query right after a bulk load
of 10,000 rows took 702 ms instead of 23 ms (bench/RESULTS.md, "GIN pending lists"). So a
unit of work that added, re-keyed or re-linked rows merges the lists of ``records`` (of the
tenant's partition) once it has committed. These tests count what is still pending after
each kind of write, with the merge on and off (off must leave pages pending, or the count
proves nothing), on a plain and a partitioned schema, and check that a role without the
privilege to merge still writes, is told once by SQLSTATE, and stops trying.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy.exc
from sqlalchemy import text
from sqlalchemy.engine import make_url

import ragport
from ragport.adapters.postgres import PostgresStore, WriteSettings
from ragport.adapters.postgres.indexes import VectorIndexes
from ragport.contract_tests._support import derived_batch, publish_sources
from ragport.domain.errors import CapabilityError, ValidationError

SECRET = "walrus-confidential-7731"
"""A word in every written text: it must appear in no log line."""

TEXTS = [f"{SECRET} harbour lantern {w} tide {i}" for i, w in enumerate("abcdefghijkl")]


def _scope(tenant: str = "tenant-1") -> ragport.Scope:
    return ragport.Scope(tenant, "kb", "c" + uuid.uuid4().hex[:12])


def _gin_pending(store: PostgresStore, *writers: PostgresStore) -> int:
    """Merge every GIN index of ``records`` and its partitions; the pages that were pending
    once ``store`` and ``writers`` ran the maintenance they had scheduled."""
    for each in (store, *writers):
        each.finish_maintenance()
    with store.engine.begin() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT coalesce(sum(gin_clean_pending_list(c.oid)), 0) "
                    "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                    "JOIN pg_am a ON a.oid = c.relam AND a.amname = 'gin' "
                    "WHERE c.relkind = 'i' AND (i.indrelid = CAST(:t AS regclass) OR i.indrelid "
                    "IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = CAST(:t AS regclass)))"
                ),
                {"t": f'"{store.schema}".records'},
            ).scalar_one()
        )


def _add(store: PostgresStore, scope: ragport.Scope) -> None:
    publish_sources(store, scope, {"fresh": TEXTS})


def _rekey(store: PostgresStore, scope: ragport.Scope) -> None:
    # ``b`` has no dependents, so no lineage is rewritten: the re-key alone must merge.
    ragport.application.repoint_source(scope=scope, store=store, from_id="b", to_id="moved")


def _relink(store: PostgresStore, scope: ragport.Scope) -> None:
    with store.unit_of_work(scope) as uow:
        assert uow.records.rewrite_lineage("a", "elsewhere") == 1
        uow.commit()


WRITES = {"add": _add, "re-key": _rekey, "re-link lineage": _relink}


def _seed(store: PostgresStore, scope: ragport.Scope) -> None:
    """Sources ``a`` and ``b``, one derived record resting on ``a``; then merge what they left."""
    publish_sources(store, scope, {"a": TEXTS[:6], "b": TEXTS[6:]})
    with store.unit_of_work(scope) as uow:
        staged = uow.generations.stage()
        batch = derived_batch(
            scope, "summary-of-a", f"{SECRET} summary", roots=["a"], generation=staged
        )
        uow.records.add(batch.records, batch.vectors)
        uow.generations.publish(staged)
        uow.commit()
    _gin_pending(store)


@pytest.fixture(params=[None, 3], ids=["plain", "partitioned"])
def stores(request, pg_engine, pg_schema) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """(merging, not merging) stores on one fresh schema."""
    merging = PostgresStore(
        pg_engine,
        schema=pg_schema,
        create=True,
        text_search_config="simple",
        partitions=request.param,
    )
    idle = PostgresStore(
        pg_engine, schema=pg_schema, writes=WriteSettings(merge_pending_lists=False)
    )
    yield merging, idle


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_leaves_no_gin_entry_pending(stores, write):
    """After each kind of write the merging store leaves nothing pending, and the same write
    through a store with the merge off leaves pages pending (so the count can fail).
    If this fails, check that the unit of work counts ``gin_rows`` for this write."""
    merging, idle = stores
    for store, expect_pending in ((idle, True), (merging, False)):
        scope = _scope()
        _seed(merging, scope)
        WRITES[write](store, scope)
        pending = _gin_pending(merging, store)
        assert (pending > 0) is expect_pending, (write, store, pending)


def test_writes_of_other_tenants_partitions_are_merged_per_tenant(stores):
    """On a partitioned schema two tenants write into two partitions; each writer merges its
    own, so nothing is pending in any. If this fails, check the tenant's ``tableoid`` lookup."""
    merging, _ = stores
    for tenant in ("tenant-1", "tenant-2", "tenant-3"):
        _add(merging, _scope(tenant))
    assert _gin_pending(merging) == 0


def test_only_units_of_work_that_change_rows_merge(stores, monkeypatch):
    """A unit of work that changes no row of ``records`` (grants only) does not call the
    merge; a delete (retirement: usually HOT, not for rows on full pages) and an add call it
    once each. If this fails, a write pays for a merge it does not need, or skips one."""
    merging, _ = stores
    merging = PostgresStore(
        merging.engine, schema=merging.schema, writes=WriteSettings(maintenance_delay=None)
    )
    scope = _scope()
    _seed(merging, scope)
    calls: list[str] = []
    original = VectorIndexes.merge_pending

    def counting(self: VectorIndexes, conn: Any, tenant_id: str, rows: int = 1) -> int:
        calls.append(tenant_id)
        return original(self, conn, tenant_id, rows)

    monkeypatch.setattr(VectorIndexes, "merge_pending", counting)
    merging.set_source_access(scope, [ragport.Grant("a", principal_ids=("u1",))])
    assert calls == []
    publish_sources(merging, scope, {"a": None})
    assert calls == [scope.tenant_id]
    _add(merging, scope)
    assert calls == [scope.tenant_id] * 2


def _publish(store: PostgresStore, scope: ragport.Scope, source: str, n: int) -> None:
    publish_sources(store, scope, {source: [f"{t} {source}" for t in TEXTS[:n]]})


def test_a_row_count_merges_once_that_many_rows_were_written(stores, pg_engine, pg_schema):
    """``merge_pending_lists=20``: 12 rows leave their entries pending, the next 12 (24 rows
    since the last merge) merge them all; rows of another tenant count for that tenant only.
    If this fails, check ``VectorIndexes.merge_pending``'s per-tenant count."""
    merging, _ = stores
    every = PostgresStore(pg_engine, schema=pg_schema, writes=WriteSettings(merge_pending_lists=20))
    one, two = _scope("tenant-1"), _scope("tenant-2")
    _seed(merging, one)
    _seed(merging, two)
    _publish(every, one, "x1", 12)
    _publish(every, two, "y1", 12)  # tenant-2's 12 do not reach 20 for tenant-1
    assert _gin_pending(merging, every) > 0  # merges all, so the count restarts
    _publish(every, one, "x2", 12)
    _publish(every, two, "y2", 12)
    pending_after_threshold = _gin_pending(merging, every)
    _publish(every, one, "x3", 12)  # 12 again: below 20 since the last merge
    assert _gin_pending(merging, every) > 0
    assert pending_after_threshold == 0
    assert every._indexes.merge_every == 20


@pytest.mark.parametrize("bad", [-1, 1.5, "10", None, 1_000_001])
def test_merge_pending_lists_is_a_bool_or_a_row_count(bad):
    with pytest.raises(ValidationError) as caught:
        WriteSettings(merge_pending_lists=bad)
    assert caught.value.field == "merge_pending_lists"


@pytest.fixture
def writer_role(pg_url, pg_engine, pg_schema) -> Iterator[str]:
    """A login role that may read and write the schema's tables but does not own them."""
    role = f"ragport_writer_{uuid.uuid4().hex[:10]}"
    PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")
    admin = pg_engine.execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
        conn.execute(text(f'GRANT USAGE ON SCHEMA "{pg_schema}" TO "{role}"'))
        conn.execute(
            text(
                f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{pg_schema}" '
                f'TO "{role}"'
            )
        )
        conn.execute(text(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{pg_schema}" TO "{role}"'))
    try:
        yield make_url(pg_url).set(username=role).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP OWNED BY "{role}"'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))


def test_a_role_that_may_not_merge_still_writes_and_is_told_once(
    writer_role, pg_engine, pg_schema, caplog
):
    """The merge runs after the commit, so a refusal (SQLSTATE 42501) loses no write: the
    rows are visible, one warning names the SQLSTATE and not the text, and the store stops
    trying. If this fails, check ``merge_pending``'s error handling."""
    owner = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    scope = _scope()
    _seed(owner, scope)  # the owner's first write creates the HNSW index
    writer = PostgresStore(writer_role, schema=pg_schema, text_search_config="simple")
    try:
        with caplog.at_level(logging.WARNING, logger="ragport.adapters.postgres.indexes"):
            _add(writer, scope)
            _add(writer, _scope())
            writer.finish_maintenance()
        warnings = [r for r in caplog.records if "pending lists" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        message = warnings[0].getMessage()
        assert "42501" in message and "merging is off" in message
        assert SECRET not in caplog.text
        assert writer._indexes.merge_pending_lists is False
        assert sorted(r.text for r in writer.get_by_source(scope, "fresh")) == sorted(TEXTS)
        assert _gin_pending(owner) > 0, "the refused merge left nothing pending: it ran"
    finally:
        writer.engine.dispose()


class _RefusingConnection:
    """A connection whose statements fail with ``error`` (a lock timeout, say)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.rolled_back = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        raise sqlalchemy.exc.OperationalError("SELECT gin_clean_pending_list", {}, self.error)

    def rollback(self) -> None:
        self.rolled_back += 1

    def commit(self) -> None:
        raise AssertionError("nothing to commit after a failed merge")


def test_another_failure_is_logged_and_the_merge_stays_on(caplog):
    """A transient failure (here a lock timeout, 55P03) is logged by SQLSTATE, rolled back,
    and the next unit of work tries again. If this fails, check ``merge_pending``."""
    indexes = VectorIndexes("ragport", '"ragport"')
    conn = _RefusingConnection(psycopg.errors.LockNotAvailable(f"lock on {SECRET}"))
    with caplog.at_level(logging.WARNING, logger="ragport.adapters.postgres.indexes"):
        assert indexes.merge_pending(conn, "tenant-1") == 0  # type: ignore[arg-type]
    assert conn.rolled_back == 1
    assert indexes.merge_pending_lists is True
    assert "55P03" in caplog.text and SECRET not in caplog.text
    assert "merging is off" not in caplog.text


def test_merge_off_never_touches_the_connection():
    """``merge_pending_lists=False``: no statement at all."""
    indexes = VectorIndexes("ragport", '"ragport"', merge_pending_lists=False)
    conn = _RefusingConnection(AssertionError("a statement ran"))
    assert indexes.merge_pending(conn, "tenant-1") == 0  # type: ignore[arg-type]
    assert conn.rolled_back == 0


def test_a_writer_role_granted_execute_merges(writer_role, pg_engine, pg_schema, caplog):
    """docs/operations.md tells a host to grant EXECUTE on ``merge_pending_lists`` to a
    writer role that does not own the schema: the function runs as its owner (SECURITY
    DEFINER), so the role's writes then leave nothing pending."""
    owner = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    scope = _scope()
    _seed(owner, scope)
    role = make_url(writer_role).username
    with pg_engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
        conn.execute(
            text(f'GRANT EXECUTE ON FUNCTION "{pg_schema}".merge_pending_lists(text) TO "{role}"')
        )
    writer = PostgresStore(writer_role, schema=pg_schema, text_search_config="simple")
    try:
        with caplog.at_level(logging.WARNING, logger="ragport.adapters.postgres.indexes"):
            _add(writer, scope)
            _rekey(writer, scope)
            writer.finish_maintenance()
        assert "pending lists" not in caplog.text
        assert writer._indexes.merge_pending_lists is True
        assert _gin_pending(owner) == 0
    finally:
        writer.engine.dispose()


def test_upgrade_from_version_9_adds_the_merge_function(pg_engine, pg_schema):
    """A schema at version 9 with data upgrades to 10: the rows stay, the function appears
    (EXECUTE not granted to PUBLIC), and the next write merges. Migration 10 changes no
    table, so the version-9 schema is made by writing at 10 and taking the migration back.
    If this fails, check ``indexes.merge_function_sql``."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")
    scope = _scope()
    _seed(store, scope)
    s = f'"{pg_schema}"'
    with pg_engine.begin() as conn:
        conn.execute(text(f"DROP FUNCTION {s}.merge_pending_lists(text)"))
        conn.execute(text(f"DELETE FROM {s}.schema_migrations WHERE version = 10"))
    stale = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    with pytest.raises(ragport.StoreError):
        stale.current_generation(scope)  # refused until upgraded
    assert stale.upgrade() == [10]
    assert stale.upgrade() == []
    with pg_engine.connect() as conn:
        public = conn.execute(
            text("SELECT has_function_privilege('public', CAST(:f AS regprocedure), 'EXECUTE')"),
            {"f": f"{s}.merge_pending_lists(text)"},
        ).scalar_one()
        definer = conn.execute(
            text("SELECT prosecdef FROM pg_proc WHERE oid = CAST(:f AS regprocedure)"),
            {"f": f"{s}.merge_pending_lists(text)"},
        ).scalar_one()
    assert public is False and definer is True
    assert sorted(r.text for r in stale.get_by_source(scope, "a")) == sorted(TEXTS[:6])
    _add(stale, scope)
    assert _gin_pending(stale) == 0  # after its scheduled merge


def test_the_merge_commits_asynchronously_and_the_setting_ends_with_it(stores):
    """The merge's own transaction commits without waiting for the WAL flush (a lost merge
    only leaves entries pending); the connection is back to ``synchronous_commit = on`` after
    it, so the next unit of work on it waits for its flush as before."""
    merging, idle = stores
    scope = _scope()
    _seed(merging, scope)
    _add(idle, scope)  # pending entries for the merge to take
    with merging.engine.connect() as conn:
        conn.execute(text("SET synchronous_commit = on"))  # the test server runs with off
        conn.commit()
        assert merging._indexes.merge_pending(conn, scope.tenant_id, 10) > 0
        assert conn.execute(text("SHOW synchronous_commit")).scalar_one() == "on"
        conn.execute(text("RESET synchronous_commit"))
        conn.commit()
    assert _gin_pending(merging) == 0


def test_merge_pending_lists_by_hand_ends_a_bulk_load(stores, pg_engine, pg_schema):
    """``store.merge_pending_lists(tenant)`` merges what a store with the merge off left and
    restarts the per-tenant count; a bad tenant id is refused before any statement."""
    merging, idle = stores
    scope = _scope()
    _seed(merging, scope)
    every = PostgresStore(pg_engine, schema=pg_schema, writes=WriteSettings(merge_pending_lists=20))
    _publish(every, scope, "x1", 12)  # 12 of 20
    _add(idle, scope)
    assert every.merge_pending_lists(scope.tenant_id) > 0
    assert every._indexes._unmerged == {}
    assert _gin_pending(merging) == 0
    assert idle.merge_pending_lists(scope.tenant_id) == 0  # nothing left
    with pytest.raises(ValidationError) as caught:
        idle.merge_pending_lists("bad\ntenant")
    assert caught.value.field == "tenant_id"


def test_merge_pending_lists_by_hand_raises_for_a_role_without_execute(
    writer_role, pg_engine, pg_schema
):
    """By hand, a refusal is an error (the writer's own merge only logs it)."""
    owner = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    _seed(owner, _scope())
    writer = PostgresStore(writer_role, schema=pg_schema, text_search_config="simple")
    try:
        with pytest.raises(CapabilityError) as caught:  # a permission, not an outage
            writer.merge_pending_lists("tenant-1")
        assert caught.value.sqlstate == "42501"
    finally:
        writer.engine.dispose()


def test_the_default_merges_on_the_maintenance_thread_after_the_delay(pg_engine, pg_schema):
    """``maintenance_delay`` (default 2 s): the write returns with its entries still pending
    (the merge is not on the writer's path), and the store's maintenance thread merges them
    by itself once the delay is over, with no call from the host. A store with a long delay
    keeps them pending until ``finish_maintenance()`` runs the merge at once. If this fails,
    check ``background.MaintenanceWorker`` and ``ScopeTransaction.commit`` (unit_of_work.py)."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")
    slow = PostgresStore(pg_engine, schema=pg_schema, writes=WriteSettings(maintenance_delay=60))
    scope = _scope()
    _seed(store, scope)
    _add(slow, scope)
    assert _gin_pending(store) > 0  # nothing merged it: 60 s have not passed
    _add(slow, scope)
    assert slow._maintenance is not None and slow._maintenance.pending
    slow.finish_maintenance()
    assert not slow._maintenance.pending
    assert _gin_pending(store) == 0, "finish_maintenance merged what the write left"
    quick = PostgresStore(pg_engine, schema=pg_schema, writes=WriteSettings(maintenance_delay=0.2))
    _add(quick, scope)
    deadline = time.monotonic() + 20
    while quick._maintenance is not None and quick._maintenance.pending:
        assert time.monotonic() < deadline, "the maintenance thread never merged"
        time.sleep(0.05)
    with pg_engine.connect() as conn:  # count without merging: the thread must have done it
        assert _pending_pages(conn, pg_schema) == 0


def _pending_pages(conn: Any, schema: str) -> int:
    """Pages in the GIN pending lists of ``records``' indexes, read from their metapages."""
    conn.execute(text("CREATE EXTENSION IF NOT EXISTS pageinspect"))
    return int(
        conn.execute(
            text(
                "SELECT coalesce(sum((gin_metapage_info(get_raw_page(c.oid::regclass::text, 0)))"
                ".n_pending_pages), 0) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_am a ON a.oid = c.relam AND a.amname = 'gin' "
                "WHERE i.indrelid = CAST(:t AS regclass)"
            ),
            {"t": f'"{schema}".records'},
        ).scalar_one()
    )


def test_the_background_thread_schedules_only_units_of_work_that_change_rows(
    pg_engine, pg_schema, monkeypatch
):
    """With the default delay, a grants-only unit of work schedules nothing; an add
    schedules one merge of its tenant. If this fails, check ``ScopeTransaction.commit`` (unit_of_work.py)."""
    from ragport.adapters.postgres.background import MaintenanceWorker

    store = PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")
    scope = _scope()
    _seed(store, scope)
    store.finish_maintenance()
    calls: list[tuple[str, bool]] = []
    original = MaintenanceWorker.schedule

    def counting(
        self: MaintenanceWorker, tenant_id: str, *, merge: bool, analyze: bool, fold: bool = False
    ) -> None:
        calls.append((tenant_id, merge))
        original(self, tenant_id, merge=merge, analyze=analyze, fold=fold)

    monkeypatch.setattr(MaintenanceWorker, "schedule", counting)
    store.set_source_access(scope, [ragport.Grant("a", principal_ids=("u1",))])
    assert calls == [] or all(not merge for _, merge in calls)
    _add(store, scope)
    assert calls[-1] == (scope.tenant_id, True)


@pytest.mark.parametrize("bad", [-0.5, 61, float("nan"), "1", True])
def test_maintenance_delay_is_none_or_seconds(bad):
    with pytest.raises(ValidationError) as caught:
        WriteSettings(maintenance_delay=bad)
    assert caught.value.field == "maintenance_delay"


def test_the_maintenance_thread_ends_when_idle_and_the_next_write_starts_another(
    pg_engine, pg_schema
):
    """An idle store holds no thread: after ``IDLE_SECONDS`` without work the thread ends,
    and the next write starts a new one, whose merge leaves nothing pending. If this fails,
    check ``MaintenanceWorker._take``'s idle exit and ``schedule``."""
    from ragport.adapters.postgres import background

    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True, text_search_config="simple",
        writes=WriteSettings(maintenance_delay=0.1),
    )  # fmt: skip
    worker = store._maintenance
    assert worker is not None
    scope = _scope()
    _seed(store, scope)
    first = worker._thread
    assert first is not None
    deadline = time.monotonic() + background.IDLE_SECONDS + 10
    while worker._thread is not None:
        assert time.monotonic() < deadline, "the idle thread never ended"
        time.sleep(0.1)
    assert not first.is_alive() or first.join(5) is None
    assert not first.is_alive()
    _add(store, scope)
    assert worker._thread is not None and worker._thread is not first
    store.finish_maintenance()
    with pg_engine.connect() as conn:
        assert _pending_pages(conn, pg_schema) == 0
