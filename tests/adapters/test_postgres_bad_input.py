"""Bad input on the PostgreSQL adapter: clear typed errors, nothing written, nothing leaked.

Covers wrong-dimension vectors, mixed dimensions, schema names with SQL metacharacters (refused
before any connection), a database without the ``vector`` extension, scopes that do not exist,
bad URLs, and driver errors whose messages must never quote SQL parameters.
"""

from __future__ import annotations

import threading
import time
import uuid

import attrs
import numpy as np
import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore
from ragport.adapters.postgres import PostgresStatusStore, PostgresStore
from ragport.contract_tests._support import error_mentions
from ragport.domain.errors import (
    CapabilityError,
    EmbedderError,
    EmbedderMismatchError,
    RagportError,
    StoreError,
    ValidationError,
)

SCOPE = ragport.Scope("tenant-1", "kb", "docs")
EMB = HashEmbedder(dimensions=32)
CLOSED_PORT_URL = "postgresql+psycopg://u@127.0.0.1:1/x"


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True)


def _count(engine, sql: str, **params) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql), params).scalar_one())


def _record_rows(engine, schema: str) -> int:
    return _count(engine, f'SELECT count(*) FROM "{schema}".records')


def _scope_rows(engine, schema: str) -> int:
    return _count(engine, f'SELECT count(*) FROM "{schema}".scopes')


def _records(scope: ragport.Scope, n: int, dims: int, *, source: str = "doc", generation=1):
    return [
        ragport.domain.Record(
            id=f"{source}#{i + 1:04d}",
            scope=scope,
            source_id=source,
            kind="chunk",
            text=f"text {i}",
            embedder_id=f"test:{dims}",
            dimensions=dims,
            generation=generation,
        )
        for i in range(n)
    ]


def _replace(store, source: str, texts: list[str], *, embedder=EMB, scope=SCOPE, **kw):
    return ragport.application.replace_source(
        source_id=source,
        chunks=[ragport.Chunk.of(source, i, t) for i, t in enumerate(texts)],
        embedder=embedder,
        store=store,
        scope=scope,
        **kw,
    )


# -- wrong dimensions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dims", "vectors", "field"),
    [
        (8, np.ones((2, 4), dtype=np.float32), "dimensions"),  # records say 8, vectors 4
        (8, np.ones((3, 8), dtype=np.float32), "vectors"),  # one row too many
        (8, np.ones(16, dtype=np.float32), "vectors"),  # not a matrix
        (8, np.full((2, 8), np.nan, dtype=np.float32), "vectors"),  # not finite
        (2001, np.ones((2, 2001), dtype=np.float32), "dimensions"),  # past HNSW's 2000
    ],
    ids=["dims-mismatch", "row-count", "1-d", "nan", "over-hnsw-limit"],
)
def test_wrong_dimension_vectors_are_refused_and_nothing_is_written(
    store, pg_engine, pg_schema, dims, vectors, field
):
    """Bad vectors in records.add: ValidationError, no rows. If this fails, check ports.store.check_records_for_add and the engine's _Records.add (engine/unit_of_work.py)."""
    with pytest.raises(ValidationError) as info, store.unit_of_work(SCOPE) as uow:
        generation = uow.generations.stage()
        uow.records.add(_records(SCOPE, 2, dims, generation=generation), vectors)
        uow.generations.publish(generation)
        uow.commit()
    assert info.value.field == field
    assert _record_rows(pg_engine, pg_schema) == 0
    assert _scope_rows(pg_engine, pg_schema) == 0, "the scope row insert was rolled back"
    assert store.current_generation(SCOPE) == 0


def test_lying_embedder_leaves_previous_version(store, pg_engine, pg_schema):
    """An embedder answering the wrong width fails before the store. If this fails, check indexing.py."""

    class Liar:
        id = EMB.id
        dimensions = 32

        def embed(self, texts):
            return np.ones((len(texts), 16), dtype=np.float32)

    _replace(store, "doc", ["first version"])
    with pytest.raises(EmbedderError) as info:
        _replace(store, "doc", ["second version", "more"], embedder=Liar())
    assert info.value.retryable is False
    assert [r.text for r in store.get_by_source(SCOPE, "doc")] == ["first version"]
    assert _record_rows(pg_engine, pg_schema) == 1
    assert store.current_generation(SCOPE) == 1


