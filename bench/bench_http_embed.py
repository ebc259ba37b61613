"""Concurrent HTTP embedding (issue 27): ``TeiEmbedder.embed`` at max_concurrency 1 vs 4.

A TEI-compatible server on 127.0.0.1 (``ThreadingHTTPServer``, one thread per connection, in
its own process as a real TEI would be, so it does not share the client's GIL) answers every
``POST /embed`` after sleeping ``--delay-ms`` (default 50 ms), as a GPU server with that
latency per batch would; its answer is a prebuilt JSON array of ``--dims`` wide rows per batch
size, so the server costs little CPU beyond the socket. ``GET /peak`` returns (and resets) the
most requests it held at once. ``--chunks`` texts (default
5,000, about 200 characters each) are embedded in one ``embed`` call with ``batch_size`` 32
(TEI's default), alternately at each concurrency, ``--repeat`` times; medians are reported
and the ratio of the medians. Goal: concurrency 4 at least 3.5x faster than 1.

Run: .venv/bin/python bench/bench_http_embed.py
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection

import numpy as np
from _results import figure, target, write_result

from ragport.adapters.embedders import HttpOptions, TeiEmbedder


def _serve(delay_s: float, dims: int, batch: int, ready: Connection) -> None:
    """The server process: bind, report the port on ``ready``, serve until killed."""
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((batch, dims)).round(6).tolist()
    bodies = {n: json.dumps(rows[:n]).encode() for n in range(1, batch + 1)}
    peak = {"now": 0, "max": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            count = len(json.loads(raw)["inputs"])
            with lock:
                peak["now"] += 1
                peak["max"] = max(peak["max"], peak["now"])
            time.sleep(delay_s)
            with lock:
                peak["now"] -= 1
            self._send(bodies[count])

        def do_GET(self) -> None:
            with lock:
                seen, peak["max"] = peak["max"], 0
            self._send(str(seen).encode())

        def _send(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ready.send(server.server_address[1])
    server.serve_forever()


def _peak(url: str) -> int:
    import httpx

    return int(httpx.get(url + "/peak", trust_env=False).text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=5_000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args(argv)

    batch = 32
    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.get_context("spawn").Process(
        target=_serve, args=(args.delay_ms / 1000, args.dims, batch, theirs), daemon=True
    )
    server.start()
    url = f"http://127.0.0.1:{ours.recv()}"
    texts = [f"chunk {i}: " + "lorem ipsum dolor sit amet " * 7 for i in range(args.chunks)]
    batches = -(-len(texts) // batch)
    embedders = {
        c: TeiEmbedder(
            url,
            dimensions=args.dims,
            batch_size=batch,
            http=HttpOptions(max_concurrency=c, allow_loopback=True),
        )
        for c in args.concurrency
    }
    for embedder in embedders.values():  # warm the connection pool
        embedder.embed(texts[: batch * 4])
    times: dict[int, list[float]] = {c: [] for c in args.concurrency}
    peaks: dict[int, int] = {}
    for _ in range(args.repeat):
        for c, embedder in embedders.items():
            _peak(url)  # reset
            started = time.perf_counter()
            out = embedder.embed(texts)
            times[c].append(time.perf_counter() - started)
            peaks[c] = _peak(url)
            assert out.shape == (len(texts), args.dims)
    print(
        f"TeiEmbedder.embed of {len(texts)} chunks ({batches} batches of {batch}, {args.dims} "
        f"dims), server sleeps {args.delay_ms:g} ms per batch, {args.repeat} runs each"
    )
    floor = batches * args.delay_ms / 1000
    for c in args.concurrency:
        med = statistics.median(times[c])
        print(
            f"  max_concurrency={c}: median {med:.2f} s ({len(texts) / med:,.0f} chunks/s; "
            f"runs {', '.join(f'{t:.2f}' for t in times[c])}; server peak in flight "
            f"{peaks[c]}; sleep floor {floor / c:.2f} s)"
        )
    figures = {
        f"c{c}_s": figure(
            f"embed {len(texts):,} chunks at max_concurrency={c}", "s", samples=times[c]
        )
        for c in args.concurrency
    }
    targets = []
    if 1 in times and len(times) > 1:
        base = statistics.median(times[1])
        for c in args.concurrency:
            if c != 1:
                ratio = base / statistics.median(times[c])
                print(f"  speed-up at {c} vs 1: {ratio:.2f}x (goal at 4: >= 3.5x)")
                figures[f"speedup_{c}"] = figure(f"speed-up at {c} vs 1 (medians)", "x", ratio)
                figures[f"speedup_{c}"]["ratio_of"] = ["c1_s", f"c{c}_s"]
                if c == 4:
                    targets.append(target("speedup_4", ">=", 3.5))
    write_result("http_embed", figures=figures, targets=targets)
    for embedder in embedders.values():
        embedder.close()
    server.terminate()
    server.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
