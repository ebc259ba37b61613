"""resolve_reranker: each kind from a plain mapping, and errors that name the field at fault."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import pytest

from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.rerankers import (
    RERANKER_KINDS,
    EmbeddingReranker,
    FakeReranker,
    LocalReranker,
    OpenAICompatibleReranker,
    TeiReranker,
    VoyageReranker,
    resolve_reranker,
)
from ragport.domain.errors import ValidationError
from ragport.ports.rerank import Reranker

API_KEY = "sk-config-key-DO-NOT-LEAK"


def test_none_means_no_reranker():
    """{"kind": "none"} resolves to None.

    If this fails, check the "none" entry of _KINDS in ragport/adapters/rerankers/config.py.
    """
    assert resolve_reranker({"kind": "none"}) is None


def test_fake():
    """{"kind": "fake"} is a FakeReranker.

    If this fails, check _build_fake in ragport/adapters/rerankers/config.py.
    """
    assert isinstance(resolve_reranker({"kind": "fake"}), FakeReranker)


def test_embedding_with_the_hash_embedder():
    """{"kind": "embedding", "embedder": "hash"} wraps a HashEmbedder.

    If this fails, check _build_embedding in ragport/adapters/rerankers/config.py.
    """
    reranker = resolve_reranker({"kind": "embedding", "embedder": "hash"})
    assert isinstance(reranker, EmbeddingReranker)
    assert repr(reranker) == f"EmbeddingReranker({HashEmbedder().id})"


def test_embedding_with_minilm_loads_nothing_yet():
    """{"kind": "embedding", "embedder": "minilm"} wraps MiniLmEmbedder, not loaded yet.

    If this fails, check the lazy MiniLmEmbedder import in _build_embedding.
    """
    reranker = resolve_reranker({"kind": "embedding", "embedder": "minilm"})
    assert isinstance(reranker, EmbeddingReranker)
    assert "all-minilm-l6-v2-int8:384" in repr(reranker)


def test_local():
    """{"kind": "local", "model": ...} is a LocalReranker that loads nothing yet.

    If this fails, check _build_local in ragport/adapters/rerankers/config.py.
    """
    reranker = resolve_reranker({"kind": "local", "model": "/no/such/model", "cache_dir": "/m"})
    assert isinstance(reranker, LocalReranker)
    assert reranker.model == "/no/such/model"


def test_tei():
    """{"kind": "tei", ...} is a TeiReranker with the given options.

    If this fails, check _Tei and _build_tei in ragport/adapters/rerankers/config.py.
    """
    reranker = resolve_reranker(
        {
            "kind": "tei",
            "base_url": "https://rerank.internal",
            "model": "bge-reranker-base",
            "timeout_ms": 1_500,
            "max_batch": 32,
        }
    )
    assert isinstance(reranker, TeiReranker)
    assert "timeout_ms=1500" in repr(reranker) and "max_batch=32" in repr(reranker)


def test_openai_compatible():
    """{"kind": "openai-compatible", ...} is an OpenAICompatibleReranker.

    If this fails, check _OpenAICompatible in ragport/adapters/rerankers/config.py.
    """
    reranker = resolve_reranker(
        {
            "kind": "openai-compatible",
            "base_url": "http://127.0.0.1:8000/v1",
            "model": "BAAI/bge-reranker-v2-m3",
            "allow_loopback": True,
            "api_key": API_KEY,
        }
    )
    assert isinstance(reranker, OpenAICompatibleReranker)
    assert API_KEY not in repr(reranker)


def test_voyage():
    """{"kind": "voyage", "api_key": ...} is a VoyageReranker on Voyage's own URL.

    If this fails, check _Voyage in ragport/adapters/rerankers/config.py.
    """
    reranker = resolve_reranker({"kind": "voyage", "api_key": API_KEY})
    assert isinstance(reranker, VoyageReranker)
    assert "https://api.voyageai.com/v1" in repr(reranker)


def test_every_kind_is_covered():
    """The kinds advertised are exactly the documented seven.

    If this fails, update the docs and these tests together with _KINDS.
    """
    assert set(RERANKER_KINDS) == {
        "local",
        "embedding",
        "tei",
        "openai-compatible",
        "voyage",
        "fake",
        "none",
    }


def test_toml_and_json_loaded_configs_resolve():
    """Tables parsed by tomllib and json are accepted as they come.

    If this fails, check that the converter needs only plain types.
    """
    from_toml = tomllib.loads(
        '[reranker]\nkind = "tei"\nbase_url = "http://localhost:8080"\n'
        "allow_loopback = true\nmax_batch = 32\n"
    )["reranker"]
    assert isinstance(resolve_reranker(from_toml), TeiReranker)
    from_json = json.loads('{"kind": "embedding", "embedder": "hash"}')
    assert isinstance(resolve_reranker(from_json), Reranker)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({}, "kind"),
        ({"kind": "cohere"}, "kind"),
        ({"kind": None}, "kind"),
        ({"kind": ["tei"]}, "kind"),
        ({"kind": "fake", "model": "x"}, "model"),
        ({"kind": "none", "extra": 1}, "extra"),
        ({"kind": "tei"}, "base_url"),
        ({"kind": "tei", "base_url": "https://r", "top_k": 5}, "top_k"),
        ({"kind": "tei", "base_url": "https://r", "timeout_ms": "2000"}, "timeout_ms"),
        ({"kind": "tei", "base_url": "https://r", "timeout_ms": 2.5}, "timeout_ms"),
        ({"kind": "tei", "base_url": "https://r", "max_batch": True}, "max_batch"),
        ({"kind": "tei", "base_url": "https://r", "allow_loopback": "false"}, "allow_loopback"),
        ({"kind": "tei", "base_url": "http://rerank.example.com"}, "base_url"),
        ({"kind": "tei", "base_url": "https://r", "timeout_ms": 300_001}, "timeout_ms"),
        ({"kind": "openai-compatible", "base_url": "https://r"}, "model"),
        ({"kind": "voyage"}, "api_key"),
        ({"kind": "voyage", "api_key": ""}, "api_key"),
        ({"kind": "voyage", "api_key": 12345}, "api_key"),
        ({"kind": "local"}, "model"),
        ({"kind": "local", "model": "m", "allow_remote_models": 1}, "allow_remote_models"),
        ({"kind": "embedding"}, "embedder"),
        ({"kind": "embedding", "embedder": "bert"}, "embedder"),
        ({"kind": "embedding", "embedder": "hash", "dimensions": 64}, "dimensions"),
    ],
)
def test_bad_configs_name_the_field(config, field):
    """Missing or unknown kinds, unknown keys and mistyped values name the key at fault.

    If this fails, check resolve_reranker and _first_field in rerankers/config.py.
    """
    with pytest.raises(ValidationError) as info:
        resolve_reranker(config)
    assert info.value.field == field


@pytest.mark.parametrize("config", [None, "fake", ["kind", "fake"], {1: "fake"}])
def test_a_non_mapping_config_is_refused(config):
    """Anything but a mapping with string keys is ValidationError(field="reranker").

    If this fails, check the first check in resolve_reranker.
    """
    with pytest.raises(ValidationError) as info:
        resolve_reranker(config)
    assert info.value.field == "reranker"


def test_errors_never_quote_the_api_key():
    """A config error next to an API key does not repeat the key.

    If this fails, check that the converter's messages name paths, never values.
    """
    with pytest.raises(ValidationError) as info:
        resolve_reranker({"kind": "voyage", "api_key": API_KEY, "timeout_ms": "slow"})
    assert info.value.field == "timeout_ms"
    assert API_KEY not in str(info.value)
    assert API_KEY not in repr(info.value.__cause__)


def test_importing_the_package_imports_no_optional_dependency():
    """Importing ragport.adapters.rerankers (and resolving a config) needs no httpx or onnx.

    If this fails, check for a top-level import of httpx, onnxruntime or tokenizers.
    """
    code = (
        "import sys\n"
        "import ragport.adapters.rerankers as r\n"
        "r.resolve_reranker({'kind': 'local', 'model': 'm'})\n"
        "loaded = [m for m in ('httpx', 'onnxruntime', 'tokenizers') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
