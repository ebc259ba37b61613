"""Alembic's environment of the policy service: its own table, and ragport's schema left to
ragport (``alembic_include_name``), so autogenerate never proposes to drop ragport's tables.

Settings (``config.attributes`` in tests and scripts, else the ini file's main options):
``connection`` (a SQLAlchemy Connection to run on) or ``sqlalchemy.url``; ``schema`` (the
service's schema, default ``policies``) and ``corpus_schema`` (ragport's, default
``policies_corpus``).
"""

from __future__ import annotations

from typing import Any

from alembic import context
from policy_service.adapters import policies_table
from sqlalchemy import create_engine, text

from ragport.adapters.postgres import alembic_include_name

config = context.config


def setting(name: str, default: str) -> str:
    value = config.attributes.get(name) or config.get_main_option(name)
    return str(value or default)


SCHEMA = setting("schema", "policies")
CORPUS_SCHEMA = setting("corpus_schema", "policies_corpus")
ragport_filter = alembic_include_name(CORPUS_SCHEMA)


def include_name(name: str | None, type_: str, parents: Any) -> bool:
    """Compare the service's own schema only, and never ragport's (``ragport_filter``)."""
    if not ragport_filter(name, type_, parents):
        return False
    return name == SCHEMA if type_ == "schema" else parents.get("schema_name") == SCHEMA


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        with create_engine(setting("sqlalchemy.url", "")).connect() as connection:
            _run(connection)
    else:
        _run(connection)


def _run(connection: Any) -> None:
    # The version table lives in the service's schema, so the schema comes first.
    connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{SCHEMA}"'))
    context.configure(
        connection=connection,
        target_metadata=policies_table(SCHEMA).metadata,
        include_schemas=True,
        include_name=config.attributes.get("include_name", include_name),
        version_table_schema=SCHEMA,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
