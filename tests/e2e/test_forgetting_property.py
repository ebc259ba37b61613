"""Property: after propagating a source, nobody retrieves anything of its lineage closure, and
everything outside the closure is exactly as it was. On both stores.

Graphs are random DAGs of derived records over a few sources: each derived record rests on a
random non-empty set of sources and earlier derived records (so diamonds are common). Cycles
cannot be built through ``index_derived``; a second property tries to close one and expects a
``ValidationError`` with nothing changed.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ragport import Authorization, Chunk, Grant, RetrievalRequest, Scope, ValidationError
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application import (
    RagDeletionHandler,
    create_deletion_propagator,
    delete_source,
    index_derived,
    replace_source,
    repoint_source,
    retrieve_context,
    rollback_generation,
)

EMB = HashEmbedder(32)
TENANT = "tenant-prop"
ADMIN = Authorization("admin", TENANT)
READER = Authorization("reader", TENANT)
WORDS = ["policy", "leave", "badge", "payment", "review", "audit", "ledger", "freight"]

# A graph: per source its chunk count; per derived record the indices it rests on, where
# index < n_sources names a source and n_sources + j names derived record j (j < own index).
Graph = tuple[list[int], list[list[int]]]


@st.composite
def graphs(draw: Any) -> tuple[Graph, int]:
    n_sources = draw(st.integers(1, 3))
    chunks = [draw(st.integers(1, 2)) for _ in range(n_sources)]
    derived: list[list[int]] = []
    for j in range(draw(st.integers(0, 6))):
        pool = list(range(n_sources + j))
        derived.append(draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True)))
    target = draw(st.integers(0, n_sources - 1))
    return (chunks, derived), target


def _names(graph: Graph) -> tuple[list[str], list[str]]:
    chunks, derived = graph
    return [f"src{i}" for i in range(len(chunks))], [f"der{j}" for j in range(len(derived))]


def _build(store: Any, scope: Scope, graph: Graph, words: list[str]) -> dict[str, list[str]]:
    """Write the graph; return the lineage (by id) of every derived record."""
    chunks, derived = graph
    sources, derived_ids = _names(graph)
    everything = sources + derived_ids
    for i, (source, n) in enumerate(zip(sources, chunks, strict=True)):
        texts = [f"{source} chunk {k} {words[(i + k) % len(words)]}" for k in range(n)]
        replace_source(
            source_id=source,
            chunks=[Chunk.of(source, k, t) for k, t in enumerate(texts)],
            embedder=EMB,
            store=store,
            scope=scope,
        )
    lineage: dict[str, list[str]] = {}
    for j, rests_on in enumerate(derived):
        lineage[derived_ids[j]] = [everything[i] for i in rests_on]
        index_derived(
            record_id=derived_ids[j],
            text=f"{derived_ids[j]} derived {words[j % len(words)]}",
            lineage=lineage[derived_ids[j]],
            embedder=EMB,
            store=store,
            scope=scope,
        )
    store.set_source_access(scope, [Grant(s, principal_ids=("admin", "reader")) for s in sources])
    return lineage


def _dependents(lineage: dict[str, list[str]], start: str) -> set[str]:
    """``start`` and every derived record resting on it, transitively (the reference closure)."""
    closure = {start}
    changed = True
    while changed:
        changed = False
        for rid, rests_on in lineage.items():
            if rid not in closure and closure.intersection(rests_on):
                closure.add(rid)
                changed = True
    return closure


def _state(store: Any, scope: Scope, ids: list[str]) -> dict[str, list[tuple[str, str, tuple]]]:
    return {
        i: [(r.id, r.text, tuple(r.lineage)) for r in store.get_by_source(scope, i)] for i in ids
    }


def _seen(store: Any, scope: Scope, lexical: str, query: str, who: Authorization | None) -> set:
    result = retrieve_context(
        query,
        embedder=EMB,
        store=store,
        scope=scope,
        authorization=who,
        request=RetrievalRequest(
            top_k=32,
            query_candidates=128,
            lexical=lexical,
            max_context_tokens=8000,
            max_result_bytes=524288,
        ),
    )
    return {(h.id, h.source_id, h.text) for h in result.hits}


def _check_propagation(store: Any, lexical: str, graph: Graph, target_index: int) -> None:
    scope = Scope(TENANT, "kb", "c-" + uuid.uuid4().hex[:12])
    sources, derived_ids = _names(graph)
    lineage = _build(store, scope, graph, WORDS)
    everything = sources + derived_ids
    before = _state(store, scope, everything)
    visible_before = {row for rows in before.values() for row in rows}
    target = sources[target_index]
    closure = _dependents(lineage, target)

    result = create_deletion_propagator(
        scope=scope,
        store=store,
        authorization=ADMIN,
        handlers=[RagDeletionHandler(store=store, scope=scope)],
    ).propagate(target)
    assert set(result.ids) == closure
    assert result.tombstoned == len(closure) == len(result.ids)
    assert store.list_invalidated_ids(scope) == frozenset(closure)

    outside = {
        (rid, text)
        for source_id, rows in before.items()
        if source_id not in closure
        for rid, text, _ in rows
    }
    withheld_ids = {rid for rid, _, _ in visible_before} - {rid for rid, _ in outside}
    query_all = " ".join(WORDS)
    for who in (None, READER, ADMIN):
        # The vector leg asks for 128 candidates: every visible record comes back.
        seen = _seen(store, scope, "off", "derived chunk", who)
        assert {(i, t) for i, _, t in seen} == outside, who
        hybrid = _seen(store, scope, lexical, query_all, who)
        assert not {i for i, _, _ in hybrid} & (withheld_ids | closure), who
        assert not {s for _, s, _ in hybrid} & closure, who

    after = _state(store, scope, everything)
    for record_id in everything:
        if record_id not in closure:
            assert after[record_id] == before[record_id], record_id
        elif record_id in derived_ids:
            assert after[record_id] == before[record_id], "derived records stay, withheld"
    assert after[target] == [], "the rag layer removed the source's chunk rows"


def _check_cycle_refused(store: Any, graph: Graph, pick: int, extra: list[int]) -> None:
    scope = Scope(TENANT, "kb", "c-" + uuid.uuid4().hex[:12])
    sources, derived_ids = _names(graph)
    lineage = _build(store, scope, graph, WORDS)
    everything = sources + derived_ids
    # x may not rest on itself or on anything that (transitively) rests on x.
    pairs = [(x, y) for x in derived_ids for y in sorted(_dependents(lineage, x))]
    x, y = pairs[pick % len(pairs)]
    also = sorted({sources[i % len(sources)] for i in extra})
    before = _state(store, scope, everything)
    generation = store.current_generation(scope)
    with pytest.raises(ValidationError):
        index_derived(
            record_id=x,
            text=f"{x} would close a cycle through {y}",
            lineage=[*also, y],
            embedder=EMB,
            store=store,
            scope=scope,
        )
    assert _state(store, scope, everything) == before
    assert store.current_generation(scope) == generation


PICKS = st.integers(0, 1_000)
EXTRAS = st.lists(st.integers(0, 2), max_size=2, unique=True)
# der0 <- der1 <- der2 over src0; pick 2 is (der0, der2): a three-record cycle.
DEEP_CYCLE = (([1], [[0], [1], [2]]), 0)


# -- in memory -----------------------------------------------------------------------------------

MEMORY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@MEMORY
@given(case=graphs())
def test_memory_propagation_withholds_exactly_the_closure(case):
    """In memory, nobody retrieves the closure and everything else is unchanged. If this fails, check propagation._closure, the store predicate and the tombstone guard."""
    graph, target = case
    _check_propagation(InMemoryStore(), "bm25", graph, target)


@MEMORY
@given(case=graphs(), pick=PICKS, extra=EXTRAS)
@example(case=DEEP_CYCLE, pick=2, extra=[])
def test_memory_index_derived_refuses_every_cycle(case, pick, extra):
    """In memory, re-indexing a derived record onto itself or a descendant raises and changes nothing. If this fails, check derived._roots."""
    graph, _ = case
    if not graph[1]:
        return  # no derived record to re-index
    _check_cycle_refused(InMemoryStore(), graph, pick, extra)


# -- PostgreSQL ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_store(pg_engine):
    from sqlalchemy import text

    from ragport.adapters.postgres import PostgresStore

    schema = "fgt_" + uuid.uuid4().hex[:10]
    store = PostgresStore(pg_engine, schema=schema, create=True)
    yield store
    with pg_engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


POSTGRES = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.mark.slow
@POSTGRES
@given(case=graphs())
def test_postgres_propagation_withholds_exactly_the_closure(pg_store, case):
    """On PostgreSQL, nobody retrieves the closure and everything else is unchanged. If this fails, check find_dependents, tombstones.add and the predicate in postgres/store.py."""
    graph, target = case
    _check_propagation(pg_store, "bm25", graph, target)


@POSTGRES
@given(case=graphs(), pick=PICKS, extra=EXTRAS)
@example(case=DEEP_CYCLE, pick=2, extra=[])
def test_postgres_index_derived_refuses_every_cycle(pg_store, case, pick, extra):
    """On PostgreSQL, re-indexing a derived record onto itself or a descendant raises and changes nothing. If this fails, check derived._roots."""
    graph, _ = case
    if not graph[1]:
        return
    _check_cycle_refused(pg_store, graph, pick, extra)


# -- sequences: re-points, deletes, rollbacks and derivations around forgets ---------------------

SEQ_SOURCES = ("src0", "src1")
SEQ_DERIVED = ("der0", "der1", "der2", "der3")
SEQ_NAMES = tuple(n + suffix for n in SEQ_SOURCES + SEQ_DERIVED for suffix in ("", "-m"))
_TOKEN = re.compile(r"\bct(\d+)\b")

# One step: (operation, a, b) where a and b pick among what exists at that point.
Step = tuple[str, int, int]
steps = st.lists(
    st.tuples(
        st.sampled_from(["derive", "derive", "replace", "delete", "repoint", "rollback", "forget"]),
        st.integers(0, 63),
        st.integers(0, 63),
    ),
    min_size=1,
    max_size=9,
)


class _Model:
    """Contents and what they rest on; which contents a forget withheld (with descendants)."""

    def __init__(self) -> None:
        self.parents: dict[int, set[int]] = {}
        self.forgotten_roots: set[int] = set()
        self.next = 0

    def new(self, parents: set[int]) -> int:
        self.next += 1
        self.parents[self.next] = set(parents)
        return self.next

    def forgotten(self) -> set[int]:
        out = set(self.forgotten_roots)
        changed = True
        while changed:
            changed = False
            for content, parents in self.parents.items():
                if content not in out and parents & out:
                    out.add(content)
                    changed = True
        return out


def _tokens(text: str) -> set[int]:
    return {int(m) for m in _TOKEN.findall(text)}


def _visible(store: Any, scope: Scope) -> dict[str, set[int]]:
    """Each visible name and the content tokens its visible records carry."""
    out: dict[str, set[int]] = {}
    for name in SEQ_NAMES:
        records = store.get_by_source(scope, name)
        if records:
            out[name] = set().union(*(_tokens(r.text) for r in records))
    return out


def _floor(store: Any, scope: Scope) -> int:
    with store.unit_of_work(scope) as uow:
        return uow.generations.floor()


def _run_sequence(store: Any, lexical: str, program: list[Step]) -> None:
    scope = Scope(TENANT, "kb", "q-" + uuid.uuid4().hex[:12])
    model = _Model()
    store.set_source_access(scope, [Grant(n, principal_ids=("admin", "reader")) for n in SEQ_NAMES])
    for k, source in enumerate(SEQ_SOURCES):
        token = model.new(set())
        replace_source(
            source_id=source,
            chunks=[Chunk.of(source, 0, f"{source} chunk ct{token} {WORDS[k]}")],
            embedder=EMB,
            store=store,
            scope=scope,
        )
    for op, a, b in program:
        visible = _visible(store, scope)
        names = sorted(visible)
        if op == "derive":
            record_id = SEQ_DERIVED[a % len(SEQ_DERIVED)]
            if not names or any(n.startswith(record_id) for n in names if n != record_id):
                continue
            lineage = sorted({names[a % len(names)], names[b % len(names)]} - {record_id})
            if not lineage:
                continue
            token = model.new(set().union(*(visible[n] for n in lineage)))
            try:
                index_derived(
                    record_id=record_id,
                    text=f"{record_id} derived ct{token} {WORDS[a % len(WORDS)]}",
                    lineage=lineage,
                    embedder=EMB,
                    store=store,
                    scope=scope,
                )
            except ValidationError:
                model.parents.pop(token)  # refused (a cycle, or forgotten content): nothing new
        elif op == "replace":
            source = SEQ_SOURCES[a % len(SEQ_SOURCES)]
            token = model.new(set())
            try:
                replace_source(
                    source_id=source,
                    chunks=[Chunk.of(source, 0, f"{source} again ct{token} {WORDS[b % 8]}")],
                    embedder=EMB,
                    store=store,
                    scope=scope,
                )
            except ValidationError:
                model.parents.pop(token)  # the id names a re-pointed derived record now
        elif op == "delete" and names:
            delete_source(source_id=names[a % len(names)], store=store, scope=scope)
        elif op == "repoint" and names:
            name = names[a % len(names)]
            if name.endswith("-m"):
                continue
            # Refused (the destination is restorable or forgotten): nothing moved.
            with contextlib.suppress(ValidationError):
                repoint_source(scope=scope, store=store, from_id=name, to_id=name + "-m")
        elif op == "rollback":
            floor, top = _floor(store, scope), store.current_generation(scope)
            rollback_generation(store=store, scope=scope, to=floor + a % (top - floor + 1))
        elif op == "forget" and names:
            name = names[a % len(names)]
            model.forgotten_roots |= visible[name]
            # delete_source revokes the grant and a rollback restores content, not grants.
            store.set_source_access(scope, [Grant(name, principal_ids=("admin", "reader"))])
            handlers = [RagDeletionHandler(store=store, scope=scope)] if b % 2 else []
            create_deletion_propagator(
                scope=scope, store=store, authorization=ADMIN, handlers=handlers
            ).propagate(name)
        withheld = model.forgotten()
        for who in (None, READER):
            for mode in ("off", lexical):
                seen = _seen(store, scope, mode, " ".join(WORDS) + " derived chunk", who)
                leaked = {t for _, _, text in seen for t in _tokens(text)} & withheld
                assert not leaked, (op, a, b, who, mode, sorted(leaked))


@MEMORY
@given(program=steps)
@example(program=[("derive", 0, 0), ("derive", 1, 4), ("forget", 4, 0), ("derive", 2, 1)])
@example(program=[("derive", 0, 0), ("derive", 1, 0), ("repoint", 0, 0), ("forget", 3, 1)])
@example(
    program=[
        ("derive", 0, 0),
        ("derive", 1, 0),
        ("derive", 2, 1),
        ("delete", 2, 0),
        ("delete", 1, 0),
        ("forget", 3, 0),
        ("rollback", 4, 0),
    ]
)
def test_memory_nothing_resting_on_forgotten_content_is_served_after_any_sequence(program):
    """In memory, random sequences of derivations, replacements, deletes, re-points,
    rollbacks and forgets never serve content that rests on forgotten content. If this
    fails, check propagation._closure, _roots, repoint_source and the roots test of the
    predicate (is_forgotten)."""
    _run_sequence(InMemoryStore(), "bm25", program)


@pytest.mark.slow
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(program=steps)
def test_postgres_nothing_resting_on_forgotten_content_is_served_after_any_sequence(
    pg_store, program
):
    """On PostgreSQL, the same sequences never serve content resting on forgotten content.
    If this fails, check find_dependents, rewrite_lineage, rekey and the predicate in
    postgres/store.py."""
    _run_sequence(pg_store, "bm25", program)
