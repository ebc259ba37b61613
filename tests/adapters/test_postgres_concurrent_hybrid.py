"""A hybrid query's two legs at the same time: the lexical leg on a second pooled connection
that imports the first one's snapshot (``backend._Companion``), and every fallback to one
connection (``BackendStore._legs``).

The snapshot test is deterministic: a writer commits a replacement after the first
connection's snapshot and before the second connection begins; the second connection must
still read the first one's snapshot (and a companion that does not import it is caught).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import QueuePool

import ragport
from ragport.adapters.postgres import PostgresStore, backend, reads
from ragport.contract_tests._support import (
    CONTRACT_DIMENSIONS,
    CONTRACT_EMBEDDER_ID,
    hash_vector,
    publish_sources,
)
from ragport.domain.errors import RagportError
from ragport.ports.store import HybridAnswer

WORD = "hyword"
SOURCE = "hy-s"


def _texts(version: int) -> list[str]:
    return [f"{WORD} version {version} part {j}" for j in range((2, 8)[version % 2])]


def _scope() -> ragport.Scope:
    return ragport.Scope("tenant-1", "kb", "c" + uuid.uuid4().hex[:12])


@pytest.fixture
def store(pg_engine: Any, pg_schema: str) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True)


def count_companions(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A list that gets one entry per PostgreSQL companion entered: whether it lent a second
    reader (``backend._Companion.__enter__`` spied on through ``monkeypatch``)."""
    entered: list[bool] = []
    enter = backend._Companion.__enter__

    def counted(self: Any) -> Any:
        second = enter(self)
        entered.append(second is not None)
        return second

    monkeypatch.setattr(backend._Companion, "__enter__", counted)
    return entered


@pytest.fixture
def companions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """One entry per companion entered: whether it lent a second reader."""
    yield count_companions(monkeypatch)


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per transaction a read begins: whether it exported its snapshot (a
    ``reads._open`` spy)."""
    sent: list[bool] = []
    open_ = reads._open

    def spied(dbapi: Any, conn: Any, opening: str, *, piped: bool) -> Any:
        sent.append(bool(conn.export))
        return open_(dbapi, conn, opening, piped=piped)

    monkeypatch.setattr(reads, "_open", spied)
    return sent


def _hybrid(store: PostgresStore, scope: ragport.Scope) -> HybridAnswer:
    return store.hybrid_query(
        scope,
        hash_vector(WORD),
        WORD,
        embedder_id=CONTRACT_EMBEDDER_ID,
        dimensions=CONTRACT_DIMENSIONS,
        limit=20,
        mode="bm25",
    )


def _versions(answer: HybridAnswer) -> set[str]:
    records = [s.record for s in [*answer.vector, *answer.lexical]]
    return {r.text.split(" part ", 1)[0] for r in records if r.source_id == SOURCE}


def _ids(answer: HybridAnswer) -> tuple[list[str], list[str]]:
    return [s.record.id for s in answer.vector], [s.record.id for s in answer.lexical]


def _lent(engine: Any) -> int:
    pool = engine.pool
    assert isinstance(pool, QueuePool)
    return pool.checkedout()


def _open_transactions(engine: Any, schema: str) -> int:
    """Sessions of this database idle inside a transaction (a leaked read would be one)."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
        )


