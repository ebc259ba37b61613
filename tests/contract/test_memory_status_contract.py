"""The in-memory ingestion-status store against the shipped IngestionStatusStoreContract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragport.adapters.memory import InMemoryStatusStore
from ragport.contract_tests import IngestionStatusStoreContract


class TestInMemoryStatusStore(IngestionStatusStoreContract):
    @pytest.fixture
    def status_store(self) -> Iterator[InMemoryStatusStore]:
        yield InMemoryStatusStore()
