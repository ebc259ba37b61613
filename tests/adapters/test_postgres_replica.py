"""Read replicas: two servers in streaming replication on 127.0.0.1 (``pg_basebackup -R``).

Retrieval and status reads run on the replica; writes, reads inside a unit of work and the
access recheck gate run on the primary. A caller who asks for its own writes
(``with_min_position``) never gets a stale answer: the read waits for the replica, then runs
on the primary or raises ``ReplicaLagError``. A dead replica fails reads over to the primary
(or raises, as configured) and never touches writes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStatusStore, PostgresStore, reads
from ragport.domain import Tombstone
from ragport.domain.errors import ReplicaLagError, StoreError, ValidationError
from ragport.domain.model import Authorization, Grant
from ragport.domain.status import IngestionStatus
from tests.adapters.test_postgres_concurrent_hybrid import count_companions

SCOPE = ragport.Scope("tenant-1", "kb", "docs")
EMB = HashEmbedder(dimensions=16)
ALICE = Authorization("alice", "tenant-1")


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


@pytest.fixture(scope="module")
def cluster(pg_replicated: tuple[Any, Any]) -> Iterator[tuple[str, str, PostgresStore]]:
    primary, replica = pg_replicated[0].url, pg_replicated[1].url
    store = PostgresStore(primary, read_url=replica, schema="ragport", create=True)
    _write(store, "seed", "seed text about onboarding")
    _wait_replayed(replica, store.last_write_position)
    yield primary, replica, store
    store.engine.dispose()
    assert store.read_engine is not None
    store.read_engine.dispose()


@pytest.fixture
def served_by(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The port of the server each read statement ran on."""
    ports: list[int] = []
    real = reads.fetch

    def spy(conn: Any, sql: str, params: Any, **kw: Any) -> Any:
        ports.append(int(conn.connection.driver_connection.info.port))
        return real(conn, sql, params, **kw)

    monkeypatch.setattr(reads, "fetch", spy)
    return ports


def _write(store: PostgresStore, source: str, body: str) -> None:
    ragport.application.replace_source(
        source_id=source,
        chunks=[ragport.Chunk.of(source, 0, body)],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )


def _wait_replayed(replica: str, position: str | None) -> None:
    assert position is not None
    with psycopg.connect(replica, autocommit=True) as conn:
        for _ in range(3000):  # up to 30 s; ends as soon as replayed
            row = conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (position,)
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.01)
    raise AssertionError("the replica did not replay in 30 s")


