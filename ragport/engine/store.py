"""``BackendStore``: the whole ``ChunkStore`` port over a ``StorageBackend``, written once.

Reads open one read block each, so every answer comes from one committed state: retrieval's
reads (the legs, the drift guard, the embedder and forgotten-id lists) the backend's
``retrieval_read(scope)`` when it defines one (a replica's; one statement without a
transaction), every other read ``backend.read(scope)``; ``unit_of_work`` wraps one
``backend.write(scope)``. Each public method asks its
sub-questions of the backend's pushdown when the backend's class defines one
(``ragport.ports.pushdowns``), else of the generic path over the narrow reader
(``ragport.engine.reads``): the visibility rule, tombstones, the grant rule and the filter
hold before ``limit`` either way, and the denial report, the drift guard and every copy
handed out are the engine's.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any, Literal, cast

import numpy as np

from ragport.domain.errors import CapabilityError, ScopeError, StoreError, ValidationError
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
from ragport.engine._guard import Guard
from ragport.engine.copies import hand_out, hand_out_scored
from ragport.engine.dispatch import GENERIC_LEXICAL_MODE, Pushdowns, capabilities_of, found
from ragport.engine.reads import (
    checked,
    denials,
    forgotten_ids,
    generic_embedders,
    generic_history,
    generic_source_id_page,
    same_scope,
    search_bm25,
    visible,
    walk_vectors,
)
from ragport.engine.rules import forgotten_set
from ragport.engine.unit_of_work import BackendUnitOfWork, _count, _ids, by_id
from ragport.ports.backend import (
    BackendReader,
    BackendWriter,
    GenerationState,
    ReadsConcurrently,
    StorageBackend,
)
from ragport.ports.embedder import Vector
from ragport.ports.history import GenerationChange, check_history_args
from ragport.ports.pushdowns import Admission, GuardedAnswer, LegAnswer
from ragport.ports.store import EmbedderKey, GuardedQuery, HybridAnswer, ScoredRecord

__all__ = ["BackendStore"]

OnDenied = Callable[[Sequence[AccessDecision]], None]
_FLOAT32 = np.dtype(np.float32)
_NO_VECTOR = np.zeros(0, dtype=np.float32)
_NONE: frozenset[EmbedderKey] = frozenset()
_NO_HITS = LegAnswer(())
# Worker threads of companion legs (``_legs``): one per hybrid query in flight, up to this
# many at once (more queue for a thread; none waits on another's connection).
_MAX_WORKERS = 32
_WORKERS: list[ThreadPoolExecutor] = []
_WORKERS_LOCK = [threading.Lock()]  # replaced in a forked child
# The hot read builds its ``Admission`` and ``GuardedQuery`` through their slots (attrs'
# frozen ``__init__`` is a Python call that sets each field through ``object.__setattr__``);
# neither class has a validator or converter to skip.
_new = object.__new__
_SET_POINTER = Admission.__dict__["pointer"].__set__
_SET_AUTHORIZATION = Admission.__dict__["authorization"].__set__
_SET_FILTER = Admission.__dict__["metadata_filter"].__set__
_SET_REPORT = Admission.__dict__["report_denied"].__set__
_SET_FOREIGN = GuardedQuery.__dict__["foreign_embedders"].__set__
_SET_RECORDS = GuardedQuery.__dict__["records"].__set__


def _scope(scope: object) -> Scope:
    if not isinstance(scope, Scope):
        raise ScopeError("scope must be a Scope", field="scope")
    return scope


class _Reading:
    """``with store._reading(scope) as reader``: the backend's ``read`` block (or its
    ``retrieval_read`` block) inside the store's guard (what ``with guard,
    backend.read(scope) as reader`` does), as a class: every
    read pays for it, and a generator-based context manager costs a few microseconds more.
    The guard is entered only when a backend call fails (``try``/``except`` costs nothing on
    the way through; ``with guard`` costs two calls each time)."""

    __slots__ = ("_block", "_guard")

    def __init__(
        self,
        guard: Guard,
        read: Callable[[Scope], AbstractContextManager[BackendReader]],
        scope: Scope,
    ) -> None:
        self._guard = guard
        try:
            self._block = read(scope)
        except BaseException as error:
            guard.__exit__(type(error), error, error.__traceback__)  # translates, or lets go on
            raise

    def __enter__(self) -> BackendReader:
        try:
            return self._block.__enter__()
        except BaseException as error:
            self._guard.__exit__(type(error), error, error.__traceback__)
            raise

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> Literal[False]:
        try:
            self._block.__exit__(kind, error, traceback)  # a read block swallows nothing
        except BaseException as failure:
            self._guard.__exit__(type(failure), failure, failure.__traceback__)
            raise
        if error is not None:
            self._guard.__exit__(kind, error, traceback)  # translates, or lets it go on
        return False


class BackendStore:
    """A transactional, generation-versioned ``ChunkStore`` with grants over any backend.

    ``BackendStore(backend)`` passes ``ChunkStoreContract`` whenever ``backend`` keeps the
    promises of ``ragport.ports.backend`` (``StorageBackendContract`` checks them that way),
    with a lexical leg (the engine's BM25 over ``rows()``, or the backend's
    ``search_lexical``), ``hybrid_query``, ``guarded_query`` (the drift guard from the scope's
    embedder claim) and ``generation_history``. ``forgotten_lookup``, ``preparation`` and
    ``borrowed_query`` are declared when the backend defines the pushdown that makes them
    cheap (``capabilities_of``). ``pushdown=False`` ignores every pushdown: the generic path
    alone, which the differential contract compares with the pushdowns.
    """

    def __init__(self, backend: StorageBackend, *, pushdown: bool = True) -> None:
        provider = backend.provider
        if not isinstance(provider, str) or not provider:
            raise ValidationError("a backend's provider is a non-empty str", field="provider")
        self._backend = backend
        self._provider = provider
        self._guard = Guard(provider)
        self._push = found(backend) if pushdown else Pushdowns()
        self._capabilities = capabilities_of(self._push)
        self._search_vectors = self._push.search_vectors  # the hot read's pushdowns, found once
        self._guarded_search = self._push.guarded_search
        self._retrieval_read = self._push.retrieval_read or backend.read
        self._lend = self._capabilities.borrowed_query
        # The last ``Admission`` of a read with no authorization, filter or report: frozen,
        # so every such read at its pointer shares it (most reads of a store are these).
        self._plain: Admission | None = None

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def backend(self) -> StorageBackend:
        """The backend this store runs on."""
        return self._backend

    @property
    def pushdowns(self) -> tuple[str, ...]:
        """The names of the pushdowns this store calls (empty with ``pushdown=False``)."""
        return self._push.names

    # -- writes -----------------------------------------------------------------------------
    @contextmanager
    def unit_of_work(self, scope: Scope) -> Iterator[BackendUnitOfWork]:
        scope = _scope(scope)
        with self._guard:
            block = self._backend.write(scope)
            writer = block.__enter__()
        uow = self._new_unit(scope, writer)
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

    def _new_unit(self, scope: Scope, writer: BackendWriter) -> BackendUnitOfWork:
        """The unit of work over one ``write`` block's writer. A subclass may return its own
        ``BackendUnitOfWork`` subclass (built with ``self._guard`` and ``self._push``), e.g.
        one that runs hooks after commit."""
        return BackendUnitOfWork(scope, writer, self._guard, self._push)

    def delete_source_at_once(self, scope: Scope, source_id: str) -> tuple[int, int] | None:
        """One source's whole deletion in one write of the backend's own (its
        ``delete_source`` pushdown, ``ragport.ports.pushdowns.DeletesSource``): a generation
        staged, the source's rows retired at it, its grant revoked, the generation published,
        committed. Answers ``(generation, retired rows that were visible)``; ``None``, having
        written nothing, when the backend has no such pushdown or declined (a derived row
        names the source, a host's transaction): the caller then deletes step by step in a
        unit of work (``ragport.application.delete_source``)."""
        scope = _scope(scope)
        validate_text(source_id, field="source_id")
        delete = self._push.delete_source
        if delete is None:
            return None
        with self._guard:
            done = delete(scope, source_id)
        if done is None:
            return None
        if not (isinstance(done, tuple) and len(done) == 2):
            raise StoreError("a delete_source pushdown returned no (generation, count)")
        generation, retired = (_count(n) for n in done)
        return generation, retired

    def set_source_access(self, scope: Scope, grants: Sequence[Grant]) -> None:
        with self.unit_of_work(scope) as uow:
            uow.grants.set(list(grants))
            uow.commit()

    def prepare(self, scope: Scope, *, dimensions: int) -> None:
        """``SupportsPreparation``: the backend's ``prepare`` (declared only when it has one)."""
        scope = _scope(scope)
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ValidationError("dimensions must be a positive int", field="dimensions")
        if self._push.prepare is not None:
            with self._guard:
                self._push.prepare(scope, dimensions=dimensions)

    # -- reads ------------------------------------------------------------------------------
    def _reading(self, scope: Scope) -> _Reading:
        return _Reading(self._guard, self._backend.read, _scope(scope))

    def _retrieving(self, scope: Scope) -> _Reading:
        """The read block of retrieval's reads (``retrieval_read``, else ``read``)."""
        return _Reading(self._guard, self._retrieval_read, _scope(scope))

    def current_generation(self, scope: Scope) -> int:
        with self._reading(scope) as r:
            return r.state().pointer

    def get_by_source(self, scope: Scope, source_id: str) -> Sequence[Record]:
        validate_text(source_id, field="source_id")
        with self._reading(scope) as r:
            pointer = r.state().pointer
            rows = checked(r.rows(source_id=source_id), scope, source_id=source_id)
            return [hand_out(x) for x in by_id(visible(rows, pointer))]

    def _embedders(self, r: BackendReader, scope: Scope, pointer: int) -> frozenset[EmbedderKey]:
        """The exact embedders of the rows visible at ``pointer``."""
        if self._push.embedders is not None:
            return frozenset(self._push.embedders(r))
        return generic_embedders(r, scope, pointer)

    def _foreign(
        self, r: BackendReader, scope: Scope, state: GenerationState, key: EmbedderKey
    ) -> frozenset[EmbedderKey]:
        """The drift guard: the scope's claim answers it when it holds nothing or only
        ``key``; otherwise the visible rows' embedders, exactly."""
        claim = state.embedders
        if claim is not None and (not claim or (len(claim) == 1 and key in claim)):
            return _NONE
        return self._exact_foreign(r, scope, state.pointer, key)

    def _exact_foreign(
        self, r: BackendReader, scope: Scope, pointer: int, key: EmbedderKey
    ) -> frozenset[EmbedderKey]:
        return frozenset(k for k in self._embedders(r, scope, pointer) if k != key)

    def list_embedders(self, scope: Scope) -> frozenset[EmbedderKey]:
        with self._retrieving(scope) as r:
            state = r.state()
            if state.embedders is not None and not state.embedders:
                return _NONE
            return self._embedders(r, scope, state.pointer)

    def foreign_embedders(
        self, scope: Scope, embedder_id: str, dimensions: int
    ) -> frozenset[EmbedderKey]:
        with self._retrieving(scope) as r:
            return self._foreign(r, scope, r.state(), (embedder_id, dimensions))

    def list_invalidated_ids(self, scope: Scope) -> frozenset[str]:
        with self._retrieving(scope) as r:
            return forgotten_ids(r)

    def forgotten_among(self, scope: Scope, ids: Sequence[str]) -> frozenset[str]:
        """``SupportsForgottenLookup`` (declared only with the backend's pushdown: without
        it this reads the scope's tombstones whole)."""
        wanted = _ids(ids, "ids")
        if not wanted:
            return frozenset()
        with self._reading(scope) as r:
            if self._push.forgotten_among is not None:
                return frozenset(self._push.forgotten_among(r, wanted)) & set(wanted)
            if self._push.tombstones_among is not None:
                found = self._push.tombstones_among(r, wanted)
                return forgotten_set(found) & set(wanted)
            return forgotten_ids(r).intersection(wanted)

    def generation_history(
        self, scope: Scope, *, limit: int = 10, max_ids: int = 100
    ) -> Sequence[GenerationChange]:
        limit, max_ids = check_history_args(limit, max_ids)
        with self._reading(scope) as r:
            if self._push.history is not None:
                return list(self._push.history(r, limit=limit, max_ids=max_ids))
            return generic_history(r, scope, limit, max_ids)

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
        if limit <= 0:
            _scope(scope)
            return []
        with self._reading(scope) as r:
            if self._push.source_id_page is not None:
                page = list(self._push.source_id_page(r, after=after, limit=limit))
                return sorted(set(page))[:limit]
            return generic_source_id_page(r, scope, r.state().pointer, after, limit)

    # -- the legs -----------------------------------------------------------------------------
    def _vector_leg(
        self,
        r: BackendReader,
        scope: Scope,
        q: Vector,
        limit: int,
        admission: Admission,
    ) -> LegAnswer:
        if limit <= 0:
            return _NO_HITS
        search = self._search_vectors
        if search is not None:
            answer = search(r, q, admission=admission, limit=limit)
            return _checked_answer(answer, scope, limit, q.shape[0])
        return walk_vectors(r, scope, q, admission, limit)

    def _lexical_leg(
        self, r: BackendReader, scope: Scope, text: str, mode: str, limit: int, admission: Admission
    ) -> LegAnswer:
        if limit <= 0 or not text.strip():
            return LegAnswer(())
        if self._push.search_lexical is not None and mode in self._push.lexical_modes:
            answer = self._push.search_lexical(r, text, mode=mode, admission=admission, limit=limit)
            return _checked_answer(answer, scope, limit, None)
        return search_bm25(r, scope, text, admission, limit)

    def _legs(
        self,
        r: BackendReader,
        companion: AbstractContextManager[BackendReader | None] | None,
        scope: Scope,
        query: tuple[Vector, str, str],
        limit: int,
        admission: Admission,
    ) -> tuple[LegAnswer, LegAnswer]:
        """The vector and lexical legs (``query``: the vector, the text, the mode), both at
        ``admission``. With a companion reader (the same snapshot on a second connection)
        the lexical leg reads on it on a worker thread while the vector leg reads on ``r``,
        so the pair costs about the slower leg; without one (none offered, none free at
        once, or it could not be set up) they read one after the other on ``r``. A lexical
        leg that failed on the companion reads again on ``r`` (the same snapshot), so a
        failure raises what the sequential read raises."""
        q, text, mode = query
        args = (scope, text, mode, limit, admission)
        lexical = None if companion is None else self._submit_lexical(companion, args)
        if lexical is None:
            vector_answer = self._vector_leg(r, scope, q, limit, admission)
            return vector_answer, self._lexical_leg(r, *args)
        try:
            vector_answer = self._vector_leg(r, scope, q, limit, admission)
        except BaseException:
            wait((lexical,))  # the companion is released before ``r``'s block ends
            raise
        try:
            return vector_answer, lexical.result()
        except Exception:  # the companion's failure (a refused import, a lost connection...)
            return vector_answer, self._lexical_leg(r, *args)

    def _submit_lexical(
        self,
        companion: AbstractContextManager[BackendReader | None],
        args: tuple[Scope, str, str, int, Admission],
    ) -> Future[LegAnswer] | None:
        """The lexical leg on the companion's reader, submitted to a worker thread; ``None``
        when the companion lends no reader, or its reader could not be set up or the leg not
        submitted (nothing then stays lent)."""
        try:
            second = companion.__enter__()
        except Exception:  # e.g. the server refused a second connection: read on one
            return None
        if second is None:
            companion.__exit__(None, None, None)
            return None
        try:
            return _workers().submit(self._companion_leg, companion, second, *args)
        except Exception:  # no thread (interpreter shutting down): give the reader back
            companion.__exit__(None, None, None)
            return None

    def _companion_leg(
        self,
        companion: AbstractContextManager[BackendReader | None],
        second: BackendReader,
        scope: Scope,
        text: str,
        mode: str,
        limit: int,
        admission: Admission,
    ) -> LegAnswer:
        """The lexical leg on ``second`` (a worker thread's), then the companion released."""
        try:
            answer = self._lexical_leg(second, scope, text, mode, limit, admission)
        except BaseException as error:
            companion.__exit__(type(error), error, error.__traceback__)
            raise
        companion.__exit__(None, None, None)
        return answer

    def _report(
        self,
        r: BackendReader,
        answer: LegAnswer,
        authorization: Authorization | None,
        denied: list[AccessDecision],
    ) -> list[ScoredRecord]:
        """The leg's hits as the caller's copies; its denials appended to ``denied``."""
        if answer.screened:
            denied.extend(denials(r, answer.screened, authorization))
        return [hand_out_scored(s.record, float(s.score)) for s in answer.hits]

    def query(
        self,
        scope: Scope,
        vector: Vector,
        *,
        limit: int,
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: OnDenied | None = None,
    ) -> Sequence[ScoredRecord]:
        """The vector leg alone: ``guarded_query`` without the drift guard."""
        return self._guarded(
            scope, vector, None, limit, authorization, metadata_filter, on_denied, lend=False
        ).records

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
        on_denied: OnDenied | None = None,
    ) -> GuardedQuery:
        """The drift guard and the vector leg from one ``read`` (``SupportsGuardedQuery``)."""
        return self._guarded(
            scope, vector, (embedder_id, dimensions), limit, authorization, metadata_filter,
            on_denied, lend=False,
        )  # fmt: skip

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
        on_denied: OnDenied | None = None,
    ) -> GuardedQuery:
        """``guarded_query`` lending the backend's own records (``SupportsBorrowedQuery``;
        declared only over a ``search_vectors`` pushdown, whose backend keeps stored records
        unchanged once returned)."""
        return self._guarded(
            scope, vector, (embedder_id, dimensions), limit, authorization, metadata_filter,
            on_denied, lend=self._lend,
        )  # fmt: skip

    def _guarded(
        self,
        scope: Scope,
        vector: Vector,
        key: EmbedderKey | None,
        limit: int,
        authorization: Authorization | None,
        metadata_filter: Mapping[str, Any] | Filter | None,
        on_denied: OnDenied | None,
        *,
        lend: bool,
    ) -> GuardedQuery:
        q, flt = _query_args(vector, limit, metadata_filter, authorization)
        # The hot read (retrieval's): ``with self._retrieving(scope) as r`` written out, with
        # no call on the way through that a failure does not need.
        if not isinstance(scope, Scope):
            scope = _scope(scope)
        guard = self._guard
        try:
            block = self._retrieval_read(scope)
            r = block.__enter__()
        except BaseException as error:
            guard.__exit__(type(error), error, error.__traceback__)  # translates, or lets go on
            raise
        try:
            foreign, answer = self._searched(
                r, scope, q, key, limit, authorization, flt, on_denied is not None
            )
            if lend:
                hits: Sequence[ScoredRecord] = answer.hits
                denied = denials(r, answer.screened, authorization) if answer.screened else None
            else:
                denied = []
                hits = self._report(r, answer, authorization, denied)
        except BaseException as error:
            _leave(guard, block, error)
            raise
        try:
            block.__exit__(None, None, None)
        except BaseException as error:
            guard.__exit__(type(error), error, error.__traceback__)
            raise
        if denied:
            _tell(on_denied, denied)
        guarded = _new(GuardedQuery)  # ``GuardedQuery(foreign, hits)`` through its slots
        _SET_FOREIGN(guarded, foreign)
        _SET_RECORDS(guarded, hits)
        return guarded

    def _searched(
        self,
        r: BackendReader,
        scope: Scope,
        q: Vector,
        key: EmbedderKey | None,
        limit: int,
        authorization: Authorization | None,
        flt: Filter | None,
        report: bool,
    ) -> tuple[frozenset[EmbedderKey], LegAnswer]:
        """The drift guard (none without ``key``) and the vector leg, read through ``r``: the
        backend's ``guarded_search`` (one read, at its own pointer) when it has one, else the
        scope's state, its embedder claim and the vector leg at its pointer."""
        search = self._guarded_search
        if search is not None and limit > 0:
            found = search(
                r, q, embedder=key, authorization=authorization, metadata_filter=flt,
                report_denied=report, limit=limit,
            )  # fmt: skip
            if type(found) is not GuardedAnswer:
                raise StoreError("a guarded_search pushdown returned no GuardedAnswer")
            foreign = found.foreign_embedders
            if type(foreign) is not frozenset:
                foreign = frozenset(foreign)
            return foreign, _checked_answer(found.answer, scope, limit, q.shape[0])
        state = r.state()
        claim = state.embedders  # the drift guard (``_foreign``), inline
        if key is None or (claim is not None and (not claim or (len(claim) == 1 and key in claim))):
            foreign = _NONE
        else:
            foreign = self._exact_foreign(r, scope, state.pointer, key)
        pointer = state.pointer
        admission = self._plain
        if (
            authorization is not None
            or flt is not None
            or report
            or admission is None
            or admission.pointer != pointer
        ):
            admission = _admission(pointer, authorization, flt, report)
            if authorization is None and flt is None and not report:
                self._plain = admission  # the next unfiltered read at this pointer shares it
        vectors = self._search_vectors
        if vectors is not None and limit > 0:  # ``_vector_leg``, inline
            answer = vectors(r, q, admission=admission, limit=limit)
            return foreign, _checked_answer(answer, scope, limit, q.shape[0])
        return foreign, self._vector_leg(r, scope, q, limit, admission)

    def _mode(self, mode: object) -> str:
        if not isinstance(mode, str) or mode not in self._capabilities.lexical_modes:
            raise CapabilityError(
                f"this store offers lexical modes {self._capabilities.lexical_modes!r}",
                capability="lexical",
            )
        return mode

    def lexical_query(
        self,
        scope: Scope,
        text: str,
        *,
        limit: int,
        mode: str = GENERIC_LEXICAL_MODE,
        authorization: Authorization | None = None,
        metadata_filter: Mapping[str, Any] | Filter | None = None,
        on_denied: OnDenied | None = None,
    ) -> Sequence[ScoredRecord]:
        """``SupportsLexicalSearch``: the backend's lexical pushdown for its own modes, the
        engine's BM25 over the scope's rows for ``bm25`` otherwise."""
        mode = self._mode(mode)
        validate_text(text, field="query")
        _, flt = _query_args(None, limit, metadata_filter, authorization)
        denied: list[AccessDecision] = []
        with self._retrieving(scope) as r:
            admission = Admission(r.state().pointer, authorization, flt, on_denied is not None)
            answer = self._lexical_leg(r, scope, text, mode, limit, admission)
            hits = self._report(r, answer, authorization, denied)
        _tell(on_denied, denied)
        return tuple(hits)

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
        on_denied: OnDenied | None = None,
    ) -> HybridAnswer:
        """The drift guard and both legs from one ``read`` (one pointer, one set of
        tombstones and grants); the two legs at the same time when the reader offers a
        companion in its snapshot (``_legs``)."""
        mode = self._mode(mode)
        validate_text(text, field="query")
        q, flt = _query_args(vector, limit, metadata_filter, authorization)
        denied: list[AccessDecision] = []
        denied_lexically: list[AccessDecision] = []
        with self._retrieving(scope) as r:
            # Asked before the reader's first read, which may prepare the second reader.
            companion = _companion(r) if limit > 0 and text.strip() else None
            state = r.state()
            foreign = self._foreign(r, scope, state, (embedder_id, dimensions))
            admission = Admission(state.pointer, authorization, flt, on_denied is not None)
            vector_answer, lexical_answer = self._legs(
                r, companion, scope, (q, text, mode), limit, admission
            )
            hits = self._report(r, vector_answer, authorization, denied)
            lexical = tuple(self._report(r, lexical_answer, authorization, denied_lexically))
        _tell(on_denied, denied)  # once per leg, as each leg's own query would
        _tell(on_denied, denied_lexically)
        return HybridAnswer(foreign, hits, lexical)


