"""Opt-in pytest plugin with deterministic fixtures for adapter and application tests.

Enable it in a ``conftest.py``::

    pytest_plugins = ["ragport.contract_tests.plugin"]

Fixtures: ``contract_clock`` (a :class:`FixedClock` at 2024-01-02T03:04:05Z),
``contract_vectors`` (a :class:`VectorFactory` of 8-dimensional SHA-256 vectors),
``contract_embedder`` (a tiny deterministic Embedder on the same vectors) and
``contract_scope`` (a Scope unique to the requesting test, the same on every run). The classes
behind them (:class:`FixedClock`, :class:`VectorFactory`, :class:`ContractEmbedder`) are
importable from here for module-level use.
"""

from __future__ import annotations

import pytest

from ragport.contract_tests._support import (
    CONTRACT_DIMENSIONS,
    ContractEmbedder,
    FixedClock,
    VectorFactory,
    scope_for,
)
from ragport.domain.model import Scope

__all__ = [
    "ContractEmbedder",
    "FixedClock",
    "VectorFactory",
    "contract_clock",
    "contract_embedder",
    "contract_scope",
    "contract_vectors",
]


@pytest.fixture
def contract_clock() -> FixedClock:
    """A clock that stands still (``advance(seconds)`` moves it)."""
    return FixedClock()


@pytest.fixture
def contract_vectors() -> VectorFactory:
    """``contract_vectors("text")`` is a unit float32 vector of 8 dims; ``.many([...])`` stacks."""
    return VectorFactory(CONTRACT_DIMENSIONS)


@pytest.fixture
def contract_embedder() -> ContractEmbedder:
    """A deterministic Embedder (``id == "contract-v1:8"``) without any model."""
    return ContractEmbedder(CONTRACT_DIMENSIONS)


@pytest.fixture
def contract_scope(request: pytest.FixtureRequest) -> Scope:
    """A scope of its own for the requesting test, derived from its node id."""
    return scope_for(request.node.nodeid)
