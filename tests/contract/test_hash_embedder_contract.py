"""The hash embedder, at two dimensions, against the shipped EmbedderContract."""

from __future__ import annotations

import pytest

from ragport.adapters.embedders import HashEmbedder
from ragport.contract_tests import EmbedderContract


class TestHashEmbedder256(EmbedderContract):
    @pytest.fixture
    def embedder(self) -> HashEmbedder:
        return HashEmbedder(dimensions=256)


class TestHashEmbedder64(EmbedderContract):
    @pytest.fixture
    def embedder(self) -> HashEmbedder:
        return HashEmbedder(dimensions=64)
