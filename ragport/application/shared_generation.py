"""``SharedGeneration``: one generation for several atomic writes, so one rollback undoes them.

A command that writes many sources (``ragport ingest`` of a folder, a ``sync`` run of many
pages) writes each source, page or batch (``ragport.application.batch``) in its own
transaction: a failure or an interrupt loses only the write in flight, and every committed
write is visible at once. With a
``SharedGeneration`` passed to those writes they also share one generation:

- the first write stages a generation and publishes it, as a write always does;
- each later write *amends* that generation (its retirements and new rows carry the same
  number, and the pointer does not move) while the generation is still the scope's newest:
  ``current() == counter() ==`` it, checked inside the write's unit of work, where writers of
  one scope are serialized;
- a write finds another writer's generation above it (a concurrent command, a rollback, a
  staged write) or a source this generation already wrote: it stages a new generation, and
  later writes share that one. ``generations`` lists every generation the writes committed.

So ``rollback_generation(to=g - 1)`` undoes a whole command that wrote generation ``g``, and a
reader never sees half of one write. Not thread-safe across scopes: one value per scope.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ragport.domain.model import Scope
from ragport.ports import UnitOfWork

__all__ = ["SharedGeneration", "StagedWrite", "staged_write"]


class SharedGeneration:
    """The generation several writes of one scope share (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scope: Scope | None = None
        self._generation: int | None = None
        self._written: set[str] = set()
        self._committed: list[int] = []

    @property
    def generations(self) -> tuple[int, ...]:
        """Every generation a write through this value committed, oldest first."""
        with self._lock:
            return tuple(self._committed)

    def take(self, uow: UnitOfWork, source_ids: Iterable[str]) -> tuple[int, bool]:
        """The generation a write of ``source_ids`` uses inside ``uow``, and whether it is new.

        New (``True``): staged here; the caller publishes it as it would any generation. Shared
        (``False``): already published; the caller must not publish again. Call once per unit
        of work, before its record changes; then ``committed`` after ``uow.commit()``.
        """
        ids = set(source_ids)
        gens = uow.generations
        with self._lock:
            if self._scope is not None and self._scope != uow.scope:
                from ragport.domain.errors import ScopeError

                raise ScopeError("a SharedGeneration serves one scope", field="scope")
            mine = self._generation
            if (
                mine is not None
                and gens.current() == mine
                and gens.counter() == mine
                and not (ids & self._written)
            ):
                self._written |= ids
                return mine, False
            generation = gens.stage()
            # Recorded before the commit: if the commit fails, the next take() finds the
            # store's pointer below this number and stages a fresh generation.
            self._scope = uow.scope
            self._generation = generation
            self._written = ids
            return generation, True

    def committed(self, generation: int) -> None:
        """Record that a write at ``generation`` committed."""
        with self._lock:
            if not self._committed or self._committed[-1] != generation:
                self._committed.append(generation)


class StagedWrite:
    """One write's generation inside its unit of work: the sequence every write follows.

    ``staged_write(uow, shared, source_ids)`` stages a generation (or takes ``shared``'s, see
    ``SharedGeneration``); the caller makes its record changes at ``generation``, then calls
    ``publish()`` (which moves the pointer only for a generation this write staged) and
    ``commit()`` (which commits the unit of work and tells ``shared``). Nothing is visible to
    readers before the commit; a failure before it rolls everything back.
    """

    __slots__ = ("_shared", "_uow", "fresh", "generation")

    def __init__(self, uow: UnitOfWork, shared: SharedGeneration | None, ids: Iterable[str]):
        self._uow = uow
        self._shared = shared
        if shared is None:
            self.generation, self.fresh = uow.generations.stage(), True
        else:
            self.generation, self.fresh = shared.take(uow, ids)

    def publish(self, advance: bool = True) -> None:
        """Publish the generation if this write staged it (and ``advance``)."""
        if advance and self.fresh:
            self._uow.generations.publish(self.generation)

    def committed(self) -> None:
        """Tell the shared generation (if any) that the unit of work committed."""
        if self._shared is not None:
            self._shared.committed(self.generation)

    def commit(self) -> None:
        """Commit the unit of work, then record the commit (``committed``)."""
        self._uow.commit()
        self.committed()


def staged_write(
    uow: UnitOfWork, shared: SharedGeneration | None = None, source_ids: Iterable[str] = ()
) -> StagedWrite:
    """The generation a write of ``source_ids`` uses inside ``uow`` (see ``StagedWrite``)."""
    return StagedWrite(uow, shared, source_ids)