def test_two_dimensions_coexist_but_retrieve_refuses_the_mix(store, pg_engine, pg_schema):
    """Dims 32 and 16 both store; retrieval raises EmbedderMismatchError. If this fails, check retrieval.py."""
    small = HashEmbedder(dimensions=16)
    _replace(store, "wide", ["alpha beta gamma"])
    _replace(store, "narrow", ["alpha beta delta"], embedder=small)
    assert store.list_embedders(SCOPE) == frozenset({(EMB.id, 32), (small.id, 16)})
    hnsw = _count(
        pg_engine,
        "SELECT count(*) FROM pg_indexes WHERE schemaname = :s AND indexdef LIKE '%USING hnsw%'",
        s=pg_schema,
    )
    assert hnsw == 2, "one HNSW index per dimension in use"
    # Each query only scores records of its own width.
    wide = store.query(SCOPE, EMB.embed(["alpha"])[0], limit=10)
    narrow = store.query(SCOPE, small.embed(["alpha"])[0], limit=10)
    assert [s.record.source_id for s in wide] == ["wide"]
    assert [s.record.source_id for s in narrow] == ["narrow"]
    assert list(store.query(SCOPE, np.ones(8, dtype=np.float32), limit=10)) == []
    with pytest.raises(EmbedderMismatchError) as info:
        ragport.application.retrieve_context("alpha", embedder=EMB, store=store, scope=SCOPE)
    assert (info.value.found_id, info.value.found_dimensions) == (small.id, 16)
    assert (info.value.expected_id, info.value.expected_dimensions) == (EMB.id, 32)


# -- schema names --------------------------------------------------------------------------------

BAD_SCHEMAS = [
    'x"; drop table y; --',
    '"A"',
    "A",
    "pg_x",
    "pg_catalog",
    "",
    "a" * 70,
    "a" * 64,
    "has space",
    "dash-ed",
    "schéma",
    "public.records",
    "x'y",
    None,
    7,
]


@pytest.fixture
def closed_engine():
    """An engine pointing at a closed port that records every connection attempt."""
    engine = create_engine(CLOSED_PORT_URL)
    attempts: list[object] = []
    event.listen(engine, "do_connect", lambda *args: attempts.append(args))
    engine.attempts = attempts  # type: ignore[attr-defined]
    yield engine
    engine.dispose()


@pytest.mark.parametrize("schema", BAD_SCHEMAS, ids=repr)
def test_schema_names_with_metacharacters_are_refused_before_connecting(closed_engine, schema):
    """Bad schema names: ValidationError(field='schema'), no connection. If this fails, check schema.py validate_schema_name."""
    for make in (
        lambda: PostgresStore(closed_engine, schema=schema),
        lambda: PostgresStore(closed_engine, schema=schema, create=True),
        lambda: PostgresStatusStore(closed_engine, schema=schema),
        lambda: PostgresStatusStore(closed_engine, schema=schema, create=True),
        lambda: PostgresStore(CLOSED_PORT_URL.replace("+psycopg", ""), schema=schema, create=True),
    ):
        with pytest.raises(ValidationError) as info:
            make()
        assert info.value.field == "schema"
    assert closed_engine.attempts == []


def test_longest_valid_schema_name_is_accepted(closed_engine):
    """63 lower-case chars is a valid schema; the closed port then fails as StoreError. If this fails, check schema.py."""
    store = PostgresStore(closed_engine, schema="a" * 63)
    assert closed_engine.attempts == []
    with pytest.raises(StoreError):
        store.current_generation(SCOPE)
    assert closed_engine.attempts, "a valid name does reach the (closed) server"


def test_text_search_config_with_metacharacters_is_refused(closed_engine):
    """text_search_config is validated like the schema. If this fails, check schema.py."""
    with pytest.raises(ValidationError) as info:
        PostgresStore(closed_engine, text_search_config="english'); drop table x; --")
    assert info.value.field == "text_search_config"
    assert closed_engine.attempts == []


