"""The engine's unit of work: every repository of ``ragport.ports.unit_of_work`` over one
``BackendWriter``, with the generation rules written once.

Each method checks its arguments, then reads and writes through the writer inside the
store's ``Guard``, or through the backend's set-based write pushdown when its class defines
one (``ragport.ports.pushdowns``: the rule is decided here either way). Once the unit is
finished (committed or rolled back) every write through it is
``ValidationError(field="unit_of_work")``; reads still answer. Any error a backend call raises
inside the unit (a ``RagportError`` too), and any row it hands back outside what was asked,
leaves the unit rollback-only: ``commit`` is refused from then on.

The unit also keeps the scope's embedder claim (``GenerationState.embedders``): every insert
adds its keys, and a purge that read every row anyway (or a claim of two keys or more) sets it
to what the remaining rows hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

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
from ragport.engine.reads import checked
from ragport.engine.rules import forgotten_set
from ragport.ports.backend import BackendWriter, GenerationState, RowKey
from ragport.ports.embedder import VectorMatrix
from ragport.ports.store import (
    EmbedderKey,
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


def _count(value: object) -> int:
    """A pushdown's count: a non-negative int, else the backend broke its promise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreError("a write pushdown returned no count")
    return value


class _Tracked:
    """The writer as the engine calls it: a call (or the iteration of what ``rows``,
    ``tombstones`` or ``nearest`` returned) that raises marks the unit failed."""

    _ITERATED = frozenset({"rows", "tombstones", "nearest"})

    def __init__(self, writer: BackendWriter, uow: BackendUnitOfWork) -> None:
        self._writer = writer
        self._uow = uow

    def _iterate(self, found: Iterable[Any]) -> Iterator[Any]:
        try:
            yield from found
        except BaseException:
            self._uow.failed = True
            raise

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._writer, name)
        if not callable(member):
            return member
        iterated = name in self._ITERATED

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = member(*args, **kwargs)
            except BaseException:
                self._uow.failed = True
                raise
            if not iterated or type(result) in (list, tuple):  # nothing left to fail
                return result
            return list(self._iterate(result))

        return call


class _Part:
    def __init__(self, uow: BackendUnitOfWork) -> None:
        self._uow = uow

    @property
    def _push(self) -> Pushdowns:
        return self._uow.pushdowns

    def _run(self, work: Callable[[BackendWriter], T]) -> T:
        uow = self._uow
        try:
            with uow.guard:
                return work(uow.view)
        except BaseException as error:
            if uow.failed or isinstance(error, StoreError):
                # A backend call failed part way, or handed back what was not asked: what
                # it left must never be committed, so the unit can only roll back from here.
                uow.done = uow.rolled_back = True
            raise

    def _read(self, read: Callable[[BackendWriter], T]) -> T:
        if self._uow.rolled_back:
            raise ValidationError("unit of work rolled back", field="unit_of_work")
        return self._run(read)

    def _open(self) -> None:
        """Refuse any write, even an empty one, once the unit is finished."""
        if self._uow.done:
            raise ValidationError("unit of work already finished", field="unit_of_work")

    def _write(self, write: Callable[[BackendWriter], T]) -> T:
        self._open()
        return self._run(write)

    def _call(self, method: Callable[..., T], *args: object, **kwargs: object) -> T:
        """A pushdown called with the backend's own writer, its failure tracked."""
        try:
            return method(self._uow.writer, *args, **kwargs)
        except BaseException:
            self._uow.failed = True
            raise

    def _pushed(self, method: Callable[..., object], *args: object, **kwargs: object) -> int:
        """A write pushdown's count."""
        return _count(self._call(method, *args, **kwargs))

    def _rows(
        self, w: BackendWriter, *, source_id: str | None = None, ids: Sequence[str] | None = None
    ) -> list[Record]:
        rows = w.rows(source_id=source_id, ids=ids)
        return checked(rows, self._uow.scope, source_id=source_id, ids=ids)


