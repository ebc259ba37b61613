"""``PostgresBackend`` keeps the tables PostgreSQL's own SQL reads: the same operations written
through the engine over the narrow port and through ``PostgresStore`` leave two schemas that
``PostgresStore``'s BM25 leg (its write-time statistics, ``live_ids``, the sole-embedder claim)
answers identically."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, WriteSettings, pipelined
from ragport.adapters.postgres.backend import PostgresBackend, transaction_of
from ragport.application import (
    compact,
    delete_source,
    index_derived,
    replace_source,
    repoint_source,
    retrieve_context,
    rollback_generation,
)
from ragport.domain.errors import StoreError
from ragport.domain.model import Authorization, Grant, Record, Tombstone
from ragport.engine import BackendStore
from ragport.ports.store import ChunkStore

SCOPE = ragport.Scope("tenant-b", "kb", "docs")
EMB = HashEmbedder(dimensions=16)
INLINE = WriteSettings(maintenance_delay=None)
DOCS = {
    "harbour": ["the harbour dues of 1901", "ships and dues in the harbour"],
    "ledger": ["ledger of the harbour master", "a ledger of ships"],
    "letter": ["a letter about ships", "the letter names the harbour twice: harbour"],
}
QUERIES = ["harbour dues", "ledger ships", "letter", "harbour ships ledger letter"]


def _chunks(source: str, texts: list[str]) -> list[ragport.Chunk]:
    return [ragport.Chunk.of(source, i, t) for i, t in enumerate(texts)]


def _operate(store: ChunkStore) -> None:
    """Writes, replaces, a delete, a forget, a re-point, a rollback and a compaction."""
    for source, texts in DOCS.items():
        replace_source(
            source_id=source, chunks=_chunks(source, texts), embedder=EMB, store=store, scope=SCOPE
        )
    replace_source(
        source_id="harbour",
        chunks=_chunks("harbour", ["harbour dues rose", "harbour harbour harbour"]),
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    before_delete = store.current_generation(SCOPE)
    delete_source(source_id="letter", store=store, scope=SCOPE)
    rollback_generation(store=store, scope=SCOPE, to=before_delete)
    repoint_source(scope=SCOPE, store=store, from_id="ledger", to_id="ledger-2")
    with store.unit_of_work(SCOPE) as uow:
        uow.tombstones.add([Tombstone("letter", "forgotten")])
        uow.commit()
    compact(store=store, scope=SCOPE, keep=0)


def _answers(store: PostgresStore) -> list[list[tuple[str, float]]]:
    return [
        [(h.record.id, round(h.score, 6)) for h in store.lexical_query(SCOPE, q, limit=10)]
        for q in QUERIES
    ]


@pytest.fixture
def stores(pg_engine: Any, pg_schema: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    other = pg_schema + "_narrow"
    yield (
        PostgresStore(pg_engine, schema=pg_schema, create=True, writes=INLINE),
        PostgresStore(pg_engine, schema=other, create=True, writes=INLINE),
    )
    with pg_engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{other}" CASCADE'))


def test_the_narrow_port_keeps_the_statistics_postgres_reads(stores) -> None:
    """If this fails, check the statistics each writing member of ``backend.py`` keeps (the
    ``with_stats`` deltas of ``update``, ``delete`` and ``put_tombstones``)."""
    direct, narrow = stores
    _operate(direct)
    _operate(BackendStore(PostgresBackend.of(narrow), pushdown=False))
    expected = _answers(direct)
    assert any(expected), "the queries must find something"
    assert _answers(narrow) == expected
    key = (EMB.id, EMB.dimensions)
    assert narrow.foreign_embedders(SCOPE, *key) == direct.foreign_embedders(SCOPE, *key)
    assert narrow.list_invalidated_ids(SCOPE) == {"letter"}


def test_a_read_sees_one_snapshot_and_nearest_streams_best_first(stores) -> None:
    """``nearest`` is every stored row of the vector's dimensions, best first, retired rows
    included; ``rows`` every generation. If this fails, check ``_Reader.nearest``."""
    _, narrow = stores
    store = BackendStore(PostgresBackend.of(narrow), pushdown=False)
    _operate(store)
    vector = EMB.embed(["harbour dues"])[0]
    with PostgresBackend.of(narrow).read(SCOPE) as reader:
        scored = list(reader.nearest(vector))
        stored = list(reader.rows())
    assert len(scored) == len(stored) > 0
    order = [(-round(s.score, 5), s.record.id, s.record.generation) for s in scored]
    assert order == sorted(order)


@contextmanager
def _round_trips() -> Iterator[list[str]]:
    """What each round trip to the server sent: a statement outside a pipeline, or
    ``"pipeline"`` for a whole (outermost) pipeline, which psycopg syncs once at its end, and
    for each of ``pipelined.transaction``'s (libpq's pipeline: one read per sync).
    The pool's idle ping (``SELECT 1``, only after 5 s idle) is left out."""
    sent: list[str] = []
    real_execute = psycopg.Cursor.execute
    real_pipeline = psycopg.Connection.pipeline
    real_read = pipelined._read

    def read(dbapi: Any) -> Any:
        sent.append("pipeline")
        return real_read(dbapi)

    def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if self.connection._pipeline is None and str(query) != "SELECT 1":
            sent.append(" ".join(str(query).split())[:60])
        return real_execute(self, query, params, **kw)

    @contextmanager
    def pipeline(self: Any) -> Iterator[Any]:
        outer = self._pipeline is None
        with real_pipeline(self) as piped:
            yield piped
        if outer:
            sent.append("pipeline")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(psycopg.Cursor, "execute", execute)
        patch.setattr(psycopg.Connection, "pipeline", pipeline)
        patch.setattr(pipelined, "_read", read)
        yield sent


