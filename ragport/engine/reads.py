"""The generic read paths: what the engine answers over the narrow reader when the backend
pushes nothing down (``ragport.ports.pushdowns`` describes each question).

Reader calls keep one order a lazy backend can rely on: everything a leg needs besides the
stream (state, tombstones, grants) is read *before* ``nearest()``, and the stream is closed
before the next reader call. Rows a backend hands back outside what was asked (another scope,
another source, another id) are refused with ``StoreError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from ragport.domain.errors import StoreError
from ragport.domain.lexical import tokenize_lexical
from ragport.domain.model import (
    AccessDecision,
    Authorization,
    Record,
    Scope,
    decide_access,
    is_forgotten,
    is_visible,
)
from ragport.engine.bm25 import bm25_scores, counted
from ragport.engine.history import history_of
from ragport.engine.rules import GrantRule, forgotten_set, screened_sources
from ragport.ports.backend import BackendReader
from ragport.ports.embedder import Vector
from ragport.ports.history import GenerationChange
from ragport.ports.pushdowns import Admission, LegAnswer
from ragport.ports.store import EmbedderKey, ScoredRecord

__all__ = [
    "checked",
    "denials",
    "forgotten_ids",
    "generic_embedders",
    "generic_history",
    "generic_source_id_page",
    "same_scope",
    "search_bm25",
    "visible",
    "walk_vectors",
]


def same_scope(a: Scope, b: Scope) -> bool:
    """``a == b``, by the three ids (attrs' ``__ne__`` costs a microsecond a row)."""
    return (
        a.tenant_id == b.tenant_id and a.resource_id == b.resource_id and a.corpus_id == b.corpus_id
    )


def checked(
    rows: Iterable[Record],
    scope: Scope,
    *,
    source_id: str | None = None,
    ids: Sequence[str] | None = None,
) -> list[Record]:
    """``rows`` as asked of ``rows(source_id=, ids=)``, as a list: a row of another scope,
    source or id is ``StoreError``, never handed on. (Every write of the narrow port reads
    whole scopes through here: one plain loop, identity first.)"""
    found = rows if type(rows) is list else list(rows)
    for row in found:
        if row.scope is not scope and not same_scope(row.scope, scope):
            raise StoreError("the backend returned a row outside the scope asked")
    if source_id is not None:
        for row in found:
            if row.source_id != source_id:
                raise StoreError("the backend returned a row outside the source asked")
    if ids is not None:
        wanted = frozenset(ids)
        for row in found:
            if row.id not in wanted:
                raise StoreError("the backend returned a row outside the ids asked")
    return found


def visible(rows: Iterable[Record], pointer: int) -> Iterator[Record]:
    return (r for r in rows if is_visible(r.generation, r.retired_generation, pointer))


def forgotten_ids(reader: BackendReader) -> frozenset[str]:
    """``forgotten_set`` of the reader's tombstones (the narrow port lists them whole)."""
    return forgotten_set(reader.tombstones())


class _Predicate:
    """An ``Admission`` with what the narrow reader holds for it, read before any stream."""

    def __init__(self, reader: BackendReader, admission: Admission) -> None:
        self.admission = admission
        self.forgotten = forgotten_ids(reader)
        caller = admission.authorization
        self.grants = None if caller is None else GrantRule(dict(reader.grants()), caller)

    def passes_all_but_grants(self, record: Record) -> bool:
        a = self.admission
        return (
            is_visible(record.generation, record.retired_generation, a.pointer)
            and not is_forgotten(record, self.forgotten)
            and (a.metadata_filter is None or a.metadata_filter.matches(record.metadata))
        )

    def granted(self, record: Record) -> bool:
        return self.grants is None or self.grants.admits(record.access_sources)

    @property
    def reporting(self) -> bool:
        return self.admission.report_denied and self.admission.authorization is not None


def walk_vectors(
    reader: BackendReader, scope: Scope, vector: Vector, admission: Admission, limit: int
) -> LegAnswer:
    """``search_vectors`` over ``nearest``: the admitted rows taken best first as the stream
    goes, stopping once ``limit`` are found."""
    rule = _Predicate(reader, admission)
    dimensions = int(vector.shape[0])
    hits: list[ScoredRecord] = []
    unfiltered: list[Record] = []  # the top `limit` before the grant rule, for the report
    stream = iter(reader.nearest(vector))
    try:
        for scored in stream:
            record = scored.record
            if record.scope is not scope and not same_scope(record.scope, scope):
                raise StoreError("the backend returned a row outside the scope asked")
            if record.dimensions != dimensions or not rule.passes_all_but_grants(record):
                continue
            if len(unfiltered) < limit:
                unfiltered.append(record)
            if rule.granted(record):
                hits.append(ScoredRecord(record, float(scored.score)))
                if len(hits) == limit:
                    break
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # a lazy cursor is finished before the next reader call
    return LegAnswer(tuple(hits), screened_sources(unfiltered) if rule.reporting else ())


def search_bm25(
    reader: BackendReader, scope: Scope, text: str, admission: Admission, limit: int
) -> LegAnswer:
    """``search_lexical`` in mode ``bm25`` over ``rows()``: BM25 statistics over the scope's
    searchable rows (visible, not forgotten), then the admission's filter and grants."""
    rule = _Predicate(reader, admission)
    pointer = admission.pointer
    docs = [
        r
        for r in visible(checked(reader.rows(), scope), pointer)
        if not is_forgotten(r, rule.forgotten)
    ]
    scores = bm25_scores([counted(r.text) for r in docs], tokenize_lexical(text))
    ranked = sorted(
        ((score, r) for score, r in zip(scores, docs, strict=True) if score is not None),
        key=lambda pair: (-pair[0], pair[1].id),
    )
    flt = admission.metadata_filter
    matching = [(score, r) for score, r in ranked if flt is None or flt.matches(r.metadata)]
    hits = tuple(ScoredRecord(r, score) for score, r in matching if rule.granted(r))[:limit]
    screened = screened_sources(r for _, r in matching[:limit]) if rule.reporting else ()
    return LegAnswer(hits, screened)


def denials(
    reader: BackendReader, screened: Sequence[str], caller: Authorization | None
) -> list[AccessDecision]:
    """The grant rule's refusals among ``screened`` (one ``grants`` read), in its order."""
    if caller is None or not screened:
        return []
    grants = reader.grants(list(screened))
    decisions = (decide_access(s, grants.get(s), caller) for s in screened)
    return [d for d in decisions if not d.allowed]


def generic_embedders(reader: BackendReader, scope: Scope, pointer: int) -> frozenset[EmbedderKey]:
    return frozenset(
        (x.embedder_id, x.dimensions) for x in visible(checked(reader.rows(), scope), pointer)
    )


def generic_source_id_page(
    reader: BackendReader, scope: Scope, pointer: int, after: str | None, limit: int
) -> list[str]:
    rows = visible(checked(reader.rows(), scope), pointer)
    ids = {x.source_id for x in rows if x.kind == "chunk"}
    return sorted(s for s in ids if after is None or s > after)[:limit]


def generic_history(
    reader: BackendReader, scope: Scope, limit: int, max_ids: int
) -> Sequence[GenerationChange]:
    state = reader.state()
    forgotten = forgotten_ids(reader)
    return history_of(
        checked(reader.rows(), scope),
        pointer=state.pointer,
        floor=state.floor,
        forgotten=forgotten,
        limit=limit,
        max_ids=max_ids,
    )
