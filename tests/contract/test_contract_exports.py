"""Every suite and mixin that docs/contract-tests.md names imports from ragport.contract_tests."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from ragport.contract_tests import chunk_store

DOC = Path(__file__).resolve().parents[2] / "docs" / "contract-tests.md"
_DOC_NAMES = sorted(set(re.findall(r"`(\w+Contract)`", DOC.read_text(encoding="utf-8"))))


def test_the_page_names_the_chunk_store_mixins() -> None:
    """The page names at least every mixin the chunk_store package exports (no vacuous pass)."""
    assert set(chunk_store.__all__) <= set(_DOC_NAMES)


@pytest.mark.parametrize("name", _DOC_NAMES)
def test_each_documented_suite_imports_from_the_package(name: str) -> None:
    """``from ragport.contract_tests import <name>`` works and the name is in ``__all__``."""
    package = importlib.import_module("ragport.contract_tests")
    assert name in package.__all__
    assert getattr(package, name) is not None


@pytest.mark.parametrize("name", sorted(chunk_store.__all__))
def test_each_chunk_store_mixin_is_the_same_object_at_the_top(name: str) -> None:
    """Each chunk_store mixin is re-exported unchanged from ragport.contract_tests."""
    package = importlib.import_module("ragport.contract_tests")
    assert getattr(package, name, None) is getattr(chunk_store, name)