def test_the_legs_share_one_snapshot_when_a_writer_commits_between_them(
    store: PostgresStore, companions: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replacement committed after the first connection's snapshot, before the second
    connection begins, is invisible to both legs: one version in the answer, the old one.

    If this fails, check that the second connection's first statement is ``SET TRANSACTION
    SNAPSHOT`` of the id the first exported (``reads._open``)."""
    scope = _scope()
    publish_sources(store, scope, {SOURCE: _texts(0)})
    enter = backend._Companion.__enter__
    versions = iter(range(1, 100))

    def write_then_enter(self: Any) -> Any:
        publish_sources(store, scope, {SOURCE: _texts(next(versions))})
        return enter(self)

    monkeypatch.setattr(backend._Companion, "__enter__", write_then_enter)
    answer = _hybrid(store, scope)
    assert companions == [True]
    assert answer.lexical and answer.vector
    assert _versions(answer) == {f"{WORD} version 0"}
    assert _versions(_hybrid(store, scope)) == {f"{WORD} version 1"}  # its own write: after


def test_a_companion_without_the_snapshot_is_caught(
    store: PostgresStore, companions: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above can fail: a second connection that begins its own snapshot (no
    import) sees the replacement, and the answer mixes two versions."""
    scope = _scope()
    publish_sources(store, scope, {SOURCE: _texts(0)})
    enter = backend._Companion.__enter__

    def broken(self: Any) -> Any:
        publish_sources(store, scope, {SOURCE: _texts(1)})
        second = enter(self)
        assert second is not None
        second._conn.snapshot = None  # a fresh snapshot of its own
        return second

    monkeypatch.setattr(backend._Companion, "__enter__", broken)
    assert len(_versions(_hybrid(store, scope))) == 2


def test_hybrid_answers_never_mix_versions_on_two_connections(
    store: PostgresStore, companions: list[bool]
) -> None:
    """Readers racing a writer that keeps replacing a source: no answer mixes two versions,
    with the two-connection path taken (most reads).

    If this fails, check the snapshot export and import (``reads._open``)."""
    scope = _scope()
    publish_sources(store, scope, {SOURCE: _texts(0)})
    stop = threading.Event()
    errors: list[BaseException] = []
    mixed: list[set[str]] = []
    reads_done = [0]

    def writer() -> None:
        version = 0
        while not stop.is_set():
            version += 1
            publish_sources(store, scope, {SOURCE: _texts(version)})

    def reader() -> None:
        try:
            for _ in range(60):
                tags = _versions(_hybrid(store, scope))
                reads_done[0] += 1
                if len(tags) != 1:
                    mixed.append(tags)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    write = threading.Thread(target=writer)
    write.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    stop.set()
    write.join(60)
    assert not errors, repr(errors[0])
    assert not mixed, f"{len(mixed)} of {reads_done[0]} answers mixed versions: {mixed[0]}"
    assert reads_done[0] == 120
    assert sum(companions) >= 60, f"the two-connection path ran {sum(companions)} times"


def test_a_pool_of_one_reads_both_legs_on_its_one_connection(
    pg_url: str, pg_schema: str, companions: list[bool], exports: list[bool]
) -> None:
    """Pool of 1: no second connection, the same answer as with two, and no snapshot
    exported (no companion is offered: ``Connections.may_lend_pair``)."""
    engine = create_engine(
        pg_url.replace("postgresql://", "postgresql+psycopg://", 1),
        pool_size=1,
        max_overflow=0,
        pool_timeout=1,
    )
    try:
        store = PostgresStore(engine, schema=pg_schema, create=True)
        scope = _scope()
        publish_sources(store, scope, {SOURCE: _texts(0)})
        exports.clear()
        answer = _hybrid(store, scope)
        assert companions == []
        assert exports and not any(exports)
        assert _versions(answer) == {f"{WORD} version 0"}
        assert len(answer.lexical) == 2 and len(answer.vector) == 2
        assert _lent(engine) == 0
    finally:
        engine.dispose()


def test_an_exhausted_pool_never_waits_for_a_second_connection(
    pg_url: str, pg_schema: str, companions: list[bool], exports: list[bool]
) -> None:
    """Every other connection held (by this thread): the hybrid reads on one connection at
    once instead of waiting for a second (which would wait on itself), and exports no
    snapshot (no companion is offered)."""
    engine = create_engine(
        pg_url.replace("postgresql://", "postgresql+psycopg://", 1),
        pool_size=2,
        max_overflow=0,
        pool_timeout=30,
    )
    try:
        store = PostgresStore(engine, schema=pg_schema, create=True)
        scope = _scope()
        publish_sources(store, scope, {SOURCE: _texts(0)})
        exports.clear()
        expected = _ids(_hybrid(store, scope))
        assert companions == [True]
        assert exports == [True, False]  # the block's and its companion's
        exports.clear()
        with engine.connect():
            assert _ids(_hybrid(store, scope)) == expected
        assert companions == [True]
        assert exports and not any(exports)
        assert _lent(engine) == 0
    finally:
        engine.dispose()


def test_a_refused_export_reads_on_one_connection(
    store: PostgresStore, companions: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export the server refuses: the read begins again without it, on one connection."""
    scope = _scope()
    publish_sources(store, scope, {SOURCE: _texts(0)})
    expected = _ids(_hybrid(store, scope))
    monkeypatch.setattr(reads, "EXPORT", "SELECT pg_export_snapshot(1)")  # no such function
    assert _ids(_hybrid(store, scope)) == expected
    assert companions == [True, False]


def test_a_joined_view_reads_on_the_hosts_connection(
    store: PostgresStore, pg_engine: Any, companions: list[bool]
) -> None:
    """Inside the host's transaction: no companion (one connection: the host's)."""
    scope = _scope()
    publish_sources(store, scope, {SOURCE: _texts(0)})
    expected = _ids(_hybrid(store, scope))
    with pg_engine.connect() as conn, conn.begin():
        assert _ids(_hybrid(store.joined(conn), scope)) == expected
    assert companions == [True]


@pytest.mark.parametrize("leg", ["lexical", "vector"])
def test_a_failed_leg_raises_and_leaves_no_connection_or_transaction(
    pg_engine: Any,
    pg_schema: str,
    companions: list[bool],
    monkeypatch: pytest.MonkeyPatch,
    leg: str,
) -> None:
    """A leg that fails (on either connection) raises ``StoreError`` like a sequential read,
    and both connections go back to the pool with no transaction left open."""
    name = "search_lexical" if leg == "lexical" else "search_vectors"

    def failing(self: Any, view: Any, *args: Any, **kwargs: Any) -> Any:
        return view.within("query", lambda conn: reads.fetch(conn, "SELECT 1/0 AS x", {}))

    monkeypatch.setattr(backend.PostgresBackend, name, failing)  # found by the store it makes
    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    scope = _scope()
    publish_sources(store, scope, {SOURCE: _texts(0)})
    lent = _lent(pg_engine)
    with pytest.raises(RagportError) as raised:
        _hybrid(store, scope)
    assert companions == [True]
    assert raised.value.__cause__ is None and raised.value.__context__ is None
    assert _lent(pg_engine) == lent
    assert _open_transactions(pg_engine, pg_schema) == 0
    monkeypatch.setattr(backend._Snapshot, "companion", lambda self: None)
    with pytest.raises(RagportError) as sequential:
        _hybrid(store, scope)
    assert type(raised.value) is type(sequential.value)
    assert vars(raised.value) == vars(sequential.value)


def test_a_refused_export_is_told_from_a_failed_statement(
    pg_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RawRead.refused`` only when the export itself failed: a statement that fails after
    it is not run again without the export (it would only fail twice)."""
    fairy = pg_engine.raw_connection()
    dbapi = fairy.driver_connection
    dbapi.autocommit = True
    try:
        conn = reads.RawRead(fairy)
        conn.opening, conn.export = backend._BEGIN, True
        with pytest.raises(psycopg.Error):
            reads.fetch(conn, "SELECT 1/0 AS x", {})
        assert conn.refused is False
        dbapi.execute("ROLLBACK")
        with monkeypatch.context() as patch:
            patch.setattr(reads, "EXPORT", "SELECT pg_export_snapshot(1)")
            conn.opening, conn.export = backend._BEGIN, True
            with pytest.raises(psycopg.Error):
                reads.fetch(conn, "SELECT 1 AS x", {})
        assert conn.refused is True
        dbapi.execute("ROLLBACK")
        conn.opening, conn.export = backend._BEGIN, True
        assert reads.fetch(conn, "SELECT 1 AS x", {})[0].x == 1
        assert conn.exported is not None
        dbapi.execute("COMMIT")
    finally:
        dbapi.autocommit = False
        fairy.close()


def test_a_denial_report_reads_its_grants_in_the_companions_snapshot(
    store: PostgresStore, companions: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``on_denied`` the companion's lexical leg runs two statements (the leg, the
    screened sources) in its transaction: the same hits and denials as one connection."""
    scope = _scope()
    publish_sources(store, scope, {SOURCE: _texts(0), "open": [f"{WORD} open text"]})
    store.set_source_access(
        scope,
        [ragport.Grant(SOURCE, principal_ids=("alice",)), ragport.Grant("open", ("bob",))],
    )
    bob = ragport.Authorization("bob", scope.tenant_id)

    def ask() -> tuple[tuple[list[str], list[str]], list[list[str]]]:
        told: list[list[str]] = []
        answer = store.hybrid_query(
            scope, hash_vector(WORD), WORD, embedder_id=CONTRACT_EMBEDDER_ID,
            dimensions=CONTRACT_DIMENSIONS, limit=20, mode="bm25", authorization=bob,
            on_denied=lambda denied: told.append([d.source_id for d in denied]),
        )  # fmt: skip
        return _ids(answer), told

    concurrent = ask()
    assert companions == [True]
    assert concurrent[1] == [[SOURCE], [SOURCE]]  # once per leg
    assert {i.split("#")[0] for ids in concurrent[0] for i in ids} == {"open"}
    monkeypatch.setattr(backend._Snapshot, "companion", lambda self: None)
    assert ask() == concurrent
