"""Pushdowns: sub-questions a storage backend may answer natively, each optional.

``ragport.engine.BackendStore`` answers every ``ChunkStore`` method over the 15 members of
``ragport.ports.backend`` (the *generic path*). A backend that can answer a sub-question
faster (an index, one SQL statement, a vectorised mask) defines the method of that pushdown on
its **class**; the engine finds it once, at ``BackendStore(backend)``, the way
``ragport.ports.supports`` checks a store (``callable(getattr(type(backend), name, None))``),
and calls it instead of the generic path. ``BackendStore(backend, pushdown=False)`` ignores
every pushdown: the differential contract compares the two paths on random operations, so a
pushdown must give *exactly* the generic path's answer (scores within 1e-5).

Every pushdown method takes, as its first argument after ``self``, the ``view``: the reader
(from the backend's own ``read(scope)``) or the writer (from ``write(scope)``) the engine is
working in. The view is the backend's own object, so the pushdown may use whatever it holds
(its connection, its snapshot); it must read and write only through it, inside that block,
and only the view's scope. The engine has validated every argument before the call. What a
pushdown raises is translated like any backend error (``StoreError`` without a chain); raised
inside a write, it leaves the unit of work rollback-only.

Reads (view = a reader, or the writer inside a unit of work):

- ``search_vectors`` / ``search_lexical`` (+ the class attribute ``lexical_modes``): one leg
  of a query, the whole ``Admission`` predicate applied before ``limit``, as a ``LegAnswer``;
- ``guarded_search``: the drift guard and the vector leg at the view's own pointer, as one
  read (a backend whose SQL reads the pointer, the guard and the hits in one statement needs
  no transaction around it: ``retrieval_read``);
- ``embedders``, ``source_id_page``, ``history``, ``forgotten_among``, ``tombstones_among``,
  ``dependents``: indexed look-ups.

How a read runs: ``retrieval_read(scope)`` (no view) opens the block the engine reads
retrieval's answers in (the legs, the drift guard, the embedder and forgotten-id lists): a
replica's, or one whose single statement needs no transaction; without it, ``read(scope)``.

Set-based writes (view = the writer): ``retire``, ``delete_where``, ``restore_above``,
``move``, ``rename_lineage``, ``merge_tombstones``, ``revoke_grants``; and ``prepare`` (before
a write, no view). ``delete_source`` (no view) is a whole write of its own: one source's
deletion, in a transaction it opens and commits, or nothing (the engine then takes the
step-by-step path).

The rules themselves stay in the engine: a pushdown applies a predicate the engine describes
(``Admission``) or performs a write whose rule the engine already decided (the rekey collision
check, the tombstone strength); the denial report is built by the engine from ``screened``.
The store's capabilities follow from what the backend defines: ``lexical_modes`` (the
backend's modes, plus the engine's generic ``"bm25"``), ``forgotten_lookup`` (with
``forgotten_among`` or ``tombstones_among``), ``preparation`` (with ``prepare``) and
``borrowed_query`` (with ``search_vectors`` or ``guarded_search``); a backend never declares
capabilities by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import attrs

from ragport.domain.filters import Filter
from ragport.domain.model import Authorization, Record, Scope, Tombstone
from ragport.ports.embedder import Vector
from ragport.ports.history import GenerationChange
from ragport.ports.store import EmbedderKey, ScoredRecord

__all__ = [
    "PUSHDOWNS",
    "Admission",
    "AnswersHistory",
    "DeletesSource",
    "DeletesWhere",
    "FindsDependents",
    "GuardedAnswer",
    "LegAnswer",
    "ListsEmbedders",
    "LooksUpForgotten",
    "LooksUpTombstones",
    "MergesTombstones",
    "MovesRows",
    "PagesSourceIds",
    "Prepares",
    "ReadsForRetrieval",
    "RenamesLineage",
    "RestoresAbove",
    "RetiresRows",
    "RevokesGrants",
    "SearchesGuarded",
    "SearchesLexically",
    "SearchesVectors",
]


@attrs.frozen
class Admission:
    """What one read withholds, as one value: a row is *admitted* when all of these hold.

    - visibility: ``generation <= pointer`` and (``retired_generation is None`` or
      ``retired_generation > pointer``) (``ragport.domain.model.is_visible``);
    - the forgotten predicate, always: no ``forgotten`` tombstone of the view's scope names
      the row's id, its source id, an id of its ``lineage`` or of its ``roots``
      (``ragport.domain.model.is_forgotten``; ``corrected`` tombstones withhold nothing);
    - ``metadata_filter`` (when not ``None``): ``metadata_filter.matches(record.metadata)``;
    - the grant rule (when ``authorization`` is not ``None``): every source id of
      ``record.access_sources`` (the source for a chunk, the roots for a derived record; an
      empty tuple is denied) is allowed by ``ragport.domain.model.decide_access`` on the
      view's stored grant of that source (``None`` when there is none).

    ``report_denied`` (only meaningful with an ``authorization``): the answer also carries
    ``LegAnswer.screened``; see there.
    """

    pointer: int
    authorization: Authorization | None = None
    metadata_filter: Filter | None = None
    report_denied: bool = False


@attrs.frozen
class LegAnswer:
    """One leg's answer.

    ``hits``: the admitted rows, best first (descending score, ties by ascending record id),
    at most ``limit`` of them, each a ``ScoredRecord`` whose record is the stored row with
    every field as written (the engine copies what it hands out).

    ``screened``: empty unless ``admission.report_denied`` and ``admission.authorization``
    are both set. Then: rank the rows that pass everything *but* the grant rule, in the same
    order, take the top ``limit``, and list the source ids of their ``access_sources`` (a row
    whose ``access_sources`` is empty lists its ``source_id``), each once, first seen first.
    The engine decides each with ``decide_access`` over ``view.grants(screened)`` and reports
    the denied ones (the denial rule stays in the engine).
    """

    hits: tuple[ScoredRecord, ...]
    screened: tuple[str, ...] = ()


@attrs.frozen
class GuardedAnswer:
    """``guarded_search``'s answer: the drift guard's ``foreign_embedders`` and the vector
    leg's ``answer`` (a ``LegAnswer``), both at the view's pointer."""

    foreign_embedders: frozenset[EmbedderKey]
    answer: LegAnswer


# -- reads -------------------------------------------------------------------------------------


@runtime_checkable
class SearchesVectors(Protocol):
    """The vector leg with the admission predicate pushed down."""

    def search_vectors(
        self, view: Any, vector: Vector, *, admission: Admission, limit: int
    ) -> LegAnswer:
        """The top ``limit`` (``limit >= 1``) admitted rows whose ``dimensions`` equal
        ``len(vector)``, scored by the cosine similarity of the stored vector and ``vector``
        (within 1e-5; a zero vector scores 0), best first, ties by ascending id."""
        ...


@runtime_checkable
class SearchesGuarded(Protocol):
    """The drift guard and the vector leg as one read, at the view's own pointer."""

    def guarded_search(
        self,
        view: Any,
        vector: Vector,
        *,
        embedder: EmbedderKey | None,
        authorization: Authorization | None,
        metadata_filter: Filter | None,
        report_denied: bool,
        limit: int,
    ) -> GuardedAnswer:
        """With ``pointer = view.state().pointer``, read in the same snapshot as the rest:
        ``foreign_embedders``, the distinct ``(embedder_id, dimensions)`` other than
        ``embedder`` of the rows visible at ``pointer`` (forgotten ones included; empty when
        ``embedder`` is ``None``); ``answer``, what ``search_vectors`` answers with
        ``Admission(pointer, authorization, metadata_filter, report_denied)`` and ``limit``
        (``limit >= 1``). The engine may read more through the view afterwards (the grants of
        ``answer.screened``), in the same snapshot."""
        ...


