"""Deterministic helpers shared by the contract suites and the opt-in plugin.

Everything here is deterministic: vectors come from SHA-256, never from a random generator, so
a failing contract test fails the same way on every machine and numpy version. The one piece
of state is the record of what the builders wrote (:class:`WrittenSources`): while a suite
test runs, ``make_batch``, ``derived_batch``, ``publish_sources`` and ``granted`` note every
(scope, source id) they touch, so the isolation canary checks exactly what the suite wrote.
Only ``ragport.domain``, ``ragport.ports``, numpy and attrs are imported: the suites must
never depend on an adapter.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import numpy as np

from ragport.domain.model import Grant, Record, Scope, chunk_id
from ragport.ports.embedder import Vector, VectorMatrix
from ragport.ports.store import ChunkStore

__all__ = [
    "CONTRACT_DIMENSIONS",
    "CONTRACT_EMBEDDER_ID",
    "Batch",
    "ContractEmbedder",
    "FixedClock",
    "VectorFactory",
    "WrittenSources",
    "derived_batch",
    "direction",
    "error_chain",
    "error_mentions",
    "granted",
    "hash_vector",
    "make_batch",
    "publish_sources",
    "record_written",
    "recording",
    "scope_for",
    "silent_overrides",
    "visible_pairs",
]

CONTRACT_DIMENSIONS = 8
CONTRACT_EMBEDDER_ID = f"contract-v1:{CONTRACT_DIMENSIONS}"
_EPOCH = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


def hash_vector(text: str, dimensions: int = CONTRACT_DIMENSIONS) -> Vector:
    """An L2-normalised float32 vector derived from SHA-256 of ``text`` (same text, same vector)."""
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
        raise ValueError("dimensions must be a positive int")
    raw = bytearray()
    block = 0
    while len(raw) < 4 * dimensions:
        raw += hashlib.sha256(f"{dimensions}:{block}:{text}".encode()).digest()
        block += 1
    ints = np.frombuffer(bytes(raw[: 4 * dimensions]), dtype=">u4").astype(np.float64)
    centred = ints / float(2**32 - 1) * 2.0 - 1.0  # uniform-ish in [-1, 1]
    norm = float(np.linalg.norm(centred))
    if norm == 0.0:  # pragma: no cover - needs a SHA-256 preimage of zeros
        centred[0] = 1.0
        norm = 1.0
    return np.ascontiguousarray(centred / norm, dtype=np.float32)


def direction(dimensions: int = CONTRACT_DIMENSIONS, *weights: float) -> Vector:
    """A unit vector with the given leading components (the rest zero), for controlled geometry.

    ``direction(8, 1.0, 0.1)`` is close to the first axis; ``direction(8, 1.0, 1.0)`` is 45
    degrees away from it. Used where a test needs to know which record is nearer.
    """
    if not weights or len(weights) > dimensions:
        raise ValueError("give between 1 and `dimensions` weights")
    out = np.zeros(dimensions, dtype=np.float64)
    out[: len(weights)] = weights
    norm = float(np.linalg.norm(out))
    if norm == 0.0:
        raise ValueError("weights must not all be zero")
    return np.ascontiguousarray(out / norm, dtype=np.float32)


@attrs.frozen
class VectorFactory:
    """Deterministic vectors of one dimension: ``factory("text")`` or ``factory.many([...])``."""

    dimensions: int = CONTRACT_DIMENSIONS

    def __call__(self, text: str) -> Vector:
        return hash_vector(text, self.dimensions)

    def many(self, texts: Iterable[str]) -> VectorMatrix:
        rows = [hash_vector(t, self.dimensions) for t in texts]
        if not rows:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return np.ascontiguousarray(np.stack(rows), dtype=np.float32)


class ContractEmbedder:
    """A tiny deterministic ``Embedder`` built on :func:`hash_vector` (no model, no I/O)."""

    def __init__(self, dimensions: int = CONTRACT_DIMENSIONS) -> None:
        self._vectors = VectorFactory(dimensions)

    @property
    def id(self) -> str:
        return f"contract-v1:{self._vectors.dimensions}"

    @property
    def dimensions(self) -> int:
        return self._vectors.dimensions

    def embed(self, texts: Sequence[str]) -> VectorMatrix:
        return self._vectors.many(texts)


class FixedClock:
    """A ``Clock`` that stands still until told to move (timezone-aware UTC)."""

    def __init__(self, start: datetime = _EPOCH) -> None:
        if start.tzinfo is None:
            raise ValueError("FixedClock needs a timezone-aware start")
        self._now = start

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now = self._now + timedelta(seconds=seconds)
        return self._now


def scope_for(key: str, *, prefix: str = "contract") -> Scope:
    """A scope unique to ``key`` (e.g. a pytest node id), stable from run to run."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Scope(f"{prefix}-tenant-{digest}", f"{prefix}-resource", f"{prefix}-corpus-{digest}")


