"""The engine's unit of work: every repository of ``ragport.ports.unit_of_work`` over one
``BackendWriter``, with the generation rules written once.

Each method checks its arguments, then reads and writes through the writer inside the
store's ``Guard``. Once the unit is finished (committed or rolled back) every write through
it is ``ValidationError(field="unit_of_work")``; reads still answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

import attrs

from ragport.domain.errors import StoreError, ValidationError
from ragport.domain.model import (
    Grant,
    Record,
    Scope,
    Tombstone,
    is_visible,
    strongest_tombstone,
    validate_id,
    validate_text,
)
from ragport.engine._guard import Guard
from ragport.engine.copies import hand_out, take_in
from ragport.engine.dispatch import Pushdowns
from ragport.engine.generations import GenerationSteps, check_generation
from ragport.ports.backend import BackendWriter, GenerationState, RowKey
from ragport.ports.embedder import VectorMatrix
from ragport.ports.store import (
    check_records_for_add,
    check_rekey_moves,
    check_stored_ids,
    rekey_collides,
)

__all__ = ["BackendUnitOfWork", "by_id", "key_of"]

T = TypeVar("T")


def key_of(record: Record) -> RowKey:
    """The row key of a stored record."""
    return (record.id, record.generation)


def by_id(records: Iterable[Record]) -> list[Record]:
    """Code-point order of ids, then generation: the order every listing hands out."""
    return sorted(records, key=key_of)


def _limit(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError("limit must be an int or None", field="limit")
    return max(value, 0)


def _ids(values: Sequence[str], field: str) -> list[str]:
    if isinstance(values, str):
        raise ValidationError(f"{field} must be a sequence of ids, not one string", field=field)
    return [validate_text(v, field=field) for v in dict.fromkeys(values)]


def _renamed(values: tuple[str, ...], from_id: str, to_id: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(to_id if v == from_id else v for v in values))


class _Part:
    def __init__(self, uow: BackendUnitOfWork) -> None:
        self._uow = uow

    def _read(self, read: Callable[[BackendWriter], T]) -> T:
        if self._uow.rolled_back:
            raise ValidationError("unit of work rolled back", field="unit_of_work")
        with self._uow.guard:
            return read(self._uow.writer)

    def _open(self) -> None:
        """Refuse any write, even an empty one, once the unit is finished."""
        if self._uow.done:
            raise ValidationError("unit of work already finished", field="unit_of_work")

    def _write(self, write: Callable[[BackendWriter], T]) -> T:
        self._open()
        try:
            with self._uow.guard:
                return write(self._uow.writer)
        except StoreError:
            # A backend call failed part way through a write: what it left must never be
            # committed, so the unit can only roll back from here.
            self._uow.done = self._uow.rolled_back = True
            raise


class _Records(_Part):
    def add(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        self._open()
        records = list(records)
        matrix = check_records_for_add(self._uow.scope, records, vectors)

        def add(w: BackendWriter) -> None:
            check_stored_ids(records, w.rows(ids=[r.id for r in records]))
            w.insert([take_in(r) for r in records], matrix)

        self._write(add)

    def list_by_source(self, source_id: str) -> Sequence[Record]:
        validate_text(source_id, field="source_id")

        def listed(w: BackendWriter) -> list[Record]:
            pointer = w.state().pointer
            rows = w.rows(source_id=source_id)
            return [
                hand_out(r)
                for r in by_id(rows)
                if is_visible(r.generation, r.retired_generation, pointer)
            ]

        return self._read(listed)

    def retire_source(self, source_id: str, *, generation: int) -> int:
        validate_text(source_id, field="source_id")
        g = check_generation(generation)
        return self._write(lambda w: _retire(w, w.rows(source_id=source_id), g))

    def retire_ids(self, ids: Sequence[str], *, generation: int) -> int:
        self._open()
        wanted, g = _ids(ids, "ids"), check_generation(generation)
        return self._write(lambda w: _retire(w, w.rows(ids=wanted), g) if wanted else 0)

    def discard_above(self, generation: int) -> int:
        g = check_generation(generation)
        return self._write(lambda w: _delete(w, (r for r in w.rows() if r.generation > g)))

    def list_live(
        self, source_id: str, *, after: str | None = None, limit: int | None = None
    ) -> Sequence[Record]:
        validate_text(source_id, field="source_id")
        if after is not None:
            validate_text(after, field="after")
        most = _limit(limit)

        def listed(w: BackendWriter) -> list[Record]:
            live = [
                r
                for r in by_id(w.rows(source_id=source_id))
                if r.retired_generation is None and (after is None or r.id > after)
            ]
            return [hand_out(r) for r in (live if most is None else live[:most])]

        return self._read(listed)

    def find_dependents(self, ids: Sequence[str]) -> Sequence[Record]:
        wanted = set(_ids(ids, "ids"))

        def found(w: BackendWriter) -> list[Record]:
            rows = (r for r in w.rows() if r.kind == "derived" and not wanted.isdisjoint(r.lineage))
            return [hand_out(r) for r in by_id(rows)]

        return self._read(found) if wanted else []

    def rekey(self, moves: Mapping[str, str], *, to_source_id: str) -> int:
        self._open()
        validate_id(to_source_id, field="to_source_id")
        for old, new in moves.items():
            validate_text(old, field="from_id")
            validate_id(new, field="to_id")
        check_rekey_moves(moves)
        if not moves:
            return 0
        return self._write(lambda w: _rekey(w, dict(moves), to_source_id))

    def rewrite_lineage(self, from_id: str, to_id: str) -> int:
        validate_text(from_id, field="from_id")
        validate_id(to_id, field="to_id")

        def rewrite(w: BackendWriter) -> int:
            edges, changes = 0, {}
            for r in w.rows():
                if r.kind != "derived" or (from_id not in r.lineage and from_id not in r.roots):
                    continue
                edges += r.lineage.count(from_id)
                changes[key_of(r)] = attrs.evolve(
                    r,
                    lineage=_renamed(r.lineage, from_id, to_id),
                    roots=_renamed(r.roots, from_id, to_id),
                )
            if changes:
                w.update(changes)
            return edges

        return self._write(rewrite)

    def purge_source(self, source_id: str) -> int:
        validate_text(source_id, field="source_id")
        return self._write(lambda w: _delete(w, w.rows(source_id=source_id)))

    def restore_above(self, generation: int) -> int:
        g = check_generation(generation)

        def restore(w: BackendWriter) -> int:
            changes = {
                key_of(r): attrs.evolve(r, retired_generation=None)
                for r in w.rows()
                if r.retired_generation is not None and r.retired_generation > g
            }
            if changes:
                w.update(changes)
            return len(changes)

        return self._write(restore)

    def purge_retired(self, through: int) -> int:
        g = check_generation(through, "through")
        return self._write(
            lambda w: _delete(
                w,
                (
                    r
                    for r in w.rows()
                    if r.retired_generation is not None and r.retired_generation <= g
                ),
            )
        )


def _retire(w: BackendWriter, rows: Iterable[Record], generation: int) -> int:
    """Live rows written below ``generation`` retire at it; rows written at it go."""
    pointer = w.state().pointer
    doomed: list[RowKey] = []
    changes: dict[RowKey, Record] = {}
    visible = 0
    for r in rows:
        if r.generation == generation:
            doomed.append(key_of(r))
        elif r.retired_generation is None and r.generation < generation:
            visible += r.generation <= pointer
            changes[key_of(r)] = attrs.evolve(r, retired_generation=generation)
    if doomed:
        w.delete(doomed)
    if changes:
        w.update(changes)
    return visible


def _delete(w: BackendWriter, rows: Iterable[Record]) -> int:
    doomed = list(dict.fromkeys(key_of(r) for r in rows))
    if doomed:
        w.delete(doomed)
    return len(doomed)


def _rekey(w: BackendWriter, moves: dict[str, str], to_source_id: str) -> int:
    floor = w.state().floor
    moving = {key_of(r): r for r in w.rows(ids=list(moves)) if r.retired_generation is None}
    destinations = [moves[r.id] for r in moving.values()]
    stored = (
        [r for r in w.rows(ids=destinations) if key_of(r) not in moving] if destinations else []
    )
    for r in moving.values():
        for existing in stored:
            if existing.id == moves[r.id] and rekey_collides(r.generation, existing, floor):
                raise ValidationError(
                    "a destination record id is visible in a restorable snapshot of this scope",
                    field="to_id",
                )
    if moving:
        w.update(
            {
                key: attrs.evolve(r, id=moves[r.id], source_id=to_source_id)
                for key, r in moving.items()
            }
        )
    return len(moving)


class _Generations(_Part, GenerationSteps):
    def _state(self) -> GenerationState:
        return self._read(lambda w: w.state())

    def current(self) -> int:
        return self._state().pointer

    def counter(self) -> int:
        return self._state().counter

    def floor(self) -> int:
        return self._state().floor

    def _step(self, step: Callable[[GenerationState], GenerationState]) -> GenerationState:
        def write(w: BackendWriter) -> GenerationState:
            old = w.state()
            new = step(old)
            if new != old:
                w.set_state(new)
            return new

        return self._write(write)


class _Grants(_Part):
    def set(self, grants: Sequence[Grant]) -> None:
        self._open()
        grants = list(grants)
        if not all(isinstance(g, Grant) for g in grants):
            raise ValidationError("grants must be Grant values", field="grants")
        if grants:
            self._write(lambda w: w.put_grants(grants))

    def get(self, source_ids: Sequence[str]) -> Mapping[str, Grant]:
        wanted = _ids(source_ids, "source_ids")
        if not wanted:
            return {}
        found = self._read(lambda w: dict(w.grants(wanted)))
        return {s: found[s] for s in wanted if s in found}


class _Tombstones(_Part):
    def add(self, tombstones: Sequence[Tombstone]) -> int:
        self._open()
        tombstones = list(tombstones)
        if not all(isinstance(t, Tombstone) for t in tombstones):
            raise ValidationError("tombstones must be Tombstone values", field="tombstones")

        def add(w: BackendWriter) -> int:
            kept = {t.id: t for t in w.tombstones()}
            changed: dict[str, Tombstone] = {}
            new = 0
            for t in tombstones:
                current = kept.get(t.id)
                new += current is None
                kept[t.id] = strongest = strongest_tombstone(current, t)
                if strongest != current:
                    changed[t.id] = strongest
            if changed:
                w.put_tombstones(list(changed.values()))
            return new

        return self._write(add) if tombstones else 0

    def list(self) -> Sequence[Tombstone]:
        return sorted(self._read(lambda w: list(w.tombstones())), key=lambda t: t.id)

    def get(self, ids: Sequence[str]) -> Mapping[str, Tombstone]:
        wanted = _ids(ids, "ids")
        if not wanted:
            return {}
        # The narrow port lists a scope's tombstones whole (as the engine's reads do).
        found = self._read(lambda w: {t.id: t for t in w.tombstones()})
        return {i: found[i] for i in wanted if i in found}

    def readmit(self, ids: Sequence[str]) -> int:
        self._open()
        wanted = set(_ids(ids, "ids"))

        def readmit(w: BackendWriter) -> int:
            changed = [
                Tombstone(t.id, "corrected")
                for t in w.tombstones()
                if t.id in wanted and t.reason == "forgotten"
            ]
            if changed:
                w.put_tombstones(changed)
            return len(changed)

        return self._write(readmit) if wanted else 0


class BackendUnitOfWork:
    """``UnitOfWork`` over one ``BackendWriter``; ``BackendStore.unit_of_work`` makes it."""

    def __init__(
        self, scope: Scope, writer: BackendWriter, guard: Guard, pushdowns: Pushdowns | None = None
    ) -> None:
        self.scope = scope
        self.writer = writer
        self.guard = guard
        self.pushdowns = pushdowns if pushdowns is not None else Pushdowns()
        self.done = False
        self.rolled_back = False
        self.records = _Records(self)
        self.generations = _Generations(self)
        self.grants = _Grants(self)
        self.tombstones = _Tombstones(self)

    def commit(self) -> None:
        if self.done:
            raise ValidationError("unit of work already finished", field="unit_of_work")
        self.done = True
        with self.guard:
            self.writer.commit()

    def rollback(self) -> None:
        """Finish the unit: nothing it wrote is committed or read back (the backend discards
        its changes when the block is left; until then its write lock is held)."""
        self.done = self.rolled_back = True
