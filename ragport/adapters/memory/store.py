"""In-memory ChunkStore: copy-on-write snapshots per scope, numpy cosine search.

Each scope holds an immutable snapshot (``snapshot.py``). A unit of work
(``unit_of_work.py``) copies the snapshot's indexes (not the vectors), mutates the copy, and
swaps it in on commit, so readers always see one committed snapshot and never wait for a
writer. Writers on one scope are serialized by a per-scope lock. A snapshot builds its search
matrix lazily, once, on the first query after a commit; the lexical leg keeps one BM25 index
per scope in step with it (``lexical.py``).
"""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from ragport.adapters.lexical.analyzers import make_analyzer
from ragport.adapters.memory.lexical import ScopeLexicon
from ragport.adapters.memory.snapshot import (
    Snapshot,
    access_mask,
    hand_out_scored,
    lend_scored,
    report_denied,
)
from ragport.adapters.memory.unit_of_work import InMemoryUnitOfWork
from ragport.domain.errors import CapabilityError, ScopeError
from ragport.domain.filters import Filter, parse_filter
from ragport.domain.model import (
    AccessDecision,
    Authorization,
    Capabilities,
    Grant,
    Record,
    Scope,
    decide_access,
    validate_text,
)
from ragport.engine.history import history_of
from ragport.ports.embedder import Vector
from ragport.ports.history import GenerationChange, check_history_args
from ragport.ports.store import EmbedderKey, GuardedQuery, HybridAnswer, ScoredRecord

__all__ = ["InMemoryStore"]


_SORT_IN_PYTHON = 64
"""Up to this many finalists are ordered in Python: fewer numpy calls for the usual top-k."""
_SCORE = operator.itemgetter(1)
_FLOAT32 = np.dtype(np.float32)
_GROUPS = 256
"""Score groups for the threshold of ``_top``: one column maximum each (see ``_floor``)."""
_GROUP_LIMIT = _GROUPS // 8
"""Up to this limit the group maxima give a tight threshold (a few rows past ``limit``)."""


def _floor(scores: np.ndarray, limit: int) -> float | None:
    """A score that at least ``limit`` of the (finite) ``scores`` reach, close to the
    ``limit``-th best; ``None`` when there are too few rows to group or ``limit`` is too large.

    Row i of the first ``rows * _GROUPS`` belongs to group ``i % _GROUPS``: those scores as a
    (rows, _GROUPS) view, whose column maxima numpy takes in one vectorised pass. Each
    group's maximum is one of its rows, so the ``limit``-th largest maximum is reached by at
    least ``limit`` rows (one per group), and every row that scores above it, ties at the cut
    and rows past the last full group included, scores at least it. That costs a pass over the
    scores and a partition of 256 values instead of a partition of every score.
    """
    rows = scores.shape[0] // _GROUPS
    if rows < 2 or limit > _GROUP_LIMIT:
        return None
    best = np.maximum.reduce(scores[: rows * _GROUPS].reshape(rows, _GROUPS), axis=0)
    best.partition(_GROUPS - limit)
    return best.item(_GROUPS - limit)  # type: ignore[no-any-return]


_BY_ARGMAX = 10
"""Up to this limit, finite scores are ranked by ``limit`` argmax passes (``_by_argmax``):
fewer numpy calls than a threshold, which is what a query pays for after the matrix-vector
product has emptied the caches (measured on the development VM, after a product: 22 vs
63 us at 10,000 rows and limit 5, 119 vs 233 us at 100,000; from limit 20 on the grouped
threshold is cheaper)."""
_NEG_INF = float("-inf")


