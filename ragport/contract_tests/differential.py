"""``DifferentialContract``: two ``ChunkStore``s give the same answers to the same random
operation sequences.

The contract of issue 41's pushdowns: a backend that answers a sub-question natively (a search
leg with the admission predicate, an indexed look-up, a set-based write) must answer it as the
engine's generic path does, so ``BackendStore(backend)`` and ``BackendStore(backend,
pushdown=False)`` are compared here, operation by operation::

    from ragport.contract_tests import DifferentialContract

    class TestMyBackendPushdowns(DifferentialContract):
        @pytest.fixture
        def store_pair(self, tmp_path):
            backend = MyBackend(tmp_path / "db")
            yield BackendStore(backend), BackendStore(backend, pushdown=False)

The fixture yields ``(subject, reference)``: two empty ``ChunkStore``s, the one under test
first. They may share one backend (or one database): every hypothesis example writes each
store in a scope of its own (same tenant, corpus ``differential-<n>-subject`` and
``...-reference``), and nothing is compared that names the scope. Any two stores can be
compared this way (a fast store against the engine over a plain backend, one release against
the next).

What runs: the ``EXPLICIT`` sequences (paths a few random draws seldom reach), then
sequences hypothesis draws (derandomized: the same sequences on every run and machine;
``differential_examples`` sequences of at most ``differential_steps`` operations, class
attributes a slow backend may lower); each is applied to both stores
through the use cases users call (``replace_source`` with and without a grant,
``index_chunks``, ``delete_source``, ``index_derived`` plain and pinned, a write by a second
embedder, ``set_source_access``, a deletion propagation, ``readmit_source``,
``repoint_source``, ``apply_source_renames``, ``rollback_generation``, ``compact``) and reads
(``query``, ``guarded_query``, ``lexical_query``, ``hybrid_query`` in every lexical mode both
stores declare, and ``retrieve_context``; each with or without a metadata filter, as a trusted
caller or under one of three authorizations, with denial reports). After every operation the
two outcomes must be equal: the result's fields or the error's type and field, the hits' ids,
order and scores (within ``SCORE_TOLERANCE``; ranks of scores that tie within it may differ),
the denial reports (as sets: the port promises no order), and the scope's generation. At the
end of every sequence the whole readable state is compared: every source's records, the
source list, the forgotten ids, grants and decisions, embedders, history, every row each
caller may find by vector and by each lexical mode, the live rows and tombstones in a unit
of work.

A lexical mode whose two answers rank by different formulas (PostgreSQL's ``bm25`` stems with
its text-search configuration and scores with k1 = 1.2 and Lucene's idf; the engine's generic
``bm25`` tokenizes with ``tokenize_lexical`` and scores with k1 = 1.5 and rank_bm25's idf) is
named in ``differential_lexical_sets``: its legs are then compared by what they admit, not by
rank. Its lexical leg, hybrid read and ``retrieve_context`` run twice: with ``WIDE`` (more
hits than any sequence writes), compared as the set of admitted hits (id, source, text, and in
``retrieve_context`` which leg found each) with the denial reports; and at the drawn limit,
compared by the number of hits (every admitted match up to the limit, so a predicate applied
after the limit shows) and, for the hybrid read, the vector leg's exact ranking. The set
holds for any ranking formula when every word of the corpus is one term to both analyzers:
``WORDS`` are chosen so (no stop word, no two stem alike, each its own lexeme in
``english``), and a backend's test should check that on its analyzer.

A failure prints hypothesis's smallest failing sequence and the first answer that differed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from ragport.application.admission import readmit_source
from ragport.application.derived import index_derived
from ragport.application.generations import compact, rollback_generation
from ragport.application.indexing import delete_source, index_chunks, replace_source
from ragport.application.propagation import RagDeletionHandler, create_deletion_propagator
from ragport.application.repoint import apply_source_renames, repoint_source
from ragport.application.retrieval import retrieve_context
from ragport.application.retrieval_request import RetrievalRequest
from ragport.contract_tests._base import ContractSuite, required_fixture
from ragport.contract_tests._support import ContractEmbedder
from ragport.domain.errors import RagportError
from ragport.domain.model import (
    AccessDecision,
    AccessDenial,
    Authorization,
    Chunk,
    Grant,
    Record,
    Rename,
    Scope,
)
from ragport.ports.store import ChunkStore, ScoredRecord

if TYPE_CHECKING:
    from hypothesis import strategies as st

__all__ = [
    "SCORE_TOLERANCE",
    "WIDE",
    "WORDS",
    "DifferentialContract",
    "check_same_answers",
    "operations",
]

SCORE_TOLERANCE = 1e-5
"""How far two scores of one hit may differ (float32 and float64 arithmetic differ)."""

TENANT = "differential-tenant"
SOURCES = ("s0", "s1", "s2", "s3")
NEW_IDS = ("n0", "n1")
DERIVED = ("d0", "d1")
WORDS = ("policy", "leave", "badge", "payment", "review", "audit", "ledger", "freight")
"""The corpus's words (with ``summary``, ``d0``, ``d1`` of the derived texts): none a stop
word, no two alike after stemming, so a stemming analyzer admits what ``tokenize_lexical``
does."""
EVERY_WORD = " ".join((*WORDS, "summary"))
"""A lexical query matching every row that holds a word."""
WIDE = 64
"""A limit above the rows any sequence writes: a leg asked for ``WIDE`` hits returns every
admitted match."""
TAGS = ("red", "blue")
PRINCIPALS = ("alice", "bob", "carol")
GROUPS = ("staff", "ops")
CALLERS: tuple[Authorization | None, ...] = (
    None,
    Authorization("alice", TENANT),
    Authorization("bob", TENANT, group_ids=("staff",)),
    Authorization("carol", TENANT, group_ids=("ops",), access_version=2),
)
EMBEDDER = ContractEmbedder(16)
OTHER_EMBEDDER = ContractEmbedder(12)

Op = tuple[Any, ...]

SETUP: tuple[Op, ...] = (
    ("write", "s0", ("policy leave", "badge review"), "red", Grant("s0", ("alice",))),
    ("write", "s1", ("payment audit", "ledger policy"), "blue", Grant("s1", (), ("staff",))),
    ("write", "s2", ("freight leave", "audit"), "red", Grant("s2", ("carol",), (), 2)),
    ("write", "s3", ("review ledger",), "blue", None),
    ("derive", "d0", ("s0", "s1"), "summary policy", False),
)
"""What every sequence starts with (and compares): four sources, three grants, one derived."""

EXPLICIT: tuple[tuple[Op, ...], ...] = (
    (  # a derived row retired with one root, its other root forgotten, then restored
        ("delete", "s0"),
        ("forget", "s1"),
        ("rollback", 1),
        ("read", "summary policy", None, 0, 8),
        ("read", "policy ledger", "blue", 2, 3),
    ),
    (  # a pinned derived row of a forgotten source, then the source readmitted
        ("derive", "d1", ("s2",), "leave audit", True),
        ("forget", "s2"),
        ("read", "leave audit", None, 3, 8),
        ("readmit", "s2"),
        ("read", "leave", "red", 3, 1),
    ),
    (  # a changed grant, a repoint paged by one row, two replaces, compaction keeping one
        # generation, a rollback to the new floor (the first replace's old rows come back)
        # and one past it (refused)
        ("grant", Grant("s3", ("bob",), (), 1)),
        ("repoint", "s0", "n0", 1),
        ("read", "policy review", None, 2, 3),
        ("write", "s3", ("review badge",), "blue", None),
        ("write", "s1", ("payment ledger",), "blue", None),
        ("compact", 1),
        ("rollback", 2),
        ("read", "review ledger badge", None, 0, 8),
        ("rollback", 1),
        ("read", "review ledger badge", "red", 2, 8),
    ),
    (  # a source two pinned levels derive from, deleted (its pinned dependents retire with
        # it: a delete pushdown must not skip them), then restored by a rollback
        ("derive", "d1", ("s2",), "leave audit", True),
        ("derive", "d0", ("d1",), "summary leave", True),
        ("delete", "s2"),
        ("read", "leave audit summary", None, 3, 8),
        ("rollback", 1),
        ("read", "leave audit summary", "red", 3, 8),
    ),
    (  # a readmitted id forgotten again: the forgotten tombstone replaces the corrected one
        ("forget", "s3"),
        ("readmit", "s3"),
        ("write", "s3", ("review audit",), "blue", None),
        ("forget", "s3"),
        ("read", "review audit", None, 0, 8),
    ),
)
"""Sequences run before the drawn ones, on every backend: the paths where a wrong predicate
or set-based write shows, which random draws of a few examples seldom reach (a forgotten row
visible again, a tombstone's strength)."""


# -- the operations ------------------------------------------------------------------------------
def _text() -> st.SearchStrategy[str]:
    from hypothesis import strategies as st  # imported when used: see _hypothesis

    return st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)