class WrittenSources:
    """The (scope, source id) pairs a suite wrote, per scope in first-write order; thread-safe.

    The builders below add to the log that :func:`recording` made current, so a test that
    writes through them is covered by the isolation canary without listing its sources.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_scope: dict[Scope, dict[str, None]] = {}

    def add(self, scope: Scope, source_ids: Iterable[str]) -> None:
        with self._lock:
            self._by_scope.setdefault(scope, {}).update(dict.fromkeys(source_ids))

    def scopes(self) -> tuple[Scope, ...]:
        with self._lock:
            return tuple(self._by_scope)

    def sources(self, scope: Scope) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._by_scope.get(scope, ()))

    def __len__(self) -> int:
        with self._lock:
            return sum(len(ids) for ids in self._by_scope.values())


_CURRENT: list[WrittenSources] = []
"""The logs being recorded into, innermost last. Module state, not a context variable, so
that writer threads a test starts record into the same log."""


@contextmanager
def recording(log: WrittenSources) -> Iterator[WrittenSources]:
    """Make ``log`` the one the builders record into until the block ends."""
    _CURRENT.append(log)
    try:
        yield log
    finally:
        _CURRENT.remove(log)


def record_written(scope: Scope, *source_ids: str) -> None:
    """Note that ``source_ids`` of ``scope`` were (or may have been) written.

    The builders call it; call it yourself only for a write no builder makes (a source a
    ``rekey`` or ``repoint_source`` moves records to, a use case called directly).
    """
    for log in _CURRENT:
        log.add(scope, source_ids)


def granted(scope: Scope, grants: Iterable[Grant]) -> list[Grant]:
    """``grants`` as a list, recorded as written to ``scope``: wrap what you pass to
    ``grants.set`` or ``set_source_access`` so the canary checks those sources too."""
    listed = list(grants)
    record_written(scope, *(grant.source_id for grant in listed))
    return listed


@attrs.frozen
class Batch:
    """Records and their vectors, row ``i`` of ``vectors`` belonging to ``records[i]``."""

    records: tuple[Record, ...]
    vectors: VectorMatrix = attrs.field(eq=False)

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(r.id for r in self.records)

    @property
    def pairs(self) -> frozenset[tuple[str, str]]:
        """``{(id, text)}``: what a snapshot comparison looks at."""
        return frozenset((r.id, r.text) for r in self.records)

    def __add__(self, other: Batch) -> Batch:
        return Batch(
            self.records + other.records,
            np.ascontiguousarray(np.vstack([self.vectors, other.vectors]), dtype=np.float32),
        )


def make_batch(
    scope: Scope,
    source_id: str,
    texts: Sequence[str],
    *,
    generation: int,
    embedder_id: str | None = CONTRACT_EMBEDDER_ID,
    dimensions: int = CONTRACT_DIMENSIONS,
    metadata: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    vectors: VectorMatrix | Sequence[Vector] | None = None,
) -> Batch:
    """Chunk records ``source_id#0001..`` of ``texts`` at ``generation``, with hash vectors.

    ``metadata`` is one mapping for every record or one per text; ``vectors`` overrides the
    hash vectors (one row per text).
    """
    if metadata is None or isinstance(metadata, Mapping):
        per_record: list[Mapping[str, Any]] = [dict(metadata or {}) for _ in texts]
    else:
        per_record = [dict(m) for m in metadata]
    if len(per_record) != len(texts):
        raise ValueError("give one metadata mapping per text")
    record_written(scope, source_id)
    records = tuple(
        Record(
            id=chunk_id(source_id, index),
            scope=scope,
            source_id=source_id,
            kind="chunk",
            text=text,
            metadata=dict(per_record[index]),
            embedder_id=embedder_id,
            dimensions=dimensions,
            generation=generation,
            chunk_index=index,
            start=0,
            end=len(text),
        )
        for index, text in enumerate(texts)
    )
    if vectors is None:
        matrix = VectorFactory(dimensions).many(texts)
    else:
        matrix = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        if matrix.shape != (len(texts), dimensions):
            raise ValueError("vectors must have one row of `dimensions` columns per text")
    return Batch(records, matrix)


def derived_batch(
    scope: Scope,
    record_id: str,
    text: str,
    *,
    roots: Sequence[str],
    lineage: Sequence[str] | None = None,
    generation: int,
    embedder_id: str | None = CONTRACT_EMBEDDER_ID,
    dimensions: int = CONTRACT_DIMENSIONS,
    vector: Vector | None = None,
) -> Batch:
    """One derived record (its ``source_id`` is its own id) resting on ``lineage``/``roots``."""
    record_written(scope, record_id, *roots, *(lineage or ()))
    record = Record(
        id=record_id,
        scope=scope,
        source_id=record_id,
        kind="derived",
        text=text,
        embedder_id=embedder_id,
        dimensions=dimensions,
        generation=generation,
        lineage=tuple(roots if lineage is None else lineage),
        roots=tuple(roots),
    )
    row = hash_vector(text, dimensions) if vector is None else np.asarray(vector, np.float32)
    return Batch((record,), np.ascontiguousarray(row.reshape(1, dimensions), dtype=np.float32))


def publish_sources(
    store: ChunkStore,
    scope: Scope,
    versions: Mapping[str, Sequence[str] | None],
    **batch_options: Any,
) -> tuple[int, dict[str, Batch]]:
    """Replace each named source with new texts in one unit of work and publish it.

    The replacement protocol every store supports: ``stage()``, then per source
    ``retire_source`` *before* ``add``, then ``publish`` and ``commit``. ``None`` as the texts
    deletes the source. Returns the published generation and the batches written.
    """
    written: dict[str, Batch] = {}
    record_written(scope, *versions)
    with store.unit_of_work(scope) as uow:
        generation = uow.generations.stage()
        for source_id, texts in versions.items():
            uow.records.retire_source(source_id, generation=generation)
            if texts is None:
                continue
            batch = make_batch(scope, source_id, texts, generation=generation, **batch_options)
            uow.records.add(batch.records, batch.vectors)
            written[source_id] = batch
        uow.generations.publish(generation)
        uow.commit()
    return generation, written


def visible_pairs(
    store: ChunkStore, scope: Scope, source_ids: Iterable[str]
) -> frozenset[tuple[str, str]]:
    """``{(id, text)}`` of the named sources as ``get_by_source`` reports them now."""
    return frozenset(
        (record.id, record.text)
        for source_id in source_ids
        for record in store.get_by_source(scope, source_id)
    )


def silent_overrides(cls: type) -> list[str]:
    """Contract test methods that ``cls`` (or a class between it and the suite) replaced.

    An override is allowed only when it carries ``pytest.mark.xfail(reason=...)`` with a
    non-empty reason, the langchain-tests rule: a known gap is declared, never hidden. A test
    set to ``None`` (deleted) counts as an override too.
    """
    package = __name__.rpartition(".")[0] + "."
    suite = [c for c in cls.__mro__ if c.__module__.startswith(package)]
    names = sorted({name for c in suite for name in vars(c) if name.startswith("test")})
    found = []
    for name in names:
        owner = next(c for c in cls.__mro__ if name in vars(c))
        if owner in suite:
            continue
        marks = getattr(vars(owner)[name], "pytestmark", [])
        declared = any(
            mark.name == "xfail" and str(mark.kwargs.get("reason") or "").strip() for mark in marks
        )
        if not declared:
            found.append(f"{owner.__qualname__}.{name}")
    return found


def error_chain(error: BaseException) -> list[BaseException]:
    """``error`` and every exception reachable from it through ``__cause__`` and ``__context__``.

    Both links are followed, whether or not ``__suppress_context__`` hides the context from a
    printed traceback: a logger, an error reporter or a debugger can still reach it.
    """
    found: list[BaseException] = []
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if any(current is seen for seen in found):
            continue
        found.append(current)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)
    return found


def error_mentions(error: BaseException, needle: str) -> list[str]:
    """Where ``needle`` shows in ``error``'s chain: message, repr, args and instance attributes.

    Returns a description per hit (empty when nothing leaks). Attributes are searched one
    level deep, as ``repr`` shows them, plus ``str``/``bytes`` values themselves (a
    ``JSONDecodeError`` keeps the whole body in ``.doc``, a ``UnicodeError`` the text in
    ``.object``).
    """
    raw = needle.encode("utf-8")
    hits: list[str] = []
    for link in error_chain(error):
        shown = [str(link), repr(link), repr(link.args)]
        for name, value in getattr(link, "__dict__", {}).items():
            shown.append(f"{name}={value!r}")
            if isinstance(value, bytes) and raw in value:
                hits.append(f"{type(link).__name__}.{name}")
        for attr in ("doc", "object", "params", "statement"):
            value = getattr(link, attr, None)
            if value is not None:
                shown.append(repr(value))
        if any(needle in piece for piece in shown):
            hits.append(type(link).__name__)
    return hits