# -- URLs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u@localhost/db",
        "sqlite:///tmp/x.db",
        "http://localhost:5432/db",
        "memory://",
        "",
        " postgresql://u@localhost/db",
        None,
        42,
    ],
    ids=repr,
)
def test_bad_url_scheme_is_refused(url):
    """Non-PostgreSQL URLs: ValidationError(field='url'). If this fails, check _driver.py make_engine."""
    for make in (lambda: PostgresStore(url), lambda: PostgresStatusStore(url)):
        with pytest.raises(ValidationError) as info:
            make()
        assert info.value.field == "url"


# -- missing vector extension --------------------------------------------------------------------


@pytest.fixture
def bare_database(pg_url, pg_engine):
    """A fresh database without pgvector and a login role that cannot create in it."""
    suffix = uuid.uuid4().hex[:10]
    db, role = f"ragport_bare_{suffix}", f"ragport_user_{suffix}"
    admin = pg_engine.execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{db}"'))
        conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
        conn.execute(text(f'REVOKE CREATE ON DATABASE "{db}" FROM PUBLIC'))
    base = make_url(pg_url)
    info = {
        "db": db,
        "role": role,
        "user_url": base.set(username=role, database=db).render_as_string(hide_password=False),
        "admin_url": base.set(database=db).render_as_string(hide_password=False),
    }
    try:
        yield info
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))


def _database_is_empty(admin_url: str) -> None:
    engine = create_engine(make_url(admin_url).set(drivername="postgresql+psycopg"))
    try:
        with engine.connect() as conn:
            extensions = conn.execute(text("SELECT extname FROM pg_extension")).scalars().all()
            schemas = conn.execute(
                text("SELECT nspname FROM pg_namespace WHERE nspname = 'ragport'")
            ).all()
            relations = conn.execute(
                text(
                    "SELECT c.relname FROM pg_class c JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE n.nspname NOT IN "
                    "('pg_catalog', 'information_schema', 'pg_toast')"
                )
            ).all()
    finally:
        engine.dispose()
    assert "vector" not in extensions
    assert schemas == []
    assert relations == []


@pytest.mark.parametrize("can_create_schema", [False, True], ids=["no-create", "create-granted"])
def test_missing_vector_extension_is_a_typed_error_and_creates_nothing(
    bare_database, pg_engine, can_create_schema
):
    """No pgvector and no right to install it: typed error, no tables. If this fails, check _driver.py _translate."""
    if can_create_schema:
        with pg_engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
            conn.execute(
                text(
                    f'GRANT CREATE ON DATABASE "{bare_database["db"]}" TO "{bare_database["role"]}"'
                )
            )
    with pytest.raises((CapabilityError, StoreError)) as info:
        PostgresStore(bare_database["user_url"], create=True)
    error = info.value
    if isinstance(error, CapabilityError):
        assert error.capability in ("privilege", "vector")
    _database_is_empty(bare_database["admin_url"])
    # Without create=True the store fails on first use, also typed, also without side effects.
    store = PostgresStore(bare_database["user_url"])
    with pytest.raises(StoreError):
        store.current_generation(SCOPE)
    store.engine.dispose()
    with pytest.raises((CapabilityError, StoreError)):
        PostgresStatusStore(bare_database["user_url"], create=True)
    _database_is_empty(bare_database["admin_url"])


# -- scopes that do not exist --------------------------------------------------------------------


