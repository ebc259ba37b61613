"""The in-memory unit of work and its repositories: they mutate a private copy of the snapshot.

``commit`` installs the copy; leaving without it drops the copy. Writers of one scope are
serialized by the store's per-scope lock, so a unit of work never sees another's copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs

from ragport.adapters.memory.snapshot import Key, Row, Snapshot
from ragport.domain.errors import ValidationError
from ragport.domain.model import Grant, Record, Scope, Tombstone, is_visible, strongest_tombstone
from ragport.ports.embedder import VectorMatrix
from ragport.ports.store import (
    check_records_for_add,
    check_rekey_moves,
    check_stored_ids,
    rekey_collides,
)

__all__ = ["InMemoryUnitOfWork"]


def hand_out(record: Record) -> Record:
    """A checked copy of a record (its constructor runs again, metadata frozen anew): what a
    unit of work stores of a caller's record, and hands back of its own. The store's
    query path uses the cheaper ``snapshot.hand_out`` for rows it already holds."""
    return attrs.evolve(record)


class _Records:
    def __init__(self, uow: InMemoryUnitOfWork):
        self._uow = uow

    def add(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        snap = self._uow._snap
        copied = check_records_for_add(self._uow.scope, records, vectors)
        check_stored_ids(
            records,
            (snap.rows[key].record for r in records for key in snap.by_id.get(r.id, frozenset())),
        )
        for record, vector in zip(records, copied, strict=True):
            key = (record.id, record.generation)
            snap.rows[key] = Row(hand_out(record), vector)  # never the caller's object
            src = record.source_id
            snap.by_source[src] = snap.by_source.get(src, frozenset()) | {key}
            snap.by_id[key[0]] = snap.by_id.get(key[0], frozenset()) | {key}

    def list_by_source(self, source_id: str) -> Sequence[Record]:
        snap = self._uow._snap
        return snap.source_records(source_id, snap.pointer)

    def retire_source(self, source_id: str, *, generation: int) -> int:
        return self._retire(set(self._uow._snap.by_source.get(source_id, frozenset())), generation)

    def retire_ids(self, ids: Sequence[str], *, generation: int) -> int:
        by_id = self._uow._snap.by_id
        return self._retire({k for rid in ids for k in by_id.get(rid, frozenset())}, generation)

    def _retire(self, keys: set[Key], generation: int) -> int:
        snap = self._uow._snap
        retired = 0
        removed: dict[str, set[Key]] = {}
        for key in keys:
            record = snap.rows[key].record
            if record.generation == generation:
                del snap.rows[key]
                self._drop_id(key)
                src = record.source_id
                removed.setdefault(src, set(snap.by_source.get(src, frozenset()))).discard(key)
            elif record.retired_generation is None and record.generation < generation:
                if is_visible(record.generation, record.retired_generation, snap.pointer):
                    retired += 1
                snap.rows[key] = Row(
                    attrs.evolve(record, retired_generation=generation), snap.rows[key].vector
                )
        for src, rest in removed.items():
            self._set_keys(src, rest)
        return retired

    def _drop_id(self, key: Key) -> None:
        by_id = self._uow._snap.by_id
        rest = by_id.get(key[0], frozenset()) - {key}
        if rest:
            by_id[key[0]] = rest
        else:
            by_id.pop(key[0], None)

    def _set_keys(self, source_id: str, keys: set[Key]) -> None:
        snap = self._uow._snap
        if keys:
            snap.by_source[source_id] = frozenset(keys)
        else:
            snap.by_source.pop(source_id, None)

    def _remove_where(self, predicate: Callable[[Record], bool]) -> int:
        snap = self._uow._snap
        doomed = [key for key, row in snap.rows.items() if predicate(row.record)]
        touched: dict[str, set[Key]] = {}
        for key in doomed:
            src = snap.rows.pop(key).record.source_id
            self._drop_id(key)
            touched.setdefault(src, set(snap.by_source.get(src, frozenset()))).discard(key)
        for src, keys in touched.items():
            self._set_keys(src, keys)
        return len(doomed)

    def discard_above(self, generation: int) -> int:
        return self._remove_where(lambda r: r.generation > generation)

    def list_live(
        self, source_id: str, *, after: str | None = None, limit: int | None = None
    ) -> Sequence[Record]:
        snap = self._uow._snap
        live = sorted(
            (
                snap.rows[k].record
                for k in snap.by_source.get(source_id, frozenset())
                if snap.rows[k].record.retired_generation is None
                and (after is None or snap.rows[k].record.id > after)
            ),
            key=lambda r: r.id,
        )
        return [hand_out(r) for r in (live if limit is None else live[:limit])]

    def find_dependents(self, ids: Sequence[str]) -> Sequence[Record]:
        wanted = set(ids)
        return sorted(
            (
                hand_out(row.record)
                for row in self._uow._snap.rows.values()
                if row.record.kind == "derived" and wanted.intersection(row.record.lineage)
            ),
            key=lambda r: r.id,
        )

    def rekey(self, moves: Mapping[str, str], *, to_source_id: str) -> int:
        check_rekey_moves(moves)
        snap = self._uow._snap
        moving = {
            key: row.record
            for key, row in snap.rows.items()
            if row.record.retired_generation is None and row.record.id in moves
        }
        for record in moving.values():
            for key in snap.by_id.get(moves[record.id], frozenset()):
                if key not in moving and rekey_collides(
                    record.generation, snap.rows[key].record, snap.floor
                ):
                    raise ValidationError(
                        "a destination record id is visible in a restorable snapshot of this scope",
                        field="to_id",
                    )
        moved: list[tuple[Key, Row]] = []
        for key, row in list(snap.rows.items()):
            record = row.record
            if record.retired_generation is None and record.id in moves:
                moved.append(
                    (
                        key,
                        Row(
                            attrs.evolve(record, id=moves[record.id], source_id=to_source_id),
                            row.vector,
                        ),
                    )
                )
        for old_key, row in moved:
            old = snap.rows.pop(old_key).record
            self._drop_id(old_key)
            rest = set(snap.by_source.get(old.source_id, frozenset()))
            rest.discard(old_key)
            self._set_keys(old.source_id, rest)
            new_key = (row.record.id, row.record.generation)
            snap.rows[new_key] = row
            snap.by_source[to_source_id] = snap.by_source.get(to_source_id, frozenset()) | {new_key}
            snap.by_id[new_key[0]] = snap.by_id.get(new_key[0], frozenset()) | {new_key}
        return len(moved)

    def rewrite_lineage(self, from_id: str, to_id: str) -> int:
        snap = self._uow._snap
        edges = 0
        for key, row in list(snap.rows.items()):
            record = row.record
            if record.kind != "derived":
                continue
            if from_id not in record.lineage and from_id not in record.roots:
                continue
            edges += record.lineage.count(from_id)
            lineage = tuple(dict.fromkeys(to_id if i == from_id else i for i in record.lineage))
            roots = tuple(dict.fromkeys(to_id if i == from_id else i for i in record.roots))
            snap.rows[key] = Row(attrs.evolve(record, lineage=lineage, roots=roots), row.vector)
        return edges

    def purge_source(self, source_id: str) -> int:
        return self._remove_where(lambda r: r.source_id == source_id)

    def restore_above(self, generation: int) -> int:
        snap = self._uow._snap
        count = 0
        for key, row in list(snap.rows.items()):
            retired = row.record.retired_generation
            if retired is not None and retired > generation:
                snap.rows[key] = Row(attrs.evolve(row.record, retired_generation=None), row.vector)
                count += 1
        return count

    def purge_retired(self, through: int) -> int:
        return self._remove_where(
            lambda r: r.retired_generation is not None and r.retired_generation <= through
        )


class _Generations:
    def __init__(self, uow: InMemoryUnitOfWork):
        self._uow = uow

    def current(self) -> int:
        return self._uow._snap.pointer

    def counter(self) -> int:
        return self._uow._snap.counter

    def stage(self) -> int:
        snap = self._uow._snap
        if snap.counter == snap.pointer:
            snap.counter += 1
        return snap.counter

    def publish(self, generation: int) -> None:
        snap = self._uow._snap
        if not snap.pointer <= generation <= snap.counter:
            raise ValidationError(
                "publish needs pointer <= generation <= counter", field="generation"
            )
        snap.pointer = generation

    def reset(self, generation: int) -> None:
        snap = self._uow._snap
        if generation < 0:
            raise ValidationError("generation must be non-negative", field="generation")
        snap.pointer = generation
        snap.counter = generation

    def floor(self) -> int:
        return self._uow._snap.floor

    def raise_floor(self, generation: int) -> None:
        snap = self._uow._snap
        snap.floor = max(snap.floor, generation)


class _Grants:
    def __init__(self, uow: InMemoryUnitOfWork):
        self._uow = uow

    def set(self, grants: Sequence[Grant]) -> None:
        for grant in grants:
            self._uow._snap.grants[grant.source_id] = grant

    def get(self, source_ids: Sequence[str]) -> Mapping[str, Grant]:
        grants = self._uow._snap.grants
        return {s: grants[s] for s in source_ids if s in grants}


class _Tombstones:
    def __init__(self, uow: InMemoryUnitOfWork):
        self._uow = uow

    def add(self, tombstones: Sequence[Tombstone]) -> int:
        existing = self._uow._snap.tombstones
        new = 0
        for t in tombstones:
            current = existing.get(t.id)
            if current is None:
                new += 1
            existing[t.id] = strongest_tombstone(current, t)
        return new

    def list(self) -> Sequence[Tombstone]:
        return sorted(self._uow._snap.tombstones.values(), key=lambda t: t.id)


class InMemoryUnitOfWork:
    """Writes to a copy of ``snapshot``; ``commit`` hands the copy to ``install``."""

    def __init__(
        self,
        scope: Scope,
        snapshot: Snapshot,
        install: Callable[[Scope, Snapshot], None],
        owner: object = None,
    ):
        self.scope = scope
        # The store whose writer lock this unit of work holds (what a checkpoint store joins).
        self.owner = owner
        self._install = install
        self._snap = snapshot.copy()
        self._done = False
        self._commit_hooks: list[Callable[[], None]] = []
        self.records = _Records(self)
        self.generations = _Generations(self)
        self.grants = _Grants(self)
        self.tombstones = _Tombstones(self)

    def commit(self) -> None:
        if self._done:
            raise ValidationError("unit of work already finished", field="unit_of_work")
        self._install(self.scope, self._snap)
        self._done = True
        for hook in self._commit_hooks:
            hook()

    def add_commit_hook(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` right after this unit of work commits (never if it rolls back): what a
        process-local store joins to the commit (``InMemoryCheckpointStore.compare_and_set_in``).
        The hook must not raise."""
        if self._done:
            raise ValidationError("unit of work already finished", field="unit_of_work")
        self._commit_hooks.append(hook)

    def rollback(self) -> None:
        self._done = True

    @property
    def done(self) -> bool:
        """Whether the unit of work was committed or rolled back."""
        return self._done