def _grant(source: str) -> st.SearchStrategy[Grant]:
    from hypothesis import strategies as st  # imported when used: see _hypothesis

    return st.builds(
        Grant,
        st.just(source),
        principal_ids=st.lists(st.sampled_from(PRINCIPALS), max_size=2, unique=True).map(tuple),
        group_ids=st.lists(st.sampled_from(GROUPS), max_size=1, unique=True).map(tuple),
        access_version=st.integers(1, 2),
    )


def _write() -> st.SearchStrategy[Op]:
    from hypothesis import strategies as st  # imported when used: see _hypothesis

    def build(source: str) -> st.SearchStrategy[Op]:
        return st.tuples(
            st.just("write"),
            st.just(source),
            st.lists(_text(), min_size=0, max_size=3).map(tuple),
            st.sampled_from(TAGS),
            st.none() | _grant(source),
        )

    return st.sampled_from(SOURCES).flatmap(build)


def operations() -> st.SearchStrategy[Op]:
    """One operation, a tuple whose first item names it (``_apply`` runs it)."""
    from hypothesis import strategies as st  # imported when used: see _hypothesis

    source = st.sampled_from(SOURCES)
    anyone = st.sampled_from(SOURCES + NEW_IDS)
    lineage = st.lists(st.sampled_from(SOURCES + DERIVED), min_size=1, max_size=2, unique=True)
    return st.one_of(
        _write(),
        _write(),
        st.tuples(st.just("index"), source, st.lists(_text(), min_size=1, max_size=2).map(tuple)),
        st.tuples(st.just("delete"), source),
        st.tuples(
            st.just("derive"), st.sampled_from(DERIVED), lineage.map(tuple), _text(), st.booleans()
        ),
        st.tuples(st.just("foreign"), source, _text()),
        source.flatmap(lambda s: st.tuples(st.just("grant"), _grant(s))),
        st.tuples(st.just("forget"), source),
        st.tuples(st.just("readmit"), source),
        st.tuples(st.just("repoint"), anyone, anyone, st.sampled_from((1, 4096))),
        st.tuples(
            st.just("rename"),
            st.lists(st.tuples(anyone, anyone), min_size=1, max_size=2).map(tuple),
        ),
        st.tuples(st.just("rollback"), st.integers(0, 3)),
        st.tuples(st.just("compact"), st.integers(0, 2)),
        _read(),
        _read(),
        _read(),
    )