def test_each_read_makes_the_round_trips_it_needs(pg_engine: Any, pg_schema: str) -> None:
    """The round trips of the hot reads, pinned (issue 41's speed budget): a vector query is
    one statement; a read block's BEGIN goes out in one pipeline with its first statement
    (``RawRead.opening``), the lexical leg's ``plan_cache_mode`` settings in one with it; a
    one-statement pushdown (``forgotten_among``) runs with no transaction. Before, a hybrid
    retrieve made 10 (BEGIN, the state, the vector leg, SET LOCAL, the BM25 leg, SET LOCAL,
    COMMIT, then BEGIN, the tombstone probe, COMMIT). If this fails, check ``_Snapshot`` in
    ``backend.py`` and ``reads.fetch``."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True, writes=INLINE)
    for source, texts in DOCS.items():
        replace_source(
            source_id=source, chunks=_chunks(source, texts), embedder=EMB, store=store, scope=SCOPE
        )
    store.set_source_access(SCOPE, [Grant("ledger", ("alice",), (), 1)])
    who = Authorization(SCOPE.tenant_id, "bob", ())
    q = EMB.embed(["harbour dues"])[0]

    def retrieve(lexical: str) -> Any:
        request = ragport.RetrievalRequest(top_k=3, query_candidates=6, lexical=lexical)
        return retrieve_context(
            "harbour dues", embedder=EMB, store=store, scope=SCOPE, request=request
        )

    reads: dict[str, tuple[Callable[[], object], int]] = {
        "vector retrieve_context": (lambda: retrieve("off"), 1),
        # [BEGIN, export, state], vector leg, COMMIT; at the same time on a second
        # connection [BEGIN, SET TRANSACTION SNAPSHOT, SET LOCAL, BM25 leg, SET LOCAL, COMMIT];
        # the probe (4 one after the other)
        "hybrid retrieve_context": (lambda: retrieve("bm25"), 5),
        "query with an authorization": (
            lambda: store.query(SCOPE, q, limit=6, authorization=who),
            1,
        ),
        # [BEGIN, vector leg], the screened sources, their grants, COMMIT
        "query reporting denials": (
            lambda: store.query(SCOPE, q, limit=6, authorization=who, on_denied=lambda d: None),
            4,
        ),
        "current_generation": (
            lambda: store.current_generation(SCOPE),
            2,
        ),  # [BEGIN, state], COMMIT
        "forgotten_among": (lambda: store.forgotten_among(SCOPE, ["harbour"]), 1),
    }
    for name, (read, expected) in reads.items():
        for _ in range(6):  # past psycopg's prepare threshold and the session settings
            read()
        with _round_trips() as sent:
            read()
        assert len(sent) == expected, (name, sent)


def test_a_backend_of_a_store_writes_as_the_store_does(pg_engine: Any, pg_schema: str) -> None:
    """``PostgresBackend.of(store)`` keeps the store's write collaborators: its units of work
    hand after-commit maintenance to the store's worker (not inline) and large adds' vectors
    to the store's vector writer, as the store's own units of work do. If this fails, check
    ``PostgresBackend.of``."""
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True, writes=WriteSettings(maintenance_delay=1.0)
    )

    def collaborators(over: ChunkStore) -> tuple[object, object]:
        with over.unit_of_work(SCOPE) as uow:
            tx = transaction_of(uow)
            assert tx is not None
            return tx.maintenance, tx.vector_writer

    maintenance, vector_writer = collaborators(store)
    assert maintenance is not None and vector_writer is not None
    of_store = collaborators(BackendStore(PostgresBackend.of(store)))
    assert of_store[0] is maintenance and of_store[1] is vector_writer


def test_a_read_block_reads_one_read_only_snapshot(pg_engine: Any, pg_schema: str) -> None:
    """The BEGIN that waits for the block's first statement goes out with it: that statement
    already runs in the REPEATABLE READ, READ ONLY transaction, and the block's end commits
    it. If this fails, check ``_Snapshot.within`` and ``reads.fetch``."""
    PostgresStore(pg_engine, schema=pg_schema, create=True)
    backend = PostgresBackend.of(PostgresStore(pg_engine, schema=pg_schema))
    sql = (
        "SELECT current_setting('transaction_isolation') AS iso, "
        "current_setting('transaction_read_only') AS ro, pg_current_xact_id_if_assigned() AS x, "
        "now() AS began"
    )
    with backend.read(SCOPE) as reader:
        first = reader._fetch("probe", sql)[0]
        second = reader._fetch("probe", sql)[0]
        dbapi = reader.conn.connection.driver_connection
    assert (first.iso, first.ro) == ("repeatable read", "on")
    assert first.began == second.began  # one transaction
    assert dbapi.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # committed


def test_a_failed_first_statement_leaves_no_transaction_behind(
    pg_engine: Any, pg_schema: str
) -> None:
    """A block whose first statement fails (after its pipelined BEGIN) rolls its transaction
    back, and its connection goes back to the pool usable (not discarded); the next read
    works. If this fails, check ``_Snapshot._first``."""
    PostgresStore(pg_engine, schema=pg_schema, create=True)
    backend = PostgresBackend.of(PostgresStore(pg_engine, schema=pg_schema))
    with backend.read(SCOPE) as reader:
        pid = reader._fetch("probe", "SELECT pg_backend_pid() AS pid")[0].pid
    with pytest.raises(StoreError), backend.read(SCOPE) as reader:
        reader._fetch("probe", "SELECT no_such_column")
    fairy = pg_engine.raw_connection()  # the pool is LIFO: the connection the blocks used
    try:
        dbapi = fairy.driver_connection
        assert dbapi.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert dbapi.info.backend_pid == pid
    finally:
        fairy.close()
    with backend.read(SCOPE) as reader:
        assert reader.state().pointer == 0


def test_reads_without_pipeline_mode_answer_the_same(
    pg_engine: Any, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a libpq without pipeline mode (before 14) ``reads.fetch`` sends the block's BEGIN and
    the lexical leg's settings one by one: the same answers, and a statement that fails outside
    a transaction still resets ``plan_cache_mode`` on the connection (the pool reuses it).
    If this fails, check ``reads._one_by_one``."""
    from ragport.adapters.postgres import reads

    store = PostgresStore(pg_engine, schema=pg_schema, create=True, writes=INLINE)
    for source, texts in DOCS.items():
        replace_source(
            source_id=source, chunks=_chunks(source, texts), embedder=EMB, store=store, scope=SCOPE
        )
    request = ragport.RetrievalRequest(top_k=3, query_candidates=6, lexical="bm25")

    def hybrid() -> list[tuple[str, float]]:
        found = retrieve_context(
            "harbour dues", embedder=EMB, store=store, scope=SCOPE, request=request
        )
        return [(h.id, h.score) for h in found.hits]

    piped = hybrid()
    monkeypatch.setattr(reads, "PIPELINE", False)
    assert hybrid() == piped and piped
    fairy = pg_engine.raw_connection()
    dbapi = fairy.driver_connection
    dbapi.autocommit = True  # as the store's read connections are
    try:
        with pytest.raises(psycopg.Error):
            reads.fetch_generic(reads.RawRead(fairy), "SELECT no_such_column", {})
        setting = dbapi.execute("SELECT current_setting('plan_cache_mode')").fetchone()
        assert setting == ("auto",)
    finally:
        dbapi.autocommit = False
        fairy.close()


