"""In-memory ChunkStore: copy-on-write snapshots per scope, numpy cosine search.

Each scope holds an immutable snapshot. A unit of work copies the snapshot's indexes (not the
vectors), mutates the copy, and swaps it in on commit, so readers always see one committed
snapshot and never wait for a writer. Writers on one scope are serialized by a per-scope lock.
A snapshot builds its search matrix lazily, once, on the first query after a commit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import numpy as np

from ragport.adapters.lexical import Bm25Index
from ragport.adapters.lexical.analyzers import make_analyzer
from ragport.domain.errors import CapabilityError, ScopeError, ValidationError
from ragport.domain.filters import Filter, parse_filter
from ragport.domain.model import (
    AccessDecision,
    Authorization,
    Capabilities,
    Grant,
    Record,
    Scope,
    Tombstone,
    decide_access,
    is_forgotten,
    is_visible,
    strongest_tombstone,
)
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.store import (
    EmbedderKey,
    GuardedQuery,
    HybridAnswer,
    ScoredRecord,
    rekey_collides,
)

__all__ = ["InMemoryStore"]

_Key = tuple[str, int]  # (record id, generation)


@attrs.frozen
class _Row:
    record: Record
    vector: Vector


@attrs.define
class _Index:
    """The visible, non-withheld rows of one snapshot with one vector dimension."""

    rows: list[Record]
    matrix: VectorMatrix
    source_pos: np.ndarray  # index into `sources` per row
    sources: list[str]
    derived: list[int]  # positions of derived rows (access via roots)


@attrs.define
class _Snapshot:
    rows: dict[_Key, _Row]
    by_source: dict[str, frozenset[_Key]]
    by_id: dict[str, frozenset[_Key]]
    counter: int = 0
    pointer: int = 0
    floor: int = 0
    grants: dict[str, Grant] = attrs.Factory(dict)
    tombstones: dict[str, Tombstone] = attrs.Factory(dict)
    _indexes: dict[int, _Index] = attrs.Factory(dict)
    _visible: list[Record] | None = None
    _embedders: frozenset[EmbedderKey] | None = None
    _searchable: dict[str, Record] | None = None
    _lock: threading.Lock = attrs.Factory(threading.Lock)

    def copy(self) -> _Snapshot:
        return _Snapshot(
            rows=dict(self.rows),
            by_source=dict(self.by_source),
            by_id=dict(self.by_id),
            counter=self.counter,
            pointer=self.pointer,
            floor=self.floor,
            grants=dict(self.grants),
            tombstones=dict(self.tombstones),
        )

    def forgotten(self) -> frozenset[str]:
        return frozenset(t.id for t in self.tombstones.values() if t.reason == "forgotten")

    def source_records(self, source_id: str, pointer: int) -> list[Record]:
        keys = self.by_source.get(source_id, frozenset())
        found = [self.rows[k].record for k in keys]
        visible = [r for r in found if is_visible(r.generation, r.retired_generation, pointer)]
        return sorted(visible, key=lambda r: r.id)

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

    def index(self, dimensions: int) -> _Index:
        with self._lock:
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
        index = _Index(
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


class _Lexical:
    """One scope's BM25 index, kept in step with the installed snapshot on demand."""

    def __init__(self, analyzer: Callable[[str], list[str]]) -> None:
        self.index = Bm25Index(analyzer=analyzer)
        self.generations: dict[str, int] = {}
        self.synced: _Snapshot | None = None
        self.lock = threading.Lock()

    def sync(self, snap: _Snapshot) -> None:
        """Make the index hold exactly ``snap``'s visible records (called under ``lock``)."""
        if self.synced is snap:
            return
        visible = {r.id: r for r in snap.visible()}
        gone = [rid for rid in self.generations if rid not in visible]
        changed = [r for rid, r in visible.items() if self.generations.get(rid) != r.generation]
        if gone:
            self.index.remove(gone)
            for rid in gone:
                del self.generations[rid]
        if changed:
            self.index.add([r.id for r in changed], [r.text for r in changed])
            for r in changed:
                self.generations[r.id] = r.generation
        self.synced = snap


