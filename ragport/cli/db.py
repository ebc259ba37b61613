"""``ragport db``: schema migrations, dump/restore/copy, the embedded server."""

from __future__ import annotations

import argparse
from typing import Any

from ragport.cli.config import _store_url, _stores
from ragport.cli.options import Parents, command, group
from ragport.cli.output import EXIT_OK, _json, _note, _print_json, _table
from ragport.cli.settings import legacy_prefix


def _db_upgrade(args: argparse.Namespace) -> int:
    if args.sql or args.extension_schema is not None:
        from ragport.bootstrap import postgres_url

        with postgres_url(_store_url(args)) as url:
            if args.sql:
                _print_pending(url, args)
                return EXIT_OK
            _migrate(url, args)
    with _stores(args, upgrade=True, partitions=args.partitions) as stores:
        print(f"schema {args.schema!r} is up to date ({stores.description})")
    return EXIT_OK


def _print_pending(url: str, args: argparse.Namespace) -> None:
    """``db upgrade --sql``: the pending statements as one psql-ready transaction."""
    from ragport.adapters.postgres import PostgresStore, pending_sql

    engine = PostgresStore(url, schema=args.schema).engine
    try:
        with engine.connect() as conn:
            statements = pending_sql(
                conn,
                schema=args.schema,
                extension_schema=args.extension_schema,
                partitions=args.partitions,
            )
    finally:
        engine.dispose()
    if not statements:
        print(f"-- schema {args.schema!r} is up to date: nothing to apply")
        return
    print("BEGIN;")
    for statement in statements:
        print(statement + ";")
    print("COMMIT;")


def _migrate(url: str, args: argparse.Namespace) -> None:
    """``db upgrade --extension-schema``: the migrations, the extension created there."""
    from ragport.adapters.postgres import PostgresStore, migrate

    engine = PostgresStore(url, schema=args.schema).engine
    try:
        with engine.begin() as conn:
            migrate(
                conn,
                schema=args.schema,
                extension_schema=args.extension_schema,
                partitions=args.partitions,
            )
    finally:
        engine.dispose()


def _db_dump(args: argparse.Namespace) -> int:
    """The schema, rows and corpus settings (roots included) in one file; roots an older
    ragport recorded in the data directory are first recorded in the store, so they travel."""
    from ragport.adapters.postgres import dump_schema
    from ragport.bootstrap import postgres_url

    with postgres_url(_store_url(args)) as url:
        _carry_roots(args, url)
        dump_schema(url, args.path, schema=args.schema)
    print(f"schema {args.schema!r} dumped to {args.path}")
    return 0


def _carry_roots(args: argparse.Namespace, url: str) -> None:
    from ragport.bootstrap import open_checkpoints, open_stores
    from ragport.bootstrap.corpus_settings import carry_recorded_roots
    from ragport.bootstrap.roots import CorpusRoots

    roots = CorpusRoots()
    prefix = legacy_prefix(args)
    if not any(key.startswith(prefix) for key in roots.entries()):
        return
    with open_stores(url, schema=args.schema, upgrade=False) as stores:
        carried = carry_recorded_roots(open_checkpoints(stores), roots, prefix=prefix)
    if carried:
        _note(f"{carried} corpus root(s) recorded in {roots.path} now kept in the store")


def _db_restore(args: argparse.Namespace) -> int:
    from ragport.adapters.postgres import restore_schema
    from ragport.bootstrap import postgres_url

    with postgres_url(_store_url(args)) as url:
        restore_schema(url, args.path, schema=args.schema)
    print(f"schema {args.schema!r} restored from {args.path}")
    return 0


def _db_copy(args: argparse.Namespace) -> int:
    import tempfile

    from ragport.adapters.postgres import copy_schema
    from ragport.bootstrap import postgres_url

    with postgres_url(_store_url(args)) as url, tempfile.TemporaryDirectory() as work:
        _carry_roots(args, url)
        copy_schema(url, args.to, work, schema=args.schema)
    print(f"schema {args.schema!r} copied; continue with --store URL")
    return 0


def _db_stop(args: argparse.Namespace) -> int:
    from ragport.adapters.postgres import default_data_dir, stop_embedded_server

    stopped = stop_embedded_server(default_data_dir())
    print("embedded server stopped" if stopped else "no embedded server was running")
    return EXIT_OK


def _db_status(args: argparse.Namespace) -> int:
    from ragport.adapters.postgres import default_data_dir, embedded_status

    status = embedded_status(default_data_dir())
    if args.json:
        _print_json(status)
    else:
        _table(["field", "value"], [(k, v) for k, v in _json.unstructure(status).items()])
    return EXIT_OK


def register(sub: Any, parents: Parents) -> None:
    """``db upgrade|dump|restore|copy|stop|status`` on ``sub``."""
    stored = parents.stored
    db_sub = group(sub, "db", "database administration", "Database administration.", "db_command")
    upgrade = command(db_sub, "upgrade", "apply schema migrations",
                      ["ragport db upgrade --store postgresql://me@db/rag",
                       "ragport db upgrade --store postgresql://me@db/rag --partitions 16",
                       "ragport db upgrade --store postgresql://me@db/rag --sql",
                       "ragport db upgrade --store postgresql://me@db/rag --extension-schema ext"],
                      [stored])  # fmt: skip
    upgrade.add_argument(
        "--partitions",
        type=int,
        help="create the tables PARTITION BY HASH (tenant_id) in N partitions (default: none)",
    )
    upgrade.add_argument(
        "--sql",
        action="store_true",
        help="print the pending migrations' SQL (one transaction, for psql) and apply nothing",
    )
    upgrade.add_argument(
        "--extension-schema",
        metavar="SCHEMA",
        help="create the vector extension in SCHEMA when the database lacks it (default: the "
        "first schema of the search_path); an installed extension is used where it is",
    )
    upgrade.set_defaults(func=_db_upgrade)
    dump = command(db_sub, "dump", "pg_dump ragport's schema to PATH (custom format)",
                   ["ragport db dump backup.dump"], [stored])  # fmt: skip
    dump.add_argument("path", help="the dump file to write")
    dump.set_defaults(func=_db_dump)
    restore = command(db_sub, "restore", "pg_restore a dump into a server without that schema",
                      ["ragport db restore backup.dump --store postgresql://me@db/rag"],
                      [stored])  # fmt: skip
    restore.add_argument("path", help="the dump file to read")
    restore.set_defaults(func=_db_restore)
    copy = command(db_sub, "copy", "copy ragport's schema to another server (dump + restore)",
                   ["ragport db copy --to postgresql://me@db/rag"], [stored])  # fmt: skip
    copy.add_argument("--to", required=True, help="postgresql://... of the target server")
    copy.set_defaults(func=_db_copy)
    stop = command(db_sub, "stop", "stop the embedded PostgreSQL server", ["ragport db stop"])
    stop.set_defaults(func=_db_stop)
    dbstatus = command(
        db_sub, "status", "which embedded server, which binaries, which data directory, how big",
        ["ragport db status"], [parents.json_out],
    )  # fmt: skip
    dbstatus.set_defaults(func=_db_status)
