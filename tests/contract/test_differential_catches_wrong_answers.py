"""The differential contract fails against a backend whose pushdown disagrees with the rule.

Each broken backend below is ``SnapshotBackend`` (``InMemoryStore``'s) with one pushdown
wrong in a way a pushdown could be: a search that ignores tombstones, one that ignores
grants, a lexical leg that ignores the metadata filter, an embedder look-up that ignores
visibility. ``check_same_answers`` of ``BackendStore(broken)`` against
``BackendStore(broken, pushdown=False)`` must raise; the same comparison on the correct
backend passes (tests/contract/test_differential_memory.py), so the failure comes from the
defect. A differential that passed here would be a check that cannot fail.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from ragport.adapters.memory.backend import SnapshotBackend
from ragport.adapters.memory.unit_of_work import SnapshotReader
from ragport.contract_tests.differential import check_same_answers
from ragport.engine import BackendStore
from ragport.ports.pushdowns import Admission, LegAnswer
from ragport.ports.store import EmbedderKey


class SearchIgnoresTombstones(SnapshotBackend):
    """The vector leg searches a snapshot whose tombstones are gone (forgotten rows come
    back)."""

    def search_vectors(
        self, view: SnapshotReader, vector: Any, *, admission: Admission, limit: int
    ) -> LegAnswer:
        snap = view.snap.copy()
        snap.tombstones = {}
        blind = SnapshotReader(snap, view.scope)  # a committed view of the tombstone-free copy
        return super().search_vectors(blind, vector, admission=admission, limit=limit)


class SearchIgnoresGrants(SnapshotBackend):
    """The vector leg drops the caller's authorization."""

    def search_vectors(
        self, view: SnapshotReader, vector: Any, *, admission: Admission, limit: int
    ) -> LegAnswer:
        admission = attrs.evolve(admission, authorization=None)
        return super().search_vectors(view, vector, admission=admission, limit=limit)


class LexicalIgnoresTheFilter(SnapshotBackend):
    """The lexical leg drops the metadata filter."""

    def search_lexical(
        self, view: SnapshotReader, text: str, *, mode: str, admission: Admission, limit: int
    ) -> LegAnswer:
        admission = attrs.evolve(admission, metadata_filter=None)
        return super().search_lexical(view, text, mode=mode, admission=admission, limit=limit)


class EmbeddersIgnoreVisibility(SnapshotBackend):
    """The embedder look-up counts every stored row, retired ones included."""

    def embedders(self, view: SnapshotReader) -> frozenset[EmbedderKey]:
        return frozenset(
            (r.record.embedder_id, r.record.dimensions) for r in view.snap.rows.values()
        )


@pytest.mark.parametrize(
    "broken",
    [
        SearchIgnoresTombstones,
        SearchIgnoresGrants,
        LexicalIgnoresTheFilter,
        EmbeddersIgnoreVisibility,
    ],
    ids=["tombstones", "grants", "filter", "embedders"],
)
def test_a_wrong_pushdown_fails_the_differential(broken: type[SnapshotBackend]) -> None:
    """``BackendStore(broken)`` answers differently from its own generic path somewhere in
    the derandomized sequences, and the differential says so."""
    backend = broken()
    subject, reference = BackendStore(backend), BackendStore(backend, pushdown=False)
    with pytest.raises(AssertionError, match=r"answered differently|state differs"):
        check_same_answers(subject, reference, examples=60, shrink=False)