def _companion(r: BackendReader) -> AbstractContextManager[BackendReader | None] | None:
    """``r.companion()`` when the reader offers one (``ReadsConcurrently``), else ``None``."""
    offer = getattr(type(r), "companion", None)
    return None if offer is None else cast("ReadsConcurrently", r).companion()


def _workers() -> ThreadPoolExecutor:
    """The threads companion legs run on, started on first use (nothing runs at import);
    a forked child starts its own (``_forget_workers``: the parent's threads are not in it)."""
    if not _WORKERS:
        with _WORKERS_LOCK[0]:
            if not _WORKERS:
                _WORKERS.append(ThreadPoolExecutor(_MAX_WORKERS, thread_name_prefix="ragport-leg"))
    return _WORKERS[0]


def _forget_workers() -> None:
    """In a forked child: drop the parent's pool (a copy whose threads did not come along,
    so a leg submitted to it would never run) and its lock (held, maybe, at the fork)."""
    _WORKERS.clear()
    _WORKERS_LOCK[0] = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forget_workers)


def _admission(
    pointer: int, authorization: Authorization | None, flt: Filter | None, report: bool
) -> Admission:
    """``Admission(pointer, authorization, flt, report)`` through its slots."""
    admission = _new(Admission)
    _SET_POINTER(admission, pointer)
    _SET_AUTHORIZATION(admission, authorization)
    _SET_FILTER(admission, flt)
    _SET_REPORT(admission, report)
    return admission