@runtime_checkable
class SearchesLexically(Protocol):
    """A lexical leg with the admission predicate pushed down.

    ``lexical_modes`` (a class attribute: a tuple of names ``check_lexical_mode`` accepts)
    names the modes it answers; the engine offers them, plus its own generic ``"bm25"`` when
    the tuple lacks it. A backend that answers ``"bm25"`` promises what
    ``ragport.ports.store.SupportsLexicalSearch`` says of it (``tokenize_lexical``'s tokens).
    """

    lexical_modes: tuple[str, ...]

    def search_lexical(
        self, view: Any, text: str, *, mode: str, admission: Admission, limit: int
    ) -> LegAnswer:
        """The top ``limit`` (``limit >= 1``) admitted rows that contain at least one term of
        ``text``, by the mode's score (finite, best first, ties by ascending id), with the
        statistics of the mode computed over the scope's *searchable* rows only (visible at
        ``admission.pointer`` and not forgotten; the filter and grants do not change them).
        For ``"bm25"``: Okapi BM25 (k1 1.5, b 0.75, epsilon 0.25) equal to
        ``rank_bm25.BM25Okapi`` over those rows' ``tokenize_lexical`` tokens. ``mode`` is one
        of ``lexical_modes``; ``text`` has at least one non-blank character."""
        ...