def test_unknown_scope_reads_empty_and_rollback_writes_nothing(store, pg_engine, pg_schema):
    """Never-written scope: empty reads; rollback(to=1) ValidationError, no row. If this fails, check PostgresBackend.write and ScopeTransaction.rollback."""
    _replace(store, "doc", ["a different scope has data"])
    ghost = ragport.Scope("tenant-1", "kb", "ghost")
    before = (_record_rows(pg_engine, pg_schema), _scope_rows(pg_engine, pg_schema))
    assert store.current_generation(ghost) == 0
    assert store.get_by_source(ghost, "doc") == []
    assert tuple(store.query(ghost, EMB.embed(["data"])[0], limit=5)) == ()
    assert store.list_embedders(ghost) == frozenset()
    assert store.list_invalidated_ids(ghost) == frozenset()
    alice = ragport.Authorization("alice", "tenant-1")
    decisions = store.check_source_access(ghost, ["doc"], alice)
    assert not decisions["doc"].allowed
    result = ragport.application.retrieve_context("data", embedder=EMB, store=store, scope=ghost)
    assert result.hits == ()
    with pytest.raises(ValidationError) as info:
        ragport.application.rollback_generation(store=store, scope=ghost, to=1)
    assert info.value.field == "to"
    assert ragport.application.compact(store=store, scope=ghost, keep=0).purged == 0
    assert ragport.application.publish_generation(store=store, scope=ghost) == 0
    ghost_rows = _count(
        pg_engine,
        f'SELECT count(*) FROM "{pg_schema}".scopes WHERE corpus_id = :c',
        c="ghost",
    )
    assert ghost_rows == 0, "no scopes row was created for the unknown scope"
    assert (_record_rows(pg_engine, pg_schema), _scope_rows(pg_engine, pg_schema)) == before


# -- driver errors never quote parameters --------------------------------------------------------

SECRET_TEXT = "confidential merger terms zebra-7781"


def _assert_no_leak(error: BaseException, *needles: str) -> None:
    rendered = [str(error), repr(error), *map(str, error.args)]
    for needle in needles:
        for piece in rendered:
            assert needle not in piece


