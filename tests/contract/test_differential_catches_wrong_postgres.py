"""The differential contract fails against a PostgreSQL lexical pushdown that disagrees with
the rule, though it compares that leg by what it admits, not by rank (PostgreSQL's bm25 and
the engine's score differently: test_differential_postgres.py).

Each broken backend is ``PostgresBackend`` with its ``search_lexical`` wrong in a way SQL
could be: the forgotten predicate left out of the WHERE, the grant predicate left out, and
the metadata filter applied after the limit (the right rows at a wide limit, too few at a
small one). ``check_same_answers`` of ``BackendStore(broken)`` against ``BackendStore(broken,
pushdown=False)`` on one schema must raise; the correct backend passes
(``TestPostgresPushdownsAgainstTheGenericPath``), so the failure comes from the defect.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import attrs
import pytest

from ragport.adapters.postgres import PostgresStore, WriteSettings
from ragport.adapters.postgres import predicate as sql_predicate
from ragport.adapters.postgres.backend import PostgresBackend
from ragport.contract_tests.differential import check_same_answers
from ragport.engine import BackendStore
from ragport.ports.pushdowns import Admission, LegAnswer


class LexicalIgnoresTombstones(PostgresBackend):
    """The BM25 statement's WHERE without the forgotten predicate (``not_forgotten``)."""

    def search_lexical(
        self, view: Any, text: str, *, mode: str, admission: Admission, limit: int
    ) -> LegAnswer:
        with mock.patch.object(sql_predicate, "not_forgotten", lambda s: "TRUE"):
            return super().search_lexical(view, text, mode=mode, admission=admission, limit=limit)


class LexicalIgnoresGrants(PostgresBackend):
    """The BM25 statement without the caller's grant predicate."""

    def search_lexical(
        self, view: Any, text: str, *, mode: str, admission: Admission, limit: int
    ) -> LegAnswer:
        admission = attrs.evolve(admission, authorization=None)
        return super().search_lexical(view, text, mode=mode, admission=admission, limit=limit)


class LexicalFiltersAfterTheLimit(PostgresBackend):
    """The metadata filter applied to the statement's top ``limit`` rows, not in its WHERE:
    only the admitted rows, but fewer than ``limit`` of them when unfiltered rows ranked
    first."""

    def search_lexical(
        self, view: Any, text: str, *, mode: str, admission: Admission, limit: int
    ) -> LegAnswer:
        flt = admission.metadata_filter
        admission = attrs.evolve(admission, metadata_filter=None)
        answer = super().search_lexical(view, text, mode=mode, admission=admission, limit=limit)
        if flt is None:
            return answer
        return LegAnswer(tuple(h for h in answer.hits if flt.matches(h.record.metadata)))


@pytest.mark.parametrize(
    "broken",
    [LexicalIgnoresTombstones, LexicalIgnoresGrants, LexicalFiltersAfterTheLimit],
    ids=["tombstones", "grants", "filter-after-limit"],
)
def test_a_wrong_lexical_pushdown_fails_the_differential(
    broken: type[PostgresBackend], pg_engine: Any, pg_schema: str
) -> None:
    """``BackendStore(broken)`` admits other rows than its own generic path somewhere in the
    derandomized sequences (or returns fewer at a limit), and the differential says so."""
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True, writes=WriteSettings(maintenance_delay=None)
    )
    backend = broken.of(store)
    subject, reference = BackendStore(backend), BackendStore(backend, pushdown=False)
    with pytest.raises(AssertionError, match=r"answered differently|state differs"):
        check_same_answers(
            subject, reference, examples=12, steps=10, shrink=False, lexical_sets=("bm25",)
        )