def _read() -> st.SearchStrategy[Op]:
    from hypothesis import strategies as st  # imported when used: see _hypothesis

    return st.tuples(
        st.just("read"),
        _text(),
        st.none() | st.sampled_from(TAGS),
        st.integers(0, len(CALLERS) - 1),
        st.sampled_from((1, 3, 8)),
    )


# -- what one store answers ------------------------------------------------------------------------
class Ranking(tuple[tuple[Any, ...], ...]):
    """Hits best first, each ``(id, score, *details)``: compared with score tolerance."""

    __slots__ = ()


def _ranked(found: Sequence[ScoredRecord]) -> Ranking:
    return Ranking((s.record.id, float(s.score), s.record.source_id, s.record.text) for s in found)


def _admitted(found: Sequence[ScoredRecord]) -> frozenset[tuple[str, str, str]]:
    """The hits as a set, scores and order left out (see ``differential_lexical_sets``)."""
    return frozenset((s.record.id, s.record.source_id, s.record.text) for s in found)


def _record(r: Record) -> tuple[Any, ...]:
    return (
        r.id,
        r.source_id,
        r.kind,
        r.text,
        dict(r.metadata),
        r.embedder_id,
        r.dimensions,
        r.generation,
        r.retired_generation,
        r.content_hash,
        tuple(r.lineage),
        tuple(r.roots),
        r.chunk_index,
        r.start,
        r.end,
    )


def _decisions(found: Sequence[AccessDecision]) -> list[tuple[str, bool, str]]:
    return [(d.source_id, d.allowed, d.reason) for d in found]


def _error(exc: RagportError) -> tuple[str, str, object]:
    return ("error", type(exc).__name__, getattr(exc, "field", None))


