"""Read replicas: two servers in streaming replication on 127.0.0.1 (``pg_basebackup -R``).

Retrieval and status reads run on the replica; writes, reads inside a unit of work and the
access recheck gate run on the primary. A caller who asks for its own writes
(``with_min_position``) never gets a stale answer: the read waits for the replica, then runs
on the primary or raises ``ReplicaLagError``. A dead replica fails reads over to the primary
(or raises, as configured) and never touches writes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStatusStore, PostgresStore, reads
from ragport.adapters.postgres.connections import Connections
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


class Served(list[int]):
    """The port of the server each read statement ran on, the look-ups of forgotten ids
    apart, in ``probes`` (a replica read that returned rows probes the primary's)."""

    def __init__(self) -> None:
        super().__init__()
        self.probes: list[int] = []

    def clear(self) -> None:
        super().clear()
        self.probes.clear()


@pytest.fixture
def served_by(monkeypatch: pytest.MonkeyPatch) -> Served:
    served = Served()
    real = reads.fetch

    def spy(conn: Any, sql: str, params: Any, **kw: Any) -> Any:
        port = int(conn.connection.driver_connection.info.port)
        probe = sql.startswith("SELECT id FROM") and "reason = 'forgotten' AND id = ANY" in sql
        (served.probes if probe else served).append(port)
        return real(conn, sql, params, **kw)

    monkeypatch.setattr(reads, "fetch", spy)
    return served


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


def _lagging(replica: str, source: str) -> bool:
    """The replica still holds ``source``'s rows and no tombstone for it (not replayed yet)."""
    with psycopg.connect(replica, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM ragport.records WHERE source_id = %(s)s), "
            "(SELECT count(*) FROM ragport.tombstones WHERE id = %(s)s)",
            {"s": source},
        ).fetchone()
    return row is not None and row[0] > 0 and row[1] == 0


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
    cluster: tuple[str, str, PostgresStore], served_by: Served
) -> None:
    """Queries and the tombstone list read the replica; get_by_source (a write path's read) the
    primary, and so does the probe of the primary's forgotten ids a replica query that
    returned rows makes (one statement).

    If this fails, check which calls ``PostgresStore._read`` marks ``replica=True``."""
    primary, replica, store = cluster
    assert "seed" in _ids(store)
    store.list_invalidated_ids(SCOPE)
    assert set(served_by) == {_port(replica)}
    assert served_by.probes == [_port(primary)]
    served_by.clear()
    store.get_by_source(SCOPE, "seed")
    assert set(served_by) == {_port(primary)}