class _Records(_Part):
    def add(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        self._open()
        records = list(records)
        matrix = check_records_for_add(self._uow.scope, records, vectors)

        def add(w: BackendWriter) -> None:
            check_stored_ids(records, self._rows(w, ids=[r.id for r in records]))
            w.insert([take_in(r) for r in records], matrix)
            self._claim(w, frozenset((r.embedder_id, r.dimensions) for r in records))

        self._write(add)

    def _claim(self, w: BackendWriter, keys: frozenset[EmbedderKey]) -> None:
        """The claim after an insert: the old one with ``keys``, or every stored row's keys
        when the old one is unknown."""
        state = w.state()
        claim = state.embedders
        if claim is None:
            claim = frozenset((r.embedder_id, r.dimensions) for r in self._rows(w))
        else:
            claim = claim | keys
        if claim != state.embedders:
            w.set_state(attrs.evolve(state, embedders=claim))

    def _reclaim(self, w: BackendWriter, remaining: Iterable[Record] | None) -> None:
        """The claim after a purge: the keys of ``remaining`` (every row left), read here
        when not given and the claim holds two keys or more (one key stays a superset)."""
        state = w.state()
        if remaining is None:
            if state.embedders is not None and len(state.embedders) < 2:
                return
            remaining = self._rows(w)
        claim = frozenset((r.embedder_id, r.dimensions) for r in remaining)
        if claim != state.embedders:
            w.set_state(attrs.evolve(state, embedders=claim))

    def list_by_source(self, source_id: str) -> Sequence[Record]:
        validate_text(source_id, field="source_id")

        def listed(w: BackendWriter) -> list[Record]:
            pointer = w.state().pointer
            rows = self._rows(w, source_id=source_id)
            return [
                hand_out(r)
                for r in by_id(rows)
                if is_visible(r.generation, r.retired_generation, pointer)
            ]

        return self._read(listed)

    def retire_source(self, source_id: str, *, generation: int) -> int:
        validate_text(source_id, field="source_id")
        g = check_generation(generation)
        if self._push.retire is not None:
            retire = self._push.retire
            return self._write(lambda w: self._pushed(retire, source_id=source_id, generation=g))
        return self._write(lambda w: _retire(w, self._rows(w, source_id=source_id), g))

    def retire_ids(self, ids: Sequence[str], *, generation: int) -> int:
        self._open()
        wanted, g = _ids(ids, "ids"), check_generation(generation)
        if not wanted:
            return 0
        if self._push.retire is not None:
            retire = self._push.retire
            return self._write(lambda w: self._pushed(retire, ids=wanted, generation=g))
        return self._write(lambda w: _retire(w, self._rows(w, ids=wanted), g))

    def discard_above(self, generation: int) -> int:
        g = check_generation(generation)
        return self._purge(lambda r: r.generation > g, above=g)

    def purge_source(self, source_id: str) -> int:
        validate_text(source_id, field="source_id")

        def purge(w: BackendWriter) -> int:
            if self._push.delete_where is not None:
                return self._pushed(self._push.delete_where, source_id=source_id)
            return _delete(w, self._rows(w, source_id=source_id))

        return self._write(purge)

    def purge_retired(self, through: int) -> int:
        g = check_generation(through, "through")
        return self._purge(
            lambda r: r.retired_generation is not None and r.retired_generation <= g,
            retired_through=g,
        )

    def _purge(self, doomed: Callable[[Record], bool], **where: int) -> int:
        """Delete the rows ``doomed`` picks (``where``: the same condition for
        ``delete_where``), then set the claim to what is left (not read again after a
        pushdown when the backend answers ``embedders`` itself: its guard is exact and cheap
        whatever the claim holds, and its scopes may be large)."""

        def purge(w: BackendWriter) -> int:
            if self._push.delete_where is not None:
                gone = self._pushed(self._push.delete_where, **where)
                if self._push.embedders is None:
                    self._reclaim(w, None)
                return gone
            rows = self._rows(w)
            gone = _delete(w, [r for r in rows if doomed(r)])
            self._reclaim(w, [r for r in rows if not doomed(r)])
            return gone

        return self._write(purge)

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
                for r in by_id(self._rows(w, source_id=source_id))
                if r.retired_generation is None and (after is None or r.id > after)
            ]
            return [hand_out(r) for r in (live if most is None else live[:most])]

        return self._read(listed)

    def find_dependents(self, ids: Sequence[str]) -> Sequence[Record]:
        wanted = set(_ids(ids, "ids"))

        def found(w: BackendWriter) -> list[Record]:
            if self._push.dependents is not None:
                found = self._call(self._push.dependents, sorted(wanted))
                rows = checked(found, self._uow.scope)
            else:
                rows = self._rows(w)
            dependents = (
                r for r in rows if r.kind == "derived" and not wanted.isdisjoint(r.lineage)
            )
            return [hand_out(r) for r in by_id(dependents)]

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
        return self._write(lambda w: self._rekey(w, dict(moves), to_source_id))

    def _rekey(self, w: BackendWriter, moves: dict[str, str], to_source_id: str) -> int:
        """The collision rule (``rekey_collides``), then the move."""
        floor = w.state().floor
        moving = {
            key_of(r): r for r in self._rows(w, ids=list(moves)) if r.retired_generation is None
        }
        destinations = list(dict.fromkeys(moves[r.id] for r in moving.values()))
        stored = (
            [r for r in self._rows(w, ids=destinations) if key_of(r) not in moving]
            if destinations
            else []
        )
        for r in moving.values():
            for existing in stored:
                if existing.id == moves[r.id] and rekey_collides(r.generation, existing, floor):
                    raise ValidationError(
                        "a destination record id is visible in a restorable snapshot of this scope",
                        field="to_id",
                    )
        if not moving:
            return 0
        if self._push.move is not None:
            return self._pushed(self._push.move, moves, to_source_id=to_source_id)
        w.update(
            {
                key: attrs.evolve(r, id=moves[r.id], source_id=to_source_id)
                for key, r in moving.items()
            }
        )
        return len(moving)

    def rewrite_lineage(self, from_id: str, to_id: str) -> int:
        validate_text(from_id, field="from_id")
        validate_id(to_id, field="to_id")

        def rewrite(w: BackendWriter) -> int:
            if self._push.rename_lineage is not None:
                return self._pushed(self._push.rename_lineage, from_id, to_id)
            edges, changes = 0, {}
            for r in self._rows(w):
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

    def restore_above(self, generation: int) -> int:
        g = check_generation(generation)

        def restore(w: BackendWriter) -> int:
            if self._push.restore_above is not None:
                return self._pushed(self._push.restore_above, g)
            changes = {
                key_of(r): attrs.evolve(r, retired_generation=None)
                for r in self._rows(w)
                if r.retired_generation is not None and r.retired_generation > g
            }
            if changes:
                w.update(changes)
            return len(changes)

        return self._write(restore)


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

    def revoke(self, source_ids: Sequence[str]) -> int:
        """Replace each stored grant of ``source_ids`` that names a principal or a group by
        an empty one (``Grant(source_id)``: the port has no delete, and an empty grant is no
        grant); returns how many changed. One step on a backend with the ``revoke_grants``
        pushdown; else read, then write the changed ones."""
        self._open()
        wanted = _ids(source_ids, "source_ids")
        if not wanted:
            return 0

        def revoke(w: BackendWriter) -> int:
            if self._push.revoke_grants is not None:
                return self._pushed(self._push.revoke_grants, wanted)
            found = w.grants(wanted)
            changed = [Grant(s) for s in wanted if s in found and not found[s].is_empty]
            if changed:
                w.put_grants(changed)
            return len(changed)

        return self._write(revoke)


