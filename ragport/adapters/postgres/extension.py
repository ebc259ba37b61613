"""Where the ``vector`` extension lives, and how SQL names its objects.

pgvector's type, its cosine distance operator and its operator class are named qualified by
the schema the extension was created in (``"extensions".vector(384)``,
``OPERATOR("extensions".<=>)``, ``"extensions".vector_cosine_ops``): a host may keep the
extension in a schema of its choice, off every ``search_path``, and no same-named object on a
``search_path`` is ever used instead. The store reads the extension's schema from the catalog
on first use; the migrations create the extension where the host asks, or use it where it is.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import psycopg
from psycopg.rows import dict_row
from psycopg.types import TypeInfo
from sqlalchemy import Connection, text

from ragport.domain.errors import CapabilityError, ValidationError

__all__ = [
    "PgVector",
    "extension_plan",
    "installed_schema",
    "pgvector",
    "register_vector_type",
]

# Names ragport writes into SQL (inside DO blocks and string literals, too) quoted and as they
# are: letters, digits and underscores, case kept.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

_INSTALLED = (
    "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
    "WHERE e.extname = 'vector'"
)
# psycopg's TypeInfo of the extension's own ``vector`` type, whatever the search_path says.
_VECTOR_TYPE = (
    "SELECT t.typname AS name, t.oid, t.typarray AS array_oid, "
    "t.oid::regtype::text AS regtype, t.typdelim AS delimiter, n.nspname AS schema "
    "FROM pg_extension e JOIN pg_type t ON t.typnamespace = e.extnamespace "
    "JOIN pg_namespace n ON n.oid = e.extnamespace "
    "WHERE e.extname = 'vector' AND t.typname = 'vector'"
)
_MISSING = (
    "the pgvector extension is not installed in this database; run `ragport db upgrade` (or "
    "ragport.adapters.postgres.migrate, or PostgresStore(..., create=True)) as a role allowed "
    "to create it"
)


@attrs.frozen
class PgVector:
    """pgvector's objects as SQL names them, in the schema ``schema`` (a quoted identifier)."""

    schema: str

    @classmethod
    def in_schema(cls, name: str) -> PgVector:
        """The names in the schema called ``name`` (as the catalog spells it)."""
        if not _NAME.fullmatch(name):
            raise CapabilityError(
                "the vector extension lives in a schema whose name ragport does not write "
                "into SQL (letters, digits and underscores only); move it with ALTER "
                "EXTENSION vector SET SCHEMA",
                capability="vector",
            )
        return cls(f'"{name}"')

    def type(self, dimensions: int | None = None) -> str:
        """``"<schema>".vector``, or ``"<schema>".vector(<dimensions>)``."""
        return f"{self.schema}.vector" + ("" if dimensions is None else f"({int(dimensions)})")

    @property
    def cosine_distance(self) -> str:
        """The ``<=>`` operator, as ``OPERATOR("<schema>".<=>)``."""
        return f"OPERATOR({self.schema}.<=>)"

    @property
    def cosine_ops(self) -> str:
        """The HNSW operator class of cosine distance."""
        return f"{self.schema}.vector_cosine_ops"


def installed_schema(conn: Connection) -> str | None:
    """The schema the ``vector`` extension was created in (``None``: not installed)."""
    found = conn.execute(text(_INSTALLED)).scalar()
    return None if found is None else str(found)


def pgvector(conn: Connection) -> PgVector:
    """The names of the installed extension's objects, else ``CapabilityError``."""
    schema = installed_schema(conn)
    if schema is None:
        raise CapabilityError(_MISSING, capability="vector")
    return PgVector.in_schema(schema)


def extension_plan(
    conn: Connection, extension_schema: str | None
) -> tuple[tuple[str, ...], PgVector]:
    """The statements that install the extension (none when it is installed) and its names.

    An installed extension is used where it is; naming another ``extension_schema`` for it is
    a ``ValidationError`` (moving it is the database owner's decision: ``ALTER EXTENSION
    vector SET SCHEMA``). A missing one is created in ``extension_schema`` (created first if
    need be), or else in the connection's current schema (the first existing schema of its
    ``search_path``, where a plain ``CREATE EXTENSION`` would put it), named explicitly. The
    caller validated ``extension_schema`` (``schema.validate_schema_name``).
    """
    installed = installed_schema(conn)
    if installed is not None:
        if extension_schema is not None and extension_schema != installed:
            raise ValidationError(
                f"the vector extension is installed in schema {installed!r}, not "
                f"{extension_schema!r}; leave extension_schema unset to use it where it is, or "
                "move it first (ALTER EXTENSION vector SET SCHEMA)",
                field="extension_schema",
            )
        return (), PgVector.in_schema(installed)
    target = extension_schema or _current_schema(conn)
    names = PgVector.in_schema(target)
    statements: tuple[str, ...] = ()
    exists = conn.execute(
        text("SELECT 1 FROM pg_namespace WHERE nspname = :n"), {"n": target}
    ).scalar()
    if exists is None:
        statements = (f"CREATE SCHEMA IF NOT EXISTS {names.schema}",)
    return (*statements, f"CREATE EXTENSION IF NOT EXISTS vector SCHEMA {names.schema}"), names


def _current_schema(conn: Connection) -> str:
    current = conn.execute(text("SELECT current_schema()")).scalar()
    if current is None:
        raise ValidationError(
            "no schema of the search_path exists to create the vector extension in; name one "
            "with extension_schema (ragport db upgrade --extension-schema)",
            field="extension_schema",
        )
    return str(current)


def register_vector_type(dbapi: psycopg.Connection[Any]) -> str:
    """Register pgvector's loaders and dumpers on ``dbapi`` for the extension's own type (one
    catalog read; ``pgvector.psycopg.register_vector`` finds ``vector`` through the
    ``search_path`` only), else ``CapabilityError``. Returns the extension's schema (as the
    catalog spells it: ``PgVector.in_schema``)."""
    from pgvector.psycopg.vector import register_vector_info

    # In a block of its own, as psycopg's TypeInfo.fetch: the connection is left in the
    # transaction state it was found in.
    with dbapi.transaction(), dbapi.cursor(row_factory=dict_row) as cur:
        cur.execute(_VECTOR_TYPE)
        row = cur.fetchone()
    if row is None:
        raise CapabilityError(_MISSING, capability="vector")
    schema = str(row.pop("schema"))
    register_vector_info(dbapi, TypeInfo(**row))
    return schema
