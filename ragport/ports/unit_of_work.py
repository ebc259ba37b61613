"""The unit of work of a ``ChunkStore``: one transaction over one scope, and its repositories.

``ChunkStore.unit_of_work(scope)`` yields a ``UnitOfWork``; every write goes through its
``records``, ``generations``, ``grants`` and ``tombstones``. The generation rules (counter,
pointer, staged writes, the visibility rule) are in the ``ragport.ports.store`` docstring;
that module's ``check_records_for_add``, ``check_stored_ids`` and ``rekey_collides`` are the
pure checks ``RecordRepository.add`` and ``rekey`` need. ``ChunkStoreContract`` checks every
promise below. ``ragport.ports.store`` re-exports every name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ragport.domain.model import Grant, Record, Scope, Tombstone
from ragport.ports.embedder import VectorMatrix

__all__ = [
    "GenerationRepository",
    "GrantRepository",
    "RecordRepository",
    "TombstoneRepository",
    "UnitOfWork",
]


class RecordRepository(Protocol):
    """Records of the unit of work's scope. Nothing is visible to readers before commit.

    Nothing is shared with the caller either way: ``add`` keeps copies, and the records
    ``list_by_source``, ``list_live`` and ``find_dependents`` return are the caller's own
    (writing to their metadata, nested lists included, changes nothing stored).
    """

    def add(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        """Insert ``records`` with ``vectors[i]`` as the vector of ``records[i]``.

        Every record's scope equals the unit of work's scope (``ScopeError`` otherwise).
        ``vectors`` has one finite row per record and ``records[i].dimensions`` columns, and
        no id appears twice in one call (``ValidationError`` otherwise). A record id already
        live (not retired) in this scope, or stored at the record's generation, is a
        ``ValidationError``: ids are unique in a scope (a replacement retires the source's
        rows first). Nothing is written when any check fails. Run the checks with
        ``ragport.ports.store.check_records_for_add`` (the pure part; it returns the float32 copy
        of ``vectors`` to store), then ``check_stored_ids`` over the stored versions of the ids.

        The store keeps copies, never the caller's objects: that float32 copy of ``vectors``
        and a copy of each record's metadata (nested dicts and lists included), so a caller
        changing a record's metadata after ``add`` (or after commit) changes nothing stored.
        """
        ...

    def list_by_source(self, source_id: str) -> Sequence[Record]:
        """Records of ``source_id`` visible at the current pointer, ordered by id."""
        ...

    def retire_source(self, source_id: str, *, generation: int) -> int:
        """Hide ``source_id``'s live records from ``generation`` on.

        Live records (``retired_generation is None``) written below ``generation`` get
        ``retired_generation = generation``; records of the source already written *at*
        ``generation`` (an earlier staged write) are removed, so call it *before* adding the
        source's new records. Returns how many records visible at the pointer are now retired.
        """
        ...

    def retire_ids(self, ids: Sequence[str], *, generation: int) -> int:
        """``retire_source`` for record ids (of any source): live ones written below
        ``generation`` retire at it, ones written at it are removed; returns the visible retired."""
        ...

    def discard_above(self, generation: int) -> int:
        """Physically remove records written above ``generation``. Returns the count."""
        ...

    def list_live(
        self, source_id: str, *, after: str | None = None, limit: int | None = None
    ) -> Sequence[Record]:
        """Live records (``retired_generation is None``, staged ones included) of ``source_id``,
        ordered by id in code-point order, starting after id ``after``, at most ``limit``."""
        ...

    def find_dependents(self, ids: Sequence[str]) -> Sequence[Record]:
        """Derived records whose ``lineage`` names any of ``ids``, of every generation: live,
        staged and retired ones alike (one row per stored version; one indexed read).

        Retired versions count because a rollback can bring them back: deletion propagation
        tombstones everything that any restorable snapshot could still serve.
        """
        ...

    def rekey(self, moves: Mapping[str, str], *, to_source_id: str) -> int:
        """Re-file live records: id ``old`` becomes ``moves[old]`` and the source ``to_source_id``;
        every other field (text, metadata, vector, offsets, chunk index, embedder, generations)
        is copied verbatim (never re-embedded), and retired versions stay under the old id and
        source. Returns how many records moved (0 for an empty ``moves``).

        Ids stay unique at every pointer a scope can reach (the current one, a staged publish,
        any rollback target down to the floor): when a stored row of a new id (live, staged or
        retired, of any source, other than the rows being moved) could be visible at a pointer
        where the moved row is (``rekey_collides``), it is ``ValidationError(field="to_id")``
        and nothing moves. So is a ``moves`` naming one new id twice (``check_rekey_moves``,
        checked before anything is read)."""
        ...

    def rewrite_lineage(self, from_id: str, to_id: str) -> int:
        """Replace ``from_id`` by ``to_id`` in the lineage and roots of derived records of every
        generation (retired versions too: a rollback must bring them back resting on the id
        that now holds the content); returns how many lineage edges were rewritten."""
        ...

    def purge_source(self, source_id: str) -> int:
        """Physically remove every record of ``source_id`` (all generations). Returns the count."""
        ...

    def restore_above(self, generation: int) -> int:
        """Clear ``retired_generation`` where it is above ``generation``. Returns the count."""
        ...

    def purge_retired(self, through: int) -> int:
        """Physically remove records retired at or below ``through``. Returns the count."""
        ...


class GenerationRepository(Protocol):
    """The scope's generation counter, pointer and compaction floor."""

    def current(self) -> int:
        """The pointer (0 for a scope never written)."""
        ...

    def counter(self) -> int:
        """The last generation handed out (``>= current()``; 0 for a scope never written)."""
        ...

    def stage(self) -> int:
        """The open staged generation: ``counter()`` if it is above the pointer, else a new one."""
        ...

    def publish(self, generation: int) -> None:
        """Move the pointer forward to ``generation`` (``current() <= generation <= counter()``)."""
        ...

    def reset(self, generation: int) -> None:
        """Set pointer and counter to ``generation`` (rollback, after the record changes); below
        ``floor()`` it is ``ValidationError(field="generation")`` (``ragport.engine.generations``
        states every step of these rules once: ``staged``, ``published``, ``reset_to``,
        ``floor_raised``)."""
        ...

    def floor(self) -> int:
        """The lowest generation still restorable (compaction raises it; 0 initially)."""
        ...

    def raise_floor(self, generation: int) -> None:
        """Record that snapshots below ``generation`` can no longer be restored: the floor
        becomes ``max(floor(), min(generation, current()))``, never above the pointer, never
        down."""
        ...