def _outcome(run: Callable[[], object]) -> object:
    try:
        return run()
    except RagportError as exc:
        return _error(exc)


class _Side:
    """One store and its scope for one sequence: applies an operation, says what it saw."""

    def __init__(
        self,
        store: ChunkStore,
        scope: Scope,
        modes: tuple[str, ...],
        optional: frozenset[str],
        sets: frozenset[str] = frozenset(),
    ) -> None:
        self.store = store
        self.scope = scope
        self.modes = modes
        self.optional = optional  # the optional capabilities both stores offer
        self.sets = sets  # the lexical modes compared by admitted set, not by rank

    def apply(self, op: Op) -> object:
        outcome = _outcome(lambda: _APPLY[op[0]](self, *op[1:]))
        return (outcome, self.store.current_generation(self.scope))

    # -- writes --------------------------------------------------------------------------------
    def write(self, source: str, texts: tuple[str, ...], tag: str, grant: Grant | None) -> object:
        chunks = [Chunk.of(source, k, t, metadata={"tag": tag}) for k, t in enumerate(texts)]
        done = replace_source(
            source_id=source,
            chunks=chunks,
            embedder=EMBEDDER,
            store=self.store,
            scope=self.scope,
            grant=grant,
        )
        return (done.deleted, done.indexed, done.skipped, done.generation)

    def index(self, source: str, texts: tuple[str, ...]) -> object:
        chunks = [Chunk.of(source, k, t, metadata={"tag": "red"}) for k, t in enumerate(texts)]
        done = index_chunks(chunks=chunks, embedder=EMBEDDER, store=self.store, scope=self.scope)
        return (done.indexed, tuple(done.source_ids))

    def foreign(self, source: str, text: str) -> object:
        done = replace_source(
            source_id=source,
            chunks=[Chunk.of(source, 0, text)],
            embedder=OTHER_EMBEDDER,
            store=self.store,
            scope=self.scope,
        )
        return (done.deleted, done.indexed, done.generation)

    def delete(self, source: str) -> object:
        done = delete_source(source_id=source, store=self.store, scope=self.scope)
        return (done.deleted, done.generation)

    def derive(self, record_id: str, lineage: tuple[str, ...], text: str, pinned: bool) -> object:
        done = index_derived(
            record_id=record_id,
            text=f"{record_id} {text}",
            lineage=lineage,
            embedder=EMBEDDER,
            store=self.store,
            scope=self.scope,
            metadata={"tag": "blue"},
            pinned=pinned,
        )
        return (done.deleted, done.indexed, done.generation)

    def grant(self, grant: Grant) -> object:
        self.store.set_source_access(self.scope, [grant])
        return None

    def forget(self, source: str) -> object:
        propagator = create_deletion_propagator(
            scope=self.scope,
            store=self.store,
            authorization=None,
            handlers=[RagDeletionHandler(store=self.store, scope=self.scope)],
            as_owner=True,
        )
        done = propagator.propagate(source)
        return (tuple(done.ids), done.tombstoned, dict(done.layers))

    def readmit(self, source: str) -> object:
        done = readmit_source(source_id=source, store=self.store, scope=self.scope)
        return (done.readmitted, done.purged)

    def repoint(self, from_id: str, to_id: str, page_size: int) -> object:
        done = repoint_source(
            scope=self.scope,
            store=self.store,
            from_id=from_id,
            to_id=to_id,
            page_size=page_size,
        )
        return (done.moved_chunks, done.rewritten_edges, done.cursor is None)

    def rename(self, pairs: tuple[tuple[str, str], ...]) -> object:
        renames = [Rename(a, b) for a, b in pairs]
        done = apply_source_renames(
            scope=self.scope, store=self.store, renames=renames, continue_on_error=True
        )
        results = [(r.moved_chunks, r.rewritten_edges) for r in done.results]
        failures = [(f.from_id, f.to_id, f.error) for f in done.failures]
        return (results, failures)

    def rollback(self, back: int) -> object:
        to = max(0, self.store.current_generation(self.scope) - back)
        done = rollback_generation(store=self.store, scope=self.scope, to=to)
        return (done.generation, done.discarded, done.restored)

    def compact(self, keep: int) -> object:
        done = compact(store=self.store, scope=self.scope, keep=keep)
        return (done.purged, done.floor)

    # -- reads ---------------------------------------------------------------------------------
    def read(self, text: str, tag: str | None, caller: int, limit: int) -> object:
        who = CALLERS[caller]
        flt = None if tag is None else {"tag": tag}
        vector = EMBEDDER.embed([text])[0]
        answers: dict[str, object] = {}

        def leg(name: str, run: Callable[[Callable[[Any], None] | None], object]) -> None:
            denied: list[tuple[str, bool, str]] = []

            def report(found: Sequence[AccessDecision]) -> None:
                denied.extend(_decisions(found))

            outcome = _outcome(lambda: run(report if who is not None else None))
            answers[name] = (outcome, sorted(denied))  # the port promises no order

        common: dict[str, Any] = {"limit": limit, "authorization": who, "metadata_filter": flt}
        leg(
            "query",
            lambda cb: _ranked(self.store.query(self.scope, vector, **common, on_denied=cb)),
        )
        for name in ("guarded_query", "borrowed_query"):
            if name in self.optional:
                leg(name, self._bind(self._guarded, name, vector, common))
        wide = {**common, "limit": WIDE}
        for mode in self.modes:
            if mode in self.sets:
                leg(f"lexical:{mode}", self._bind(self._lexical_set, text, mode, common, wide))
                leg(f"hybrid:{mode}", self._bind(self._hybrid_set, vector, text, mode, common))
                leg(f"hybrid:{mode}:wide", self._bind(self._hybrid, vector, text, mode, wide))
            else:
                leg(f"lexical:{mode}", self._bind(self._lexical, text, mode, common))
                leg(f"hybrid:{mode}", self._bind(self._hybrid, vector, text, mode, common))
        for mode in ("off", *self.modes):
            if mode in self.sets:
                answers[f"retrieve:{mode}"] = self._retrieve_set(text, mode, who, tag, limit)
            else:
                answers[f"retrieve:{mode}"] = self._retrieve(text, mode, who, tag, limit)
        return answers

    @staticmethod
    def _bind(method: Callable[..., object], *args: Any) -> Callable[[Any], object]:
        return lambda cb: method(*args, cb)

    def _guarded(self, name: str, vector: Any, common: dict[str, Any], cb: Any) -> object:
        found = getattr(self.store, name)(
            self.scope,
            vector,
            embedder_id=EMBEDDER.id,
            dimensions=EMBEDDER.dimensions,
            **common,
            on_denied=cb,
        )
        return (sorted(found.foreign_embedders), _ranked(found.records))

    def _lexical(self, text: str, mode: str, common: dict[str, Any], cb: Any) -> object:
        store: Any = self.store
        return _ranked(store.lexical_query(self.scope, text, mode=mode, **common, on_denied=cb))

    def _lexical_set(
        self, text: str, mode: str, common: dict[str, Any], wide: dict[str, Any], cb: Any
    ) -> object:
        """Every admitted hit (and the denials among them), and how many the drawn limit
        gave (the denials at that limit follow the ranking: not reported)."""
        store: Any = self.store
        found = store.lexical_query(self.scope, text, mode=mode, **wide, on_denied=cb)
        cut = store.lexical_query(self.scope, text, mode=mode, **common)
        return (_admitted(found), len(cut))

    def _hybrid_found(
        self, vector: Any, text: str, mode: str, common: dict[str, Any], cb: Any
    ) -> Any:
        store: Any = self.store
        return store.hybrid_query(
            self.scope,
            vector,
            text,
            embedder_id=EMBEDDER.id,
            dimensions=EMBEDDER.dimensions,
            mode=mode,
            **common,
            on_denied=cb,
        )

    def _hybrid(self, vector: Any, text: str, mode: str, common: dict[str, Any], cb: Any) -> object:
        found = self._hybrid_found(vector, text, mode, common, cb)
        if mode in self.sets:  # at WIDE: every admitted lexical hit
            lexical: object = _admitted(found.lexical)
        else:
            lexical = _ranked(found.lexical)
        return (sorted(found.foreign_embedders), _ranked(found.vector), lexical)

    def _hybrid_set(
        self, vector: Any, text: str, mode: str, common: dict[str, Any], cb: Any
    ) -> object:
        """At the drawn limit: the vector leg exactly, the lexical leg's size (the denials
        follow the lexical ranking: not reported; the WIDE read reports them)."""
        found = self._hybrid_found(vector, text, mode, common, None)
        return (sorted(found.foreign_embedders), _ranked(found.vector), len(found.lexical))

    def _retrieve(
        self,
        text: str,
        mode: str,
        who: Authorization | None,
        tag: str | None,
        limit: int,
        candidates: int | None = None,
    ) -> tuple[object, list[tuple[str, str, int, str | None]]]:
        denials: list[tuple[str, str, int, str | None]] = []

        def report(d: AccessDenial) -> None:
            denials.append((d.source_id, d.reason, d.hits, d.error))

        def run() -> object:
            found = retrieve_context(
                text,
                embedder=EMBEDDER,
                store=self.store,
                scope=self.scope,
                request=RetrievalRequest(
                    top_k=limit,
                    query_candidates=candidates or max(limit, 8),
                    lexical=mode,
                    metadata_filter=None if tag is None else {"tag": tag},
                ),
                authorization=who,
                on_access_denied=report,
            )
            return Ranking(
                (h.id, float(h.score), h.source_id, h.provenance.retrieval) for h in found.hits
            )

        return (_outcome(run), sorted(denials))

    def _retrieve_set(
        self, text: str, mode: str, who: Authorization | None, tag: str | None, limit: int
    ) -> object:
        """At ``WIDE``: the hits as a set (id, source, the leg that found each), the denials;
        at the drawn limit: how many hits (fused top ``limit`` of every admitted match)."""
        everything, denials = self._retrieve(text, mode, who, tag, WIDE, WIDE)
        cut, _ = self._retrieve(text, mode, who, tag, limit)
        if isinstance(everything, Ranking):
            everything = frozenset((h[0], h[2], h[3]) for h in everything)
        if isinstance(cut, Ranking):
            cut = len(cut)
        return (everything, denials, cut)

    # -- the whole readable state -------------------------------------------------------------
    def state(self) -> dict[str, object]:
        store: Any = self.store
        scope = self.scope
        ids = list(SOURCES + NEW_IDS + DERIVED)
        out: dict[str, object] = {
            "generation": store.current_generation(scope),
            "records": {i: [_record(r) for r in store.get_by_source(scope, i)] for i in ids},
            "source_ids": list(store.list_source_ids(scope)),
            "source_page": list(store.list_source_ids(scope, after="s0", limit=2)),
            "forgotten": sorted(store.list_invalidated_ids(scope)),
            "embedders": sorted(store.list_embedders(scope)),
            "foreign": sorted(store.foreign_embedders(scope, EMBEDDER.id, EMBEDDER.dimensions)),
            "grants": {s: _fields(g) for s, g in store.get_source_access(scope, ids).items()},
        }
        for n, who in enumerate(CALLERS):
            if who is not None:
                decisions = store.check_source_access(scope, ids, who)
                out[f"access:{n}"] = {s: _decisions([d])[0] for s, d in decisions.items()}
            out[f"all:{n}"] = _ranked(
                store.query(scope, EMBEDDER.embed(["policy"])[0], limit=WIDE, authorization=who)
            )
            for mode in self.modes:  # every row holding a word, as each caller may read it
                found = store.lexical_query(
                    scope, EVERY_WORD, mode=mode, limit=WIDE, authorization=who
                )
                out[f"lexical:{mode}:{n}"] = (
                    _admitted(found) if mode in self.sets else _ranked(found)
                )
        if "forgotten_among" in self.optional:
            out["forgotten_among"] = sorted(store.forgotten_among(scope, ids))
        if "generation_history" in self.optional:
            history = store.generation_history(scope, limit=20, max_ids=3)
            out["history"] = [_fields(change) for change in history]
        with store.unit_of_work(scope) as uow:
            out["live"] = {i: [_record(r) for r in uow.records.list_live(i)] for i in ids}
            out["tombstones"] = [(t.id, t.reason) for t in uow.tombstones.list()]
            out["counter"] = (uow.generations.counter(), uow.generations.floor())
            uow.rollback()
        return out


