"""``BackendStore``: the whole ``ChunkStore`` port over a ``StorageBackend``, written once.

Reads open one ``backend.read(scope)`` each, so every answer comes from one committed state;
``unit_of_work`` wraps one ``backend.write(scope)``. The visibility rule, tombstones, the
grant rule and the filter are applied here, row by row, as ``nearest`` streams its rows best
first, so they hold before ``limit`` whatever the backend is.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from ragport.domain.errors import ScopeError, ValidationError
from ragport.domain.filters import Filter, parse_filter
from ragport.domain.model import (
    AccessDecision,
    Authorization,
    Capabilities,
    Grant,
    Record,
    Scope,
    decide_access,
    is_forgotten,
    is_visible,
    validate_text,
)
from ragport.engine._guard import Guard
from ragport.engine.copies import hand_out
from ragport.engine.history import history_of
from ragport.engine.unit_of_work import BackendUnitOfWork, _ids, by_id
from ragport.ports.backend import BackendReader, StorageBackend
from ragport.ports.embedder import Vector
from ragport.ports.history import GenerationChange, check_history_args
from ragport.ports.store import EmbedderKey, GuardedQuery, ScoredRecord

__all__ = ["BackendStore"]


def _scope(scope: object) -> Scope:
    if not isinstance(scope, Scope):
        raise ScopeError("scope must be a Scope", field="scope")
    return scope


def _visible(rows: Iterable[Record], pointer: int) -> Iterator[Record]:
    return (r for r in rows if is_visible(r.generation, r.retired_generation, pointer))


def _forgotten(reader: BackendReader) -> frozenset[str]:
    return frozenset(t.id for t in reader.tombstones() if t.reason == "forgotten")


class _Grants:
    """Grants read once per query, as the walk first needs them (one snapshot)."""

    def __init__(self, reader: BackendReader) -> None:
        self._reader = reader
        self._grants: Mapping[str, Grant] | None = None

    def get(self, source_id: str) -> Grant | None:
        if self._grants is None:
            self._grants = dict(self._reader.grants())
        return self._grants.get(source_id)


def _allowed(record: Record, grants: _Grants, caller: Authorization) -> bool:
    sources = record.access_sources
    return bool(sources) and all(decide_access(s, grants.get(s), caller).allowed for s in sources)


class BackendStore:
    """A transactional, generation-versioned ``ChunkStore`` with grants over any backend.

    ``BackendStore(backend)`` passes ``ChunkStoreContract`` whenever ``backend`` keeps the
    promises of ``ragport.ports.backend`` (``StorageBackendContract`` checks them that way).
    It also answers ``generation_history`` (``SupportsGenerationHistory``) and
    ``guarded_query`` (``SupportsGuardedQuery``: the drift guard and the vector leg from one
    ``read``), derived from the same members, and declares ``private_reads``. It does not
    declare ``forgotten_lookup``: the narrow port reads tombstones whole, so
    ``forgotten_among`` costs what the scope's tombstones cost, not what the ids do.
    """

    capabilities = Capabilities(
        authorization="acl",
        generations=True,
        transactions=True,
        generation_history=True,
        guarded_query=True,
        private_reads=True,  # every record handed out is a fresh copy (hand_out)
    )

    def __init__(self, backend: StorageBackend) -> None:
        provider = backend.provider
        if not isinstance(provider, str) or not provider:
            raise ValidationError("a backend's provider is a non-empty str", field="provider")
        self._backend = backend
        self._provider = provider
        self._guard = Guard(provider)

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def backend(self) -> StorageBackend:
        """The backend this store runs on."""
        return self._backend

    # -- writes -----------------------------------------------------------------------------
    @contextmanager
    def unit_of_work(self, scope: Scope) -> Iterator[BackendUnitOfWork]:
        scope = _scope(scope)
        with self._guard:
            block = self._backend.write(scope)
            writer = block.__enter__()
        uow = BackendUnitOfWork(scope, writer, self._guard)
        try:
            yield uow
        except BaseException:
            uow.done = True
            with self._guard:
                block.__exit__(*sys.exc_info())
            raise
        uow.done = True
        with self._guard:
            block.__exit__(None, None, None)

    def set_source_access(self, scope: Scope, grants: Sequence[Grant]) -> None:
        with self.unit_of_work(scope) as uow:
            uow.grants.set(list(grants))
            uow.commit()

    # -- reads ------------------------------------------------------------------------------
    @contextmanager
    def _reading(self, scope: Scope) -> Iterator[BackendReader]:
        scope = _scope(scope)
        with self._guard, self._backend.read(scope) as reader:
            yield reader

    def current_generation(self, scope: Scope) -> int:
        with self._reading(scope) as r:
            return r.state().pointer

    def get_by_source(self, scope: Scope, source_id: str) -> Sequence[Record]:
        validate_text(source_id, field="source_id")
        with self._reading(scope) as r:
            pointer = r.state().pointer
            return [hand_out(x) for x in by_id(_visible(r.rows(source_id=source_id), pointer))]

    def list_embedders(self, scope: Scope) -> frozenset[EmbedderKey]:
        with self._reading(scope) as r:
            pointer = r.state().pointer
            return frozenset((x.embedder_id, x.dimensions) for x in _visible(r.rows(), pointer))

    def foreign_embedders(
        self, scope: Scope, embedder_id: str, dimensions: int
    ) -> frozenset[EmbedderKey]:
        return frozenset(k for k in self.list_embedders(scope) if k != (embedder_id, dimensions))

    def list_invalidated_ids(self, scope: Scope) -> frozenset[str]:
        with self._reading(scope) as r:
            return _forgotten(r)

    def generation_history(
        self, scope: Scope, *, limit: int = 10, max_ids: int = 100
    ) -> Sequence[GenerationChange]:
        limit, max_ids = check_history_args(limit, max_ids)
        with self._reading(scope) as r:
            state = r.state()
            return history_of(
                r.rows(),
                pointer=state.pointer,
                floor=state.floor,
                forgotten=_forgotten(r),
                limit=limit,
                max_ids=max_ids,
            )

    def check_source_access(
        self, scope: Scope, source_ids: Sequence[str], authorization: Authorization
    ) -> Mapping[str, AccessDecision]:
        wanted = _ids(source_ids, "source_ids")
        grants = self._grants_of(scope, wanted)
        return {s: decide_access(s, grants.get(s), authorization) for s in wanted}

    def get_source_access(self, scope: Scope, source_ids: Sequence[str]) -> Mapping[str, Grant]:
        wanted = _ids(source_ids, "source_ids")
        found = self._grants_of(scope, wanted)
        return {s: found[s] for s in wanted if s in found}

    def _grants_of(self, scope: Scope, wanted: list[str]) -> Mapping[str, Grant]:
        with self._reading(scope) as r:
            return dict(r.grants(wanted)) if wanted else {}

    def list_source_ids(
        self, scope: Scope, *, after: str | None = None, limit: int = 1_000
    ) -> Sequence[str]:
        if after is not None:
            validate_text(after, field="after")
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ValidationError("limit must be an int", field="limit")
        with self._reading(scope) as r:
            pointer = r.state().pointer
            ids = {x.source_id for x in _visible(r.rows(), pointer) if x.kind == "chunk"}
        return sorted(s for s in ids if after is None or s > after)[: max(limit, 0)]

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
        q, flt = _query_args(vector, limit, metadata_filter, authorization)
        with self._reading(scope) as r:
            hits, denied = _walk(r, q, limit, authorization, flt, on_denied is not None)
        if denied and on_denied is not None:
            on_denied(denied)
        return hits

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
        """The drift guard and the vector leg from one ``read`` (``SupportsGuardedQuery``)."""
        q, flt = _query_args(vector, limit, metadata_filter, authorization)
        with self._reading(scope) as r:
            pointer = r.state().pointer
            keys = {(x.embedder_id, x.dimensions) for x in _visible(r.rows(), pointer)}
            foreign = frozenset(k for k in keys if k != (embedder_id, dimensions))
            hits, denied = _walk(r, q, limit, authorization, flt, on_denied is not None)
        if denied and on_denied is not None:
            on_denied(denied)
        return GuardedQuery(foreign, hits)


def _query_args(
    vector: Vector,
    limit: object,
    metadata_filter: Mapping[str, Any] | Filter | None,
    authorization: object,
) -> tuple[Vector, Filter | None]:
    if authorization is not None and not isinstance(authorization, Authorization):
        raise ValidationError("authorization must be an Authorization", field="authorization")
    flt = parse_filter(metadata_filter)
    q = np.asarray(vector, dtype=np.float32).reshape(-1)
    if not np.all(np.isfinite(q)):
        raise ValidationError("the query vector must be finite", field="vector")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValidationError("limit must be an int", field="limit")
    return q, flt


def _walk(
    r: BackendReader,
    q: Vector,
    limit: int,
    authorization: Authorization | None,
    flt: Filter | None,
    report: bool,
) -> tuple[list[ScoredRecord], list[AccessDecision]]:
    """The top ``limit`` of ``r.nearest(q)`` that pass the whole predicate, taken best first
    as the stream goes; with ``report``, the sources the grant rule withheld from the top
    ``limit`` of the rows that passed everything else."""
    if limit <= 0:
        return [], []
    hits: list[ScoredRecord] = []
    unfiltered: list[Record] = []  # the top `limit` before the grant rule, for on_denied
    pointer, forgotten, grants = r.state().pointer, _forgotten(r), _Grants(r)
    for scored in r.nearest(q):
        record = scored.record
        if (
            record.dimensions != q.shape[0]
            or not is_visible(record.generation, record.retired_generation, pointer)
            or is_forgotten(record, forgotten)
            or (flt is not None and not flt.matches(record.metadata))
        ):
            continue
        if len(unfiltered) < limit:
            unfiltered.append(record)
        if authorization is None or _allowed(record, grants, authorization):
            hits.append(ScoredRecord(hand_out(record), float(scored.score)))
            if len(hits) == limit:
                break
    if authorization is None or not report:
        return hits, []
    sources = dict.fromkeys(s for x in unfiltered for s in x.access_sources or (x.source_id,))
    decisions = (decide_access(s, grants.get(s), authorization) for s in sources)
    return hits, [d for d in decisions if not d.allowed]
