"""The in-memory unit of work: the generation engine's (``ragport.engine``) over a private copy
of the scope's snapshot.

``SnapshotWriter`` is the narrow storage port's writer (``ragport.ports.backend``) on a copy of
a ``Snapshot`` and its indexes; every repository rule (staging, publish, retire, restore,
rekey, lineage, the checks of ``add``) is ``ragport.engine.BackendUnitOfWork``'s, written once
for every store built on the port. ``commit`` installs the copy; leaving without it drops the
copy. Writers of one scope are serialized by the store's per-scope lock, so a unit of work
never sees another's copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from ragport.adapters.memory.snapshot import Key, Row, Snapshot
from ragport.domain.errors import ValidationError
from ragport.domain.model import Grant, Record, Scope, Tombstone
from ragport.engine import BackendUnitOfWork, rank_by_cosine
from ragport.engine._guard import Guard
from ragport.ports.backend import GenerationState
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.store import ScoredRecord

__all__ = ["InMemoryUnitOfWork", "SnapshotWriter"]


def _with(index: dict[str, frozenset[Key]], name: str, key: Key) -> None:
    index[name] = index.get(name, frozenset()) | {key}


def _without(index: dict[str, frozenset[Key]], name: str, key: Key) -> None:
    rest = index.get(name, frozenset()) - {key}
    if rest:
        index[name] = rest
    else:
        index.pop(name, None)


class SnapshotWriter:
    """``BackendWriter`` over ``snap`` (a private copy): its rows and both indexes."""

    def __init__(self, snap: Snapshot, install: Callable[[Snapshot], None]) -> None:
        self.snap = snap
        self._install = install

    # -- BackendReader ------------------------------------------------------------------------
    def state(self) -> GenerationState:
        s = self.snap
        return GenerationState(s.counter, s.pointer, s.floor, embedders=s.claim)

    def rows(
        self, *, source_id: str | None = None, ids: Sequence[str] | None = None
    ) -> Iterable[Record]:
        s = self.snap
        if ids is not None:
            keys: Iterable[Key] = {k for i in ids for k in s.by_id.get(i, frozenset())}
            if source_id is not None:
                keys = [k for k in keys if s.rows[k].record.source_id == source_id]
        elif source_id is not None:
            keys = s.by_source.get(source_id, frozenset())
        else:
            return [row.record for row in s.rows.values()]
        return [s.rows[k].record for k in keys]

    def nearest(self, vector: Vector) -> Iterable[ScoredRecord]:
        return rank_by_cosine(((r.record, r.vector) for r in self.snap.rows.values()), vector)

    def grants(self, source_ids: Sequence[str] | None = None) -> Mapping[str, Grant]:
        grants = self.snap.grants
        if source_ids is None:
            return dict(grants)
        return {s: grants[s] for s in source_ids if s in grants}

    def tombstones(self) -> Sequence[Tombstone]:
        return list(self.snap.tombstones.values())

    # -- BackendWriter ------------------------------------------------------------------------
    def insert(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        s = self.snap
        for record, vector in zip(records, np.asarray(vectors), strict=True):
            key = (record.id, record.generation)
            s.rows[key] = Row(record, vector)
            _with(s.by_source, record.source_id, key)
            _with(s.by_id, record.id, key)

    def update(self, changes: Mapping[Key, Record]) -> None:
        s = self.snap
        moved = [(key, s.rows.pop(key), new) for key, new in changes.items()]
        for key, old, _ in moved:
            _without(s.by_source, old.record.source_id, key)
            _without(s.by_id, key[0], key)
        for _, old, new in moved:
            key = (new.id, new.generation)
            s.rows[key] = Row(new, old.vector)
            _with(s.by_source, new.source_id, key)
            _with(s.by_id, new.id, key)

    def delete(self, keys: Sequence[Key]) -> None:
        s = self.snap
        for key in keys:
            row = s.rows.pop(key, None)
            if row is not None:
                _without(s.by_source, row.record.source_id, key)
                _without(s.by_id, key[0], key)

    def set_state(self, state: GenerationState) -> None:
        s = self.snap
        s.counter, s.pointer, s.floor = state.counter, state.pointer, state.floor
        s.claim = state.embedders

    def put_grants(self, grants: Sequence[Grant]) -> None:
        self.snap.grants.update((g.source_id, g) for g in grants)

    def put_tombstones(self, tombstones: Sequence[Tombstone]) -> None:
        self.snap.tombstones.update((t.id, t) for t in tombstones)

    def commit(self) -> None:
        self._install(self.snap)


class InMemoryUnitOfWork(BackendUnitOfWork):
    """Writes to a copy of ``snapshot``; ``commit`` hands the copy to ``install``."""

    def __init__(
        self,
        scope: Scope,
        snapshot: Snapshot,
        install: Callable[[Scope, Snapshot], None],
        owner: object = None,
    ):
        writer = SnapshotWriter(snapshot.copy(), lambda snap: install(scope, snap))
        super().__init__(scope, writer, Guard("memory"))
        # The store whose writer lock this unit of work holds (what a checkpoint store joins).
        self.owner = owner
        self._commit_hooks: list[Callable[[], None]] = []

    def commit(self) -> None:
        super().commit()
        for hook in self._commit_hooks:
            hook()

    def add_commit_hook(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` right after this unit of work commits (never if it rolls back): what a
        process-local store joins to the commit (``InMemoryCheckpointStore.compare_and_set_in``).
        The hook must not raise."""
        if self.done:
            raise ValidationError("unit of work already finished", field="unit_of_work")
        self._commit_hooks.append(hook)
