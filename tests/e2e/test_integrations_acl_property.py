"""Property: every face (context provider, LangChain, LlamaIndex, MCP search and
list_sources) shows exactly the sources the bound caller may see, under random grants."""

from __future__ import annotations

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from ragport import Authorization, Chunk, Grant, Scope, WriteOptions
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.application import RagContextProvider, replace_source
from ragport.domain.model import decide_access
from ragport.integrations.langchain import RagportRetriever as LangChainRetriever
from ragport.integrations.llama_index import RagportRetriever as LlamaIndexRetriever
from ragport.integrations.mcp import build_server

EMBEDDER = HashEmbedder(32)
SCOPE = Scope("tenant", "kb", "docs")
WORDS = ["policy", "leave", "badge", "payment", "review", "audit", "ledger", "freight"]
PRINCIPALS = ["alice", "bob", "carol"]
GROUPS = ["staff", "finance", "ops"]
# Large enough that top-k and the ceilings never hide an allowed source.
WIDE = {"top_k": 32, "query_candidates": 128, "max_context_tokens": 8000}

grant_strategy = st.one_of(
    st.none(),
    st.tuples(
        st.lists(st.sampled_from(PRINCIPALS), max_size=2, unique=True),
        st.lists(st.sampled_from(GROUPS), max_size=2, unique=True),
        st.integers(1, 2),
    ),
)
caller_strategy = st.tuples(
    st.sampled_from(PRINCIPALS),
    st.lists(st.sampled_from(GROUPS), max_size=2, unique=True),
    st.one_of(st.none(), st.integers(1, 2)),
)


def _mcp_views(server, query: str) -> tuple[set[str], set[str], str]:
    async def run() -> tuple[set[str], set[str], str]:
        async with Client(server) as client:
            found = await client.call_tool("search", {"query": query, "top_k": 32})
            listed = await client.call_tool("list_sources", {"limit": 200})
        assert not found.is_error and not listed.is_error
        return (
            {c["source_id"] for c in found.structured_content["citations"]},
            {s["source_id"] for s in listed.structured_content["sources"]},
            found.content[0].text,
        )

    return anyio.run(run)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    corpus=st.lists(
        st.tuples(st.lists(st.sampled_from(WORDS), min_size=2, max_size=4), grant_strategy),
        min_size=1,
        max_size=8,
    ),
    caller=caller_strategy,
    query_words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
)
def test_every_face_shows_exactly_the_allowed_sources(corpus, caller, query_words):
    """No face leaks a source the caller may not see, and none hides one it may.

    If this fails, check which face disagrees: each passes its bound authorization to
    retrieve_context, and MCP list_sources filters the status page with check_source_access.
    """
    store, status = InMemoryStore(), InMemoryStatusStore()
    grants = []
    for n, (words, grant) in enumerate(corpus):
        source = f"src{n}"
        replace_source(
            source_id=source,
            chunks=[Chunk.of(source, 0, " ".join(words) + f" marker{n}")],
            embedder=EMBEDDER,
            store=store,
            scope=SCOPE,
            write_options=WriteOptions(status_store=status),
        )
        if grant is not None:
            grants.append(
                Grant(source, principal_ids=grant[0], group_ids=grant[1], access_version=grant[2])
            )
    store.set_source_access(SCOPE, grants)
    auth = Authorization(caller[0], "tenant", group_ids=caller[1], access_version=caller[2])
    by_source = {g.source_id: g for g in grants}
    allowed = {
        f"src{n}"
        for n in range(len(corpus))
        if decide_access(f"src{n}", by_source.get(f"src{n}"), auth).allowed
    }
    denied_markers = [f"marker{n}" for n in range(len(corpus)) if f"src{n}" not in allowed]
    query = " ".join(query_words)
    bound = {"store": store, "embedder": EMBEDDER, "scope": SCOPE, "authorization": auth, **WIDE}

    block = RagContextProvider(query=query, **bound).provide([])
    provided = {c.source_id for c in block.citations} if block else set()
    docs = LangChainRetriever(**bound).invoke(query)
    nodes = LlamaIndexRetriever(**bound).retrieve(query)
    options = {k: v for k, v in bound.items() if k != "top_k"}
    searched, listed, mcp_text = _mcp_views(build_server(status_store=status, **options), query)

    assert provided == allowed
    assert {d.metadata["source_id"] for d in docs} == allowed
    assert {n.node.metadata["source_id"] for n in nodes} == allowed
    assert searched == allowed
    assert listed == allowed
    texts = [block.text if block else "", mcp_text]
    texts += [d.page_content for d in docs] + [n.node.get_content() for n in nodes]
    for marker in denied_markers:
        assert all(f"{marker} " not in t + " " for t in texts)