class GrantRepository(Protocol):
    """Per-source grants of the scope. Not versioned by generations."""

    def set(self, grants: Sequence[Grant]) -> None:
        """Replace the grant of each named source (an empty grant revokes)."""
        ...

    def get(self, source_ids: Sequence[str]) -> Mapping[str, Grant]:
        """The grants that exist for ``source_ids`` (absent sources are absent from the map)."""
        ...


class TombstoneRepository(Protocol):
    """Tombstones of the scope. Not versioned by generations."""

    def add(self, tombstones: Sequence[Tombstone]) -> int:
        """Insert tombstones; an id keeps one row. Returns how many ids are new.

        A ``forgotten`` tombstone is never downgraded by a later ``corrected`` one; a
        ``corrected`` one is upgraded by a later ``forgotten`` one.
        """
        ...

    def list(self) -> Sequence[Tombstone]:
        """Every tombstone of the scope, ordered by id."""
        ...

    def get(self, ids: Sequence[str]) -> Mapping[str, Tombstone]:
        """The tombstones that exist for ``ids`` (ids without one are absent from the map).

        What a write checks before it writes under an id: a cost that follows ``ids``, not
        the scope's tombstones (``list`` reads them all)."""
        ...

    def readmit(self, ids: Sequence[str]) -> int:
        """Turn the ``forgotten`` tombstone of each of ``ids`` into a ``corrected`` one: the
        only way an id stops being withheld. Returns how many ids changed (ids with a
        ``corrected`` tombstone or none change nothing).

        The row stays as the record that the id was forgotten once (a later ``forgotten``
        tombstone upgrades it again). Records still named by another ``forgotten`` tombstone
        stay withheld; a store keeping statistics of what it serves (BM25) counts the records
        this makes servable again. ``ragport.application.readmit_source`` is the use case: it
        purges the id's own records first, so nothing forgotten comes back."""
        ...


class UnitOfWork(Protocol):
    """One transaction over one scope.

    Used as ``with store.unit_of_work(scope) as uow: ...; uow.commit()``. Leaving the block
    without ``commit()`` (or by an exception) rolls everything back: readers never observe a
    partial unit of work. Writers on the same scope are serialized, never interleaved.
    """

    # Read-only: an adapter may hold plain attributes or properties.
    @property
    def scope(self) -> Scope:
        """The one scope every repository of this unit of work reads and writes."""
        ...

    @property
    def records(self) -> RecordRepository:
        """The scope's records (chunks and derived artifacts)."""
        ...

    @property
    def generations(self) -> GenerationRepository:
        """The scope's generation counter, pointer and floor."""
        ...

    @property
    def grants(self) -> GrantRepository:
        """The scope's per-source grants."""
        ...

    @property
    def tombstones(self) -> TombstoneRepository:
        """The scope's tombstones."""
        ...

    def commit(self) -> None:
        """Make every change of the unit visible at once; the unit is finished afterwards.

        A second ``commit()`` is ``ValidationError(field="unit_of_work")``; ``rollback()``
        after it does nothing. Write nothing through the repositories once finished."""
        ...

    def rollback(self) -> None:
        """Discard every change of the unit; the unit is finished afterwards."""
        ...