def _leave(guard: Guard, block: Any, error: BaseException) -> None:
    """What ``_Reading.__exit__`` does when the read's body raised ``error``: the block is
    left with it (a failure there is translated and raised instead), then ``error`` is
    translated (raised as ``StoreError``) or, when this returns, re-raised by the caller."""
    try:
        block.__exit__(type(error), error, error.__traceback__)
    except BaseException as failure:
        guard.__exit__(type(failure), failure, failure.__traceback__)
        raise
    guard.__exit__(type(error), error, error.__traceback__)


def _tell(on_denied: OnDenied | None, denied: list[AccessDecision]) -> None:
    if denied and on_denied is not None:
        on_denied(denied)


def _checked_answer(
    answer: LegAnswer, scope: Scope, limit: int, dimensions: int | None
) -> LegAnswer:
    """A pushdown's answer as the engine hands it on: at most ``limit`` hits, each of the
    asked scope (and, for the vector leg, dimension), else ``StoreError``."""
    if not isinstance(answer, LegAnswer) or len(answer.hits) > limit:
        raise StoreError("a search pushdown returned more than the limit, or no LegAnswer")
    if dimensions is None:
        for scored in answer.hits:
            _check_row(scored.record, scope, None)
        return answer
    for scored in answer.hits:
        record = scored.record
        if record.scope is not scope or record.dimensions != dimensions:
            _check_row(record, scope, dimensions)  # the same scope by its ids, or refused
    return answer