def _fields(value: object) -> tuple[Any, ...]:
    slots = getattr(type(value), "__attrs_attrs__", ())
    return tuple(getattr(value, a.name) for a in slots)


_APPLY: dict[str, Callable[..., object]] = {
    name: getattr(_Side, name)
    for name in (
        "write",
        "index",
        "foreign",
        "delete",
        "derive",
        "grant",
        "forget",
        "readmit",
        "repoint",
        "rename",
        "rollback",
        "compact",
        "read",
    )
}


# -- comparing ---------------------------------------------------------------------------------
def _ties(ranking: Ranking) -> list[list[int]]:
    """Positions grouped into runs whose neighbouring scores lie within the tolerance."""
    groups: list[list[int]] = []
    for i, hit in enumerate(ranking):
        if groups and abs(ranking[groups[-1][-1]][1] - hit[1]) <= SCORE_TOLERANCE:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _ranking_problem(a: Ranking, b: Ranking) -> str | None:
    if len(a) != len(b):
        return f"{len(a)} hits against {len(b)}: {[h[0] for h in a]} vs {[h[0] for h in b]}"
    for x, y in zip(a, b, strict=True):
        if not math.isclose(x[1], y[1], rel_tol=0.0, abs_tol=SCORE_TOLERANCE):
            return (
                f"scores differ: {x[:2]} vs {y[:2]} (of {[h[0] for h in a]} vs {[h[0] for h in b]})"
            )
    if [h[0] for h in a] == [h[0] for h in b]:
        return _details_problem(a, b)
    # Ids differ: only inside runs of tied scores, and (at the cut) in the last run's members.
    groups = _ties(a)
    for n, group in enumerate(groups):
        ours = {a[i][0] for i in group}
        theirs = {b[i][0] for i in group}
        if ours != theirs and n != len(groups) - 1:
            return f"order differs beyond score ties: {[h[:2] for h in a]} vs {[h[:2] for h in b]}"
    return _details_problem(a, b)


