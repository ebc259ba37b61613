"""The narrow storage port (``ragport.ports.backend``) on one scope's ``Snapshot``.

``SnapshotReader`` reads a committed snapshot; ``SnapshotWriter`` writes a private copy of one
and installs it on ``commit`` (leaving without it drops the copy). Every rule of the unit of
work (staging, publish, retire, restore, rekey, lineage, the checks of ``add``) is
``ragport.engine``'s, written once for every backend. Writers of one scope are serialized by
the backend's per-scope lock, so a writer never sees another's copy. ``add_commit_hook`` runs
a callable right after the copy is installed (what ``InMemoryCheckpointStore`` joins).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType

import numpy as np

from ragport.adapters.memory.snapshot import Key, Row, Snapshot
from ragport.domain.model import Grant, Record, Scope, Tombstone
from ragport.engine import rank_by_cosine
from ragport.ports.backend import GenerationState
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.store import ScoredRecord

__all__ = ["SnapshotReader", "SnapshotWriter"]


def _with(index: dict[str, frozenset[Key]], name: str, key: Key) -> None:
    index[name] = index.get(name, frozenset()) | {key}


def _without(index: dict[str, frozenset[Key]], name: str, key: Key) -> None:
    rest = index.get(name, frozenset()) - {key}
    if rest:
        index[name] = rest
    else:
        index.pop(name, None)


class SnapshotReader:
    """``BackendReader`` over ``snap``; also its own (no-op) context manager, so a read costs
    one object. ``committed``: ``snap`` is installed and never changes again (its caches may
    be filled); a writer's copy is not."""

    committed = True

    def __init__(self, snap: Snapshot, scope: Scope, owner: object = None) -> None:
        self.snap = snap
        self.scope = scope
        self.owner = owner  # the backend that made this view

    def __enter__(self) -> SnapshotReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def state(self) -> GenerationState:
        return self.snap.state

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


class SnapshotWriter(SnapshotReader):
    """``BackendWriter`` over ``snap`` (a private copy): its rows and both indexes."""

    committed = False

    def __init__(
        self,
        snap: Snapshot,
        scope: Scope,
        install: Callable[[Snapshot], None],
        owner: object = None,
    ) -> None:
        super().__init__(snap, scope, owner)
        self._install = install
        self._hooks: list[Callable[[], None]] = []

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
        self.snap.state = state

    def put_grants(self, grants: Sequence[Grant]) -> None:
        self.snap.grants.update((g.source_id, g) for g in grants)

    def put_tombstones(self, tombstones: Sequence[Tombstone]) -> None:
        self.snap.tombstones.update((t.id, t) for t in tombstones)

    def add_commit_hook(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` right after ``commit`` installs the copy (never without a commit). The
        hook must not raise."""
        self._hooks.append(hook)

    def commit(self) -> None:
        self._install(self.snap)
        for hook in self._hooks:
            hook()