def test_write_is_invisible_on_the_replica_until_replayed(
    cluster: tuple[str, str, PostgresStore], paused: None, served_by: Served
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
    assert served_by.probes == []  # an answer of the primary's is checked by its own statement
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
    assert _lagging(replica, "secret")
    result = ragport.application.retrieve_context(
        "salaries",
        embedder=EMB,
        store=store,
        scope=SCOPE,
        request=ragport.RetrievalRequest(lexical="bm25"),
    )
    assert "secret" not in {h.provenance.source_id for h in result.hits}
    assert result.hits  # "seed" is still served


def _forget_in_a_unit_of_work(primary: str, store: PostgresStore, source: str) -> None:
    with store.unit_of_work(SCOPE) as uow:
        uow.tombstones.add([Tombstone(source)])
        uow.commit()


def _forget_by_propagation(primary: str, store: PostgresStore, source: str) -> None:
    ragport.application.create_deletion_propagator(
        scope=SCOPE, store=store, authorization=None, as_owner=True
    ).propagate(source)


def _forget_in_the_hosts_transaction(primary: str, store: PostgresStore, source: str) -> None:
    url = primary.replace("postgresql://", "postgresql+psycopg://", 1)
    host = create_engine(url, pool_size=1, max_overflow=0)
    try:
        with host.begin() as conn:  # the host's commit publishes the forget
            _forget_by_propagation(primary, store.joined(conn), source)
    finally:
        host.dispose()


FORGETS = {
    "unit of work": _forget_in_a_unit_of_work,
    "propagation": _forget_by_propagation,
    "host transaction": _forget_in_the_hosts_transaction,
}


def _forgotten_while_lagging(cluster: tuple[str, str, PostgresStore], how: str) -> str:
    """A new source alice may read, a derived note resting on it and a kept source of
    nearly the same text, replayed on the replica; then replay paused and the source
    forgotten on the primary (``how``). Answers the forgotten source's id."""
    primary, replica, store = cluster
    source = "gone-" + uuid.uuid4().hex[:8]
    kept = "kept-" + source[5:]
    _replay(replica, paused=False)
    _write(store, source, BOARD)
    _write(store, kept, "quarterly salaries of the staff")
    ragport.application.index_derived(
        record_id=f"note-{source}",
        text="a note on quarterly salaries",
        lineage=[source],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    store.set_source_access(
        SCOPE, [Grant(s, principal_ids=("alice",)) for s in (source, kept, "seed")]
    )
    _wait_replayed(replica, store.last_write_position)
    _replay(replica, paused=True)
    FORGETS[how](primary, store, source)
    assert _lagging(replica, source)
    return source


BOARD = "quarterly salaries of the board"


def _retrieved(store: PostgresStore, **kw: Any) -> set[str]:
    """The source and record ids ``retrieve_context`` served for ``BOARD`` (some)."""
    result = ragport.application.retrieve_context(
        BOARD, embedder=EMB, store=store, scope=SCOPE, **kw
    )
    assert result.hits
    return {h.provenance.source_id for h in result.hits} | {
        h.provenance.chunk_id for h in result.hits
    }


@pytest.mark.parametrize("how", sorted(FORGETS))
def test_vector_only_retrieval_drops_a_source_forgotten_on_the_primary(
    cluster: tuple[str, str, PostgresStore], paused: None, served_by: Served, how: str
) -> None:
    """A forget committed on the primary (by a unit of work, a propagator or the host's own
    transaction) withholds the source and the note resting on it from a vector-only
    retrieval at once, while the lagging replica still holds no tombstone for them: the
    replica's answer is checked against the primary's forgotten ids and, when it named one,
    read again on the primary, so the top_k is still full. (rev48's finding: the guarded
    statement applied only the replica's tombstones, and retrieve_context skipped its re-read.)

    If this fails, check ``PostgresBackend.guarded_search`` (``_forgotten_on_primary``)."""
    primary, _, store = cluster
    source = _forgotten_while_lagging(cluster, how)
    withheld = {source, f"note-{source}"}
    served_by.clear()
    assert not _retrieved(store) & withheld  # borrowed_query, narrowed to top_k
    assert served_by.probes == [_port(primary)]
    assert served_by[-1] == _port(primary)  # read again on the primary
    assert not _retrieved(store, authorization=ALICE) & withheld
    denials: list[Any] = []
    found = _retrieved(store, authorization=ALICE, on_access_denied=denials.append)
    assert not (found | {d.source_id for d in denials}) & withheld
    # The forgotten source is the replica's best hit: the primary's answer fills its place.
    one = ragport.RetrievalRequest(top_k=1, query_candidates=1)
    assert not _retrieved(store, request=one) & withheld


@pytest.mark.parametrize("lexical", ["off", "bm25"])
def test_a_denial_report_from_the_replica_names_no_source_forgotten_on_the_primary(
    cluster: tuple[str, str, PostgresStore], paused: None, lexical: str
) -> None:
    """A caller granted nothing asks with ``on_access_denied`` while the replica lags behind
    a forget: the forgotten source is among the rows the replica screened, never among its
    hits, and the report does not name it (rev48: the primary's probe covered the hits only,
    so the report named it, vector-only and hybrid). If this fails, check
    ``PostgresBackend._forgotten_on_primary``'s ``screened`` and ``_unforgotten``."""
    _, replica, store = cluster
    source = _forgotten_while_lagging(cluster, "unit of work")
    bob = Authorization("bob", "tenant-1")
    denials: list[Any] = []
    result = ragport.application.retrieve_context(
        BOARD, embedder=EMB, store=store, scope=SCOPE, authorization=bob,
        on_access_denied=denials.append,
        request=ragport.RetrievalRequest(lexical=lexical, top_k=5),
    )  # fmt: skip
    assert _lagging(replica, source)
    denied = {d.source_id for d in denials}
    assert not result.hits and denied  # bob is denied the rest
    assert source not in denied, denied


def test_every_store_read_on_the_replica_drops_a_source_forgotten_on_the_primary(
    cluster: tuple[str, str, PostgresStore], paused: None
) -> None:
    """The store's own reads keep the promise too: query (with a denial report),
    guarded_query, borrowed_query, lexical_query and both legs of hybrid_query (each leg
    is checked apart: they share the replica's snapshot).

    If this fails, check ``PostgresBackend._unforgotten`` and ``guarded_search``."""
    _, _, store = cluster
    source = _forgotten_while_lagging(cluster, "unit of work")
    kept, withheld = "kept-" + source[5:], {source, f"note-{source}"}
    vector = EMB.embed([BOARD])[0]
    key: dict[str, Any] = {"embedder_id": EMB.id, "dimensions": 16}
    hybrid = store.hybrid_query(SCOPE, vector, BOARD, limit=50, mode="bm25", **key)
    answers = {
        "query": store.query(SCOPE, vector, limit=50),
        "reported": store.query(
            SCOPE, vector, limit=50, authorization=ALICE, on_denied=lambda d: None
        ),
        "guarded": store.guarded_query(SCOPE, vector, limit=50, **key).records,
        "borrowed": store.borrowed_query(SCOPE, vector, limit=50, **key).records,
        "lexical": store.lexical_query(SCOPE, BOARD, limit=50),
        "hybrid vector": hybrid.vector,
        "hybrid lexical": hybrid.lexical,
    }
    for name, found in answers.items():
        names = {s.record.source_id for s in found} | {s.record.id for s in found}
        assert kept in names, name
        assert not names & withheld, name


def test_a_replica_read_whose_forgets_the_primary_cannot_confirm_fails_closed(
    cluster: tuple[str, str, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the primary unreachable, a replica read that returned rows raises StoreError
    (its forgets unconfirmed) rather than serve them unchecked, as the hybrid and the
    access-checked paths do (their re-reads run on the primary too).

    If this fails, check that ``_forgotten_on_primary`` lets the primary's failure through."""
    _, _, store = cluster

    def primary_down(self: Connections, operation: str, run: Any, *, replica: bool = False) -> Any:
        if not replica:
            raise StoreError(f"{operation}: the primary did not answer", lost_connection=True)
        return real(self, operation, run, replica=replica)

    real = Connections.read
    monkeypatch.setattr(Connections, "read", primary_down)
    with pytest.raises(StoreError) as caught:
        ragport.application.retrieve_context("onboarding", embedder=EMB, store=store, scope=SCOPE)
    assert caught.value.lost_connection


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
    served_by: Served,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hot standby exports and imports snapshots (PostgreSQL 10 on): a hybrid query's
    lexical leg runs on a second replica connection, never on the primary.

    If this fails, check ``Connections.second_read`` (the first connection's engine)."""
    primary, replica, store = cluster
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
    assert served_by.probes == [_port(primary)] * 2  # each leg's hits, on the primary


# Last in this module: it stops the module's replica.
def test_a_dead_replica_fails_reads_over_or_raises_and_never_touches_writes(
    cluster: tuple[str, str, PostgresStore], pg_replicated: tuple[Any, Any], served_by: Served
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
