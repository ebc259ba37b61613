"""RagportRetriever for LlamaIndex through llama-index-core's own retrieve / aretrieve."""

from __future__ import annotations

import asyncio

import pytest
from handbook_corpus import (
    ALICE,
    DENIED_SOURCE,
    MALLORY,
    OTHER_SCOPE,
    SCOPE,
    SECRET_WORD,
    build_handbook,
)
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.integrations.llama_index import RagportRetriever


@pytest.fixture
def corpus() -> dict:
    store, embedder = InMemoryStore(), HashEmbedder()
    build_handbook(store, embedder)
    return {"store": store, "embedder": embedder, "scope": SCOPE}


def test_sync_and_async_retrieve_give_the_same_scored_nodes(corpus):
    """retrieve and aretrieve (str or QueryBundle) return NodeWithScore with ragport metadata.

    If this fails, check _retrieve/_aretrieve in ragport/integrations/llama_index.py.
    """
    retriever = RagportRetriever(**corpus, authorization=ALICE, top_k=3)
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve("How long is parental leave?")
    again = asyncio.run(retriever.aretrieve(QueryBundle("How long is parental leave?")))
    assert [n.node.node_id for n in nodes] == [n.node.node_id for n in again]
    assert len(nodes) == 3 and all(isinstance(n, NodeWithScore) for n in nodes)
    first = nodes[0]
    assert isinstance(first.node, TextNode)
    assert first.node.node_id == "leave-policy#0001"
    assert first.node.get_content().startswith("# Leave")
    meta = first.node.metadata
    assert meta["citation_id"] == "leave-policy#0001" and meta["source_id"] == "leave-policy"
    assert meta["heading"] == ["Leave", "Parental leave"] and meta["page"] is None
    assert meta["retrieval"] == "vector"
    assert meta["trust"] == {"untrusted": True, "inert": True, "injection_capable": True}
    assert first.score == meta["score"] and first.score >= nodes[1].score


def test_denied_source_never_appears(corpus):
    """Neither retrieve nor aretrieve returns the merger plans to ALICE or MALLORY.

    If this fails, check that the retriever passes its bound authorization to retrieve_context.
    """
    alice = RagportRetriever(**corpus, authorization=ALICE, top_k=32)
    for nodes in (
        alice.retrieve(f"{SECRET_WORD} merger"),
        asyncio.run(alice.aretrieve(f"{SECRET_WORD} merger")),
    ):
        assert nodes and DENIED_SOURCE not in {n.node.metadata["source_id"] for n in nodes}
        assert all(SECRET_WORD not in n.node.get_content() for n in nodes)
    assert RagportRetriever(**corpus, authorization=MALLORY).retrieve(SECRET_WORD) == []


def test_same_citation_in_two_scopes_keeps_both_nodes(corpus):
    """LlamaIndex drops repeated node ids, so a citation id found in two scopes is qualified.

    If this fails, check _node_id in ragport/integrations/llama_index.py.
    """
    build_handbook(corpus["store"], corpus["embedder"], scope=OTHER_SCOPE)
    retriever = RagportRetriever(
        store=corpus["store"], embedder=corpus["embedder"], scopes=[SCOPE, OTHER_SCOPE], top_k=2
    )
    nodes = retriever.retrieve(f"{SECRET_WORD} merger")
    assert {n.node.node_id for n in nodes} == {
        "acme/kb/handbook/merger-plans#0001",
        "acme/kb/archive/merger-plans#0001",
    }


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"top_k": 0}, "top_k"),
        ({"scope": None}, "scope"),
        ({"authorization": {"principal_id": "ceo"}}, "authorization"),
        ({"principal_id": "ceo"}, "principal_id"),
    ],
)
def test_bad_construction_is_refused(corpus, kwargs, field):
    """Construction validates the count, the binding and option names at once.

    If this fails, check BoundRetrieval.bind.
    """
    with pytest.raises(ragport.ValidationError) as info:
        RagportRetriever(**{**corpus, **kwargs})
    assert info.value.field == field


def test_errors_are_typed(corpus):
    """A capability the store lacks is a CapabilityError through retrieve and aretrieve.

    If this fails, check that the retriever does not swallow retrieve_context errors.
    """
    retriever = RagportRetriever(**corpus, lexical="fts5")
    with pytest.raises(ragport.CapabilityError):
        retriever.retrieve("leave")
    with pytest.raises(ragport.CapabilityError):
        asyncio.run(retriever.aretrieve("leave"))