class _Records:
    def __init__(self, uow: _UnitOfWork):
        self._uow = uow

    def add(self, records: Sequence[Record], vectors: VectorMatrix) -> None:
        snap = self._uow._snap
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[0] != len(records):
            raise ValidationError("vectors must have one row per record", field="vectors")
        if not np.all(np.isfinite(vectors)):
            raise ValidationError("vectors must be finite", field="vectors")
        copied = np.array(vectors, dtype=np.float32, copy=True)
        staged: list[tuple[_Key, _Row]] = []
        batch_ids: dict[str, str] = {}
        for i, record in enumerate(records):
            if record.scope != self._uow.scope:
                raise ScopeError(
                    "record scope differs from the unit of work's scope", field="scope"
                )
            if record.dimensions != copied.shape[1]:
                raise ValidationError(
                    "record dimensions differ from its vector", field="dimensions"
                )
            other = batch_ids.setdefault(record.id, record.source_id)
            if other != record.source_id or any(k[0] == record.id for k, _ in staged):
                raise ValidationError("duplicate record id in one write", field="id")
            staged.append(((record.id, record.generation), _Row(record, copied[i])))
        live_owner = self._live_owners({k[0] for k, _ in staged})
        for (rid, _gen), row in staged:
            owner = live_owner.get(rid)
            if owner is not None and owner != row.record.source_id:
                raise ValidationError(
                    "record id is live for another source in this scope", field="id"
                )
        for key, row in staged:
            if key in snap.rows and snap.rows[key].record.source_id != row.record.source_id:
                raise ValidationError(
                    "record id is live for another source in this scope", field="id"
                )
        for key, row in staged:
            snap.rows[key] = row
            src = row.record.source_id
            snap.by_source[src] = snap.by_source.get(src, frozenset()) | {key}
            snap.by_id[key[0]] = snap.by_id.get(key[0], frozenset()) | {key}

    def _live_owners(self, ids: set[str]) -> dict[str, str]:
        owners: dict[str, str] = {}
        snap = self._uow._snap
        for rid in ids:
            for key in snap.by_id.get(rid, frozenset()):
                record = snap.rows[key].record
                if record.retired_generation is None:
                    owners[rid] = record.source_id
        return owners

    def list_by_source(self, source_id: str) -> Sequence[Record]:
        snap = self._uow._snap
        return snap.source_records(source_id, snap.pointer)

    def retire_source(self, source_id: str, *, generation: int) -> int:
        return self._retire(set(self._uow._snap.by_source.get(source_id, frozenset())), generation)

    def retire_ids(self, ids: Sequence[str], *, generation: int) -> int:
        by_id = self._uow._snap.by_id
        return self._retire({k for rid in ids for k in by_id.get(rid, frozenset())}, generation)

    def _retire(self, keys: set[_Key], generation: int) -> int:
        snap = self._uow._snap
        retired = 0
        removed: dict[str, set[_Key]] = {}
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
                snap.rows[key] = _Row(
                    attrs.evolve(record, retired_generation=generation), snap.rows[key].vector
                )
        for src, rest in removed.items():
            self._set_keys(src, rest)
        return retired

    def _drop_id(self, key: _Key) -> None:
        by_id = self._uow._snap.by_id
        rest = by_id.get(key[0], frozenset()) - {key}
        if rest:
            by_id[key[0]] = rest
        else:
            by_id.pop(key[0], None)

    def _set_keys(self, source_id: str, keys: set[_Key]) -> None:
        snap = self._uow._snap
        if keys:
            snap.by_source[source_id] = frozenset(keys)
        else:
            snap.by_source.pop(source_id, None)

    def _remove_where(self, predicate: Any) -> int:
        snap = self._uow._snap
        doomed = [key for key, row in snap.rows.items() if predicate(row.record)]
        touched: dict[str, set[_Key]] = {}
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
        return live if limit is None else live[:limit]

    def find_dependents(self, ids: Sequence[str]) -> Sequence[Record]:
        wanted = set(ids)
        return sorted(
            (
                row.record
                for row in self._uow._snap.rows.values()
                if row.record.kind == "derived" and wanted.intersection(row.record.lineage)
            ),
            key=lambda r: r.id,
        )

    def rekey(self, moves: Mapping[str, str], *, to_source_id: str) -> int:
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
        moved: list[tuple[_Key, _Row]] = []
        for key, row in list(snap.rows.items()):
            record = row.record
            if record.retired_generation is None and record.id in moves:
                moved.append(
                    (
                        key,
                        _Row(
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
            snap.rows[key] = _Row(attrs.evolve(record, lineage=lineage, roots=roots), row.vector)
        return edges

    def purge_source(self, source_id: str) -> int:
        return self._remove_where(lambda r: r.source_id == source_id)

    def restore_above(self, generation: int) -> int:
        snap = self._uow._snap
        count = 0
        for key, row in list(snap.rows.items()):
            retired = row.record.retired_generation
            if retired is not None and retired > generation:
                snap.rows[key] = _Row(attrs.evolve(row.record, retired_generation=None), row.vector)
                count += 1
        return count

    def purge_retired(self, through: int) -> int:
        return self._remove_where(
            lambda r: r.retired_generation is not None and r.retired_generation <= through
        )


class _Generations:
    def __init__(self, uow: _UnitOfWork):
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
    def __init__(self, uow: _UnitOfWork):
        self._uow = uow

    def set(self, grants: Sequence[Grant]) -> None:
        for grant in grants:
            self._uow._snap.grants[grant.source_id] = grant

    def get(self, source_ids: Sequence[str]) -> Mapping[str, Grant]:
        grants = self._uow._snap.grants
        return {s: grants[s] for s in source_ids if s in grants}


class _Tombstones:
    def __init__(self, uow: _UnitOfWork):
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


class _UnitOfWork:
    def __init__(self, store: InMemoryStore, scope: Scope):
        self.scope = scope
        self._store = store
        self._snap = store._snapshot(scope).copy()
        self._done = False
        self.records = _Records(self)
        self.generations = _Generations(self)
        self.grants = _Grants(self)
        self.tombstones = _Tombstones(self)

    def commit(self) -> None:
        if self._done:
            raise ValidationError("unit of work already finished", field="unit_of_work")
        self._store._install(self.scope, self._snap)
        self._done = True

    def rollback(self) -> None:
        self._done = True


def _top(
    scores: np.ndarray, mask: np.ndarray | None, limit: int, rows: Sequence[Record]
) -> list[tuple[int, float]]:
    """Positions and scores of the best ``limit`` rows allowed by ``mask``; ties by id."""
    positions = np.arange(len(rows))
    if mask is not None:
        positions, scores = positions[mask], scores[mask]
    if positions.size == 0:
        return []
    if positions.size > limit:
        kth = np.partition(scores, positions.size - limit)[positions.size - limit]
        keep = scores >= kth  # keep every tie at the cut, then order ties by id
        positions, scores = positions[keep], scores[keep]
    order = sorted(range(positions.size), key=lambda i: (-float(scores[i]), rows[positions[i]].id))
    return [(int(positions[i]), float(scores[i])) for i in order[:limit]]


def _report_denied(
    snap: _Snapshot,
    records: Sequence[Record],
    authorization: Authorization,
    on_denied: Callable[[Sequence[AccessDecision]], None],
) -> None:
    """Tell the caller which sources the grant predicate withheld among ``records``."""
    sources = dict.fromkeys(src for r in records for src in (r.access_sources or (r.source_id,)))
    decisions = [decide_access(src, snap.grants.get(src), authorization) for src in sources]
    denied = [d for d in decisions if not d.allowed]
    if denied:
        on_denied(denied)


def _check_mode(mode: str) -> None:
    if mode != "bm25":
        raise CapabilityError(
            f"the in-memory store offers lexical mode 'bm25', not {mode!r}", capability="lexical"
        )


def _foreign(snap: _Snapshot, embedder_id: str, dimensions: int) -> frozenset[EmbedderKey]:
    """The snapshot's visible (embedder_id, dimensions) pairs other than the given one."""
    return frozenset(k for k in snap.embedders() if k != (embedder_id, dimensions))


class InMemoryStore:
    """A thread-safe, transactional ChunkStore held in process memory (the reference fake)."""

    provider = "memory"

    def __init__(self, *, lexical_language: str | None = None) -> None:
        """``lexical_language``: ``None`` (language-neutral tokens) or ``"english"`` (stop
        words removed, Snowball-stemmed, like PostgreSQL's ``english`` configuration)."""
        self._analyzer = make_analyzer(lexical_language)
        self._snapshots: dict[Scope, _Snapshot] = {}
        self._writers: dict[Scope, threading.Lock] = {}
        self._lexical: dict[Scope, _Lexical] = {}
        self._lock = threading.Lock()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            lexical_modes=("bm25",),
            authorization="acl",
            generations=True,
            transactions=True,
            guarded_query=True,
        )

    # -- snapshots -----------------------------------------------------------------------------
    def _snapshot(self, scope: Scope) -> _Snapshot:
        with self._lock:
            snap = self._snapshots.get(scope)
            if snap is None:
                snap = self._snapshots[scope] = _Snapshot(rows={}, by_source={}, by_id={})
            return snap

    def _install(self, scope: Scope, snap: _Snapshot) -> None:
        with self._lock:
            self._snapshots[scope] = snap

    def _writer(self, scope: Scope) -> threading.Lock:
        with self._lock:
            return self._writers.setdefault(scope, threading.Lock())

    @contextmanager
    def unit_of_work(self, scope: Scope) -> Iterator[_UnitOfWork]:
        if not isinstance(scope, Scope):
            raise ScopeError("scope must be a Scope", field="scope")
        with self._writer(scope):
            uow = _UnitOfWork(self, scope)
            try:
                yield uow
            finally:
                if not uow._done:
                    uow.rollback()

    # -- reads ---------------------------------------------------------------------------------
    def current_generation(self, scope: Scope) -> int:
        return self._snapshot(scope).pointer

    def get_by_source(self, scope: Scope, source_id: str) -> Sequence[Record]:
        snap = self._snapshot(scope)
        return snap.source_records(source_id, snap.pointer)

    def list_embedders(self, scope: Scope) -> frozenset[EmbedderKey]:
        return self._snapshot(scope).embedders()

    def foreign_embedders(
        self, scope: Scope, embedder_id: str, dimensions: int
    ) -> frozenset[EmbedderKey]:
        return _foreign(self._snapshot(scope), embedder_id, dimensions)

    def list_invalidated_ids(self, scope: Scope) -> frozenset[str]:
        return self._snapshot(scope).forgotten()

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
        return self._query(
            self._snapshot(scope), vector, limit, authorization, metadata_filter, on_denied
        )

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
        """``foreign_embedders`` and ``query`` over one snapshot."""
        snap = self._snapshot(scope)
        found = self._query(snap, vector, limit, authorization, metadata_filter, on_denied)
        return GuardedQuery(_foreign(snap, embedder_id, dimensions), found)

    def _query(
        self,
        snap: _Snapshot,
        vector: Vector,
        limit: int,
        authorization: Authorization | None,
        metadata_filter: Mapping[str, Any] | Filter | None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None,
    ) -> tuple[ScoredRecord, ...]:
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if limit <= 0:
            return ()
        index = snap.index(q.shape[0])
        if not index.rows:
            return ()
        fmask = None
        flt = parse_filter(metadata_filter)
        if flt is not None:
            fmask = np.fromiter(
                (flt.matches(r.metadata) for r in index.rows), dtype=bool, count=len(index.rows)
            )
        amask = self._access_mask(snap, index, authorization)
        mask = amask if fmask is None else (fmask if amask is None else amask & fmask)
        norm = float(np.linalg.norm(q))
        scores = index.matrix @ (q / norm if norm else q)
        if on_denied is not None and authorization is not None:
            unfiltered = [index.rows[i] for i, _ in _top(scores, fmask, limit, index.rows)]
            _report_denied(snap, unfiltered, authorization, on_denied)
        return tuple(
            ScoredRecord(index.rows[i], score) for i, score in _top(scores, mask, limit, index.rows)
        )

    def lexical_query(
        self,
        scope: Scope,
        text: str,
        *,
        limit: int,
        mode: str = "bm25",
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None = None,
    ) -> Sequence[ScoredRecord]:
        """BM25 (equal to ``rank_bm25.BM25Okapi`` over the scope's visible records)."""
        _check_mode(mode)
        return self._lexical_query(
            scope, None, text, limit, authorization, metadata_filter, on_denied
        )

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
        """The drift guard, ``query`` and ``lexical_query`` over one snapshot."""
        _check_mode(mode)
        snap = self._snapshot(scope)
        found = self._query(snap, vector, limit, authorization, metadata_filter, on_denied)
        lexical = self._lexical_query(
            scope, snap, text, limit, authorization, metadata_filter, on_denied
        )
        return HybridAnswer(_foreign(snap, embedder_id, dimensions), found, lexical)

    def _lexical_query(
        self,
        scope: Scope,
        pinned: _Snapshot | None,
        text: str,
        limit: int,
        authorization: Authorization | None,
        metadata_filter: Mapping[str, Any] | Filter | None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None,
    ) -> tuple[ScoredRecord, ...]:
        """BM25 over ``pinned`` (or the scope's current snapshot when ``None``)."""
        if limit <= 0 or not text.strip():
            return ()
        with self._lock:
            lexical = self._lexical.get(scope)
            if lexical is None:
                lexical = self._lexical[scope] = _Lexical(self._analyzer)
        with lexical.lock:
            snap = pinned if pinned is not None else self._snapshot(scope)
            lexical.sync(snap)
            rows = snap.searchable()
            flt = parse_filter(metadata_filter)
            if authorization is not None or flt is not None:
                decisions: dict[str, bool] = {}

                def allowed(source: str) -> bool:
                    assert authorization is not None
                    if source not in decisions:
                        decisions[source] = decide_access(
                            source, snap.grants.get(source), authorization
                        ).allowed
                    return decisions[source]

                candidates = [
                    r.id
                    for r in rows.values()
                    if (flt is None or flt.matches(r.metadata))
                    and (
                        authorization is None
                        or (
                            bool(r.access_sources) and all(allowed(src) for src in r.access_sources)
                        )
                    )
                ]
            else:
                candidates = list(rows)
            found = lexical.index.search(text, limit=limit, candidates=candidates)
            if on_denied is not None and authorization is not None:
                matching = [r.id for r in rows.values() if flt is None or flt.matches(r.metadata)]
                unfiltered = lexical.index.search(text, limit=limit, candidates=matching)
                _report_denied(snap, [rows[rid] for rid, _ in unfiltered], authorization, on_denied)
        return tuple(ScoredRecord(rows[rid], score) for rid, score in found)

    def _access_mask(
        self, snap: _Snapshot, index: _Index, authorization: Authorization | None
    ) -> np.ndarray | None:
        if authorization is None:
            return None
        allowed = np.fromiter(
            (decide_access(s, snap.grants.get(s), authorization).allowed for s in index.sources),
            dtype=bool,
            count=len(index.sources),
        )
        mask = allowed[index.source_pos]
        for pos in index.derived:
            roots = index.rows[pos].roots
            mask[pos] = bool(roots) and all(
                decide_access(s, snap.grants.get(s), authorization).allowed for s in roots
            )
        return mask

    # -- grants --------------------------------------------------------------------------------
    def set_source_access(self, scope: Scope, grants: Sequence[Grant]) -> None:
        with self.unit_of_work(scope) as uow:
            uow.grants.set(list(grants))
            uow.commit()

    def check_source_access(
        self, scope: Scope, source_ids: Sequence[str], authorization: Authorization
    ) -> Mapping[str, AccessDecision]:
        grants = self._snapshot(scope).grants
        return {
            s: decide_access(s, grants.get(s), authorization) for s in dict.fromkeys(source_ids)
        }
