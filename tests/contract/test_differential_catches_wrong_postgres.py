"""The differential contract fails against a PostgreSQL pushdown that disagrees with the rule,
the lexical leg included though it is compared by what it admits, not by rank (PostgreSQL's
bm25 and the engine's score differently: test_differential_postgres.py).

Each broken backend is ``PostgresBackend`` with one pushdown wrong in a way SQL could be: the
BM25 statement without the forgotten predicate, without the grant predicate, or with the
metadata filter applied after the limit (the right rows at a wide limit, too few at a small
one); the HNSW statement without the filter, in the vector leg and in the guarded read; and
the set-based writes: ``restore_above`` off by one generation (a rollback leaves the rows
retired at the generation above its target retired), compaction purging one generation too
many, a lineage rename that rewrites nothing, a tombstone merge that never upgrades
``corrected`` to ``forgotten``; the one-statement ``delete_source`` keeping the source's grant,
retiring a source a pinned derived row names (its dependents left visible), or committing the
delete and then declining it (the step path deletes again).
``check_same_answers`` of ``BackendStore(broken)`` against ``BackendStore(broken,
pushdown=False)`` on one schema, at the PostgreSQL contract's own budget, must raise; the
correct backend passes (``TestPostgresPushdownsAgainstTheGenericPath``), so the failure comes
from the defect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from unittest import mock

import attrs
import pytest

from ragport.adapters.postgres import PostgresStore, WriteSettings, statements
from ragport.adapters.postgres import predicate as sql_predicate
from ragport.adapters.postgres.backend import PostgresBackend
from ragport.contract_tests.differential import check_same_answers
from ragport.domain.model import Tombstone
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


class VectorIgnoresTheFilter(PostgresBackend):
    """The HNSW statement without the metadata filter."""

    def search_vectors(
        self, view: Any, vector: Any, *, admission: Admission, limit: int
    ) -> LegAnswer:
        admission = attrs.evolve(admission, metadata_filter=None)
        return super().search_vectors(view, vector, admission=admission, limit=limit)


class GuardedSearchIgnoresTheFilter(PostgresBackend):
    """The one-statement vector read (drift guard and hits) without the metadata filter."""

    def guarded_search(self, view: Any, vector: Any, **kwargs: Any) -> Any:
        return super().guarded_search(view, vector, **{**kwargs, "metadata_filter": None})


class RestoresOneGenerationShort(PostgresBackend):
    """``restore_above`` restores the rows retired above ``generation + 1``: a rollback by
    one generation restores nothing."""

    def restore_above(self, view: Any, generation: int) -> int:
        return super().restore_above(view, generation + 1)


class CompactsOneGenerationTooFar(PostgresBackend):
    """``delete_where(retired_through=g)`` purges the rows retired at ``g + 1`` too."""

    def delete_where(
        self,
        view: Any,
        *,
        source_id: str | None = None,
        above: int | None = None,
        retired_through: int | None = None,
    ) -> int:
        if retired_through is not None:
            retired_through += 1
        return super().delete_where(
            view, source_id=source_id, above=above, retired_through=retired_through
        )


class RenamesNoLineage(PostgresBackend):
    """``rename_lineage`` rewrites nothing: derived rows keep naming the old source id."""

    def rename_lineage(self, view: Any, from_id: str, to_id: str) -> int:
        return 0


class NeverUpgradesATombstone(PostgresBackend):
    """``merge_tombstones`` as ``ON CONFLICT DO NOTHING``: a ``corrected`` tombstone stays
    when the id is forgotten again."""

    def merge_tombstones(self, view: Any, tombstones: Sequence[Tombstone]) -> int:
        ids = [t.id for t in tombstones]
        kept = {t.id for t in self.tombstones_among(view, ids)}
        return super().merge_tombstones(view, [t for t in tombstones if t.id not in kept])


_DELETE = statements.delete_source.__wrapped__


def _delete_statement_with(old: str, new: str) -> Any:
    def build(s: str) -> str:
        sql = _DELETE(s)
        assert old in sql, "the broken test no longer matches statements.delete_source"
        return sql.replace(old, new)

    return build


class DeleteKeepsTheGrant(PostgresBackend):
    """``delete_source``'s statement with its grant revoke matching no row."""

    def delete_source(self, scope: Any, source_id: str) -> tuple[int, int] | None:
        broken = _delete_statement_with("IS NOT NULL), pb", "IS NOT NULL AND false), pb")
        with mock.patch.object(statements, "delete_source", broken):
            return super().delete_source(scope, source_id)


class DeleteIgnoresDerivedRows(PostgresBackend):
    """``delete_source``'s statement retiring the source though a derived row names it (the
    engine's steps would retire the pinned dependents too)."""

    def delete_source(self, scope: Any, source_id: str) -> tuple[int, int] | None:
        broken = _delete_statement_with("CASE WHEN EXISTS", "CASE WHEN false AND EXISTS")
        with mock.patch.object(statements, "delete_source", broken):
            return super().delete_source(scope, source_id)


class DeleteCommitsThenDeclines(PostgresBackend):
    """``delete_source`` commits the delete, then answers ``None`` (nothing done)."""

    def delete_source(self, scope: Any, source_id: str) -> tuple[int, int] | None:
        super().delete_source(scope, source_id)
        return None


@pytest.mark.parametrize(
    "broken",
    [
        LexicalIgnoresTombstones,
        LexicalIgnoresGrants,
        LexicalFiltersAfterTheLimit,
        VectorIgnoresTheFilter,
        GuardedSearchIgnoresTheFilter,
        RestoresOneGenerationShort,
        CompactsOneGenerationTooFar,
        RenamesNoLineage,
        NeverUpgradesATombstone,
        DeleteKeepsTheGrant,
        DeleteIgnoresDerivedRows,
        DeleteCommitsThenDeclines,
    ],
    ids=[
        "lexical-tombstones",
        "lexical-grants",
        "lexical-filter-after-limit",
        "vector-filter",
        "guarded-search-filter",
        "restore-above",
        "compact",
        "rename-lineage",
        "tombstone-strength",
        "delete-keeps-grant",
        "delete-ignores-derived",
        "delete-commits-then-declines",
    ],
)
def test_a_wrong_pushdown_fails_the_differential(
    broken: type[PostgresBackend], pg_engine: Any, pg_schema: str
) -> None:
    """``BackendStore(broken)`` answers otherwise than its own generic path somewhere in the
    derandomized sequences (other rows admitted, fewer at a limit, another rollback), and
    the differential says so."""
    store = PostgresStore(
        pg_engine, schema=pg_schema, create=True, writes=WriteSettings(maintenance_delay=None)
    )
    backend = broken.of(store)
    subject, reference = BackendStore(backend), BackendStore(backend, pushdown=False)
    with pytest.raises(AssertionError, match=r"answered differently|state differs"):
        check_same_answers(
            subject, reference, examples=12, steps=10, shrink=False, lexical_sets=("bm25",)
        )
