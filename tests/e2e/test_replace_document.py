"""replace_document on both stores: load, parse, chunk, replace; skip key; status; failures.

Every test runs on InMemoryStore and on PostgresStore (the session's embedded server).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from doubles import CountingEmbedder
from flat_options import flat_write
from pdf_bytes import pdf

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.loaders import FileDocumentLoader, ResourceDocumentLoader
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.adapters.parsers import MarkdownParser, PdfParser, parser_for
from ragport.ports.documents import LoadedDocument

SCOPE = ragport.Scope("acme", "kb", "docs")
DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(params=["memory", "postgres"])
def stores(request):
    if request.param == "memory":
        return InMemoryStore(), InMemoryStatusStore()
    from ragport.adapters.postgres import PostgresStatusStore, PostgresStore

    engine = request.getfixturevalue("pg_engine")
    schema = request.getfixturevalue("pg_schema")
    return PostgresStore(engine, schema=schema, create=True), PostgresStatusStore(
        engine, schema=schema
    )


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "handbook.md").write_bytes((DATA / "handbook.md").read_bytes())
    return root


def _replace(stores, loader, uri, embedder, **kwargs):
    store, status = stores
    kwargs.setdefault("parser", parser_for)
    return ragport.bootstrap.replace_document(
        uri=uri, loader=loader, embedder=embedder, store=store, scope=SCOPE,
        **flat_write(status_store=status, **kwargs),
    )  # fmt: skip


def test_markdown_document_is_indexed_with_metadata_and_status(stores, corpus):
    """Front-matter title, media type, path and heading stacks on every chunk; status indexed.

    If this fails, check replace_document steps 2-7 in ragport/application/documents.py.
    """
    store, status = stores
    embedder = CountingEmbedder(HashEmbedder(dimensions=64))
    result = _replace(stores, FileDocumentLoader(root=corpus), "handbook.md", embedder, size=200)
    assert result.source_id == "handbook.md" and result.indexed >= 2 and not result.skipped
    rows = store.get_by_source(SCOPE, "handbook.md")
    assert len(rows) == result.indexed
    for row in rows:
        assert row.metadata["title"] == "Employee handbook"
        assert row.metadata["media_type"] == "text/markdown"
        assert row.metadata["path"] == "handbook.md"
        assert row.metadata["heading"][0] == "Employee handbook"
    item = status.get(SCOPE, "handbook.md")
    assert item.state == "indexed"
    assert item.bytes == (corpus / "handbook.md").stat().st_size
    assert item.chunks_total == item.chunks_indexed == result.indexed


def test_unchanged_bytes_skip_and_any_setting_change_reindexes(stores, corpus):
    """Same bytes, embedder, chunking and parser: skipped without embedding; change one: re-index.

    If this fails, check document_skip_key and the skip check in replace_document.
    """
    loader = FileDocumentLoader(root=corpus)
    embedder = CountingEmbedder(HashEmbedder(dimensions=64))
    _replace(stores, loader, "handbook.md", embedder, size=200)
    embedded = len(embedder.texts)
    again = _replace(stores, loader, "handbook.md", embedder, size=200)
    assert again.skipped and len(embedder.texts) == embedded
    assert not _replace(stores, loader, "handbook.md", embedder, size=300).skipped

    class NewerMarkdownParser(MarkdownParser):
        version = 2

    newer = _replace(
        stores, loader, "handbook.md", embedder, size=300, parser=NewerMarkdownParser()
    )
    assert not newer.skipped
    other = CountingEmbedder(HashEmbedder(dimensions=32))
    assert not _replace(
        stores, loader, "handbook.md", other, size=300, parser=NewerMarkdownParser()
    ).skipped
    (corpus / "handbook.md").write_text("# Handbook\n\nRewritten.\n")
    changed = _replace(stores, loader, "handbook.md", other, size=300, parser=NewerMarkdownParser())
    assert not changed.skipped and changed.indexed == 1


def test_pdf_chunks_stay_on_their_page_and_cite_it(stores):
    """Every PDF chunk lies inside one page and carries metadata["page"]; retrieval shows it.

    If this fails, check _chunks (per-page offsets) in ragport/application/documents.py.
    """
    store, _status = stores
    pages = [
        "Travel policy. " + "Trains are preferred for short trips. " * 8,
        "Expense claims. " + "Claim hotel costs within thirty days. " * 8,
    ]
    data = pdf(pages)
    loader = ResourceDocumentLoader(loader=lambda uri: LoadedDocument(data, "application/pdf"))
    result = _replace(
        stores, loader, "travel.pdf", HashEmbedder(dimensions=64), size=120, overlap=20
    )
    rows = sorted(store.get_by_source(SCOPE, "travel.pdf"), key=lambda r: r.chunk_index)
    assert len(rows) == result.indexed > 2
    parsed = PdfParser().parse(data)
    starts = [0, len(parsed.pages[0]) + 1]
    for row in rows:
        page = row.metadata["page"]
        assert page in (1, 2)
        lo = starts[page - 1]
        assert lo <= row.start and row.end <= lo + len(parsed.pages[page - 1])
        assert parsed.text[row.start : row.end] == row.text
    found = ragport.application.retrieve_context(
        "hotel costs thirty days", embedder=HashEmbedder(dimensions=64), store=store, scope=SCOPE
    )
    assert found.hits[0].metadata["page"] == 2


def test_a_failed_replacement_keeps_the_previous_version_and_records_why(stores, corpus):
    """An unparsable new version raises ParseError, the old rows stay visible, status is failed.

    If this fails, check the except clause of replace_document (status, no partial write).
    """
    store, status = stores
    loader = FileDocumentLoader(root=corpus)
    embedder = HashEmbedder(dimensions=64)
    first = _replace(stores, loader, "handbook.md", embedder)
    before = store.get_by_source(SCOPE, "handbook.md")
    (corpus / "handbook.md").write_bytes(b"SECRET-BODY then a bad byte \xff")
    with pytest.raises(ragport.ParseError) as info:
        _replace(stores, loader, "handbook.md", embedder)
    assert info.value.reason == "decode"
    assert store.get_by_source(SCOPE, "handbook.md") == before
    assert store.current_generation(SCOPE) == first.generation
    item = status.get(SCOPE, "handbook.md")
    assert item.state == "failed"
    assert item.error.startswith("ParseError") and len(item.error) <= 256
    assert "SECRET-BODY" not in item.error


def test_load_failures_are_recorded_under_the_given_source_id(stores, corpus):
    """A missing file raises LoadError and records failed under source_id.

    If this fails, check that pending is written before loading when source_id is given.
    """
    _store, status = stores
    with pytest.raises(ragport.domain.errors.LoadError):
        _replace(
            stores, FileDocumentLoader(root=corpus), "gone.md", HashEmbedder(dimensions=64),
            source_id="gone.md",
        )  # fmt: skip
    assert status.get(SCOPE, "gone.md").state == "failed"


def test_loader_metadata_reaches_every_chunk_and_a_parser_is_required(stores):
    """untrusted and url from the loader are on every chunk; the core replace_document refuses
    parser=None with a ValidationError (the public, wired one defaults to parser_for).

    If this fails, check the metadata merge and _pick_parser in replace_document.
    """
    store, _status = stores
    web = LoadedDocument(
        b"<html><title>Wiki</title><main><h1>Leave</h1><p>Sixteen weeks.</p></main></html>",
        "text/html; charset=utf-8",
        None,
        {"url": "https://wiki.example.com/leave", "citation": "https://wiki.example.com/leave", "untrusted": True},
    )  # fmt: skip
    loader = ResourceDocumentLoader(loader=lambda uri: web)
    uri = "https://wiki.example.com/leave"
    _replace(stores, loader, uri, HashEmbedder(dimensions=64))
    (row,) = store.get_by_source(SCOPE, uri)
    assert row.metadata["untrusted"] is True and row.metadata["url"] == uri
    assert row.metadata["title"] == "Wiki" and row.metadata["heading"] == ["Leave"]
    from ragport.application.documents import replace_document as core_replace

    with pytest.raises(ragport.ValidationError) as info:
        core_replace(
            uri=uri, loader=loader, embedder=HashEmbedder(dimensions=64), store=store,
            scope=SCOPE, parser=None,
        )  # fmt: skip
    assert info.value.field == "parser"
