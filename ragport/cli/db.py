"""``ragport db``: schema migrations, dump/restore/copy, the embedded server."""

from __future__ import annotations

import argparse

from ragport.cli.config import _store_url, _stores
from ragport.cli.output import EXIT_OK, _json, _print_json, _table


def _db_upgrade(args: argparse.Namespace) -> int:
    with _stores(args, upgrade=True, partitions=args.partitions) as stores:
        print(f"schema {args.schema!r} is up to date ({stores.description})")
    return EXIT_OK


def _db_dump(args: argparse.Namespace) -> int:
    from ragport.adapters.postgres import dump_schema
    from ragport.bootstrap import postgres_url

    with postgres_url(_store_url(args)) as url:
        dump_schema(url, args.path, schema=args.schema)
    print(f"schema {args.schema!r} dumped to {args.path}")
    return 0


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
