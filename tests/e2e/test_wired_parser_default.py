"""The public, wired entry points parse with ``parser_for`` when no ``parser=`` is given.

``ragport.sync_knowledge``, ``ragport.replace_document`` and ``ragport.Rag`` are the use cases
of ``ragport.application`` with the default parser wired in by ``ragport.bootstrap``; the
application functions themselves keep requiring an injected parser.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ragport
from ragport import application
from ragport.adapters.connectors import FolderConnector
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.loaders import FileDocumentLoader
from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore
from ragport.adapters.postgres import PostgresStore

SCOPE = ragport.Scope("acme", "kb", "docs")
EMB = HashEmbedder(dimensions=32)


def _corpus(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "leave.md").write_text("# Leave\n\nParental leave lasts 16 weeks.\n")
    (root / "pay.txt").write_text("A payment above 10k needs two approvals.\n")
    return root


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest):
    """Both stores: the in-memory one and PostgreSQL."""
    if request.param == "memory":
        yield InMemoryStore()
        return
    pg_url = request.getfixturevalue("pg_url")
    schema = request.getfixturevalue("pg_schema")
    made = PostgresStore(pg_url, schema=schema, create=True)
    yield made
    made.engine.dispose()


def _sources(store, query: str) -> list[str]:
    found = ragport.application.retrieve_context(query, embedder=EMB, store=store, scope=SCOPE)
    return [h.provenance.source_id for h in found.hits]


def test_sync_knowledge_without_parser_syncs_a_folder(store, tmp_path: Path) -> None:
    """``ragport.sync_knowledge`` with no ``parser=`` indexes a folder (Markdown and text).

    If this fails, check ``_parser_for_by_default`` in ragport/bootstrap/stores.py and the
    export in ragport/__init__.py."""
    result = ragport.bootstrap.sync_knowledge(
        connector=FolderConnector(_corpus(tmp_path)),
        checkpoints=InMemoryCheckpointStore(),
        store=store,
        embedder=EMB,
        scope=SCOPE,
    )
    assert result.upserted == 2
    assert "leave.md" in _sources(store, "parental leave")


def test_replace_document_without_parser(store, tmp_path: Path) -> None:
    """``ragport.replace_document`` with no ``parser=`` loads, parses and indexes a file.

    If this fails, check ``_parser_for_by_default`` in ragport/bootstrap/stores.py."""
    root = _corpus(tmp_path)
    result = ragport.bootstrap.replace_document(
        uri="leave.md", loader=FileDocumentLoader(root=root), embedder=EMB, store=store,
        scope=SCOPE,
    )  # fmt: skip
    assert result.indexed >= 1 and not result.skipped
    assert "leave.md" in _sources(store, "parental leave")


def test_rag_replace_document_without_parser(store, tmp_path: Path) -> None:
    """``ragport.Rag(...).replace_document`` with no ``parser=`` parses with ``parser_for``.

    If this fails, check ``Rag.default_parser`` in ragport/bootstrap/stores.py and
    ragport/application/facade.py."""
    rag = ragport.Rag(store=store, embedder=EMB, scope=SCOPE, status_store=InMemoryStatusStore())
    result = rag.replace_document(uri="pay.txt", loader=FileDocumentLoader(root=_corpus(tmp_path)))
    assert result.indexed >= 1
    assert isinstance(rag, application.Rag)
    assert "pay.txt" in _sources(store, "payment approvals")


def test_the_application_functions_still_require_a_parser(tmp_path: Path) -> None:
    """``ragport.application`` keeps requiring ``parser=`` (it imports no parser adapter).

    If this fails, the default moved into the application layer: move it back to bootstrap."""
    loader = FileDocumentLoader(root=_corpus(tmp_path))
    with pytest.raises(ragport.ValidationError) as caught:
        application.replace_document(
            uri="pay.txt", loader=loader, embedder=EMB, store=InMemoryStore(), scope=SCOPE
        )
    assert caught.value.field == "parser"
    with pytest.raises(ragport.ValidationError) as caught:
        application.Rag(store=InMemoryStore(), embedder=EMB, scope=SCOPE).replace_document(
            uri="pay.txt", loader=loader
        )
    assert caught.value.field == "parser"