def _by_argmax(scores: np.ndarray, limit: int) -> list[tuple[int, float]]:
    """The best ``limit`` of ``scores`` (finite, more than ``limit`` of them), ties by
    position: ``argmax`` returns the first position of the maximum. Each pick is set to
    -inf for the next pass and written back before returning, so ``scores`` ends unchanged.
    """
    if not scores.flags.writeable:
        scores = scores.copy()
    found: list[tuple[int, float]] = []
    argmax, item = scores.argmax, scores.item
    try:
        for _ in range(limit):
            i = int(argmax())
            found.append((i, item(i)))
            scores[i] = _NEG_INF
    finally:
        for i, score in found:
            scores[i] = score
    return found


def _top(
    scores: np.ndarray, mask: np.ndarray | None, limit: int, *, finite: bool = False
) -> list[tuple[int, float]]:
    """Positions and scores of the best ``limit`` rows allowed by ``mask``; ties by id.

    An ``Index`` holds its rows in id order, so ties by id are ties by position. ``finite``:
    the caller knows that no score is NaN or infinite, which lets a small top-k come from
    argmax passes (``_by_argmax``) and a larger one from a threshold of group maxima
    (``_floor``); else (a NaN has no place in an order) every score is partitioned, as numpy
    orders NaN.
    """
    if mask is None:
        positions = None
    else:
        positions = mask.nonzero()[0]
        scores = scores[positions]
    size = scores.shape[0]
    if size == 0:
        return []
    if size > limit and finite and limit <= _BY_ARGMAX:
        found = _by_argmax(scores, limit)
        if positions is None:
            return found
        return [(int(positions[pos]), score) for pos, score in found]
    if size > limit:
        kth = _floor(scores, limit) if finite else None
        if kth is None:
            part = scores.copy()  # np.partition's own copy, without its Python wrapper
            part.partition(size - limit)
            kth = part[size - limit]
        keep = (scores >= kth).nonzero()[0]  # every tie at the cut, in position order
    else:
        keep = np.arange(size)
    if keep.shape[0] <= _SORT_IN_PYTHON:
        # keep is in position order and Python's sort is stable (reverse=True too), so ties
        # stay in position order.
        # (``item`` reads one score as a Python float: for these few rows, cheaper than
        # gathering them into an array first.)
        item = scores.item
        found = sorted([(i, item(i)) for i in keep.tolist()], key=_SCORE, reverse=True)[:limit]
    else:
        # A stable sort of the scores keeps ties in position order.
        order = keep[np.argsort(-scores[keep], kind="stable")[:limit]]
        found = list(zip(order.tolist(), scores[order].tolist(), strict=True))
    if positions is None:
        return found
    return [(int(positions[pos]), score) for pos, score in found]


def _check_mode(mode: str) -> None:
    if mode != "bm25":
        raise CapabilityError(
            f"the in-memory store offers lexical mode 'bm25', not {mode!r}", capability="lexical"
        )


def _foreign(snap: Snapshot, embedder_id: str, dimensions: int) -> frozenset[EmbedderKey]:
    """The snapshot's visible (embedder_id, dimensions) pairs other than the given one."""
    found = snap.embedders()
    if not found or (len(found) == 1 and (embedder_id, dimensions) in found):
        return _NONE
    return frozenset(k for k in found if k != (embedder_id, dimensions))


_NONE: frozenset[EmbedderKey] = frozenset()


_CAPABILITIES = Capabilities(
    lexical_modes=("bm25",),
    authorization="acl",
    generations=True,
    transactions=True,
    guarded_query=True,
    generation_history=True,
    forgotten_lookup=True,
    private_reads=True,  # every read hands out copies (snapshot.hand_out)
    borrowed_query=True,  # ... except borrowed_query, which lends the stored records
)