def _details_problem(a: Ranking, b: Ranking) -> str | None:
    theirs = {h[0]: h for h in b}
    for hit in a:
        other = theirs.get(hit[0])
        if other is not None and hit[2:] != other[2:]:
            return f"hit {hit[0]!r} differs: {hit[2:]} vs {other[2:]}"
    return None


def difference(a: object, b: object, path: str = "") -> str | None:
    """Where ``a`` and ``b`` differ (scores within ``SCORE_TOLERANCE``), or ``None``."""
    if isinstance(a, Ranking) and isinstance(b, Ranking):
        problem = _ranking_problem(a, b)
        return None if problem is None else f"{path}: {problem}"
    if isinstance(a, float) and isinstance(b, float):
        if math.isclose(a, b, rel_tol=0.0, abs_tol=SCORE_TOLERANCE):
            return None
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{path}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            found = difference(a[key], b[key], f"{path}/{key}")
            if found is not None:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and type(a) is type(b):
        if len(a) != len(b):
            return f"{path}: {a!r} != {b!r}"
        for n, (x, y) in enumerate(zip(a, b, strict=True)):
            found = difference(x, y, f"{path}[{n}]")
            if found is not None:
                return found
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


_OPTIONAL = ("guarded_query", "borrowed_query", "forgotten_among", "generation_history")
"""Optional methods compared when both stores define them (declared or not: a store without a
pushdown may define a method it does not declare, e.g. ``BackendStore.forgotten_among``)."""


