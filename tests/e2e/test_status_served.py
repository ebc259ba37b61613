"""Ingestion status agrees with retrieval on both stores: a failed re-ingest leaves the previous
version served, and every status view (list_ingestion_status, Rag.status, MCP list_sources,
`ragport status` and `ragport sources`) reports that version's chunks, with the failure as the
last attempt's error; a status row claiming chunks that are not served is not `indexed`."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.application import (
    Runtime,
    WriteOptions,
    delete_source,
    list_ingestion_status,
    retrieve_context,
)
from ragport.application.ingest import IngestOptions, ingest_limits
from ragport.application.status import count_ingestion_states
from ragport.bootstrap.ingest import collect_documents, ingest_files
from ragport.cli import EXIT_FAILED, EXIT_OK, main

SCOPE = ragport.Scope("acme", "kb", "docs")
EMBEDDER = HashEmbedder(dimensions=64)
SOURCE = "guide.md"


def _words(word: str, n: int) -> str:
    return "# Guide\n\n" + "\n\n".join(f"The {word} paragraph {i} says {word}." for i in range(n))


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


def _ingest(stores, root: Path, max_bytes: int | None = None):
    store, status = stores
    runtime = None if max_bytes is None else Runtime(limits=ingest_limits(max_bytes))
    return list(
        ingest_files(
            collect_documents([root], root=root), root=root, store=store, status_store=status,
            embedder=EMBEDDER, scope=SCOPE, runtime=runtime,
            options=IngestOptions(write=WriteOptions(size=200, overlap=20)),
        )
    )  # fmt: skip


def _served_by_retrieval(store) -> int:
    """How many chunks of the source a query returns (top_k above the source's chunk count)."""
    result = retrieve_context(
        "guide paragraph", embedder=EMBEDDER, store=store, scope=SCOPE,
        request=ragport.RetrievalRequest(top_k=32),
    )  # fmt: skip
    return sum(1 for hit in result.hits if hit.source_id == SOURCE)


def _mcp_sources(store, status) -> list[dict]:
    pytest.importorskip("mcp")
    from mcp import Client

    from ragport.integrations.mcp import build_server

    server = build_server(store=store, status_store=status, embedder=EMBEDDER, scope=SCOPE)

    async def run():
        async with Client(server) as client:
            return await client.call_tool("list_sources", {})

    return anyio.run(run).structured_content["sources"]


@pytest.mark.parametrize("failure", ["too_large", "decode"])
def test_a_failed_reingest_reports_the_version_still_served(stores, tmp_path, failure):
    """Ingest, then a re-ingest that fails (over --max-bytes, or not UTF-8): the previous
    version stays served, and every status view says indexed with exactly the chunks a query
    returns (freshness stale, the failure as the last attempt's error), not failed with 0.

    If this fails, check served_status in ragport/domain/status.py and its callers:
    list_ingestion_status (chunk_store=), Rag.status, count_ingestion_states, list_sources in
    ragport/bootstrap/corpus.py and _Sources in ragport/integrations/mcp.py.
    """
    store, status = stores
    (tmp_path / SOURCE).write_text(_words("alpha", 20))
    (first,) = _ingest(stores, tmp_path)
    assert first.state == "indexed" and first.chunks >= 3
    if failure == "too_large":
        (tmp_path / SOURCE).write_text(_words("beta", 400))
        (again,) = _ingest(stores, tmp_path, max_bytes=2_000)
    else:
        (tmp_path / SOURCE).write_bytes(_words("beta", 20).encode("cp1252") + b"\xe9\xff")
        (again,) = _ingest(stores, tmp_path)
    assert again.state == "failed" and again.reason == failure
    served = _served_by_retrieval(store)
    assert served == first.chunks  # the previous version, whole

    (item,) = list_ingestion_status(store=status, scope=SCOPE, chunk_store=store).items
    assert (item.state, item.chunks_indexed, item.chunks_total) == ("indexed", served, served)
    assert item.freshness == "stale" and item.error is not None
    rag = ragport.Rag(store=store, embedder=EMBEDDER, scope=SCOPE, status_store=status)
    assert rag.status().items == (item,)
    assert count_ingestion_states(store=status, scope=SCOPE, chunk_store=store) == {"indexed": 1}
    (shown,) = _mcp_sources(store, status)
    assert (shown["state"], shown["chunks_indexed"]) == ("indexed", served)
    assert shown["freshness"] == "stale" and shown["error"] is not None
    # the status row itself still records the failed attempt (sync retries from it)
    assert status.get(SCOPE, SOURCE).state == "failed"


def test_a_status_claiming_chunks_that_are_not_served_is_not_indexed(stores, tmp_path):
    """A source deleted without its status store keeps an `indexed` row: every view reports
    it failed with 0 chunks (freshness unavailable), since a query returns none of it.

    If this fails, check the served == 0 branch of served_status in ragport/domain/status.py.
    """
    store, status = stores
    (tmp_path / SOURCE).write_text(_words("alpha", 20))
    _ingest(stores, tmp_path)
    delete_source(source_id=SOURCE, store=store, scope=SCOPE)
    assert status.get(SCOPE, SOURCE).state == "indexed"
    assert _served_by_retrieval(store) == 0
    (item,) = list_ingestion_status(store=status, scope=SCOPE, chunk_store=store).items
    assert (item.state, item.chunks_indexed, item.freshness) == ("failed", 0, "unavailable")
    assert count_ingestion_states(store=status, scope=SCOPE, chunk_store=store) == {"failed": 1}
    (shown,) = _mcp_sources(store, status)
    assert (shown["state"], shown["chunks_indexed"]) == ("failed", 0)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_status_and_sources_agree_with_query_after_a_failed_reingest(
    tmp_path, capsys, monkeypatch, pg_url, pg_schema
):
    """`ragport ingest`, then `ingest --max-bytes 2000` of the grown file (exit 1): `status`
    and `sources` say indexed with the chunks `query` returns, `status` shows the last error.

    If this fails, check _status in ragport/cli/lifecycle.py (chunk_store= and
    count_ingestion_states) and list_sources in ragport/bootstrap/corpus.py.
    """
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    store = ["--store", pg_url, "--schema", pg_schema]
    corpus = [*store, "--corpus", "kb", "--embedder", "hash"]
    assert _run(capsys, "db", "upgrade", *store)[0] == EXIT_OK
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / SOURCE).write_text(_words("alpha", 20))
    code, _, err = _run(capsys, "ingest", str(docs), "--size", "200", "--overlap", "20", *corpus)
    assert code == EXIT_OK, err
    (docs / SOURCE).write_text(_words("beta", 400))
    code, out, _ = _run(
        capsys, "ingest", str(docs), "--size", "200", "--overlap", "20", "--max-bytes", "2000",
        *corpus,
    )  # fmt: skip
    assert code == EXIT_FAILED and "too_large" in out
    code, out, err = _run(capsys, "query", "guide paragraph", "--top-k", "32", "--json", *corpus)
    assert code == EXIT_OK, err
    served = sum(1 for hit in json.loads(out)["hits"] if hit["source_id"] == SOURCE)
    assert served >= 3

    code, out, err = _run(capsys, "status", "--json", *corpus[:-2])
    assert code == EXIT_OK, err
    shown = json.loads(out)
    assert shown["states"] == {"indexed": 1}
    (item,) = shown["items"]
    assert (item["state"], item["chunks_indexed"], item["chunks_total"]) == (
        "indexed", served, served,
    )  # fmt: skip
    assert item["freshness"] == "stale" and "LoadError" in item["error"]
    code, out, err = _run(capsys, "status", *corpus[:-2])
    assert code == EXIT_OK and "indexed (stale)" in out and "last error" in out.lower()
    code, out, err = _run(capsys, "sources", "--json", *corpus[:-2])
    assert code == EXIT_OK, err
    (row,) = json.loads(out)["items"]
    assert (row["state"], row["chunks"]) == ("indexed", served)
