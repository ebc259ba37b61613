"""Writes to a forgotten id fail loudly, on every store (issue 44: "writing to a forgotten id
vanishes"): the use cases, the facade and sync refuse it with ``ForgottenError``; ingestion
status and ``sources`` never say ``indexed`` for it; ``readmit_source`` lets it in again,
audited."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from sync_support import DictConnector, Stores, sync_stores

import ragport
from ragport import WriteOptions
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.loaders import ResourceDocumentLoader
from ragport.adapters.memory import InMemoryCheckpointStore
from ragport.adapters.parsers import parser_for
from ragport.aio import AsyncRag
from ragport.application import readmit_source
from ragport.bootstrap import FORGOTTEN, list_sources
from ragport.bootstrap import Stores as BootStores

SCOPE = ragport.Scope("acme", "kb", "forgotten")
EMB = HashEmbedder(dimensions=64)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def stores(request) -> Iterator[Stores]:
    yield sync_stores(request)


def _put(stores: Stores, source_id: str, text: str, **kw: Any) -> ragport.ReplaceResult:
    return ragport.application.replace_source(
        source_id=source_id, chunks=[ragport.Chunk.of(source_id, 0, text)], embedder=EMB,
        store=stores.store, scope=SCOPE,
        write_options=WriteOptions(status_store=stores.status), **kw,
    )  # fmt: skip


def _forget(stores: Stores, source_id: str, *, rag_handler: bool = True) -> None:
    handlers = (
        [
            ragport.application.RagDeletionHandler(
                store=stores.store, scope=SCOPE, status_store=stores.status
            )
        ]
        if rag_handler
        else []
    )
    ragport.application.create_deletion_propagator(
        scope=SCOPE, store=stores.store, authorization=None, handlers=handlers, as_owner=True
    ).propagate(source_id)


def _hits(stores: Stores, query: str) -> list[str]:
    result = ragport.application.retrieve_context(
        query, embedder=EMB, store=stores.store, scope=SCOPE,
        request=ragport.RetrievalRequest(top_k=10),
    )  # fmt: skip
    return [h.text for h in result.hits]


def test_the_issue_scenario_is_refused_and_status_says_failed(stores):
    """After propagate("x"), replace_source("x") is ForgottenError naming x (it returned
    indexed=1 and served nothing); status says failed with the hint, never indexed.

    If this fails, check first_forgotten and refuse_forgotten in replace_source
    (ragport/application/indexing.py).
    """
    _put(stores, "x", "the first words")
    _forget(stores, "x")
    generation = stores.store.current_generation(SCOPE)
    with pytest.raises(ragport.ForgottenError) as caught:
        _put(stores, "x", "words written after the forget")
    assert caught.value.source_id == "x" and caught.value.field == "source_id"
    assert isinstance(caught.value, ragport.ValidationError)
    assert "readmit" in str(caught.value) and "words" not in str(caught.value)
    assert stores.store.current_generation(SCOPE) == generation
    assert not stores.store.get_by_source(SCOPE, "x")
    status = stores.status.get(SCOPE, "x")
    assert status is not None and status.state == "failed"
    assert status.error is not None and status.error.startswith("ForgottenError")
    assert _hits(stores, "words written after the forget") == []


def test_sources_never_say_indexed_for_a_forgotten_source(stores):
    """A source forgotten without the rag handler keeps its (withheld) rows and its old
    ``indexed`` status: ``list_sources`` (``ragport sources``) shows it ``forgotten``.

    If this fails, check list_sources in ragport/bootstrap/corpus.py.
    """
    _put(stores, "kept", "kept words")
    _put(stores, "x", "forgotten words")
    _forget(stores, "x", rag_handler=False)
    assert stores.status.get(SCOPE, "x").state == "indexed"  # what the status store holds
    boot = BootStores(stores.store, stores.status, "test")
    states = {row.source_id: row.state for row in list_sources(boot, SCOPE)}
    assert states == {"kept": "indexed", "x": FORGOTTEN}


def test_replace_document_and_index_chunks_are_refused(stores):
    """replace_document (before parsing: status failed) and index_chunks refuse a forgotten
    id; index_chunks writes nothing of the other sources in the call either.

    If this fails, check prepare_document (ragport/application/documents.py) and index_chunks.
    """
    _forget(stores, "doc.md")
    loader = ResourceDocumentLoader(loader=lambda uri: b"# Doc\n\nSome words.\n")
    with pytest.raises(ragport.ForgottenError):
        ragport.bootstrap.replace_document(
            uri="doc.md", loader=loader, parser=parser_for, embedder=EMB, store=stores.store,
            scope=SCOPE, write_options=WriteOptions(status_store=stores.status),
        )  # fmt: skip
    assert stores.status.get(SCOPE, "doc.md").state == "failed"
    with pytest.raises(ragport.ForgottenError) as caught:
        ragport.application.index_chunks(
            chunks=[ragport.Chunk.of("other", 0, "other words"),
                    ragport.Chunk.of("doc.md", 0, "doc words")],
            embedder=EMB, store=stores.store, scope=SCOPE,
            write_options=WriteOptions(status_store=stores.status),
        )  # fmt: skip
    assert caught.value.source_id == "doc.md"
    assert not stores.store.get_by_source(SCOPE, "other")
    assert stores.status.get(SCOPE, "other") is None


def test_sync_fails_the_forgotten_item_alone_and_does_not_retry_it(stores):
    """A connector still listing a forgotten item: that item fails (ForgottenError, not kept
    for a retry), the others are indexed.

    If this fails, check prepare_document's refusal and is_retryable (_sync_state.py).
    """
    connector = DictConnector({"a.md": b"# A\n\nalpha", "x.md": b"# X\n\nxray"})
    _forget(stores, "x.md")
    result = ragport.bootstrap.sync_knowledge(
        connector=connector, checkpoints=InMemoryCheckpointStore(), store=stores.store,
        embedder=EMB, scope=SCOPE, status_store=stores.status,
    )  # fmt: skip
    assert result.upserted == 1 and result.failed == 1 and result.retrying == 0
    (failure,) = result.failures
    assert (failure.source_id, failure.reason, failure.retrying) == (
        "x.md",
        "ForgottenError",
        False,
    )
    assert stores.status.get(SCOPE, "x.md").state == "failed"
    assert not stores.store.get_by_source(SCOPE, "x.md")


class _Spans:
    """A Telemetry that records span names, attributes and counters."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, dict[str, Any]]] = []
        self.counts: dict[str, int] = {}

    @contextmanager
    def span(self, name: str) -> Iterator[Any]:
        attributes: dict[str, Any] = {}
        self.spans.append((name, attributes))

        class _Span:
            def set_attribute(self, key: str, value: Any) -> None:
                attributes[key] = value

        yield _Span()

    def count(self, name: str, value: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + value


def test_readmit_is_audited_and_lets_the_facade_write_again(stores, caplog):
    """Through the facade: a write is ForgottenError until ``readmit_source``, which emits a
    ``rag.readmit`` span and counter and one ``ragport.audit`` line naming the id (no text);
    then the write is indexed and served.

    If this fails, check readmit_source (ragport/application/admission.py) and Rag.
    """
    telemetry = _Spans()
    rag = ragport.Rag(
        store=stores.store, embedder=EMB, scope=SCOPE, status_store=stores.status,
        runtime=ragport.Runtime(telemetry=telemetry),
    )  # fmt: skip
    rag.replace_source(source_id="x", chunks=[ragport.Chunk.of("x", 0, "secret old words")])
    _forget(stores, "x", rag_handler=False)
    new = [ragport.Chunk.of("x", 0, "fresh new words")]
    with pytest.raises(ragport.ForgottenError):
        rag.replace_source(source_id="x", chunks=new)
    with caplog.at_level(logging.INFO, logger="ragport.audit"):
        result = rag.readmit("x")
    assert (result.readmitted, result.purged) == (True, 1)
    (line,) = [r for r in caplog.records if r.name == "ragport.audit"]
    assert "'x'" in line.getMessage() and "words" not in line.getMessage()
    (attributes,) = [a for name, a in telemetry.spans if name == "rag.readmit"]
    assert attributes["rag.readmit.source_id"] == "x"
    assert not any("words" in str(v) for v in attributes.values())
    assert telemetry.counts == {"rag.readmit": 1}
    assert stores.status.get(SCOPE, "x") is None
    assert rag.replace_source(source_id="x", chunks=new).indexed == 1
    assert stores.status.get(SCOPE, "x").state == "indexed"
    assert _hits(stores, "fresh new words") == ["fresh new words"]
    assert not any("old" in text for text in _hits(stores, "secret old words"))


def test_async_facade_refuses_and_readmits(stores):
    """AsyncRag mirrors both: replace_source raises ForgottenError, readmit_source re-admits.

    If this fails, check the mirrored methods of ragport/aio.py (forget's pair, readmit).
    """
    rag = ragport.Rag(store=stores.store, embedder=EMB, scope=SCOPE, status_store=stores.status)
    _forget(stores, "x")
    chunks = [ragport.Chunk.of("x", 0, "async words")]

    async def run() -> ragport.ReplaceResult:
        arag = AsyncRag(rag, max_threads=2)
        with pytest.raises(ragport.ForgottenError):
            await arag.replace_source(source_id="x", chunks=chunks)
        assert (await arag.readmit("x")).readmitted
        return await arag.replace_source(source_id="x", chunks=chunks)

    assert anyio.run(run).indexed == 1


def test_readmit_of_an_id_that_is_not_forgotten_writes_nothing(stores):
    """readmit_source on a live, unforgotten source is a no-op: nothing purged or revoked.

    If this fails, check that readmit_source writes only when a forgotten tombstone names the id.
    """
    _put(stores, "live", "live words")
    stores.store.set_source_access(SCOPE, [ragport.Grant("live", principal_ids=("alice",))])
    result = readmit_source(source_id="live", store=stores.store, scope=SCOPE)
    assert (result.readmitted, result.purged) == (False, 0)
    assert [r.text for r in stores.store.get_by_source(SCOPE, "live")] == ["live words"]
    assert stores.store.get_source_access(SCOPE, ["live"])["live"].principal_ids == ("alice",)
