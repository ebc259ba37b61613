"""The shipped EmbedderContract against MiniLmEmbedder and both HTTP embedders.

The HTTP embedders talk to a real loopback server that speaks both APIs and computes its
vectors with HashEmbedder, so the contract sees deterministic, text-dependent answers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ragport.adapters.embedders import (
    HashEmbedder,
    MiniLmEmbedder,
    OpenAICompatibleEmbedder,
    TeiEmbedder,
)
from ragport.contract_tests import EmbedderContract

DIMS = 64
_HASH = HashEmbedder(dimensions=DIMS)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/v1/embeddings":
            rows = _HASH.embed(request["input"]).tolist()
            data = [{"index": i, "embedding": row} for i, row in enumerate(rows)]
            body = json.dumps({"object": "list", "data": data[::-1]}).encode()
        elif self.path == "/embed":
            body = json.dumps(_HASH.embed(request["inputs"]).tolist()).encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def loopback_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def minilm() -> MiniLmEmbedder:
    # Stateless after loading, so one instance serves every test of the module.
    return MiniLmEmbedder()


class TestMiniLmEmbedder(EmbedderContract):
    @pytest.fixture
    def embedder(self, minilm: MiniLmEmbedder) -> MiniLmEmbedder:
        return minilm


class TestOpenAICompatibleEmbedder(EmbedderContract):
    @pytest.fixture
    def embedder(self, loopback_url: str) -> Iterator[OpenAICompatibleEmbedder]:
        # batch_size=4 so the contract's six texts span two requests.
        embedder = OpenAICompatibleEmbedder(
            loopback_url + "/v1", "hash-v1", dimensions=DIMS, batch_size=4, allow_loopback=True
        )
        yield embedder
        embedder.close()


class TestTeiEmbedder(EmbedderContract):
    @pytest.fixture
    def embedder(self, loopback_url: str) -> Iterator[TeiEmbedder]:
        embedder = TeiEmbedder(
            loopback_url, model="hash-v1", dimensions=DIMS, batch_size=4, allow_loopback=True
        )
        yield embedder
        embedder.close()
