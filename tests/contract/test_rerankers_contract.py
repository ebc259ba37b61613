"""RerankerContract against every reranker: the network-free ones, the local ONNX one, and the
three HTTP ones through a real server on 127.0.0.1 that speaks each API."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_http import Reply, relevance, start, stop

from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.rerankers import (
    EmbeddingReranker,
    FakeReranker,
    HttpOptions,
    LocalReranker,
    OpenAICompatibleReranker,
    TeiReranker,
    VoyageReranker,
)
from ragport.contract_tests import RerankerContract

API_KEY = "sk-contract-key"
LOOPBACK = HttpOptions(allow_loopback=True)


def _answer(request: dict[str, Any]) -> Reply:
    """Answers /tei/rerank, /openai/rerank and /voyage/rerank as each API does."""
    dialect = request["path"].split("/")[1]
    body = request["json"]
    documents = body["texts" if dialect == "tei" else "documents"]
    key = "score" if dialect == "tei" else "relevance_score"
    items = [{"index": i, key: relevance(body["query"], doc)} for i, doc in enumerate(documents)]
    items.sort(key=lambda item: -item[key])
    answer: Any = {
        "tei": items,
        "openai": {"results": items},
        "voyage": {"object": "list", "data": items, "model": "rerank-2"},
    }[dialect]
    return Reply(body=json.dumps(answer).encode())


@pytest.fixture(scope="module")
def rerank_server() -> Iterator[str]:
    server = start(_answer)
    yield server.url
    stop(server)


class TestFakeReranker(RerankerContract):
    @pytest.fixture
    def reranker(self) -> FakeReranker:
        return FakeReranker()


class TestEmbeddingReranker(RerankerContract):
    @pytest.fixture
    def reranker(self) -> EmbeddingReranker:
        return EmbeddingReranker(HashEmbedder())


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The ONNX graph builder lives with the adapter tests; load it by path (tests are not a
    # package, and --import-mode=importlib keeps them off sys.path).
    path = Path(__file__).resolve().parents[1] / "adapters" / "test_local_reranker.py"
    spec = importlib.util.spec_from_file_location("_ragport_tiny_cross_encoder", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    built: Path = module.build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))
    return built


class TestLocalReranker(RerankerContract):
    @pytest.fixture
    def reranker(self, tiny_model: Path) -> LocalReranker:
        return LocalReranker(str(tiny_model))


class TestTeiReranker(RerankerContract):
    @pytest.fixture
    def reranker(self, rerank_server: str) -> Iterator[TeiReranker]:
        with TeiReranker(rerank_server + "/tei", http=LOOPBACK) as reranker:
            yield reranker


class TestTeiRerankerInBatches(RerankerContract):
    @pytest.fixture
    def reranker(self, rerank_server: str) -> Iterator[TeiReranker]:
        with TeiReranker(rerank_server + "/tei", http=LOOPBACK, max_batch=3) as reranker:
            yield reranker


class TestOpenAICompatibleReranker(RerankerContract):
    @pytest.fixture
    def reranker(self, rerank_server: str) -> Iterator[OpenAICompatibleReranker]:
        with OpenAICompatibleReranker(
            rerank_server + "/openai", "test-reranker", api_key=API_KEY, http=LOOPBACK
        ) as reranker:
            yield reranker


class TestVoyageReranker(RerankerContract):
    @pytest.fixture
    def reranker(self, rerank_server: str) -> Iterator[VoyageReranker]:
        with VoyageReranker(API_KEY, base_url=rerank_server + "/voyage", http=LOOPBACK) as reranker:
            yield reranker