class _Tombstones(_Part):
    def add(self, tombstones: Sequence[Tombstone]) -> int:
        self._open()
        tombstones = list(tombstones)
        if not all(isinstance(t, Tombstone) for t in tombstones):
            raise ValidationError("tombstones must be Tombstone values", field="tombstones")
        merged: dict[str, Tombstone] = {}
        for t in tombstones:
            merged[t.id] = strongest_tombstone(merged.get(t.id), t)
        if not merged:
            return 0

        def add(w: BackendWriter) -> int:
            if self._push.merge_tombstones is not None:
                return self._pushed(self._push.merge_tombstones, list(merged.values()))
            kept = {t.id: t for t in w.tombstones()}
            changed = [
                strongest
                for t in merged.values()
                if (strongest := strongest_tombstone(kept.get(t.id), t)) != kept.get(t.id)
            ]
            if changed:
                w.put_tombstones(changed)
            return sum(t.id not in kept for t in merged.values())

        return self._write(add)

    def list(self) -> Sequence[Tombstone]:
        return sorted(self._read(lambda w: list(w.tombstones())), key=lambda t: t.id)

    def get(self, ids: Sequence[str]) -> Mapping[str, Tombstone]:
        wanted = _ids(ids, "ids")
        if not wanted:
            return {}
        found = self._read(lambda w: {t.id: t for t in self._among(w, wanted)})
        return {i: found[i] for i in wanted if i in found}

    def _among(self, w: BackendWriter, ids: Sequence[str]) -> Iterable[Tombstone]:
        """The stored tombstones of ``ids``: looked up where the backend can, else (the narrow
        port lists a scope's tombstones whole) every one."""
        if self._push.tombstones_among is not None:
            found: Iterable[Tombstone] = self._call(self._push.tombstones_among, list(ids))
            return found
        return w.tombstones()

    def readmit(self, ids: Sequence[str]) -> int:
        self._open()
        wanted = set(_ids(ids, "ids"))

        def readmit(w: BackendWriter) -> int:
            forgotten = forgotten_set(self._among(w, sorted(wanted))) & wanted
            changed = [Tombstone(i, "corrected") for i in sorted(forgotten)]
            if changed:
                w.put_tombstones(changed)
            return len(changed)

        return self._write(readmit) if wanted else 0


class BackendUnitOfWork:
    """``UnitOfWork`` over one ``BackendWriter``; ``BackendStore.unit_of_work`` makes it.

    ``writer`` is the backend's own writer (what the pushdowns get); ``view`` the same writer
    as the engine calls it, every failure tracked."""

    def __init__(
        self, scope: Scope, writer: BackendWriter, guard: Guard, pushdowns: Pushdowns | None = None
    ) -> None:
        self.scope = scope
        self.writer = writer
        self.view = cast(BackendWriter, _Tracked(writer, self))
        self.guard = guard
        self.pushdowns = pushdowns if pushdowns is not None else Pushdowns()
        self.done = False
        self.rolled_back = False
        self.failed = False  # a backend call raised: only rollback remains
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
