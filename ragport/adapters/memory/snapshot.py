"""One scope's committed state in the in-memory backends: an immutable snapshot and its indexes.

A write copies the snapshot's dicts (not the vectors), mutates the copy, and swaps it in on
commit. A committed snapshot builds its per-dimension search matrix lazily, once, on the
first query after a commit; the lazy parts are guarded by the snapshot's own lock. Only a
committed snapshot caches: a writer's copy is read without filling any cache (a cache filled
before a later write of the same unit would be installed stale).
"""

from __future__ import annotations

import threading

import attrs
import numpy as np
import numpy.typing as npt

from ragport.domain.model import (
    Authorization,
    Grant,
    Record,
    Tombstone,
    is_forgotten,
    is_visible,
)
from ragport.engine.copies import hand_out, hand_out_scored
from ragport.engine.rules import GrantRule, forgotten_set
from ragport.ports.backend import GenerationState
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.store import EmbedderKey, ScoredRecord

__all__ = [
    "Index",
    "Key",
    "Row",
    "Snapshot",
    "access_mask",
    "hand_out",
    "hand_out_scored",
    "lend_scored",
]

_NEVER_WRITTEN = GenerationState()

Key = tuple[str, int]  # (record id, generation)
"""A stored row's key: ``(record id, generation)``."""


@attrs.frozen
class Row:
    record: Record
    vector: Vector


@attrs.define
class Index:
    """The visible, non-withheld rows of one snapshot with one vector dimension."""

    rows: list[Record]
    matrix: VectorMatrix
    source_pos: npt.NDArray[np.int64]  # index into `sources` per row
    sources: list[str]
    derived: list[int]  # positions of derived rows (access via roots)


@attrs.define
class Snapshot:
    rows: dict[Key, Row]
    by_source: dict[str, frozenset[Key]]
    by_id: dict[str, frozenset[Key]]
    state: GenerationState = _NEVER_WRITTEN
    grants: dict[str, Grant] = attrs.Factory(dict)
    tombstones: dict[str, Tombstone] = attrs.Factory(dict)
    _indexes: dict[int, Index] = attrs.Factory(dict)
    _visible: list[Record] | None = None
    _embedders: frozenset[EmbedderKey] | None = None
    _searchable: dict[str, Record] | None = None
    _forgotten: frozenset[str] | None = None
    _lock: threading.Lock = attrs.Factory(threading.Lock)

    def copy(self) -> Snapshot:
        return Snapshot(
            rows=dict(self.rows),
            by_source=dict(self.by_source),
            by_id=dict(self.by_id),
            state=self.state,
            grants=dict(self.grants),
            tombstones=dict(self.tombstones),
        )

    @property
    def pointer(self) -> int:
        return self.state.pointer

    @property
    def counter(self) -> int:
        return self.state.counter

    @property
    def floor(self) -> int:
        return self.state.floor

    def forgotten(self) -> frozenset[str]:
        """The ``forgotten`` ids, built once per committed snapshot (like its indexes), so
        a read costs nothing however many tombstones the scope holds."""
        found = self._forgotten
        if found is None:
            found = forgotten_set(self.tombstones.values())
            self._forgotten = found
        return found

    def visible(self) -> list[Record]:
        with self._lock:
            if self._visible is None:
                self._visible = sorted(
                    (
                        row.record
                        for row in self.rows.values()
                        if is_visible(
                            row.record.generation, row.record.retired_generation, self.pointer
                        )
                    ),
                    key=lambda r: r.id,
                )
            return self._visible

    def searchable(self) -> dict[str, Record]:
        """Visible records that no ``forgotten`` tombstone withholds, by id."""
        with self._lock:
            if self._searchable is not None:
                return self._searchable
        withheld = self.forgotten()
        found = {r.id: r for r in self.visible() if not is_forgotten(r, withheld)}
        with self._lock:
            self._searchable = found
        return found

    def embedders(self) -> frozenset[EmbedderKey]:
        if self._embedders is None:
            self._embedders = frozenset((r.embedder_id, r.dimensions) for r in self.visible())
        return self._embedders

    def index(self, dimensions: int) -> Index:
        # Built once, then only read: a dict read (atomic under the GIL) finds it.
        cached = self._indexes.get(dimensions)
        if cached is not None:
            return cached
        withheld = self.forgotten()
        rows: list[Record] = []
        vectors: list[Vector] = []
        for row in self.rows.values():
            r = row.record
            if row.vector.shape[0] != dimensions:
                continue
            if not is_visible(r.generation, r.retired_generation, self.pointer):
                continue
            if is_forgotten(r, withheld):
                continue
            rows.append(r)
            vectors.append(row.vector)
        order = sorted(range(len(rows)), key=lambda i: rows[i].id)
        rows = [rows[i] for i in order]
        matrix = (
            np.stack([vectors[i] for i in order]).astype(np.float32, copy=False)
            if rows
            else np.zeros((0, dimensions), dtype=np.float32)
        )
        sources = sorted({r.source_id for r in rows})
        pos = {s: i for i, s in enumerate(sources)}
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        index = Index(
            rows=rows,
            matrix=np.ascontiguousarray(matrix / norms, dtype=np.float32),
            source_pos=np.fromiter(
                (pos[r.source_id] for r in rows), dtype=np.int64, count=len(rows)
            ),
            sources=sources,
            derived=[i for i, r in enumerate(rows) if r.kind == "derived"],
        )
        with self._lock:
            self._indexes[dimensions] = index
        return index


_new_record = object.__new__


_SET_RECORD = ScoredRecord.__dict__["record"].__set__
_SET_SCORE = ScoredRecord.__dict__["score"].__set__


def lend_scored(record: Record, score: float) -> ScoredRecord:
    """``ScoredRecord(record, score)`` of the stored record itself, for ``borrowed_query``
    (built through its slots, like ``hand_out_scored``)."""
    out = _new_record(ScoredRecord)
    _SET_RECORD(out, record)
    _SET_SCORE(out, score)
    return out


def access_mask(
    snap: Snapshot, index: Index, authorization: Authorization | None
) -> npt.NDArray[np.bool_] | None:
    """Per row of ``index``, whether the engine's ``GrantRule`` lets ``authorization`` see it
    (``None``: no authorization, every row): a chunk row gathers its source's decision by
    position (its access sources are its source alone), a derived row asks ``admits``."""
    if authorization is None:
        return None
    rule = GrantRule(snap.grants, authorization)
    allowed = np.array(rule.allows_each(index.sources), dtype=bool)
    mask: npt.NDArray[np.bool_] = allowed[index.source_pos]
    rows = index.rows
    for pos in index.derived:
        mask[pos] = rule.admits(rows[pos].access_sources)
    return mask