@runtime_checkable
class ListsEmbedders(Protocol):
    """The embedder look-up."""

    def embedders(self, view: Any) -> frozenset[EmbedderKey]:
        """The distinct ``(embedder_id, dimensions)`` of the rows visible at the view's
        pointer (``view.state().pointer``), forgotten ones included."""
        ...


@runtime_checkable
class PagesSourceIds(Protocol):
    """A page of source ids."""

    def source_id_page(self, view: Any, *, after: str | None, limit: int) -> Sequence[str]:
        """The distinct source ids with a ``chunk`` row visible at the view's pointer,
        forgotten ones included, in code-point order, greater than ``after`` when it is not
        ``None``, at most ``limit`` (``limit >= 1``) of them."""
        ...


@runtime_checkable
class AnswersHistory(Protocol):
    """Generation history from an index."""

    def history(self, view: Any, *, limit: int, max_ids: int) -> Sequence[GenerationChange]:
        """What ``ragport.engine.history.history_of`` returns over every row of the scope
        with the view's pointer and floor and its ``forgotten`` ids (arguments checked)."""
        ...


@runtime_checkable
class LooksUpForgotten(Protocol):
    """Forgotten ids by look-up, at a cost that follows ``len(ids)``."""

    def forgotten_among(self, view: Any, ids: Sequence[str]) -> frozenset[str]:
        """The ``ids`` (distinct, non-empty) that a ``forgotten`` tombstone of the scope
        names."""
        ...


@runtime_checkable
class LooksUpTombstones(Protocol):
    """Tombstones by id (what every write reads first, to refuse a forgotten id)."""

    def tombstones_among(self, view: Any, ids: Sequence[str]) -> Sequence[Tombstone]:
        """The stored tombstones (either reason) of the ``ids`` (distinct, non-empty), in any
        order, at most one per id."""
        ...


@runtime_checkable
class FindsDependents(Protocol):
    """Derived rows by lineage (what deletion propagation and re-pointing read)."""

    def dependents(self, view: Any, ids: Sequence[str]) -> Sequence[Record]:
        """Every ``derived`` row of the scope, of every generation (retired ones included),
        whose ``lineage`` names one of ``ids`` (distinct, non-empty), in any order."""
        ...


@runtime_checkable
class ReadsForRetrieval(Protocol):
    """The read block of retrieval's reads (no view: it makes one)."""

    def retrieval_read(self, scope: Scope) -> AbstractContextManager[Any]:
        """What ``read(scope)`` promises (one committed state from start to end, never a
        wait for a write), except that the state may be older than the one ``read`` would
        see (a streaming replica's). The engine opens it for the vector, lexical and hybrid
        queries, the drift guard and the embedder and forgotten-id lists; the reads a writer
        decides on (``get_by_source``, ``current_generation``, grants, ``forgotten_among``)
        use ``read``. Forgetting may not lag: a leg pushdown that read rows in an older
        state withholds those a ``forgotten`` tombstone committed before the call names
        (their id, source, lineage or roots), as ``guarded_query`` promises; PostgreSQL's
        legs on the replica look them up on the primary."""
        ...


# -- writes (view = the writer) -----------------------------------------------------------------


@runtime_checkable
class RetiresRows(Protocol):
    """Retire a source's rows, or some ids' rows, at a generation, in one statement."""

    def retire(
        self,
        view: Any,
        *,
        source_id: str | None = None,
        ids: Sequence[str] | None = None,
        generation: int,
    ) -> int:
        """Exactly one of ``source_id`` / ``ids`` (distinct, non-empty) is given; it selects
        the rows of that source, or the rows whose id is in ``ids``. Of those: rows written
        at ``generation`` are deleted; rows with ``retired_generation is None`` written below
        ``generation`` take ``retired_generation = generation``; others stay. Returns how
        many of the retired rows were written at or below the view's pointer."""
        ...


@runtime_checkable
class DeletesWhere(Protocol):
    """Delete rows by one condition."""

    def delete_where(
        self,
        view: Any,
        *,
        source_id: str | None = None,
        above: int | None = None,
        retired_through: int | None = None,
    ) -> int:
        """Exactly one condition is given: every row of ``source_id``; every row written
        above generation ``above``; every row with ``retired_generation`` not ``None`` and
        ``<= retired_through``. Deletes those rows (with their vectors); returns how many."""
        ...


@runtime_checkable
class RestoresAbove(Protocol):
    """Un-retire what a rollback brings back."""

    def restore_above(self, view: Any, generation: int) -> int:
        """Every row with ``retired_generation > generation`` takes
        ``retired_generation = None``; returns how many."""
        ...


