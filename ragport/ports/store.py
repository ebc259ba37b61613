"""The ChunkStore port, its optional read protocols, and the pure checks of its writes.

A store keeps records (chunks and derived artifacts with their vectors) per exact scope, with
per-scope generations, grants and tombstones. Everything a caller may not see is filtered by
the store's own predicate *before* top-k. ``ChunkStoreContract`` checks every promise below.

Generations
    Each scope has a *counter* (the last generation handed out) and a *pointer* (the current
    generation). A record is visible at pointer ``p`` when ``generation <= p`` and
    (``retired_generation is None or retired_generation > p``). Writes happen at a *staged*
    generation above the pointer and become visible together when the pointer moves to it.

The unit of work and its repositories (``UnitOfWork``, ``RecordRepository``,
``GenerationRepository``, ``GrantRepository``, ``TombstoneRepository``) are in
``ragport.ports.unit_of_work`` and re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

from ragport.domain.errors import ScopeError, ValidationError
from ragport.domain.filters import Filter
from ragport.domain.model import (
    AccessDecision,
    Authorization,
    Capabilities,
    Grant,
    Record,
    Scope,
)
from ragport.ports.capabilities import OptionalCapability, declared, missing_methods, supports
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.unit_of_work import (
    GenerationRepository,
    GrantRepository,
    RecordRepository,
    TombstoneRepository,
    UnitOfWork,
)

__all__ = [
    "ChunkStore",
    "EmbedderKey",
    "GenerationRepository",
    "GrantRepository",
    "GuardedQuery",
    "HybridAnswer",
    "OptionalCapability",
    "RecordRepository",
    "ScoredRecord",
    "StoredVersion",
    "SupportsForgottenLookup",
    "SupportsGuardedQuery",
    "SupportsLexicalSearch",
    "SupportsPreparation",
    "TombstoneRepository",
    "UnitOfWork",
    "check_records_for_add",
    "check_rekey_moves",
    "check_stored_ids",
    "declared",
    "missing_methods",
    "rekey_collides",
    "supports",
]

EmbedderKey = tuple[str | None, int | None]
"""``(embedder_id, dimensions)`` of stored records; ``None`` for legacy rows without one."""


@attrs.frozen
class ScoredRecord:
    """A record found by a query leg, with its leg score (higher is better)."""

    record: Record
    score: float


@attrs.frozen
class GuardedQuery:
    """A vector leg answered together with its drift guard (``SupportsGuardedQuery``)."""

    foreign_embedders: frozenset[EmbedderKey]
    records: Sequence[ScoredRecord]


@attrs.frozen
class HybridAnswer:
    """Both legs of a hybrid query and the drift guard, read from one snapshot."""

    foreign_embedders: frozenset[EmbedderKey]
    vector: Sequence[ScoredRecord]
    lexical: Sequence[ScoredRecord]


class StoredVersion(Protocol):
    """What ``check_stored_ids`` reads of one stored row (a ``Record`` is one)."""

    @property
    def id(self) -> str:
        """The record id."""
        ...

    @property
    def source_id(self) -> str:
        """The source the row belongs to."""
        ...

    @property
    def generation(self) -> int:
        """The generation the row was written at."""
        ...

    @property
    def retired_generation(self) -> int | None:
        """The generation that retired it, ``None`` while live."""
        ...


def check_records_for_add(
    scope: Scope, records: Sequence[Record], vectors: VectorMatrix
) -> VectorMatrix:
    """The checks of ``RecordRepository.add`` that need no stored state; what to store.

    ``vectors`` must be a matrix with one row per record, every value finite
    (``ValidationError(field="vectors")``); then, record by record: its scope is ``scope``
    (``ScopeError(field="scope")``), its ``dimensions`` the matrix's width
    (``ValidationError(field="dimensions")``), its id not seen before in ``records``
    (``ValidationError(field="id")``). Returns a C-contiguous float32 copy of ``vectors``: the
    store keeps that, never the caller's array.
    """
    matrix = np.asarray(vectors)
    if matrix.ndim != 2 or matrix.shape[0] != len(records):
        raise ValidationError("vectors must have one row per record", field="vectors")
    if not np.all(np.isfinite(matrix)):
        raise ValidationError("vectors must be finite", field="vectors")
    seen: set[str] = set()
    for record in records:
        if record.scope != scope:
            raise ScopeError("record scope differs from the unit of work's scope", field="scope")
        if record.dimensions != matrix.shape[1]:
            raise ValidationError("record dimensions differ from its vector", field="dimensions")
        if record.id in seen:
            raise ValidationError("duplicate record id in one write", field="id")
        seen.add(record.id)
    return np.array(matrix, dtype=np.float32, order="C", copy=True)


def check_stored_ids(records: Sequence[Record], stored: Iterable[StoredVersion]) -> None:
    """The check of ``RecordRepository.add`` against what the scope already holds.

    ``stored``: the scope's stored versions of the records' ids (every one that is live, or
    written at a generation of ``records``; more do no harm). A live version, or one at the
    record's own generation, is a ``ValidationError(field="id")``: for another source the id
    would be shared by two sources, for the same source it would be live twice.
    """
    by_id = {record.id: record for record in records}
    for row in stored:
        mine = by_id.get(row.id)
        if mine is None:
            continue
        if row.retired_generation is not None and row.generation != mine.generation:
            continue
        if row.source_id != mine.source_id:
            raise ValidationError("record id is live for another source in this scope", field="id")
        raise ValidationError("record id is already live in this scope", field="id")


def check_rekey_moves(moves: Mapping[str, str]) -> None:
    """The check of ``RecordRepository.rekey`` that needs no stored state: two ids moved onto
    one id is ``ValidationError(field="to_id")`` (whether or not both are stored), so one
    re-point can never leave two rows with one id at one generation."""
    if len(set(moves.values())) < len(moves):
        raise ValidationError("two record ids would move onto one id", field="to_id")


def rekey_collides(moved_generation: int, existing: Record, floor: int) -> bool:
    """Whether a row moved onto ``existing``'s id could be visible at one pointer with it.

    The moved row (written at ``moved_generation``, live) is visible at every reachable pointer
    from ``max(moved_generation, floor)`` on; ``existing`` until its ``retired_generation``
    (forever when live or staged). Rollback cannot go below ``floor``. The same generation is a
    collision too: a store keys rows on (id, generation) and never overwrites history.
    """
    if existing.generation == moved_generation or existing.retired_generation is None:
        return True
    return existing.retired_generation > max(moved_generation, floor)


@runtime_checkable
class ChunkStore(Protocol):
    """Stores records per exact scope and answers scoped, filtered, top-k queries.

    Promises (checked by ``ChunkStoreContract``):

    - Exact scope: nothing matches by prefix; the same ids in two scopes never meet.
    - ``capabilities`` tells the truth: ``transactions`` means ``unit_of_work`` is atomic and
      isolated: a read (``get_by_source``, ``query``, ``current_generation``,
      ``list_invalidated_ids``, ...) never waits for an open unit of work of the same scope and
      sees the last committed state; ``generations`` means the visibility rule above;
      ``authorization == "acl"`` means ``query`` applies grants before top-k and
      ``check_source_access`` works.
    - Queries see one consistent generation of a scope, never a mix.
    - ``query`` applies, inside its own predicate and before ``limit``: exact scope,
      visibility at the current pointer, ``forgotten`` tombstones (on record id, source id,
      every lineage edge and every root: ``ragport.domain.model.is_forgotten``, so a derived
      record resting on a forgotten source at any depth is withheld), the grant rule when
      ``authorization`` is given (for derived records: every root source must be allowed),
      and ``metadata_filter`` (the filter language of ``ragport.domain.filters``: a mapping,
      parsed with ``parse_filter``, or a parsed ``Filter``; it is never authorization).
      Results are ordered by descending score, ties by id, at most ``limit`` of them (none
      for ``limit <= 0``).
    - Grants are read live by every read that applies them (``query``, ``lexical_query``,
      ``hybrid_query``, ``guarded_query``, ``borrowed_query``, ``check_source_access``,
      ``get_source_access``): a grant ``set_source_access`` changed applies to the very next
      read, never a cached one.
    - Every read that returns records (``query``, ``get_by_source``, ``lexical_query``,
      ``hybrid_query``, ``guarded_query``; the repositories' ``list_by_source``,
      ``list_live``, ``find_dependents``) hands out copies the caller owns: writing to their
      metadata, nested lists included, changes no later read (only ``borrowed_query`` lends
      the store's own). Every field comes back as written: id, source id, kind, text,
      metadata (nested, JSON types kept), embedder id, dimensions, scope, generation,
      content hash, chunk index, offsets, lineage (in order) and roots.
    - Reads refuse NUL and lone surrogates (``validate_text``) as ``ValidationError``:
      ``get_by_source`` ``field="source_id"``, ``check_source_access`` ``"source_ids"``,
      ``lexical_query`` ``"query"``, ``forgotten_among`` ``"ids"``.
    - A driver failure is a ``StoreError`` raised through ``raise_unchained`` (no
      ``__cause__`` and no ``__context__``: a driver's message may quote parameters, hence
      document text), from every read, every write, ``unit_of_work`` and ``commit`` alike;
      no other exception escapes, and a failed read never answers as if the scope were empty
      (``ChunkStoreFailureContract``, given a ``break_store`` fixture).
    - Signatures: every method (of ``ChunkStore`` and of each optional protocol declared)
      takes the port's positional parameters, each keyword-only one by name, with a default
      wherever the port has one; an adapter's extra parameters must have defaults
      (``ragport.contract_tests.assert_conforms`` checks it).
    """

    @property
    def capabilities(self) -> Capabilities:
        """What the store promises (and, for optional methods, implements); never changes."""
        ...

    @property
    def provider(self) -> str:
        """A short stable name for provenance, e.g. ``"memory"`` or ``"postgres"``."""
        ...

    def unit_of_work(self, scope: Scope) -> AbstractContextManager[UnitOfWork]:
        """One transaction over exactly ``scope`` (see ``UnitOfWork``)."""
        ...

    def current_generation(self, scope: Scope) -> int:
        """The scope's committed pointer (0 for a scope never written); never waits for an
        open unit of work."""
        ...

    def query(
        self,
        scope: Scope,
        vector: Vector,
        *,
        limit: int,
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None = None,
    ) -> Sequence[ScoredRecord]:
        """Top ``limit`` visible records by cosine similarity to ``vector``.

        Each score is the cosine similarity of the stored vector and ``vector`` (within 1e-5;
        neither need be unit length), not only an order: a record's own vector, scaled,
        scores 1. The predicate of the class docstring (forgotten ids, sources, lineage and
        roots; live grants; the filter) applies before ``limit``; the records are the caller's
        copies, every field as written; the read sees the last committed state without waiting
        for an open unit of work. An empty sequence for ``limit <= 0`` or no match.
        Records whose dimensions differ from ``len(vector)`` are never scored against it;
        callers check ``list_embedders`` first. With an ``authorization`` and ``on_denied``,
        the store also reports, once, the sources its grant predicate withheld from the top
        ``limit`` (ids and reasons only, never text), at the cost of at most one extra read;
        without ``on_denied`` it does no extra work.
        """
        ...

    def get_by_source(self, scope: Scope, source_id: str) -> Sequence[Record]:
        """Records of ``source_id`` visible at the current pointer, ordered by id (empty for an
        unknown source): the caller's copies, every field as written, read from the last
        committed state without waiting for an open unit of work."""
        ...

    def foreign_embedders(
        self, scope: Scope, embedder_id: str, dimensions: int
    ) -> frozenset[EmbedderKey]:
        """The ``(embedder_id, dimensions)`` of visible records that differ from the given
        pair (legacy rows without an embedder included); empty when the scope is consistent.

        Retrieval calls it for every scope before searching, so it must stay cheap on a large,
        consistent scope (PostgreSQL answers it from an index).
        """
        ...

    def list_embedders(self, scope: Scope) -> frozenset[EmbedderKey]:
        """Distinct ``(embedder_id, dimensions)`` of the records visible in ``scope``."""
        ...

    def set_source_access(self, scope: Scope, grants: Sequence[Grant]) -> None:
        """Replace the grants of the named sources (never merged; an empty grant revokes), in
        one transaction; the very next read that applies grants sees them (no cache)."""
        ...

    def check_source_access(
        self, scope: Scope, source_ids: Sequence[str], authorization: Authorization
    ) -> Mapping[str, AccessDecision]:
        """One live decision per distinct source id, read in one round trip: the grant rule,
        ``ragport.domain.model.decide_access`` on the source's stored grant (``None`` if none)."""
        ...

    def list_invalidated_ids(self, scope: Scope) -> frozenset[str]:
        """Ids the scope withholds now: ids of ``forgotten`` tombstones (``corrected`` do not),
        as last committed; never waits for an open unit of work."""
        ...

    def get_source_access(self, scope: Scope, source_ids: Sequence[str]) -> Mapping[str, Grant]:
        """The stored grant of each distinct source id that has one, read in one round trip.

        A source without a grant is absent from the mapping (an empty grant is present, with
        no principals and no groups). Grants are not versioned: this reads what
        ``set_source_access`` last wrote, whatever the generation pointer.
        """
        ...

    def list_source_ids(
        self, scope: Scope, *, after: str | None = None, limit: int = 1_000
    ) -> Sequence[str]:
        """Distinct source ids with a chunk record visible at the pointer, in code-point
        order, starting after ``after``, at most ``limit`` (page with the last id returned)."""
        ...


@runtime_checkable
class SupportsLexicalSearch(Protocol):
    """A store with a lexical leg; ``capabilities.lexical_modes`` names the modes it offers.

    ``lexical_query`` applies the same predicate as ``query`` (exact scope, visibility at the
    current pointer, ``forgotten`` tombstones on record id, source id, lineage and roots,
    live grants when ``authorization`` is given, ``metadata_filter``) *before* ``limit``, and
    returns records that contain at least one query term, best first (ties by id). Scores are
    finite and the mode's own (BM25 in both built-in stores), comparable only within one call,
    with statistics (document count, lengths, document frequencies) per exact scope, in every
    mode: another scope's records never change a scope's order or scores. The records are the
    caller's copies. A mode is any name ``ragport.domain.lexical.check_lexical_mode`` accepts
    (lower-case letters, digits, ``_``, ``-``, starting with a letter, at most 32; ``off`` is
    no mode): ``bm25``, ``fts``, or one of your own (``fts5``). ``retrieve_context`` takes
    every name the store declares (``RetrievalRequest(lexical=name)``), so ``lexical_query``
    and ``hybrid_query`` must answer each declared name; a mode the store does not declare is
    a ``CapabilityError``. ``bm25`` promises more: BM25 ranking over exact per-scope
    statistics, the mode both built-in stores serve (PostgreSQL named it ``fts`` until
    2026-12). Its tokens are ``ragport.domain.lexical.tokenize_lexical``'s (then stop words may
    be dropped or tokens stemmed: ``strasse`` matches ``Straße``, ``cafe`` not ``café``) unless
    the store documents its engine's analyzer (PostgreSQL: its text-search configuration) and
    its contract test class says so (``bm25_tokens = "engine"``). Declare no mode whose
    statistics are table-wide (FTS5's ``bm25()``).

    ``hybrid_query`` is what hybrid retrieval calls: what ``foreign_embedders``, ``query`` and
    ``lexical_query`` would return, all read from *one* snapshot (one pointer, one set of
    tombstones and grants), so a replacement committed meanwhile is seen by both legs or by
    neither: fused results never mix two versions of a source.
    """

    def lexical_query(
        self,
        scope: Scope,
        text: str,
        *,
        limit: int,
        mode: str,
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None = None,
    ) -> Sequence[ScoredRecord]:
        """Top ``limit`` visible records containing a query term, best first (the mode's
        finite score, ties by id), with the same predicate as ``query`` (forgotten ids,
        sources, lineage and roots; live grants; the filter) applied before the limit. A
        ``tuple`` of the caller's copies: ``()`` when nothing matches, the text has no term or
        ``limit <= 0``. With an ``authorization`` and ``on_denied``, reports once the sources
        the grant predicate withheld, as ``query`` does. NUL or a lone surrogate in ``text``
        is ``ValidationError(field="query")``; an undeclared ``mode`` ``CapabilityError``."""
        ...

    def hybrid_query(
        self,
        scope: Scope,
        vector: Vector,
        text: str,
        *,
        embedder_id: str,
        dimensions: int,
        limit: int,
        mode: str,
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None = None,
    ) -> HybridAnswer:
        """The drift guard, the vector leg and the lexical leg read from one snapshot, each leg
        with ``query``'s predicate (forgotten ids, sources, lineage and roots; live grants;
        the filter) before the limit; the records are the caller's copies."""
        ...


@runtime_checkable
class SupportsGuardedQuery(Protocol):
    """A store that answers the retrieval guards inside its vector leg's own statement.

    ``guarded_query`` returns what ``foreign_embedders(scope, embedder_id, dimensions)`` and
    ``query(scope, vector, ...)`` would (scores within 1e-5), from one snapshot (one statement
    on PostgreSQL) with ``forgotten`` tombstones (record id, source id, every lineage edge and
    every root) and live grants applied in it, before ``limit``. Every ``forgotten`` tombstone
    committed before the call is applied, wherever the store reads: a store that answers
    from a copy that may lag (PostgreSQL's read replica) checks its answer against the
    primary's tombstones and, when one names a row, answers from the primary. ``retrieve_context``
    then skips its drift-guard read (a mismatch is raised from the leg's answer) and, when the
    vector leg is the only leg, its tombstone re-read; with a lexical leg (a second snapshot)
    the re-read still runs, which catches legs that miss a tombstone. Used only when
    ``capabilities.guarded_query`` is declared and the store's own class defines it
    (``supports``): a wrapper that delegates unknown attributes keeps its own ``query``.
    """

    def guarded_query(
        self,
        scope: Scope,
        vector: Vector,
        *,
        embedder_id: str,
        dimensions: int,
        limit: int,
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None = None,
    ) -> GuardedQuery:
        """``foreign_embedders`` and ``query`` answered from one snapshot (tombstones on ids,
        sources, lineage and roots applied before the limit); the records are the caller's
        copies."""
        ...


@runtime_checkable
class SupportsForgottenLookup(Protocol):
    """A store that answers which of some ids are forgotten without listing every tombstone
    (declared as ``capabilities.forgotten_lookup``).

    ``forgotten_among(scope, ids)`` equals ``list_invalidated_ids(scope) & set(ids)``, read
    at one moment, at a cost that follows ``len(ids)``, not the scope's tombstones.
    ``retrieve_context``'s tombstone re-read asks it for the ids, sources, lineage and roots
    of its candidates, so a scope with 100,000 forgotten ids retrieves as fast as one with 10.
    """

    def forgotten_among(self, scope: Scope, ids: Sequence[str]) -> frozenset[str]:
        """The ``ids`` that a ``forgotten`` tombstone of ``scope`` names."""
        ...


@runtime_checkable
class SupportsPreparation(Protocol):
    """A store that wants to set up per-dimension structures before a write transaction
    (declared as ``capabilities.preparation``).

    Use cases call ``prepare(scope, dimensions=d)`` before opening the unit of work that
    writes vectors of dimension ``d`` (PostgreSQL creates its HNSW index there, where it
    cannot deadlock with other writers). Idempotent and cheap when nothing is missing.
    """

    def prepare(self, scope: Scope, *, dimensions: int) -> None:
        """Create what writing vectors of ``dimensions`` needs; idempotent."""
        ...