def _wait_until_blocked(engine, schema: str, blocker_pid: int, timeout: float = 10.0) -> None:
    """Until a backend writing into ``schema`` waits on a lock held by ``blocker_pid``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        waiting = _count(
            engine,
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND :p = ANY(pg_blocking_pids(pid)) AND position(:s in query) > 0",
            p=blocker_pid,
            s=schema,
        )
        if waiting:
            return
        time.sleep(0.02)
    raise AssertionError("the concurrent writer never blocked on the uncommitted row")


def test_unique_violation_from_a_concurrent_insert_does_not_leak_text(store, pg_engine, pg_schema):
    """A real UniqueViolation surfaces typed and without the record text. If this fails, check _driver.py _translate."""
    # The HNSW index exists first, so the writer blocks on the live id, not on creating the index.
    store.prepare(SCOPE, dimensions=32)
    blocker = pg_engine.connect()
    try:
        blocker_pid = blocker.execute(text("SELECT pg_backend_pid()")).scalar_one()
        blocker.execute(
            text(
                f'INSERT INTO "{pg_schema}".records (tenant_id, resource_id, corpus_id, id, '
                "generation, source_id, kind, text, row_key, dimensions) VALUES "
                "(:t, :r, :c, 'doc#0001', 1, 'doc', 'chunk', 'placeholder', -1, 32)"
            ),
            {"t": SCOPE.tenant_id, "r": SCOPE.resource_id, "c": SCOPE.corpus_id},
        )
        # A live id is held in live_ids (migration 9): the writer blocks on its primary key.
        blocker.execute(
            text(
                f'INSERT INTO "{pg_schema}".live_ids (tenant_id, resource_id, corpus_id, id) '
                "VALUES (:t, :r, :c, 'doc#0001')"
            ),
            {"t": SCOPE.tenant_id, "r": SCOPE.resource_id, "c": SCOPE.corpus_id},
        )
        status = InMemoryStatusStore()
        outcome: list[BaseException | object] = []

        def write() -> None:
            try:
                outcome.append(_replace(store, "doc", [SECRET_TEXT], status_store=status))
            except BaseException as exc:
                outcome.append(exc)

        writer = threading.Thread(target=write)
        writer.start()
        _wait_until_blocked(pg_engine, pg_schema, blocker_pid)
        blocker.commit()
        writer.join(30)
    finally:
        blocker.close()
    (error,) = outcome
    assert isinstance(error, RagportError), f"expected a ragport error, got {error!r}"
    assert isinstance(error, ValidationError)
    assert error.field == "id"
    assert error.sqlstate == "23505", "the violation came from the server, not a pre-check"
    assert error.__cause__ is None and error.__context__ is None, "the driver error is dropped"
    _assert_no_leak(error, SECRET_TEXT, "zebra")
    failed = status.get(SCOPE, "doc")
    assert failed is not None and failed.state == "failed"
    assert SECRET_TEXT not in (failed.error or "")
    rows = _count(
        pg_engine, f'SELECT count(*) FROM "{pg_schema}".records WHERE text = :x', x=SECRET_TEXT
    )
    assert rows == 0


@pytest.mark.parametrize(
    ("attribute", "value", "sqlstate"),
    [
        ("text", SECRET_TEXT + " \x00 nul byte", "22021"),  # character_not_in_repertoire
        ("metadata", {"note": SECRET_TEXT + " \u0000"}, "22P05"),  # the server's CONTEXT quotes it
        ("text", SECRET_TEXT + " \udfff", None),  # not encodable: UnicodeEncodeError.object
    ],
    ids=["nul-in-text", "nul-in-jsonb", "surrogate-in-text"],
)
def test_data_rejected_by_postgres_is_typed_and_chains_nothing(
    store, pg_engine, pg_schema, attribute, value, sqlstate
):
    """A value the domain refuses, slipped past it, is a ValidationError with no chain.

    The domain refuses NUL and lone surrogates (see test_domain_boundary), and the engine's
    unit of work builds every record it takes in again; here a record is altered after
    validation and handed to the backend's writer, so the driver sees the value. The
    translated error keeps the
    SQLSTATE as a field and chains nothing: psycopg's error quotes the JSON in its CONTEXT,
    SQLAlchemy's holds the parameters. If this fails, check translate_errors in _driver.py.
    """
    _replace(store, "doc", ["previous version"])
    [record] = _records(SCOPE, 1, EMB.dimensions)
    record = attrs.evolve(record, embedder_id=EMB.id)
    with pytest.raises(RagportError) as info, store.unit_of_work(SCOPE) as uow:
        generation = uow.generations.stage()
        uow.records.retire_source("doc", generation=generation)
        record = attrs.evolve(record, generation=generation)
        object.__setattr__(record, attribute, value)
        uow.writer.insert([record], EMB.embed(["x"]))  # type: ignore[attr-defined]
        uow.commit()
    assert isinstance(info.value, ValidationError)
    assert info.value.field == "data"
    assert info.value.sqlstate == sqlstate
    assert info.value.__cause__ is None and info.value.__context__ is None
    for needle in (SECRET_TEXT, "nul byte"):
        assert error_mentions(info.value, needle) == []
    _assert_no_leak(info.value, SECRET_TEXT, "zebra", "nul byte")
    assert [r.text for r in store.get_by_source(SCOPE, "doc")] == ["previous version"]
    assert _record_rows(pg_engine, pg_schema) == 1
    assert store.current_generation(SCOPE) == 1


@pytest.mark.parametrize(
    "metadata",
    [{"note": SECRET_TEXT + " \x00"}, {"note": {SECRET_TEXT + " \udfff": 1}}],
    ids=["nul-in-metadata", "surrogate-in-metadata-key"],
)
def test_bad_metadata_through_replace_source_chains_no_driver_error(store, metadata):
    """NUL in metadata (the issue's scenario) is refused by the domain: nothing is chained.

    Before, the ValidationError's __cause__ was psycopg's error quoting the metadata JSON.
    If this fails, check freeze_metadata in domain/model.py and translate_errors.
    """
    _replace(store, "doc", ["previous version"])
    with pytest.raises(ValidationError) as info:
        ragport.application.replace_source(
            source_id="doc",
            chunks=[
                ragport.Chunk(
                    id="doc#0001",
                    source_id="doc",
                    index=0,
                    start=0,
                    end=1,
                    text="x",
                    metadata=metadata,
                )
            ],
            embedder=EMB,
            store=store,
            scope=SCOPE,
        )
    assert info.value.field == "metadata"
    assert error_mentions(info.value, SECRET_TEXT) == []
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert [r.text for r in store.get_by_source(SCOPE, "doc")] == ["previous version"]