class InMemoryStore:
    """A thread-safe, transactional ChunkStore held in process memory (the reference fake)."""

    provider = "memory"

    def __init__(self, *, lexical_language: str | None = None) -> None:
        """``lexical_language``: ``None`` (language-neutral tokens) or ``"english"`` (stop
        words removed, Snowball-stemmed, like PostgreSQL's ``english`` configuration)."""
        self._analyzer = make_analyzer(lexical_language)
        self._snapshots: dict[Scope, Snapshot] = {}
        self._writers: dict[Scope, threading.Lock] = {}
        self._lexical: dict[Scope, ScopeLexicon] = {}
        self._lock = threading.Lock()

    @property
    def capabilities(self) -> Capabilities:
        return _CAPABILITIES

    # -- snapshots -----------------------------------------------------------------------------
    def _snapshot(self, scope: Scope) -> Snapshot:
        # A committed scope is one dict read (atomic under the GIL; _install swaps whole
        # snapshots); only a scope's first snapshot is made under the lock.
        snap = self._snapshots.get(scope)
        if snap is not None:
            return snap
        with self._lock:
            snap = self._snapshots.get(scope)
            if snap is None:
                snap = self._snapshots[scope] = Snapshot(rows={}, by_source={}, by_id={})
            return snap

    def _install(self, scope: Scope, snap: Snapshot) -> None:
        with self._lock:
            self._snapshots[scope] = snap

    def _writer(self, scope: Scope) -> threading.Lock:
        with self._lock:
            return self._writers.setdefault(scope, threading.Lock())

    @contextmanager
    def unit_of_work(self, scope: Scope) -> Iterator[InMemoryUnitOfWork]:
        if not isinstance(scope, Scope):
            raise ScopeError("scope must be a Scope", field="scope")
        with self._writer(scope):
            uow = InMemoryUnitOfWork(scope, self._snapshot(scope), self._install, owner=self)
            try:
                yield uow
            finally:
                if not uow.done:
                    uow.rollback()

    # -- reads ---------------------------------------------------------------------------------
    def current_generation(self, scope: Scope) -> int:
        return self._snapshot(scope).pointer

    def get_by_source(self, scope: Scope, source_id: str) -> Sequence[Record]:
        validate_text(source_id, field="source_id")  # what PostgreSQL cannot hold, refused alike
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

    def forgotten_among(self, scope: Scope, ids: Sequence[str]) -> frozenset[str]:
        wanted = [validate_text(i, field="ids") for i in ids]
        return self._snapshot(scope).forgotten().intersection(wanted)

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
        foreign = _foreign(snap, embedder_id, dimensions)
        found = self._query(snap, vector, limit, authorization, metadata_filter, on_denied)
        return GuardedQuery(foreign, found)

    def borrowed_query(
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
        """``guarded_query`` lending the snapshot's own records (``SupportsBorrowedQuery``):
        no record or metadata copy per hit. The snapshot's records are never changed, so a
        caller that keeps to the borrowing rules sees exactly what ``guarded_query`` returns.
        It reads the snapshot itself, not through ``guarded_query``: a subclass that changes
        ``guarded_query`` changes this too (or declares ``borrowed_query=False``)."""
        snap = self._snapshot(scope)
        foreign = _foreign(snap, embedder_id, dimensions)
        found = self._query(
            snap, vector, limit, authorization, metadata_filter, on_denied, lend=True
        )
        return GuardedQuery(foreign, found)

    def _query(
        self,
        snap: Snapshot,
        vector: Vector,
        limit: int,
        authorization: Authorization | None,
        metadata_filter: Mapping[str, Any] | Filter | None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None,
        *,
        lend: bool = False,
    ) -> tuple[ScoredRecord, ...]:
        """The vector leg over ``snap``: copies of its records (``hand_out``), or with
        ``lend`` the records themselves (``borrowed_query``)."""
        q = vector if type(vector) is np.ndarray and vector.dtype is _FLOAT32 else None
        if q is None:
            q = np.asarray(vector, dtype=np.float32)
        if q.ndim != 1:
            q = q.reshape(-1)
        if limit <= 0:
            return ()
        index = snap.index(q.shape[0])
        if not index.rows:
            return ()
        fmask = None
        flt = None if metadata_filter is None else parse_filter(metadata_filter)
        if flt is not None:
            fmask = np.fromiter(
                (flt.matches(r.metadata) for r in index.rows), dtype=bool, count=len(index.rows)
            )
        amask = None if authorization is None else access_mask(snap, index, authorization)
        mask = amask if fmask is None else (fmask if amask is None else amask & fmask)
        # Rows are unit vectors: the cosine is (row . q) / |q|. Ranking by row . q and dividing
        # only the finalists' scores costs no numpy call to scale q (dividing by 0 or by 1.0
        # would change nothing).
        norm = math.sqrt(q.dot(q))  # what np.linalg.norm computes, without its wrapper
        # A finite float32 |q|^2 bounds |q| far below float32's range, and the rows are finite
        # unit vectors (or zero): every score is finite.
        finite = math.isfinite(norm)
        scores = index.matrix @ q
        if on_denied is not None and authorization is not None:
            unfiltered = [index.rows[i] for i, _ in _top(scores, fmask, limit, finite=finite)]
            report_denied(snap, unfiltered, authorization, on_denied)
        rows = index.rows
        found = _top(scores, mask, limit, finite=finite)
        scored = lend_scored if lend else hand_out_scored
        if norm in (0.0, 1.0):
            return tuple([scored(rows[i], score) for i, score in found])
        return tuple([scored(rows[i], score / norm) for i, score in found])

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
        pinned: Snapshot | None,
        text: str,
        limit: int,
        authorization: Authorization | None,
        metadata_filter: Mapping[str, Any] | Filter | None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None,
    ) -> tuple[ScoredRecord, ...]:
        """BM25 over ``pinned`` (or the scope's current snapshot when ``None``)."""
        validate_text(text, field="query")
        if limit <= 0 or not text.strip():
            return ()
        with self._lock:
            lexical = self._lexical.get(scope)
            if lexical is None:
                lexical = self._lexical[scope] = ScopeLexicon(self._analyzer)
        return lexical.search(
            (lambda: pinned) if pinned is not None else (lambda: self._snapshot(scope)),
            text,
            limit,
            authorization,
            parse_filter(metadata_filter),
            on_denied,
        )

    # -- grants --------------------------------------------------------------------------------
    def set_source_access(self, scope: Scope, grants: Sequence[Grant]) -> None:
        with self.unit_of_work(scope) as uow:
            uow.grants.set(list(grants))
            uow.commit()

    def check_source_access(
        self, scope: Scope, source_ids: Sequence[str], authorization: Authorization
    ) -> Mapping[str, AccessDecision]:
        wanted = [validate_text(s, field="source_ids") for s in dict.fromkeys(source_ids)]
        grants = self._snapshot(scope).grants
        return {s: decide_access(s, grants.get(s), authorization) for s in wanted}

    def get_source_access(self, scope: Scope, source_ids: Sequence[str]) -> Mapping[str, Grant]:
        wanted = [validate_text(s, field="source_ids") for s in dict.fromkeys(source_ids)]
        grants = self._snapshot(scope).grants
        return {s: grants[s] for s in wanted if s in grants}

    def list_source_ids(
        self, scope: Scope, *, after: str | None = None, limit: int = 1_000
    ) -> Sequence[str]:
        ids = sorted({r.source_id for r in self._snapshot(scope).visible() if r.kind == "chunk"})
        return [s for s in ids if after is None or s > after][:limit]

    # -- history -------------------------------------------------------------------------------
    def generation_history(
        self, scope: Scope, *, limit: int = 10, max_ids: int = 100
    ) -> Sequence[GenerationChange]:
        limit, max_ids = check_history_args(limit, max_ids)
        if not isinstance(scope, Scope):
            raise ScopeError("scope must be a Scope", field="scope")
        snap = self._snapshot(scope)
        return history_of(
            (row.record for row in snap.rows.values()),
            pointer=snap.pointer,
            floor=snap.floor,
            forgotten=snap.forgotten(),
            limit=limit,
            max_ids=max_ids,
        )
