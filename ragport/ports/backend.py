"""The narrow storage port: the 15 members a new store adapter writes.

A ``StorageBackend`` keeps rows and answers "which rows, which vectors are nearest"; it knows
nothing of generations, grants or tombstones beyond storing them.
``ragport.engine.BackendStore`` implements the whole ``ChunkStore`` port over it once, for
every backend: the visibility rule, staging, publish, retire, restore, rollback, compaction,
rekeying, lineage, the grant rule, forgetting, the filter, copies, the read-side checks of
ids and text, and the translation of a driver's failure into ``StoreError``. A backend that
can do more natively (PostgreSQL compiles grants, tombstones and generations into one SQL
predicate before top-k) defines pushdowns, each checked against the engine's generic path.

The members, all required (ragport's own tests count them, so the port stays this narrow):

- ``StorageBackend``: ``provider``, ``read``, ``write``;
- ``BackendReader``: ``state``, ``rows``, ``nearest``, ``grants``, ``tombstones``;
- ``BackendWriter`` (a reader too): ``insert``, ``update``, ``delete``, ``set_state``,
  ``put_grants``, ``put_tombstones``, ``commit``.

Optional *pushdowns* (``ragport.ports.pushdowns``) let a backend answer sub-questions
natively (a search leg, an indexed look-up, a set-based write); the engine finds them on the
backend's class and keeps the generic path over these members for everything else.

A row is keyed by ``(record.id, record.generation)`` (``RowKey``) within its scope: the same
id is stored once per generation. Scopes are exact: nothing is shared or matched across two
scopes, whatever their ids look like (compare the three ids, never a joined string).

What the engine does, so a backend need not: it validates every argument before calling the
backend (scopes, ids, text, limits, vectors: a backend sees only values the domain accepted),
copies every record it hands out, sorts what it lists, and turns any exception a backend
raises that is not a ``ragport.domain.errors.RagportError`` into a ``StoreError`` with no
cause and no context (a driver's message may quote document text). A backend may return its
own stored ``Record`` objects (they are immutable; the engine copies what it hands out), and
may keep the vectors matrix ``insert`` gets (the engine made it for that call).

``StorageBackendContract`` (``ragport.contract_tests``) runs the whole ``ChunkStoreContract``
on ``BackendStore(your_backend)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

import attrs

from ragport.domain.errors import ValidationError
from ragport.domain.model import Grant, Record, Scope, Tombstone
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.store import EmbedderKey, ScoredRecord

__all__ = [
    "BackendReader",
    "BackendWriter",
    "GenerationState",
    "ReadsConcurrently",
    "RowKey",
    "StorageBackend",
]

RowKey = tuple[str, int]
"""``(record id, generation)``: what identifies one stored row within a scope."""


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"{attribute.name} must be a non-negative int", field="generation")


def _claim(value: Iterable[EmbedderKey] | None) -> frozenset[EmbedderKey] | None:
    return None if value is None else frozenset((k[0], k[1]) for k in value)


@attrs.frozen
class GenerationState:
    """A scope's generation numbers and embedder claim; ``GenerationState()`` for a scope
    never written.

    ``counter``: the last generation handed out; ``pointer``: the current (published) one;
    ``floor``: the lowest one still restorable. ``floor <= pointer <= counter`` is the
    engine's business, not the backend's: store and return the numbers as given.

    ``embedders``: the scope's embedder claim, kept by the engine: a set of
    ``(embedder_id, dimensions)`` holding at least those of every stored row (it may hold
    more: a key leaves it only when the engine has read every row), or ``None`` when unknown
    (a state stored before the claim existed, or by a backend that does not keep it).
    Retrieval's drift guard reads it instead of the rows. Store it with the three numbers
    and return it as given (any encoding: e.g. a JSON list of ``[embedder_id, dimensions]``
    pairs); a backend that returns ``None`` always stays correct, only slower (every guard
    then reads the scope's visible rows).
    """

    counter: int = attrs.field(default=0, validator=_non_negative)
    pointer: int = attrs.field(default=0, validator=_non_negative)
    floor: int = attrs.field(default=0, validator=_non_negative)
    embedders: frozenset[EmbedderKey] | None = attrs.field(
        default=None, converter=_claim, kw_only=True
    )


@runtime_checkable
class BackendReader(Protocol):
    """One consistent, committed view of one scope (or, inside ``write``, the transaction's
    own view, its uncommitted changes included)."""

    def state(self) -> GenerationState:
        """The scope's generation numbers as last stored; ``GenerationState()`` if none."""
        ...

    def rows(
        self, *, source_id: str | None = None, ids: Sequence[str] | None = None
    ) -> Iterable[Record]:
        """Every stored row of the scope, of every generation, retired ones included, in any
        order: only those of ``source_id`` when it is not ``None``, only those whose id is in
        ``ids`` when it is not ``None`` (so ``ids=[]`` matches nothing; both: both). Each as
        stored, every field as written. A row of another scope, or outside the asked source
        or ids, is refused by the engine with ``StoreError`` (never handed out)."""
        ...

    def nearest(self, vector: Vector) -> Iterable[ScoredRecord]:
        """Every stored row whose ``dimensions`` equal ``len(vector)``, each with the cosine
        similarity of its stored vector and ``vector`` (within 1e-5; neither need be unit
        length; a zero vector scores 0), in descending score, ties by ascending id then
        ascending generation (``ragport.engine.rank_by_cosine`` does exactly this).

        Every generation, retired rows included: the engine applies the visibility rule,
        tombstones, grants and the filter as it walks, and stops once it has enough, so a
        lazy iterator (a cursor, an ANN index's stream) is read only as far as needed. The
        engine consumes it inside the ``read`` block it came from and calls no other member
        of the reader while it is open: what it needs besides is read before, and the
        iterator is exhausted or closed (``close()``, when it has one) before the next call,
        so a cursor on the read's one connection is never cut off.
        """
        ...

    def grants(self, source_ids: Sequence[str] | None = None) -> Mapping[str, Grant]:
        """The stored grant per source id (of ``source_ids`` if given, else every one);
        sources without one are absent."""
        ...

    def tombstones(self) -> Sequence[Tombstone]:
        """Every stored tombstone of the scope (one per id), in any order."""
        ...


@runtime_checkable
class ReadsConcurrently(Protocol):
    """Optional, on the reader a ``read`` (or ``retrieval_read``) block yields: a second
    reader in the same snapshot, for another thread. Not one of the 15 members: a backend
    without it has its hybrid legs read one after the other on its one reader.

    ``companion()`` is called before the reader's first read (a backend may prepare the
    second reader with that read: PostgreSQL exports its snapshot in one pipeline with its
    ``BEGIN``) and returns ``None`` when it cannot offer one, else a context manager; the
    engine enters it after its first reads. Entering yields a ``BackendReader`` that sees
    exactly what this reader sees (the same rows, state, grants and tombstones), usable on
    another thread while this reader keeps reading on its own, or ``None`` when none is
    available at once (the engine never waits for one: it reads on this reader instead).
    Its exit (on the thread that used it) releases it; the engine leaves it before it
    leaves the block."""

    def companion(self) -> AbstractContextManager[BackendReader | None] | None:
        """A second reader in this reader's snapshot, entered later (see the class), or
        ``None`` when this reader cannot offer one."""
        ...


@runtime_checkable
class BackendWriter(BackendReader, Protocol):
    """One transaction over one scope. Its reads see its own writes.

    Nothing it writes is visible to a ``read`` before ``commit``; leaving the ``write`` block
    without ``commit`` (or by an exception) discards every change. Values arrive checked: the
    engine never inserts a key that exists or updates or deletes one that does not, and it
    calls nothing that writes after ``commit`` (nor ``commit`` twice). Any exception a
    writer member raises (a ``RagportError`` too) leaves the engine's unit of work
    rollback-only: ``commit`` is never called after it. Durability is the
    backend's to state: the suite checks atomicity and isolation between threads of one
    process; a backend shared by processes must also serialize their writes.
    """

    def insert(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        """Store new rows: ``vectors[i]`` is the vector of ``records[i]`` (a C-contiguous
        float32 matrix the engine copied for this call, yours to keep)."""
        ...

    def update(self, changes: Mapping[RowKey, Record]) -> None:
        """Rewrite stored rows: the row at each key takes every field of its new record and
        keeps its vector, and is stored from then on under the new record's key
        ``(id, generation)``. The id and source may change (a rename), and so may
        ``retired_generation``, ``lineage`` and ``roots``; the generation never does. All at
        once: a chain of renames (``a`` to ``b``, ``b`` to ``c``) never meets itself."""
        ...

    def delete(self, keys: Sequence[RowKey]) -> None:
        """Remove the rows at ``keys`` (with their vectors)."""
        ...

    def set_state(self, state: GenerationState) -> None:
        """Store the scope's generation numbers."""
        ...

    def put_grants(self, grants: Sequence[Grant]) -> None:
        """Store each grant, replacing the source's previous one (never merged)."""
        ...

    def put_tombstones(self, tombstones: Sequence[Tombstone]) -> None:
        """Store each tombstone, replacing the previous one of its id."""
        ...

    def commit(self) -> None:
        """Make every change of the transaction visible to later reads, at once."""
        ...


@runtime_checkable
class StorageBackend(Protocol):
    """Rows, vectors, grants, tombstones and three numbers per exact scope, transactionally.

    Isolation: a ``read`` sees one committed state from its start to its end and never waits
    for a ``write``; ``write`` blocks of one scope never interleave (serialize them: a lock,
    ``BEGIN IMMEDIATE``, ``SELECT ... FOR UPDATE``). Both may be entered from many threads.
    """

    @property
    def provider(self) -> str:
        """A short stable name for provenance, e.g. ``"sqlite"``."""
        ...

    def read(self, scope: Scope) -> AbstractContextManager[BackendReader]:
        """A consistent read-only view of ``scope``'s last committed state."""
        ...

    def write(self, scope: Scope) -> AbstractContextManager[BackendWriter]:
        """One transaction over ``scope``; see ``BackendWriter``."""
        ...