def test_a_vector_read_after_a_hybrid_one_is_still_one_round_trip(
    pg_engine: Any, pg_schema: str
) -> None:
    """Reads alternate in a real application: a hybrid read (a block, with its SET LOCAL
    settings) must not leave its connection needing a settings round trip before the next
    vector read. If this fails, check how ``_Snapshot`` and ``reads.fetch`` keep the
    connection's HNSW settings cache (``ragport_hnsw``)."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True, writes=INLINE)
    for source, texts in DOCS.items():
        replace_source(
            source_id=source, chunks=_chunks(source, texts), embedder=EMB, store=store, scope=SCOPE
        )

    def retrieve(lexical: str) -> Any:
        request = ragport.RetrievalRequest(top_k=3, query_candidates=6, lexical=lexical)
        return retrieve_context(
            "harbour dues", embedder=EMB, store=store, scope=SCOPE, request=request
        )

    for _ in range(6):
        retrieve("bm25")
        retrieve("off")
    retrieve("bm25")
    with _round_trips() as sent:
        retrieve("off")
    assert len(sent) == 1, sent


def test_a_delete_makes_the_round_trips_it_needs(pg_engine: Any, pg_schema: str) -> None:
    """``delete_source`` on PostgreSQL (issue 45, delete one source): one round trip, the
    ``delete_source`` pushdown's pipeline: BEGIN, the scope lock, then one statement that
    takes the generation from the locked row, retires the source, revokes its grant and
    publishes (its generic plan's settings around it), then COMMIT. Before: four ([BEGIN,
    lock], [retire, probe], the revoke, [numbers, COMMIT]); before those, eight. If this
    fails, check ``backend._delete_at_once`` and ``statements.delete_source``. The
    after-commit maintenance (the fold of the batch retired whole, the GIN merge) is left to
    the maintenance thread, 60 s later, so every round trip counted is the delete's."""
    deferred = WriteSettings(maintenance_delay=60)
    store = PostgresStore(pg_engine, schema=pg_schema, create=True, writes=deferred)
    for source, texts in DOCS.items():
        replace_source(
            source_id=source, chunks=_chunks(source, texts), embedder=EMB, store=store, scope=SCOPE
        )
    store.set_source_access(SCOPE, [Grant(s, ("alice",), (), 1) for s in DOCS])
    delete_source(source_id="harbour", store=store, scope=SCOPE)
    before = store.current_generation(SCOPE)
    with _round_trips() as sent:
        done = delete_source(source_id="ledger", store=store, scope=SCOPE)
    assert sent == ["pipeline"], sent
    assert (done.generation, done.deleted) == (before + 1, len(DOCS["ledger"]))
    assert store.current_generation(SCOPE) == before + 1
    assert store.get_by_source(SCOPE, "ledger") == []
    assert store.get_source_access(SCOPE, ["ledger"])["ledger"].is_empty


