"""Reranker adapters. Every reranker runs behind ``ragport.application.rerank_hits``.

``FakeReranker`` and ``EmbeddingReranker`` need nothing beyond numpy. ``LocalReranker`` needs
the ``local`` extra (onnxruntime, tokenizers) and the HTTP rerankers the ``http`` extra
(httpx); their modules import those only when a model loads or a client is built, so importing
this package never needs them.
"""

from ragport.adapters.http_options import HttpOptions
from ragport.adapters.rerankers.config import RERANKER_KINDS, resolve_reranker
from ragport.adapters.rerankers.http import (
    OpenAICompatibleReranker,
    TeiReranker,
    VoyageReranker,
)
from ragport.adapters.rerankers.local import LocalReranker, OnnxCrossEncoderRuntime
from ragport.adapters.rerankers.simple import EmbeddingReranker, FakeReranker

__all__ = [
    "RERANKER_KINDS",
    "EmbeddingReranker",
    "FakeReranker",
    "HttpOptions",
    "LocalReranker",
    "OnnxCrossEncoderRuntime",
    "OpenAICompatibleReranker",
    "TeiReranker",
    "VoyageReranker",
    "resolve_reranker",
]
