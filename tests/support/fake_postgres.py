"""A loopback TCP server that speaks just enough of the PostgreSQL protocol to refuse a login.

It answers SSL and GSS encryption requests with 'N' and the startup message with a FATAL
ErrorResponse carrying the SQLSTATE given (``28P01`` password authentication failed).
"""

from __future__ import annotations

import socket
import struct
import threading

__all__ = ["refusing_server"]


def _error(sqlstate: str, message: str) -> bytes:
    fields = b"".join(
        code + value.encode() + b"\0"
        for code, value in ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", sqlstate), (b"M", message))
    )
    body = fields + b"\0"
    return b"E" + struct.pack("!I", len(body) + 4) + body


def _serve_one(conn: socket.socket, sqlstate: str, message: str) -> None:
    with conn:
        while True:
            head = conn.recv(8)
            if len(head) < 8:
                return
            length, code = struct.unpack("!II", head)
            if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest
                conn.sendall(b"N")
                continue
            remaining = length - 8
            while remaining > 0:
                chunk = conn.recv(remaining)
                if not chunk:
                    return
                remaining -= len(chunk)
            conn.sendall(_error(sqlstate, message))
            return


def refusing_server(sqlstate: str = "28P01") -> tuple[int, socket.socket]:
    """Start the server on 127.0.0.1; returns (port, listening socket: close it to stop)."""
    message = {
        "28P01": 'password authentication failed for user "u"',
        "3D000": 'database "nope" does not exist',
    }.get(sqlstate, "refused")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def loop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_serve_one, args=(conn, sqlstate, message), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return listener.getsockname()[1], listener