def _check_row(record: Record, scope: Scope, dimensions: int | None) -> None:
    if (record.scope is not scope and not same_scope(record.scope, scope)) or (
        dimensions is not None and record.dimensions != dimensions
    ):
        raise StoreError("a search pushdown returned a row outside the scope asked")


def _query_args(
    vector: Vector | None,
    limit: object,
    metadata_filter: Mapping[str, Any] | Filter | None,
    authorization: object,
) -> tuple[Vector, Filter | None]:
    if authorization is not None and not isinstance(authorization, Authorization):
        raise ValidationError("authorization must be an Authorization", field="authorization")
    flt = None if metadata_filter is None else parse_filter(metadata_filter)
    if type(limit) is not int and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise ValidationError("limit must be an int", field="limit")
    if vector is None:
        return _NO_VECTOR, flt
    if type(vector) is np.ndarray and vector.dtype is _FLOAT32:
        q = vector
    else:
        q = np.asarray(vector, dtype=np.float32)
    if q.ndim != 1:
        q = q.reshape(-1)
    # A finite square norm proves every value finite (one dot product); an infinite one may
    # be an overflow of finite values, so only then is each value checked.
    if not math.isfinite(q.dot(q)) and not np.isfinite(q).all():
        raise ValidationError("the query vector must be finite", field="vector")
    return q, flt