def _replay(replica: str, *, paused: bool) -> None:
    with psycopg.connect(replica, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()" if paused else "SELECT pg_wal_replay_resume()")
        if paused:
            for _ in range(3000):  # up to 30 s; ends as soon as paused
                row = conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
                if row and row[0] == "paused":
                    return
                time.sleep(0.01)


def _ids(store: PostgresStore, **kw: Any) -> set[str]:
    found = store.query(SCOPE, EMB.embed(["anything"])[0], limit=50, **kw)
    return {s.record.source_id for s in found}


@pytest.fixture
def paused(cluster: tuple[str, str, PostgresStore]) -> Iterator[None]:
    _replay(cluster[1], paused=True)
    try:
        yield
    finally:
        _replay(cluster[1], paused=False)


def test_reads_run_on_the_replica_and_writes_on_the_primary(
    cluster: tuple[str, str, PostgresStore], served_by: list[int]
) -> None:
    """Queries and the tombstone list read the replica; get_by_source (a write path's read) the primary.

    If this fails, check which calls ``PostgresStore._read`` marks ``replica=True``."""
    primary, replica, store = cluster
    assert "seed" in _ids(store)
    store.list_invalidated_ids(SCOPE)
    assert set(served_by) == {_port(replica)}
    served_by.clear()
    store.get_by_source(SCOPE, "seed")
    assert set(served_by) == {_port(primary)}


def test_write_is_invisible_on_the_replica_until_replayed(
    cluster: tuple[str, str, PostgresStore], paused: None, served_by: list[int]
) -> None:
    """A plain replica read may lag; one that asked for the write waits, then falls back or raises.

    If this fails, check ``PostgresStore._await_position`` and ``with_min_position``."""
    primary, replica, store = cluster
    _write(store, "fresh", "fresh text about payroll")
    position = store.last_write_position
    assert position is not None
    assert "fresh" not in _ids(store)  # no requirement named: the replica's (stale) snapshot
    with pytest.raises(ReplicaLagError) as caught:
        _ids(store.with_min_position(position, fallback="raise", wait=0.2))
    assert caught.value.position == position and caught.value.replayed is not None
    served_by.clear()
    assert "fresh" in _ids(store.with_min_position(position, fallback="primary", wait=0.2))
    assert served_by[-1] == _port(primary)
    _replay(replica, paused=False)
    served_by.clear()
    view = store.with_min_position(position, fallback="raise", wait=5)
    assert "fresh" in _ids(view)
    assert set(served_by) == {_port(replica)}
    # the same view, once caught up, reads without re-checking the position
    served_by.clear()
    _ids(view)
    assert len(served_by) == 1


def test_read_your_writes_through_retrieve_context(
    cluster: tuple[str, str, PostgresStore], paused: None
) -> None:
    """retrieve_context on a with_min_position view sees the caller's own write at once.

    If this fails, check that every retrieval read honours the view's position."""
    _, _, store = cluster
    _write(store, "mine", "mine text about expenses and receipts")
    view = store.with_min_position(store.last_write_position, fallback="primary", wait=0.05)
    result = ragport.application.retrieve_context(
        "expenses and receipts",
        embedder=EMB,
        store=view,
        scope=SCOPE,
        request=ragport.RetrievalRequest(lexical="bm25"),
    )
    assert "mine" in {h.provenance.source_id for h in result.hits}


def test_recheck_gate_reads_grants_on_the_primary(
    cluster: tuple[str, str, PostgresStore], paused: None
) -> None:
    """A revocation committed on the primary denies at once, while the replica still shows the grant.

    The query's own grant predicate sees the replica's snapshot; the gate
    (``check_source_access``) reads the primary, where grants are freshest.
    If this fails, check that ``check_source_access`` is not routed to the replica."""
    _, replica, store = cluster
    _replay(replica, paused=False)
    store.set_source_access(SCOPE, [Grant("seed", principal_ids=("alice",))])
    _wait_replayed(replica, store.last_write_position)
    _replay(replica, paused=True)
    store.set_source_access(SCOPE, [Grant("seed")])  # revoked on the primary only
    assert "seed" in _ids(store, authorization=ALICE)  # the lagging replica's predicate
    assert not store.check_source_access(SCOPE, ["seed"], ALICE)["seed"].allowed
    result = ragport.application.retrieve_context(
        "onboarding", embedder=EMB, store=store, scope=SCOPE, authorization=ALICE
    )
    assert "seed" not in {h.provenance.source_id for h in result.hits}


def test_hybrid_query_drops_a_source_forgotten_on_the_primary(
    cluster: tuple[str, str, PostgresStore], paused: None
) -> None:
    """A forget committed on the primary withholds the source from a hybrid query at once,
    while the lagging replica still holds no tombstone for it: the tombstone re-read after
    fusion runs on the primary. (rev47 found b26c2cd's skip of that re-read serving it.)"""
    _, replica, store = cluster
    _replay(replica, paused=False)
    _write(store, "secret", "secret text about salaries")
    _wait_replayed(replica, store.last_write_position)
    _replay(replica, paused=True)
    with store.unit_of_work(SCOPE) as uow:  # on the primary only
        uow.tombstones.add([Tombstone("secret")])
        uow.commit()
    assert "secret" in _ids(store)  # the lagging replica's own leg still has it
    result = ragport.application.retrieve_context(
        "salaries",
        embedder=EMB,
        store=store,
        scope=SCOPE,
        request=ragport.RetrievalRequest(lexical="bm25"),
    )
    assert "secret" not in {h.provenance.source_id for h in result.hits}
    assert result.hits  # "seed" is still served


def test_status_reads_run_on_the_replica(cluster: tuple[str, str, PostgresStore]) -> None:
    """PostgresStatusStore(read_url=...) writes on the primary and pages from the replica.

    If this fails, check ``PostgresStatusStore._read``."""
    primary, replica, _ = cluster
    status = PostgresStatusStore(primary, read_url=replica)
    status.put(IngestionStatus(scope=SCOPE, source_id="seed", state="indexed"))
    with psycopg.connect(primary, autocommit=True) as conn:
        position = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert position is not None
    _wait_replayed(replica, position[0])
    assert [s.source_id for s in status.list_page(SCOPE, limit=5).items] == ["seed"]


def test_bad_positions_and_options_are_refused(cluster: tuple[str, str, PostgresStore]) -> None:
    """A malformed LSN or option is a ValidationError before any statement runs.

    If this fails, check ``_check_position``."""
    _, replica, store = cluster
    for bad in ("", "0/", "x/1", "0/1; select 1", "1/2/3"):
        with pytest.raises(ValidationError):
            store.with_min_position(bad)
    with pytest.raises(ValidationError):
        PostgresStore(replica, read_url=replica, replica_fallback="maybe")  # type: ignore[arg-type]


def test_hybrid_legs_run_on_two_replica_connections_in_one_snapshot(
    cluster: tuple[str, str, PostgresStore],
    served_by: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hot standby exports and imports snapshots (PostgreSQL 10 on): a hybrid query's
    lexical leg runs on a second replica connection, never on the primary.

    If this fails, check ``Connections.second_read`` (the first connection's engine)."""
    _, replica, store = cluster
    lent = count_companions(monkeypatch)
    answer = store.hybrid_query(
        SCOPE,
        EMB.embed(["onboarding"])[0],
        "onboarding",
        embedder_id=EMB.id,
        dimensions=16,
        limit=5,
        mode="bm25",
    )
    assert lent == [True]
    assert [s.record.source_id for s in answer.lexical] == ["seed"]
    assert set(served_by) == {_port(replica)}


# Last in this module: it stops the module's replica.
def test_a_dead_replica_fails_reads_over_or_raises_and_never_touches_writes(
    cluster: tuple[str, str, PostgresStore], pg_replicated: tuple[Any, Any], served_by: list[int]
) -> None:
    """Stop the replica: reads answer from the primary (or raise StoreError), writes carry on.

    Runs last in this module: it stops the replica. If this fails, check ``PostgresStore._read``."""
    primary, replica, store = cluster
    strict = PostgresStore(primary, read_url=replica, replica_fallback="raise")
    assert "seed" in _ids(strict)  # the replica answers while it is up
    pg_replicated[1].stop("immediate")
    served_by.clear()
    _write(store, "after", "written while the replica is down")
    assert "after" in _ids(store)
    assert served_by[-1] == _port(primary)
    with pytest.raises(StoreError) as caught:
        _ids(strict)
    assert caught.value.lost_connection and not isinstance(caught.value, ReplicaLagError)
    strict.engine.dispose()
