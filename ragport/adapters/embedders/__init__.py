"""Embedder adapters.

``HashEmbedder`` needs nothing beyond numpy. ``MiniLmEmbedder`` needs the ``local`` extra and
the HTTP embedders the ``http`` extra; their modules import onnxruntime, tokenizers and httpx
only when an embedder is loaded or built, so importing this package never needs them.
"""

from ragport.adapters.embedders.hash import HashEmbedder
from ragport.adapters.embedders.http import OpenAICompatibleEmbedder, TeiEmbedder
from ragport.adapters.embedders.minilm import MiniLmEmbedder
from ragport.adapters.http_options import HttpOptions

__all__ = [
    "HashEmbedder",
    "HttpOptions",
    "MiniLmEmbedder",
    "OpenAICompatibleEmbedder",
    "TeiEmbedder",
]
