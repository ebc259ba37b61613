"""Each test of ``StorageBackendEngineContract`` fails against what it guards against: a
backend that drops the embedder claim, and an engine put back the way it was before issue 41
(grants read while ``nearest`` is open, rows taken unchecked, only ``StoreError`` making a
unit rollback-only). The engine parts are patched for the length of one test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from ragport.adapters.memory.backend import MemoryBackend
from ragport.contract_tests.storage_backend_engine import StorageBackendEngineContract
from ragport.domain.errors import StoreError
from ragport.domain.model import Scope, decide_access, is_forgotten, is_visible
from ragport.engine import store, unit_of_work
from ragport.engine.reads import forgotten_ids
from ragport.ports.backend import BackendReader, GenerationState
from ragport.ports.pushdowns import Admission, LegAnswer
from ragport.ports.store import ScoredRecord

Suite = type("Suite", (StorageBackendEngineContract,), {})
FAILED = (AssertionError, pytest.fail.Exception)


def _fails(test: Callable[..., None], *args: Any) -> None:
    with pytest.raises(FAILED):
        test(Suite(), MemoryBackend(), *args)


class DropsClaim(MemoryBackend):
    """A backend that stores the three numbers and forgets the embedder claim."""

    @contextmanager
    def read(self, scope: Scope) -> Iterator[BackendReader]:
        with super().read(scope) as reader:
            state = reader.state

            def without_claim() -> GenerationState:
                s = state()
                return GenerationState(s.counter, s.pointer, s.floor)

            reader.state = without_claim  # type: ignore[method-assign]
            yield reader


def test_a_backend_that_drops_the_claim_fails_both_claim_tests() -> None:
    with pytest.raises(FAILED):
        Suite().test_backend_state_keeps_the_embedder_claim(DropsClaim())
    with pytest.raises(FAILED):
        Suite().test_the_drift_guard_reads_the_claim_not_the_rows(DropsClaim())


def _old_walk(
    reader: BackendReader, scope: Scope, vector: Any, admission: Admission, limit: int
) -> LegAnswer:
    """The walk before issue 41 (the same answer and report): grants read at the first
    candidate, while the stream is open."""
    grants: dict[str, Any] | None = None
    hits, unfiltered = [], []
    forgotten = forgotten_ids(reader)
    for scored in reader.nearest(vector):
        r = scored.record
        if not is_visible(r.generation, r.retired_generation, admission.pointer):
            continue
        if is_forgotten(r, forgotten):
            continue
        if len(unfiltered) < limit:
            unfiltered.append(r)
        caller = admission.authorization
        if caller is not None:
            grants = grants if grants is not None else dict(reader.grants())
            if not all(decide_access(s, grants.get(s), caller).allowed for s in r.access_sources):
                continue
        hits.append(ScoredRecord(r, scored.score))
        if len(hits) == limit:
            break
    screened = tuple(dict.fromkeys(r.source_id for r in unfiltered))
    return LegAnswer(tuple(hits), screened if admission.report_denied else ())


def test_the_cursor_test_fails_against_the_old_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "walk_vectors", _old_walk)
    _fails(StorageBackendEngineContract.test_no_reader_call_while_nearest_is_open)


def test_the_refusal_test_fails_without_the_row_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "checked", lambda rows, scope, **asked: iter(rows))
    _fails(StorageBackendEngineContract.test_rows_outside_the_asked_source_or_scope_are_refused)


def test_the_rollback_test_fails_when_only_store_errors_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ragport.domain.errors import ValidationError

    def old_run(self: Any, work: Callable[[Any], Any]) -> Any:
        try:
            with self._uow.guard:
                return work(self._uow.view)
        except StoreError:
            self._uow.done = self._uow.rolled_back = True
            raise

    monkeypatch.setattr(unit_of_work._Part, "_run", old_run)
    _fails(
        StorageBackendEngineContract.test_a_backend_error_in_a_write_leaves_the_unit_rollback_only,
        ValidationError("refused", field="x"),
    )
