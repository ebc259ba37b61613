"""ragport.Rag: the use cases bound to one store, embedder and scope (issue 11, item 6)."""

from __future__ import annotations

import pytest

from ragport import CapabilityError, Chunk, Rag, RetrievalRequest, Scope, ValidationError
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.application import retrieve_context

A, B = Scope("t", "r", "a"), Scope("t", "r", "b")
EMB = HashEmbedder(64)


def _chunks(source: str, *texts: str) -> list[Chunk]:
    return [Chunk.of(source, i, t) for i, t in enumerate(texts)]


def test_a_bound_rag_runs_the_lifecycle_like_the_functions() -> None:
    """replace, derive, retrieve, delete, rollback and status through one bound object give
    what the functions give. If this fails, check ragport/application/facade.py."""
    store, status = InMemoryStore(), InMemoryStatusStore()
    rag = Rag(store=store, embedder=EMB, scope=A, status_store=status)
    first = rag.replace_source(source_id="doc", chunks=_chunks("doc", "walrus colonies", "ice"))
    assert (first.indexed, first.generation) == (2, 1)
    rag.index_derived(record_id="sum", text="summary of walrus colonies", lineage=["doc"])
    result = rag.retrieve("walrus", top_k=3)
    direct = retrieve_context(
        "walrus", embedder=EMB, store=store, scope=A, request=RetrievalRequest(top_k=3)
    )
    assert [h.id for h in result.hits] == [h.id for h in direct.hits]
    assert {h.id for h in result.hits} == {"doc#0001", "doc#0002", "sum"}
    assert [item.source_id for item in rag.status().items] == ["doc"]
    deleted = rag.delete_source(source_id="doc")
    assert deleted.deleted == 2
    assert {h.id for h in rag.retrieve("walrus").hits} == {"sum"}
    rag.rollback(to=first.generation)
    assert {h.id for h in rag.retrieve("walrus").hits} == {"doc#0001", "doc#0002"}


def test_a_rag_over_several_scopes_retrieves_from_all_and_refuses_writes() -> None:
    """Bound to scopes=, retrieve searches every scope; a write needs one scope. If this
    fails, check Rag._write_scope."""
    store = InMemoryStore()
    for scope, text in ((A, "walrus in a"), (B, "walrus in b")):
        Rag(store=store, embedder=EMB, scope=scope).replace_source(
            source_id="doc", chunks=_chunks("doc", text)
        )
    both = Rag(store=store, embedder=EMB, scopes=[A, B])
    assert {h.scope for h in both.retrieve("walrus").hits} == {A, B}
    assert both.scopes == (A, B)
    with pytest.raises(ValidationError) as caught:
        both.replace_source(source_id="x", chunks=_chunks("x", "text"))
    assert caught.value.field == "scope"


def test_a_rag_refuses_ambiguous_binding_and_status_without_a_store() -> None:
    """Exactly one of scope / scopes; status needs a status store. If this fails, check
    Rag.__init__ and Rag.status."""
    store = InMemoryStore()
    for bad in ({}, {"scope": A, "scopes": [B]}):
        with pytest.raises(ValidationError):
            Rag(store=store, embedder=EMB, **bad)
    with pytest.raises(CapabilityError):
        Rag(store=store, embedder=EMB, scope=A).status()


def test_a_bound_rag_replaces_documents() -> None:
    """Rag.replace_document loads, parses and indexes in the bound scope, with status.

    If this fails, check Rag.replace_document in ragport/application/facade.py.
    """
    from ragport.adapters.loaders import ResourceDocumentLoader
    from ragport.adapters.parsers import parser_for
    from ragport.ports.documents import LoadedDocument

    store, status = InMemoryStore(), InMemoryStatusStore()
    rag = Rag(store=store, embedder=EMB, scope=A, status_store=status)
    loader = ResourceDocumentLoader(
        loader=lambda uri: LoadedDocument(b"# Leave\n\nSixteen weeks.\n", "text/markdown")
    )
    first = rag.replace_document(uri="kb/leave.md", loader=loader, parser=parser_for)
    assert first.indexed == 1 and status.get(A, "kb/leave.md").state == "indexed"
    assert rag.replace_document(uri="kb/leave.md", loader=loader, parser=parser_for).skipped
    assert not store.get_by_source(B, "kb/leave.md")


def test_bootstrap_hands_back_a_bound_rag() -> None:
    """``ragport.bootstrap.open_rag`` binds a Rag to the stores of a URL. If this fails,
    check open_rag in ragport/bootstrap/stores.py."""
    from ragport.bootstrap import open_rag

    with open_rag("memory://", scope=A, embedder="hash") as rag:
        rag.replace_source(source_id="doc", chunks=_chunks("doc", "walrus colonies"))
        assert [h.id for h in rag.retrieve("walrus").hits] == ["doc#0001"]
        assert [item.source_id for item in rag.status().items] == ["doc"]


def test_open_rag_binds_the_runtime_it_is_given() -> None:
    """``open_rag(runtime=)`` is the Rag's bound runtime: its limits apply to every call. If
    this fails, check that open_rag passes runtime to Rag."""
    from ragport import Limits, Runtime
    from ragport.bootstrap import open_rag

    with open_rag(
        "memory://", scope=A, embedder="hash", runtime=Runtime(limits=Limits(top_k=1))
    ) as rag:
        for n in range(3):
            rag.replace_source(source_id=f"d{n}", chunks=_chunks(f"d{n}", "walrus colonies"))
        assert rag.runtime.limits.top_k == 1
        assert len(rag.retrieve("walrus").hits) == 1
