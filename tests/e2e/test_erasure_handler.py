"""``DerivedErasureHandler``: a forgotten closure's text is gone from every table, both stores.

The scenario: a source whose text carries a marker word, a summary of it (two stored
versions: the first was replaced), a note resting on the summary (two levels of lineage), and
an unrelated source. A propagation with ``RagDeletionHandler`` alone withholds everything of
the closure but leaves the derived records' text stored (checked: the scan below finds it, so
the check can fail); with ``DerivedErasureHandler`` the marker is in no row of any table of
the schema (PostgreSQL, by SQL) or of the store's state (memory), the unrelated source is
untouched, and a rollback to before the propagation brings nothing back.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application import DerivedErasureHandler
from ragport.ports.store import ChunkStore

EMB = HashEmbedder(dimensions=32)
MARK = "zqxmarker"  # one token, so every analyzer keeps it whole
SCOPE = ragport.Scope("acme", "kb", "erase")


def _seed(store: ChunkStore) -> int:
    ragport.application.replace_source(
        source_id="policy",
        chunks=[ragport.Chunk.of("policy", i, f"{MARK} clause {i}") for i in range(3)],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    ragport.application.replace_source(
        source_id="other",
        chunks=[ragport.Chunk.of("other", 0, "unrelated travel rules, clause 9")],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    before = store.current_generation(SCOPE)
    for version in (1, 2):  # the first summary is retired by the second
        ragport.application.index_derived(
            record_id="policy-summary",
            text=f"summary v{version}: {MARK} in short",
            lineage=["policy"],
            embedder=EMB,
            store=store,
            scope=SCOPE,
        )
    ragport.application.index_derived(
        record_id="policy-note",
        text=f"a note on the summary, {MARK}",
        lineage=["policy-summary"],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    return before


def _propagate(store: ChunkStore, *handlers: Any) -> ragport.application.PropagationResult:
    propagator = ragport.application.create_deletion_propagator(
        scope=SCOPE, store=store, authorization=None, handlers=handlers, as_owner=True
    )
    return propagator.propagate("policy")


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Every str reachable from ``value`` (dicts, sequences, sets, attrs/slots objects)."""
    if depth > 12:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k, depth + 1)
            yield from _strings(v, depth + 1)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            yield from _strings(v, depth + 1)
    elif hasattr(value, "__dict__") or hasattr(value, "__slots__"):
        names = list(getattr(value, "__dict__", {})) + list(getattr(value, "__slots__", ()))
        for name in names:
            yield from _strings(getattr(value, name, None), depth + 1)


def _memory_marks(store: InMemoryStore) -> int:
    backend: Any = store.backend
    state = (backend._scopes, backend._lexicons)
    return sum(MARK in s for s in _strings(state))


def _postgres_marks(engine: Any, schema: str) -> dict[str, int]:
    found = {}
    with engine.connect() as conn:
        tables = conn.execute(
            text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s"),
            {"s": schema},
        ).scalars()
        for table in list(tables):
            n = conn.execute(
                text(f'SELECT count(*) FROM "{schema}"."{table}" t WHERE t::text LIKE :m'),
                {"m": f"%{MARK}%"},
            ).scalar_one()
            if n:
                found[table] = int(n)
    return found


def _served(store: ChunkStore, query: str) -> set[str]:
    result = ragport.application.retrieve_context(query, embedder=EMB, store=store, scope=SCOPE)
    return {hit.source_id for hit in result.hits}


def _lexical(store: ChunkStore) -> list[tuple[str, float]]:
    mode = store.capabilities.lexical_modes[0]
    found = store.lexical_query(SCOPE, "clause travel rules", limit=10, mode=mode)
    return [(s.record.id, round(s.score, 9)) for s in found]


def _check(store: ChunkStore, marks: Any, before: int) -> None:
    _propagate(store, ragport.application.RagDeletionHandler(store=store, scope=SCOPE))
    assert marks(), "the rag layer alone leaves the derived text stored: nothing to erase?"
    assert _served(store, MARK) <= {"other"}
    scores = _lexical(store)
    assert scores and scores[0][0] == "other#0001"
    result = _propagate(store, DerivedErasureHandler(store=store, scope=SCOPE))
    assert _lexical(store) == scores  # the BM25 statistics of what stays did not change
    assert result.layers["erase"] >= 3  # two summary versions and the note
    assert not marks(), f"the marker is still stored: {marks()}"
    assert _propagate(store, DerivedErasureHandler(store=store, scope=SCOPE)).layers == {"erase": 0}
    ragport.application.rollback_generation(store=store, scope=SCOPE, to=before)
    assert not marks()
    assert _served(store, "unrelated travel rules") == {"other"}


def test_erasure_on_memory():
    """In memory: no snapshot row, lexicon entry or index of the scope keeps the marker.

    If this fails, check ``DerivedErasureHandler.on_propagate`` (``purge_source`` of every id
    of the closure) and the memory unit of work's ``purge_source``.
    """
    store = InMemoryStore()
    before = _seed(store)
    _check(store, lambda: _memory_marks(store), before)


def test_erasure_on_postgres(pg_engine, pg_schema):
    """On PostgreSQL: no row of any table of the schema contains the marker (``t::text``).

    If this fails, check the table named in the message: ``purge_source`` must delete from it
    (or it must not copy text in the first place).
    """
    from ragport.adapters.postgres import PostgresStore

    store = PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")
    before = _seed(store)
    _check(store, lambda: _postgres_marks(pg_engine, pg_schema), before)


def test_the_handler_refuses_another_scope():
    """A handler built for one scope refuses a call for another, quoting no id.

    If this fails, check the scope comparison at the top of ``on_propagate``.
    """
    handler = DerivedErasureHandler(store=InMemoryStore(), scope=SCOPE)
    other = ragport.Scope("acme", "kb", "c" + uuid.uuid4().hex[:8])
    with pytest.raises(ragport.ValidationError) as caught:
        handler.on_propagate("secret-id", ["secret-id"], other)
    assert "secret-id" not in str(caught.value)
