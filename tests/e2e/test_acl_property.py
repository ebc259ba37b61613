"""Property: with an authorization, retrieval returns exactly the sources the caller may see.

Random grants (principals, groups, versions, revocations) and random callers, on both stores,
through the public retrieve_context with both legs on.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragport import Authorization, Chunk, Grant, RetrievalRequest, Scope
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application import replace_source, retrieve_context
from ragport.domain.model import decide_access

EMBEDDER = HashEmbedder(32)
WORDS = ["policy", "leave", "badge", "payment", "review", "audit", "ledger", "freight"]
PRINCIPALS = ["alice", "bob", "carol"]
GROUPS = ["staff", "finance", "ops"]

grants_strategy = st.builds(
    lambda principals, groups, version, revoked: (principals, groups, version, revoked),
    st.lists(st.sampled_from(PRINCIPALS), max_size=2, unique=True),
    st.lists(st.sampled_from(GROUPS), max_size=2, unique=True),
    st.integers(1, 3),
    st.booleans(),
)
corpus_strategy = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=2, max_size=5),
        st.one_of(st.none(), grants_strategy),
    ),
    min_size=1,
    max_size=10,
)
caller_strategy = st.tuples(
    st.sampled_from(PRINCIPALS),
    st.lists(st.sampled_from(GROUPS), max_size=2, unique=True),
    st.one_of(st.none(), st.integers(1, 3)),
)


def _check(store, mode: str, corpus, caller, query_words) -> None:
    scope = Scope("tenant", "kb", "c-" + uuid.uuid4().hex[:12])
    grants = []
    for n, (words, grant) in enumerate(corpus):
        source = f"src{n}"
        replace_source(
            source_id=source,
            chunks=[Chunk.of(source, 0, " ".join(words) + f" marker{n}")],
            embedder=EMBEDDER,
            store=store,
            scope=scope,
        )
        if grant is not None:
            principals, groups, version, revoked = grant
            grants.append(
                Grant(
                    source,
                    principal_ids=() if revoked else principals,
                    group_ids=() if revoked else groups,
                    access_version=version,
                )
            )
    store.set_source_access(scope, grants)
    principal, groups, version = caller
    auth = Authorization(principal, "tenant", group_ids=groups, access_version=version)
    by_source = {g.source_id: g for g in grants}
    allowed = {
        f"src{n}"
        for n in range(len(corpus))
        if decide_access(f"src{n}", by_source.get(f"src{n}"), auth).allowed
    }
    result = retrieve_context(
        " ".join(query_words),
        embedder=EMBEDDER,
        store=store,
        scope=scope,
        authorization=auth,
        request=RetrievalRequest(
            top_k=32,
            query_candidates=128,
            lexical=mode,
            max_context_tokens=8000,
            max_result_bytes=524288,
        ),
    )
    seen = {hit.source_id for hit in result.hits}
    assert seen == allowed
    assert {c.source_id for c in result.citations} == allowed
    for n in range(len(corpus)):
        if f"src{n}" not in allowed:
            assert f"marker{n} " not in result.text + " "


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    corpus=corpus_strategy,
    caller=caller_strategy,
    query_words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
)
def test_memory_store_returns_exactly_the_allowed_sources(corpus, caller, query_words):
    """In memory, hybrid retrieval returns every allowed source and no other.

    If this fails, check the grant predicate in InMemoryStore.query/lexical_query and the gates.
    """
    _check(InMemoryStore(), "bm25", corpus, caller, query_words)


@pytest.fixture(scope="module")
def pg_store(pg_engine):
    import uuid as _uuid

    from sqlalchemy import text

    from ragport.adapters.postgres import PostgresStore

    schema = "acl_" + _uuid.uuid4().hex[:10]
    store = PostgresStore(pg_engine, schema=schema, create=True)
    yield store
    with pg_engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    corpus=corpus_strategy,
    caller=caller_strategy,
    query_words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
)
def test_postgres_store_returns_exactly_the_allowed_sources(pg_store, corpus, caller, query_words):
    """On PostgreSQL, hybrid retrieval returns every allowed source and no other.

    If this fails, check `_acl_predicate` in ragport/adapters/postgres/store.py.
    """
    _check(pg_store, "bm25", corpus, caller, query_words)