@runtime_checkable
class MovesRows(Protocol):
    """Rekey rows (a re-point), the collision rule already checked by the engine."""

    def move(self, view: Any, moves: Mapping[str, str], *, to_source_id: str) -> int:
        """Every row with ``retired_generation is None`` whose id is a key of ``moves`` takes
        id ``moves[id]`` and source id ``to_source_id`` (keeping its vector and every other
        field), all at once (a chain ``a -> b``, ``b -> c`` never meets itself); returns how
        many rows moved."""
        ...


@runtime_checkable
class RenamesLineage(Protocol):
    """Rewrite one id in every derived row's lineage and roots."""

    def rename_lineage(self, view: Any, from_id: str, to_id: str) -> int:
        """Every ``derived`` row (of every generation) whose ``lineage`` or ``roots`` holds
        ``from_id``: in both tuples ``from_id`` becomes ``to_id`` and repeats are then
        dropped, first occurrence kept. Returns the number of ``from_id`` occurrences in the
        ``lineage`` tuples before the change."""
        ...


@runtime_checkable
class MergesTombstones(Protocol):
    """Write tombstones, the strongest reason winning."""

    def merge_tombstones(self, view: Any, tombstones: Sequence[Tombstone]) -> int:
        """``tombstones`` holds at most one per id. Each is stored unless the id already has
        a ``forgotten`` one (``forgotten`` is never downgraded to ``corrected``:
        ``ragport.domain.model.strongest_tombstone``). Returns how many ids had no tombstone
        before."""
        ...


@runtime_checkable
class RevokesGrants(Protocol):
    """Revoke sources' grants (what a source's deletion does), read and write in one step."""

    def revoke_grants(self, view: Any, source_ids: Sequence[str]) -> int:
        """For each of ``source_ids`` (distinct, non-empty) whose stored grant names a
        principal or a group, store ``Grant(source_id)`` (none of either, ``access_version``
        1) in its place; a source with no grant, or an empty one, keeps what it has (the
        port has no delete: an empty grant is no grant). Returns how many grants changed."""
        ...


@runtime_checkable
class Prepares(Protocol):
    """Per-dimension set-up before a write (``ragport.ports.store.SupportsPreparation``)."""

    def prepare(self, scope: Scope, *, dimensions: int) -> None:
        """Create what writing vectors of ``dimensions`` to ``scope`` needs; idempotent,
        cheap when nothing is missing, outside any ``read``/``write`` block."""
        ...


@runtime_checkable
class DeletesSource(Protocol):
    """One source's whole deletion (``ragport.application.delete_source`` without a shared
    generation) as one write of the backend's own: one transaction, which a backend over a
    server can send with its ``BEGIN`` and ``COMMIT`` in one round trip."""

    def delete_source(self, scope: Scope, source_id: str) -> tuple[int, int] | None:
        """Outside any ``read``/``write`` block, in one write of ``scope`` as ``write``
        serializes them: with the scope's state ``s`` as read under its lock, take
        ``g = staged(s).counter`` (``ragport.engine.generations``: the counter when above
        the pointer, else the counter plus one); ``retire`` the rows of ``source_id`` at
        ``g``; ``revoke_grants([source_id])``; publish ``g`` (counter and pointer both
        ``g``, the floor and the embedder claim unchanged); commit. Returns ``(g, n)``,
        ``n`` what ``retire`` returns (counted at ``s.pointer``).

        Returns ``None`` having committed nothing when a ``derived`` row of any
        generation holds ``source_id`` in its ``lineage`` (the engine must decide which of
        them retire with it: ``retire_pinned_dependents``), or when it cannot write this way
        here (e.g. inside a host's transaction, which it may not commit); the engine then
        runs the same deletion step by step in a unit of work. The engine has validated
        ``source_id``; the deletion is all or nothing, as a unit of work's."""
        ...


PUSHDOWNS: Mapping[str, type] = {
    "search_vectors": SearchesVectors,
    "search_lexical": SearchesLexically,
    "guarded_search": SearchesGuarded,
    "retrieval_read": ReadsForRetrieval,
    "embedders": ListsEmbedders,
    "source_id_page": PagesSourceIds,
    "history": AnswersHistory,
    "forgotten_among": LooksUpForgotten,
    "tombstones_among": LooksUpTombstones,
    "dependents": FindsDependents,
    "retire": RetiresRows,
    "delete_where": DeletesWhere,
    "restore_above": RestoresAbove,
    "move": MovesRows,
    "rename_lineage": RenamesLineage,
    "merge_tombstones": MergesTombstones,
    "revoke_grants": RevokesGrants,
    "delete_source": DeletesSource,
    "prepare": Prepares,
}
"""Every pushdown: the method a backend's class defines, and the Protocol describing it."""
