"""Static promises of the public API, checked by ``make typecheck`` (``mypy --strict``).

Each ``# type: ignore[...]`` below marks a call that must stay a type error: with
``warn_unused_ignores`` (part of ``--strict``), an ignore that is no longer needed is itself an
error, so this file fails the type check the day a misspelt keyword stops being caught.
Nothing here runs; tests/unit/test_retrieval_request.py checks the same calls at run time.
"""

from __future__ import annotations

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.aio import AsyncRag


def rag_methods(rag: ragport.Rag) -> None:
    rag.retrieve("q", top_k=3)
    rag.retrieve("q", request=ragport.RetrievalRequest(top_k=3, lexical="bm25"))
    rag.retrieve("q", top_kk=3)  # type: ignore[call-arg]
    rag.retrieve("q", top_k="3")  # type: ignore[arg-type]
    rag.replace_source(source_id="s", chunks=[], batch_sizes=8)  # type: ignore[call-arg]
    rag.delete_source(source_id="s", status_stor=None)  # type: ignore[call-arg]
    rag.index_derived(record_id="r", text="t", lineage=["s"], metadata_=None)  # type: ignore[call-arg]


async def async_rag_methods(rag: AsyncRag) -> None:
    await rag.retrieve("q", top_k=3)
    await rag.retrieve("q", top_kk=3)  # type: ignore[call-arg]
    await rag.delete_source(source_id="s", runtime=None)


def retrieve_context_keywords() -> None:
    store, embedder = InMemoryStore(), HashEmbedder()
    scope = ragport.Scope("acme", "kb", "docs")
    ragport.application.retrieve_context("q", embedder=embedder, store=store, scope=scope)
    ragport.application.retrieve_context(
        "q",
        embedder=embedder,
        store=store,
        scope=scope,
        top_k=3,  # type: ignore[call-arg]
    )
    ragport.RetrievalRequest(top_kk=3)  # type: ignore[call-arg]
    ragport.Runtime(telemetri=None)  # type: ignore[call-arg]


def faces_take_typed_retrieve_options() -> None:
    from ragport.application import RagContextProvider
    from ragport.integrations.mcp import build_server

    store, embedder = InMemoryStore(), HashEmbedder()
    scope = ragport.Scope("acme", "kb", "docs")
    RagContextProvider(embedder=embedder, store=store, scope=scope, top_k=3, lexical="bm25")
    RagContextProvider(embedder=embedder, store=store, scope=scope, top_kk=3)  # type: ignore[call-arg]
    RagContextProvider(embedder=embedder, store=store, scope=scope, top_k="3")  # type: ignore[arg-type]
    build_server(store=store, embedder=embedder, scope=scope, lexical="bm25")
    build_server(store=store, embedder=embedder, scope=scope, lexicals="bm25")  # type: ignore[call-arg]