def test_a_delete_named_by_a_derived_row_takes_the_steps(pg_engine: Any, pg_schema: str) -> None:
    """A derived row names the source: the one-step statement writes nothing (its pinned
    dependents are the engine's to decide), and the step-by-step unit of work deletes it, a
    pinned dependent with it, at one new generation. If this fails, check the ``sg`` CTE of
    ``statements.delete_source`` (NULL when a derived row names the source) and the
    fallback in ``ragport.application.indexing.delete_source``."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True, writes=INLINE)
    replace_source(
        source_id="harbour", chunks=_chunks("harbour", DOCS["harbour"]), embedder=EMB,
        store=store, scope=SCOPE,
    )  # fmt: skip
    store.set_source_access(SCOPE, [Grant("harbour", ("alice",), (), 1)])
    index_derived(
        record_id="summary", text="a summary of the harbour", lineage=["harbour"],
        embedder=EMB, store=store, scope=SCOPE, pinned=True,
    )  # fmt: skip
    before = store.current_generation(SCOPE)
    with _round_trips() as sent:
        done = delete_source(source_id="harbour", store=store, scope=SCOPE)
    assert sent[0] == "pipeline" and sent.count("pipeline") >= 3, sent  # then the steps
    assert done.generation == store.current_generation(SCOPE) == before + 1
    assert store.get_by_source(SCOPE, "harbour") == []
    assert store.get_by_source(SCOPE, "summary") == [], "the pinned summary retires too"
    assert store.get_source_access(SCOPE, ["harbour"])["harbour"].is_empty
    rollback_generation(store=store, scope=SCOPE, to=before)
    assert len(store.get_by_source(SCOPE, "harbour")) == len(DOCS["harbour"])
    assert [r.id for r in store.get_by_source(SCOPE, "summary")] == ["summary"]


def test_a_retirement_knows_its_dependents_only_until_a_row_is_written(
    pg_engine: Any, pg_schema: str
) -> None:
    """``retire`` found no derived row naming the source, so ``dependents`` answers none
    without a statement; a derived row written after it in the same unit of work is found.
    If this fails, check ``_Writer.rows_written`` (every member that writes a row or a
    lineage clears what ``retire`` knew)."""
    store = PostgresStore(pg_engine, schema=pg_schema, create=True, writes=INLINE)
    replace_source(
        source_id="harbour", chunks=_chunks("harbour", DOCS["harbour"]), embedder=EMB,
        store=store, scope=SCOPE,
    )  # fmt: skip
    backend = PostgresBackend.of(store)
    derived = Record(
        id="summary", scope=SCOPE, source_id="summary", kind="derived",
        text="a summary of the harbour",
        embedder_id=EMB.id, dimensions=EMB.dimensions, generation=2, lineage=("harbour",),
        roots=("harbour",),
    )  # fmt: skip
    with backend.write(SCOPE) as view:
        assert backend.retire(view, source_id="harbour", generation=2) == 2
        with _round_trips() as sent:
            assert backend.dependents(view, ["harbour"]) == []
        assert sent == []
        view.insert([derived], EMB.embed([derived.text]))
        assert [r.id for r in backend.dependents(view, ["harbour"])] == ["summary"]
