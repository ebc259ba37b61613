"""Migrations a host runs: ragport's schema brought up to date inside the host's own migration
transaction (an Alembic revision, a Django ``RunPython``, a hand-written script), the SQL that
would run, and the Alembic autogenerate filter that leaves ragport's objects alone.

docs/hosts.md ("Migrations") is the guide; ``schema.py`` holds the migrations themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sqlalchemy import Connection

from ragport.adapters.postgres._driver import translate_errors
from ragport.adapters.postgres.schema import lock_sql, plan, upgrade, validate_schema_name
from ragport.domain.errors import ValidationError

__all__ = ["IncludeName", "alembic_include_name", "migrate", "pending_sql"]

IncludeName = Callable[[str | None, str, Mapping[str, str | None]], bool]
"""Alembic's ``include_name(name, type_, parent_names) -> bool`` hook."""


def migrate(
    connection: Connection,
    *,
    schema: str = "ragport",
    extension_schema: str | None = None,
    text_search_config: str = "english",
    partitions: int | None = None,
) -> list[int]:
    """Bring ragport's ``schema`` up to date on ``connection``, in its open transaction, and
    return the migration versions applied (``[]`` when it was up to date).

    Every statement runs on ``connection``: no second connection, no commit. The host's
    commit publishes the migrations with the rest of its own; its rollback discards them.
    The call takes a transaction-level advisory lock on the schema (concurrent migrators of
    the same schema wait for the host's commit) and may ``SET LOCAL maintenance_work_mem``.

    ``extension_schema``: where to create the ``vector`` extension when the database lacks
    it (default: the connection's current schema, as a plain ``CREATE EXTENSION`` would). An
    extension already installed is used where it is; naming another schema for it is a
    ``ValidationError``. ``text_search_config`` and ``partitions`` are those of
    ``PostgresStore``, chosen when the schema is created.

    Raises ``ValidationError`` for an AUTOCOMMIT connection (each statement would commit on
    its own) or an invalid name, ``CapabilityError`` when pgvector is not available, and
    ``StoreError`` for what the server refuses (the transaction is then aborted).
    """
    _check_transactional(connection)
    validate_schema_name(schema)
    with translate_errors("migrate"):
        return upgrade(
            connection,
            schema,
            text_search_config=text_search_config,
            partitions=partitions,
            extension_schema=extension_schema,
        )


def pending_sql(
    connection: Connection,
    *,
    schema: str = "ragport",
    extension_schema: str | None = None,
    text_search_config: str = "english",
    partitions: int | None = None,
) -> list[str]:
    """The statements ``migrate`` would run now with the same arguments, in order, without
    running any (``[]`` when ``schema`` is up to date): to review, or to hand to a DBA.

    It reads the catalog only. The first statement takes the advisory lock ``migrate`` takes;
    run them in one transaction (``ragport db upgrade --sql`` prints them inside ``BEGIN`` and
    ``COMMIT``). Raises as ``migrate`` does.
    """
    validate_schema_name(schema)
    with translate_errors("plan migrations"):
        pending = plan(
            connection,
            schema,
            text_search_config=text_search_config,
            partitions=partitions,
            extension_schema=extension_schema,
        )
    statements = [s for migration in pending for s in migration.statements]
    return [lock_sql(schema), *statements] if statements else []


def alembic_include_name(schema: str = "ragport") -> IncludeName:
    """An ``include_name`` hook for Alembic's ``context.configure`` with which autogenerate
    leaves ragport's ``schema`` alone: the schema, its tables, and their columns, indexes
    and constraints are neither compared nor dropped. Everything else is included.

    ragport must live in a schema of its own (not the connection's default schema, whose
    objects Alembic reports without a schema name).
    """
    name = validate_schema_name(schema)

    def include_name(
        object_name: str | None, type_: str, parent_names: Mapping[str, str | None]
    ) -> bool:
        if type_ == "schema":
            return object_name != name
        return parent_names.get("schema_name") != name

    return include_name


def _check_transactional(connection: object) -> None:
    if not isinstance(connection, Connection):
        raise ValidationError(
            "connection must be a SQLAlchemy Connection (in Alembic: op.get_bind())",
            field="connection",
        )
    if connection.dialect.name != "postgresql":
        raise ValidationError("connection must be to PostgreSQL", field="connection")
    # SQLAlchemy's AUTOCOMMIT isolation level, however set, is the driver's autocommit mode.
    if getattr(connection.connection.driver_connection, "autocommit", False):
        raise ValidationError(
            "migrate runs inside the caller's transaction; an AUTOCOMMIT connection would "
            "commit each statement on its own",
            field="connection",
        )