def _lexical_modes(
    subject: ChunkStore,
    reference: ChunkStore,
    only: tuple[str, ...] | None,
    sets: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """The modes compared; a mode named in ``only`` or ``sets`` that one store lacks fails
    the test (a comparison that silently never runs cannot fail)."""
    theirs = set(reference.capabilities.lexical_modes)
    common = tuple(m for m in subject.capabilities.lexical_modes if m in theirs)
    named = (*(only or ()), *sets)
    missing = [m for m in named if m not in common]
    if missing:
        pytest.fail(f"lexical modes {missing} are not served by both stores (they serve {common})")
    unranked = [m for m in sets if only is not None and m not in only]
    if unranked:
        pytest.fail(f"lexical modes {unranked} are in lexical_sets but not in lexical_modes")
    return common if only is None else tuple(m for m in common if m in only)


def _run_sequence(
    subject: ChunkStore,
    reference: ChunkStore,
    ops: Sequence[Op],
    n: int,
    modes: tuple[str, ...] | None = None,
    sets: tuple[str, ...] = (),
) -> None:
    modes = _lexical_modes(subject, reference, modes, sets)
    optional = frozenset(
        name
        for name in _OPTIONAL
        if callable(getattr(subject, name, None)) and callable(getattr(reference, name, None))
    )
    scope = Scope(TENANT, "differential", f"differential-{n}-subject")
    one = _Side(subject, scope, modes, optional, frozenset(sets))
    scope = Scope(TENANT, "differential", f"differential-{n}-reference")
    two = _Side(reference, scope, modes, optional, frozenset(sets))
    for step, op in enumerate((*SETUP, *ops)):
        found = difference(one.apply(op), two.apply(op))
        assert found is None, f"operation {step} {op!r} answered differently: {found}"
    found = difference(one.state(), two.state())
    assert found is None, f"after {len(ops)} operations the state differs: {found}"


def _hypothesis() -> None:
    """Fail the test, naming the missing package, when hypothesis is not installed (it comes
    with the ``contract-tests`` extra; imported only here, so ``import
    ragport.contract_tests`` never needs it)."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        pytest.fail("DifferentialContract needs hypothesis: pip install 'ragport[contract-tests]'")


def check_same_answers(
    subject: ChunkStore,
    reference: ChunkStore,
    *,
    examples: int = 60,
    steps: int = 16,
    shrink: bool = True,
    lexical_modes: tuple[str, ...] | None = None,
    lexical_sets: tuple[str, ...] = (),
) -> None:
    """Run ``examples`` derandomized sequences of up to ``steps`` operations on both stores;
    ``AssertionError`` (from hypothesis, with the failing sequence) at the first difference.
    ``lexical_modes``: the lexical modes compared (``None``: every mode both declare);
    ``lexical_sets``: those of them compared by admitted set, not by rank (module
    docstring)."""
    _hypothesis()
    from hypothesis import HealthCheck, Phase, example, given, settings
    from hypothesis import strategies as st

    runs = itertools.count()
    phases = (Phase.explicit, Phase.generate, *((Phase.shrink,) if shrink else ()))

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
        report_multiple_bugs=False,  # one AssertionError, never an ExceptionGroup
    )
    @given(ops=st.lists(operations(), min_size=min(4, steps), max_size=steps))
    def run(ops: list[Op]) -> None:
        _run_sequence(subject, reference, ops, next(runs), lexical_modes, lexical_sets)

    for ops in EXPLICIT:
        run = example(ops=list(ops))(run)
    run()


class DifferentialContract(ContractSuite):
    """The store under test answers every operation as the reference store does."""

    differential_examples: ClassVar[int] = 60
    differential_steps: ClassVar[int] = 16
    differential_lexical_modes: ClassVar[tuple[str, ...] | None] = None
    """The lexical modes compared; ``None``: every mode both stores declare. Narrow it only
    for a mode whose two answers differ by design (say so in a comment): a backend's
    ``bm25`` on another analyzer than ``tokenize_lexical`` scores differently from the
    engine's generic ``bm25``; better, name it in ``differential_lexical_sets``."""
    differential_lexical_sets: ClassVar[tuple[str, ...]] = ()
    """Lexical modes compared by what their legs admit, not by rank (the module docstring
    says how): for a mode both stores serve under different scoring formulas or analyzers."""

    store_pair = required_fixture(
        "DifferentialContract",
        "store_pair",
        "yield (subject, reference): two empty ChunkStores (they may share one backend), "
        "e.g. BackendStore(backend) and BackendStore(backend, pushdown=False)",
    )

    def test_same_answers_on_random_operation_sequences(
        self, store_pair: tuple[ChunkStore, ChunkStore]
    ) -> None:
        """Checks ``ChunkStore.query``, ``ChunkStore.unit_of_work``,
        ``SupportsLexicalSearch.hybrid_query``: ``subject`` answers like ``reference``,
        every write, read, grant, forget, repoint, rollback and compaction of random
        sequences, and the state after.

        If this fails, hypothesis prints the smallest failing sequence and the first answer
        that differed (``/query`` a vector leg, ``/lexical:<mode>``, ``/hybrid:<mode>``,
        ``/retrieve:<mode>``, ``records``, ``history``, ...): check the pushdown that answers
        that question against the engine's generic path (``pushdown=False``)."""
        subject, reference = _pair(store_pair)
        check_same_answers(
            subject,
            reference,
            examples=self.differential_examples,
            steps=self.differential_steps,
            lexical_modes=self.differential_lexical_modes,
            lexical_sets=self.differential_lexical_sets,
        )


def _pair(value: object) -> tuple[ChunkStore, ChunkStore]:
    if not isinstance(value, tuple) or len(value) != 2:
        pytest.fail("store_pair must be a (subject, reference) tuple of two ChunkStores")
    if value[0] is value[1]:
        pytest.fail("store_pair must hold two distinct store objects")
    return value[0], value[1]
