"""The differential contract fails against a store whose answers disagree with the rule.

Each broken store keeps one defect a pushdown could have; ``check_same_answers`` must raise
against it (and pass against the same store without the defect, in the memory suite), so a
differential that passed here would be a check that cannot fail.
"""

from __future__ import annotations

from typing import Any

import pytest

from ragport.adapters.memory.backend import MemoryBackend
from ragport.contract_tests.differential import check_same_answers
from ragport.engine import BackendStore


class VectorLegIgnoresGrants(BackendStore):
    """A vector leg that forgets the caller's authorization (grants are not applied)."""

    def query(self, scope: Any, vector: Any, **kw: Any) -> Any:
        kw["authorization"] = None
        return super().query(scope, vector, **kw)

    def guarded_query(self, scope: Any, vector: Any, **kw: Any) -> Any:
        kw["authorization"] = None
        return super().guarded_query(scope, vector, **kw)


def test_a_vector_leg_that_ignores_grants_fails_the_differential() -> None:
    """The differential compares answers under authorizations, not only trusted reads."""
    broken = VectorLegIgnoresGrants(MemoryBackend())
    with pytest.raises(AssertionError, match=r"answered differently|state differs"):
        check_same_answers(broken, BackendStore(MemoryBackend()), examples=20, shrink=False)
