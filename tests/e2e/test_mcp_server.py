"""`ragport mcp` as a real stdio subprocess on the embedded PostgreSQL store, driven by the MCP
SDK's own stdio client: tool listing, grants, a denied source, bad arguments, round-trip time."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import anyio
import pytest
from handbook_corpus import ALICE, DENIED_SOURCE, DOCUMENTS, SCOPE, SECRET_WORD, build_handbook
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import ragport
from ragport.adapters.embedders import HashEmbedder

ROUND_TRIPS = 20


@pytest.fixture
def served_schema(pg_engine, pg_schema) -> str:
    """The handbook corpus with grants and ingestion status in a fresh schema."""
    from ragport.adapters.postgres import PostgresStatusStore, PostgresStore

    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    status = PostgresStatusStore(pg_engine, schema=pg_schema, create=True)
    build_handbook(store, HashEmbedder(), status_store=status)
    return pg_schema


def _server(pg_url: str, schema: str, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-m", "ragport.cli", "mcp",
            "--store", pg_url, "--schema", schema, "--embedder", "hash",
            "--tenant", SCOPE.tenant_id, "--resource", SCOPE.resource_id,
            "--corpus", SCOPE.corpus_id,
            *extra,
        ],
    )  # fmt: skip


async def _session_run(params: StdioServerParameters) -> dict:
    out: dict = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        out["tools"] = {t.name: t for t in (await session.list_tools()).tools}
        out["search"] = await session.call_tool(
            "search", {"query": f"{SECRET_WORD} merger payment approval", "top_k": 32}
        )
        out["sources"] = await session.call_tool("list_sources", {})
        out["hybrid"] = await session.call_tool(
            "search", {"query": "parental leave", "lexical": "bm25"}
        )
        out["bad"] = {
            "tenant": await session.call_tool("search", {"query": "x", "tenant_id": "other"}),
            "principal": await session.call_tool("search", {"query": "x", "principal_id": "ceo"}),
            "scope": await session.call_tool("list_sources", {"scope": "acme/kb/archive"}),
            "top_k": await session.call_tool("search", {"query": "x", "top_k": 0}),
            "type": await session.call_tool("search", {"query": "x", "top_k": "many"}),
            "lexical": await session.call_tool("search", {"query": "x", "lexical": "semantic"}),
            "fts": await session.call_tool("search", {"query": "x", "lexical": "fts"}),
            "missing": await session.call_tool("search", {}),
            "cursor": await session.call_tool("list_sources", {"cursor": "not-a-cursor"}),
            "tool": await session.call_tool("delete_source", {"source_id": "expenses"}),
        }
        timings = []
        for _ in range(ROUND_TRIPS):
            start = time.perf_counter()
            done = await session.call_tool("search", {"query": "parental leave", "top_k": 3})
            timings.append(time.perf_counter() - start)
            assert not done.is_error
        out["after_errors"] = done
        out["timings"] = timings
    return out


def test_mcp_server_over_stdio_respects_grants_and_answers_bad_arguments(pg_url, served_schema):
    """A real `ragport mcp --principal alice --group staff` process: tools, grants, errors.

    If this fails, check ragport/integrations/mcp.py (tools, strict argument models) and
    `_mcp` in ragport/cli/query.py (authorization from the command line, stdout kept clean).
    """
    params = _server(pg_url, served_schema, "--principal", "alice", "--group", "staff")
    out = anyio.run(_session_run, params)

    tools = out["tools"]
    assert set(tools) == {"search", "list_sources"}
    for tool in tools.values():
        assert tool.input_schema.get("additionalProperties") is False
        names = set(tool.input_schema["properties"])
        assert not names & {"tenant_id", "principal_id", "scope", "group_ids", "authorization"}
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
    assert set(tools["search"].input_schema["properties"]) == {"query", "top_k", "lexical"}
    # PostgreSQL serves the lexical mode the in-memory store serves, and the schema says so
    assert tools["search"].input_schema["properties"]["lexical"]["enum"] == ["off", "bm25"]

    search = out["search"]
    assert not search.is_error
    text = search.content[0].text
    assert text.startswith("<<<ragport-context ") and "untrusted" in text.splitlines()[0]
    cited = search.structured_content["citations"]
    assert cited and {c["source_id"] for c in cited} <= set(DOCUMENTS) - {DENIED_SOURCE}
    assert all(c["trust"]["untrusted"] for c in cited)
    assert search.structured_content["trust"]["untrusted"] is True
    assert SECRET_WORD not in text and DENIED_SOURCE not in text
    assert f"[{cited[0]['citation_id']}] " in text

    hybrid = out["hybrid"]
    assert not hybrid.is_error
    assert "hybrid" in {c["retrieval"] for c in hybrid.structured_content["citations"]}

    sources = out["sources"]
    assert not sources.is_error
    listed = {s["source_id"] for s in sources.structured_content["sources"]}
    assert listed == set(DOCUMENTS) - {DENIED_SOURCE}

    for name, result in out["bad"].items():
        assert result.is_error, name
        assert SECRET_WORD not in result.content[0].text, name
        assert "pydantic" not in result.content[0].text.lower(), (name, result.content[0].text)
        assert "http" not in result.content[0].text, (name, result.content[0].text)
    assert not out["after_errors"].is_error  # the server survived every bad call

    median_ms = statistics.median(out["timings"]) * 1000
    print(
        f"\nMCP search round trip (embedded PostgreSQL, hash embedder): median {median_ms:.1f} ms"
    )
    assert median_ms < 2000


def test_the_same_query_finds_the_denied_source_for_a_trusted_caller(pg_engine, served_schema):
    """The merger plans are in the served schema: only the grants kept them from alice.

    If this fails, the grant test above proves nothing: check build_handbook.
    """
    from ragport.adapters.postgres import PostgresStore

    store = PostgresStore(pg_engine, schema=served_schema)
    query = f"{SECRET_WORD} merger payment approval"
    embedder = HashEmbedder()
    trusted = ragport.application.retrieve_context(
        query, embedder=embedder, store=store, scope=SCOPE
    )
    assert DENIED_SOURCE in {h.source_id for h in trusted.hits}
    alice = ragport.application.retrieve_context(
        query,
        embedder=embedder,
        store=store,
        scope=SCOPE,
        authorization=ALICE,
        request=ragport.RetrievalRequest(top_k=32),
    )
    assert DENIED_SOURCE not in {h.source_id for h in alice.hits}


def test_groups_without_a_principal_are_refused_before_serving():
    """`ragport mcp --group staff` without --principal exits 2 with a ValidationError.

    If this fails, check the --group/--principal check at the top of `_mcp` in ragport/cli/query.py.
    """
    done = subprocess.run(
        [sys.executable, "-m", "ragport.cli", "mcp", "--store", "memory://", "--group", "staff"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2
    assert "ValidationError" in done.stderr and "Traceback" not in done.stderr


def test_an_unknown_corpus_is_warned_about_on_stderr():
    """`ragport mcp --corpus nowhere` on a store without it says so on stderr (stdout is the
    MCP channel) and still serves (the corpus may be ingested later).

    If this fails, check the empty-corpus note in `_mcp` in ragport/cli/query.py.
    """
    done = subprocess.run(
        [sys.executable, "-m", "ragport.cli", "mcp", "--store", "memory://", "--corpus", "nowhere",
         "--embedder", "hash"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert "corpus nowhere is empty or unknown" in done.stderr, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
