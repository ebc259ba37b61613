"""Loopback HTTP servers for the adapter tests: real sockets on 127.0.0.1, scripted answers.

A test gives ``FakeServer`` a ``respond(request) -> Reply`` function; the server records every
request (path, headers, parsed JSON body) and answers as the ``Reply`` says: status, body,
headers (a ``Content-Type`` there replaces the JSON default), a delay, a byte-by-byte drip or
chunked encoding. GET requests are recorded with ``json`` set to None. ``start`` runs one in a daemon
thread; ``stop`` shuts it down. The ``serve`` fixture in tests/conftest.py wraps both.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

__all__ = ["FakeServer", "Reply", "bomb", "relevance", "start", "stop"]


@attrs.define
class Reply:
    """What the fake server sends: status, body, and how (delay, drip, chunked)."""

    status: int = 200
    body: bytes = b""
    delay_s: float = 0.0
    drip_s: float = 0.0  # pause between single-byte chunks (forces chunked encoding)
    chunked: bool = False
    headers: dict[str, str] = attrs.Factory(dict)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out as separate writes: without TCP_NODELAY, Nagle plus the client's
    # delayed ACK stall every keep-alive answer by ~40 ms.
    disable_nagle_algorithm = True
    server: FakeServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._answer({"path": self.path, "headers": dict(self.headers), "json": json.loads(body)})

    def do_GET(self) -> None:
        self._answer({"path": self.path, "headers": dict(self.headers), "json": None})

    def _answer(self, request: dict[str, Any]) -> None:
        with self.server.lock:
            self.server.requests.append(request)
        reply = self.server.respond(request)
        try:
            time.sleep(reply.delay_s)
            self.send_response(reply.status)
            if "Content-Type" not in reply.headers:
                self.send_header("Content-Type", "application/json")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.chunked or reply.drip_s:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                pieces = (
                    [reply.body[i : i + 1] for i in range(len(reply.body))]
                    if reply.drip_s
                    else [reply.body[i : i + 512] for i in range(0, len(reply.body), 512)]
                )
                for piece in pieces:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                    time.sleep(reply.drip_s)
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout, byte ceiling): that is the point of the test

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, respond: Callable[[dict[str, Any]], Reply]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up mid-answer is what several tests provoke; anything else is a
        # bug in the fake server and must stay loud.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def start(respond: Callable[[dict[str, Any]], Reply]) -> FakeServer:
    """A FakeServer answering with ``respond``, serving in a daemon thread."""
    server = FakeServer(respond)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    return server


def stop(server: FakeServer) -> None:
    server.shutdown()
    server.server_close()


def relevance(query: str, document: str) -> float:
    """A deterministic stand-in for a cross-encoder: shared words, then a CRC tie-breaker."""
    shared = len(set(query.lower().split()) & set(document.lower().split()))
    return shared + (zlib.crc32(document.encode()) % 1000) / 10_000


_ZEROS = bytes(1 << 20)


def _deflate_bomb(wbits: int, inflated: int) -> bytes:
    """``inflated`` zero bytes (a multiple of 1 MiB) as one gzip (wbits 31) or zlib (15)
    stream, built from one 1 MiB block compressed once: after a full flush the compressor's
    state is reset, so every further block compresses to the same bytes and is repeated."""
    blocks = inflated >> 20
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    first = compressor.compress(_ZEROS) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeat = compressor.compress(_ZEROS) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush(zlib.Z_FINISH)
    if wbits > 15:  # gzip trailer: CRC-32 and size mod 2**32, little-endian
        crc = 0
        for _ in range(blocks):
            crc = zlib.crc32(_ZEROS, crc)
        end = end[:-8] + crc.to_bytes(4, "little") + (inflated & 0xFFFFFFFF).to_bytes(4, "little")
    else:  # zlib trailer: Adler-32, big-endian
        adler = 1
        for _ in range(blocks):
            adler = zlib.adler32(_ZEROS, adler)
        end = end[:-4] + adler.to_bytes(4, "big")
    return first + repeat * (blocks - 1) + end


def bomb(encoding: str, inflated: int = 1 << 30) -> bytes:
    """A body that decodes to ``inflated`` zero bytes under ``Content-Encoding: encoding``,
    without ever holding them: ``gzip`` and ``deflate`` (~1 MB for 1 GiB), ``gzip, gzip``
    (gzip of that: ~2 kB), ``zstd`` (one 1 MiB frame repeated: ~50 kB; zstandard is an
    httpx extra here). ``br`` is junk: the brotli module is not installed, and a client that
    refuses unasked-for encodings refuses on the header alone."""
    if encoding == "gzip":
        return _deflate_bomb(31, inflated)
    if encoding == "deflate":
        return _deflate_bomb(15, inflated)
    if encoding == "gzip, gzip":
        compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
        return compressor.compress(_deflate_bomb(31, inflated)) + compressor.flush()
    if encoding == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=1).compress(_ZEROS) * (inflated >> 20)
    if encoding == "br":
        return b"\xff" * 32_768
    raise ValueError(encoding)
