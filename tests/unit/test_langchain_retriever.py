"""RagportRetriever for LangChain: metadata, access, and what it refuses (in-memory store)."""

from __future__ import annotations

import asyncio

import pytest
from handbook_corpus import ALICE, DENIED_SOURCE, MALLORY, SCOPE, SECRET_WORD, build_handbook
from langchain_core.documents import Document
from pydantic import ValidationError as PydanticValidationError

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.integrations.langchain import RagportRetriever


@pytest.fixture
def corpus() -> dict:
    store, embedder = InMemoryStore(), HashEmbedder()
    build_handbook(store, embedder)
    return {"store": store, "embedder": embedder, "scope": SCOPE}


def test_documents_carry_citation_metadata(corpus):
    """Each Document carries the citation, provenance, score, leg and trust labels.

    If this fails, check hit_metadata in ragport/integrations/_common.py.
    """
    docs = RagportRetriever(**corpus, top_k=2).invoke("How long is parental leave?")
    assert len(docs) == 2 and all(isinstance(d, Document) for d in docs)
    first = docs[0]
    assert first.id == "leave-policy#0001"
    assert first.page_content.startswith("# Leave")
    meta = first.metadata
    assert meta["citation_id"] == meta["chunk_id"] == "leave-policy#0001"
    assert meta["source_id"] == "leave-policy"
    assert meta["heading"] == ["Leave", "Parental leave"]
    assert meta["page"] is None
    assert meta["retrieval"] == "vector"
    assert isinstance(meta["score"], float) and meta["score"] >= docs[1].metadata["score"]
    assert meta["trust"] == {"untrusted": True, "inert": True, "injection_capable": True}
    assert (meta["tenant_id"], meta["resource_id"], meta["corpus_id"]) == ("acme", "kb", "handbook")


def test_denied_source_never_appears(corpus):
    """Under ALICE's authorization the merger plans never come back, however the query asks.

    If this fails, check that the retriever passes its bound authorization to retrieve_context.
    """
    retriever = RagportRetriever(**corpus, authorization=ALICE, top_k=32)
    docs = retriever.invoke(f"{SECRET_WORD} merger")
    assert docs and DENIED_SOURCE not in {d.metadata["source_id"] for d in docs}
    assert all(SECRET_WORD not in d.page_content for d in docs)
    assert RagportRetriever(**corpus, authorization=MALLORY).invoke(SECRET_WORD) == []
    trusted = RagportRetriever(**corpus, top_k=1).invoke(f"{SECRET_WORD} merger")
    assert trusted[0].metadata["source_id"] == DENIED_SOURCE


@pytest.mark.parametrize(
    "kwargs",
    [
        {"authorization": None},
        {"scope": ragport.Scope("acme", "kb", "other")},
        {"principal_id": "ceo"},
        {"metadata_filter": {"source_id": DENIED_SOURCE}},
    ],
)
def test_invoke_cannot_change_the_binding(corpus, kwargs):
    """invoke takes a result count only: scope, authorization or options per call are refused.

    If this fails, check RagportRetriever._count.
    """
    retriever = RagportRetriever(**corpus, authorization=ALICE)
    with pytest.raises(ragport.ValidationError) as info:
        retriever.invoke(SECRET_WORD, **kwargs)
    assert info.value.field == next(iter(kwargs))


def test_binding_is_frozen(corpus):
    """The bound retrieval cannot be swapped after construction.

    If this fails, check model_config frozen=True on RagportRetriever.
    """
    retriever = RagportRetriever(**corpus, authorization=ALICE)
    with pytest.raises(PydanticValidationError):
        retriever.bound = RagportRetriever(**corpus).bound  # type: ignore[misc]
    assert retriever.authorization == ALICE


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"top_k": 0}, "top_k"),
        ({"top_k": 33}, "top_k"),
        ({"k": 2, "top_k": 2}, "top_k"),
        ({"scopes": [SCOPE]}, "scope"),
        ({"authorization": "alice"}, "authorization"),
        ({"tenant_id": "other"}, "tenant_id"),
    ],
)
def test_bad_construction_is_refused(corpus, kwargs, field):
    """Construction validates counts, the binding and option names at once.

    If this fails, check BoundRetrieval.bind and pick_top_k.
    """
    with pytest.raises(ragport.ValidationError) as info:
        RagportRetriever(**corpus, **kwargs)
    assert info.value.field == field


def test_errors_are_typed_and_async_works(corpus):
    """A capability the store lacks is a CapabilityError through invoke and ainvoke.

    If this fails, check that the retriever does not swallow retrieve_context errors.
    """
    retriever = RagportRetriever(**corpus, lexical="fts5")
    with pytest.raises(ragport.CapabilityError):
        retriever.invoke("leave")
    with pytest.raises(ragport.CapabilityError):
        asyncio.run(retriever.ainvoke("leave"))
    docs = asyncio.run(RagportRetriever(**corpus, lexical="bm25").ainvoke("parental leave", k=1))
    assert docs[0].metadata["retrieval"] in ("hybrid", "lexical", "vector")


def test_a_bound_abort_still_stops_an_async_call(corpus):
    """An abort= bound at construction stops invoke and ainvoke, beside ainvoke's own signal.

    If this fails, check how BoundRetrieval.run combines its abort with a bound one.
    """
    import threading

    stop = threading.Event()
    retriever = RagportRetriever(**corpus, abort=stop)
    assert asyncio.run(retriever.ainvoke("parental leave"))
    stop.set()
    with pytest.raises(ragport.AbortedError):
        retriever.invoke("parental leave")
    with pytest.raises(ragport.AbortedError):
        asyncio.run(retriever.ainvoke("parental leave"))
    assert retriever.limiter.borrowed_tokens == 0
