"""The generation engine over the reference in-memory backend, against the whole
StorageBackendContract (ChunkStoreContract through the engine), its driver-failure section included (a backend that starts raising)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager

import pytest

from ragport.adapters.memory.backend import MemoryBackend
from ragport.contract_tests import StorageBackendContract
from ragport.contract_tests.chunk_store.failures import BreakStore
from ragport.domain.model import Scope
from ragport.engine import BackendStore
from ragport.ports.backend import BackendReader, BackendWriter
from ragport.ports.store import ChunkStore


class FailingBackend:
    """A MemoryBackend whose driver 'fails' once ``broken``: every entry raises an error
    whose message quotes document text, as a driver's may."""

    provider = "failing"

    def __init__(self) -> None:
        self.broken = False
        self._inner = MemoryBackend()

    def read(self, scope: Scope) -> AbstractContextManager[BackendReader]:
        if self.broken:
            raise OSError("could not read 'the secret document text'")
        return self._inner.read(scope)

    def write(self, scope: Scope) -> AbstractContextManager[BackendWriter]:
        if self.broken:
            raise OSError("could not write 'the secret document text'")
        return self._inner.write(scope)


class TestMemoryBackend(StorageBackendContract):
    """MemoryBackend, behind a switch that makes it fail like a driver (``break_store``)."""

    @pytest.fixture
    def backend(self) -> Iterator[FailingBackend]:
        yield FailingBackend()

    @pytest.fixture
    def break_store(self) -> BreakStore:
        def break_it(store: ChunkStore) -> None:
            assert isinstance(store, BackendStore)
            backend = store.backend
            assert isinstance(backend, FailingBackend)
            backend.broken = True

        return break_it
