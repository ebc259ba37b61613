"""ports.store.check_records_for_add and check_stored_ids: the pre-write checks of records.add.

Both stores call them; a third-party store can too. The contract suite pins what a store does
with them; these tests pin the functions themselves (field names, never message text).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pytest

from ragport.adapters.memory import InMemoryStore
from ragport.domain.errors import ScopeError, ValidationError
from ragport.domain.model import Record, Scope
from ragport.ports.store import check_records_for_add, check_stored_ids

SCOPE = Scope("t", "r", "c")
OTHER = Scope("t", "r", "c2")


def _record(rid: str, source: str = "doc", generation: int = 1, **changes: Any) -> Record:
    fields: dict[str, Any] = {"text": "x", "embedder_id": "hash-v1:3", "dimensions": 3}
    fields.update(changes)
    return Record(
        id=rid, scope=SCOPE, source_id=source, kind="chunk", generation=generation, **fields
    )


def _vectors(n: int) -> np.ndarray:
    return np.arange(1, 3 * n + 1, dtype=np.float64).reshape(n, 3)


def test_good_records_come_back_as_an_owned_float32_copy() -> None:
    """The matrix to store is float32, C-contiguous, and not the caller's array. If this fails, check the copy at the end of check_records_for_add."""
    given = np.asfortranarray(_vectors(2))
    out = check_records_for_add(SCOPE, [_record("doc#0001"), _record("doc#0002")], given)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    assert np.array_equal(out, given.astype(np.float32))
    given[0, 0] = 99.0
    assert out[0, 0] == 1.0


def test_no_records_and_no_rows_pass() -> None:
    """An empty write with a (0, d) matrix is valid. If this fails, check the shape test."""
    assert check_records_for_add(SCOPE, [], np.zeros((0, 3))).shape == (0, 3)


@pytest.mark.parametrize(
    "vectors",
    [
        np.zeros(3),
        np.zeros((1, 3)),
        np.zeros((3, 3)),
        np.array([[1.0, np.nan, 0.0], [1.0, 0.0, 0.0]]),
        np.array([[1.0, np.inf, 0.0], [1.0, 0.0, 0.0]]),
    ],
    ids=["one-dimensional", "too-few-rows", "too-many-rows", "nan", "inf"],
)
def test_a_bad_matrix_is_refused_on_the_vectors_field(vectors: np.ndarray) -> None:
    """Shape and finiteness: ValidationError(field="vectors"). If this fails, check the matrix tests in check_records_for_add."""
    with pytest.raises(ValidationError) as caught:
        check_records_for_add(SCOPE, [_record("doc#0001"), _record("doc#0002")], vectors)
    assert caught.value.field == "vectors"


@pytest.mark.parametrize(
    ("records", "error", "field"),
    [
        ([_record("a"), attrs.evolve(_record("b"), scope=OTHER)], ScopeError, "scope"),
        ([_record("a"), _record("b", dimensions=4)], ValidationError, "dimensions"),
        ([_record("a"), _record("a", source="other")], ValidationError, "id"),
        ([_record("a"), _record("a", generation=2)], ValidationError, "id"),
    ],
    ids=["other-scope", "dimensions", "duplicate-other-source", "duplicate-same-source"],
)
def test_a_bad_record_is_refused_on_its_field(
    records: list[Record], error: type[Exception], field: str
) -> None:
    """Scope, dimensions and duplicate ids each name their field. If this fails, check the per-record loop of check_records_for_add."""
    with pytest.raises(error) as caught:
        check_records_for_add(SCOPE, records, _vectors(2))
    assert type(caught.value) is error
    assert getattr(caught.value, "field", None) == field


@pytest.mark.parametrize(
    ("stored", "refused"),
    [
        (_record("a", source="other", generation=0), True),  # live for another source
        (_record("a", generation=0), True),  # live for the same source: would be live twice
        (_record("a", source="other", generation=1, retired_generation=2), True),  # same key
        (_record("a", source="other", generation=0, retired_generation=1), False),  # retired
        (_record("a", generation=0, retired_generation=1), False),
        (_record("b", source="other", generation=0), False),  # another id
    ],
    ids=[
        "live-other-source",
        "live-same-source",
        "same-generation",
        "retired-other-source",
        "retired-same-source",
        "other-id",
    ],
)
def test_stored_versions_that_would_share_an_id_are_refused(stored: Record, refused: bool) -> None:
    """A live version of the id, or one at the record's generation, is ValidationError(field="id"). If this fails, check check_stored_ids."""
    mine = [_record("a", generation=1)]
    if not refused:
        check_stored_ids(mine, [stored])
        return
    with pytest.raises(ValidationError) as caught:
        check_stored_ids(mine, [stored])
    assert caught.value.field == "id"


def test_the_memory_store_refuses_an_id_live_for_its_own_source() -> None:
    """Writing a live id again without retiring it first is refused, as on PostgreSQL. If this fails, check that the in-memory records.add calls check_stored_ids."""
    store = InMemoryStore()
    with store.unit_of_work(SCOPE) as uow:
        generation = uow.generations.stage()
        uow.records.add([_record("a", generation=generation)], _vectors(1))
        uow.generations.publish(generation)
        uow.commit()
    with store.unit_of_work(SCOPE) as uow:
        generation = uow.generations.stage()
        with pytest.raises(ValidationError) as caught:
            uow.records.add([_record("a", generation=generation)], _vectors(1))
        assert caught.value.field == "id"
        uow.records.retire_source("doc", generation=generation)
        uow.records.add([_record("a", generation=generation, text="y")], _vectors(1))
        uow.generations.publish(generation)
        uow.commit()
    assert [(r.id, r.text) for r in store.get_by_source(SCOPE, "doc")] == [("a", "y")]
