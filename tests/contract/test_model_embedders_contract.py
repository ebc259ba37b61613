"""The shipped EmbedderContract against MiniLmEmbedder and both HTTP embedders.

The HTTP embedders talk to a real loopback server that speaks both APIs and computes its
vectors with HashEmbedder, so the contract sees deterministic, text-dependent answers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_http import Reply, start, stop

from ragport.adapters.embedders import (
    HashEmbedder,
    HttpOptions,
    MiniLmEmbedder,
    OpenAICompatibleEmbedder,
    TeiEmbedder,
)
from ragport.contract_tests import EmbedderContract

DIMS = 64
_HASH = HashEmbedder(dimensions=DIMS)


def _answer(request: dict[str, Any]) -> Reply:
    """Answers /v1/embeddings (OpenAI-compatible, rows out of order) and /embed (TEI)."""
    if request["path"] == "/v1/embeddings":
        rows = _HASH.embed(request["json"]["input"]).tolist()
        data = [{"index": i, "embedding": row} for i, row in enumerate(rows)]
        return Reply(body=json.dumps({"object": "list", "data": data[::-1]}).encode())
    if request["path"] == "/embed":
        return Reply(body=json.dumps(_HASH.embed(request["json"]["inputs"]).tolist()).encode())
    return Reply(status=404)


@pytest.fixture(scope="module")
def loopback_url() -> Iterator[str]:
    server = start(_answer)
    yield server.url
    stop(server)


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
            loopback_url + "/v1",
            "hash-v1",
            dimensions=DIMS,
            batch_size=4,
            http=HttpOptions(allow_loopback=True),
        )
        yield embedder
        embedder.close()


class TestTeiEmbedder(EmbedderContract):
    @pytest.fixture
    def embedder(self, loopback_url: str) -> Iterator[TeiEmbedder]:
        embedder = TeiEmbedder(
            loopback_url,
            model="hash-v1",
            dimensions=DIMS,
            batch_size=4,
            http=HttpOptions(allow_loopback=True),
        )
        yield embedder
        embedder.close()
