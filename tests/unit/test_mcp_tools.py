"""The MCP tools in process, through the SDK's in-memory client (the stdio process test is
tests/e2e/test_mcp_server.py)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from doubles import Delegating, NoTransactionsStore
from handbook_corpus import (
    ALICE,
    DENIED_SOURCE,
    DOCUMENTS,
    MALLORY,
    SCOPE,
    SECRET_WORD,
    build_handbook,
)
from mcp import Client

from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.integrations.mcp import build_server


@pytest.fixture
def parts() -> dict[str, Any]:
    store, status, embedder = InMemoryStore(), InMemoryStatusStore(), HashEmbedder()
    build_handbook(store, embedder, status_store=status)
    return {"store": store, "status_store": status, "embedder": embedder, "scope": SCOPE}


def _calls(server, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    async def run() -> list[Any]:
        async with Client(server) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(run)


def test_trusted_server_sees_everything_and_alice_does_not(parts):
    """Without an authorization the server is a trusted caller; with ALICE's, grants apply.

    If this fails, check that build_server binds its authorization into both tools.
    """
    query = ("search", {"query": f"{SECRET_WORD} merger", "top_k": 32})
    trusted, trusted_sources = _calls(build_server(**parts), query, ("list_sources", {}))
    assert DENIED_SOURCE in {c["source_id"] for c in trusted.structured_content["citations"]}
    assert {s["source_id"] for s in trusted_sources.structured_content["sources"]} == set(DOCUMENTS)
    alice, alice_sources = _calls(
        build_server(**parts, authorization=ALICE), query, ("list_sources", {})
    )
    assert DENIED_SOURCE not in {c["source_id"] for c in alice.structured_content["citations"]}
    assert SECRET_WORD not in alice.content[0].text
    assert DENIED_SOURCE not in {
        s["source_id"] for s in alice_sources.structured_content["sources"]
    }
    (mallory,) = _calls(build_server(**parts, authorization=MALLORY), query)
    assert not mallory.is_error and mallory.structured_content["citations"] == []
    assert mallory.content[0].text == "No passages found."


def test_list_sources_pages_with_a_cursor(parts):
    """Pages of one follow the cursor through every readable source, none twice.

    If this fails, check the cursor handling in list_sources.
    """
    server = build_server(**parts, authorization=ALICE)
    seen: list[str] = []
    cursor = None
    for _ in range(len(DOCUMENTS) + 1):
        (page,) = _calls(server, ("list_sources", {"limit": 1, "cursor": cursor}))
        assert not page.is_error
        seen += [s["source_id"] for s in page.structured_content["sources"]]
        cursor = page.structured_content["cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(set(DOCUMENTS) - {DENIED_SOURCE})
    assert page.structured_content["generation"] == len(DOCUMENTS)


def test_forgotten_sources_are_not_listed(parts):
    """A source with a forgotten tombstone is left out of the status page.

    If this fails, check the list_invalidated_ids filter in list_sources.
    """
    store = parts["store"]
    with store.unit_of_work(SCOPE) as uow:
        from ragport.domain import Tombstone

        uow.tombstones.add([Tombstone("expenses")])
        uow.commit()
    (page,) = _calls(build_server(**parts), ("list_sources", {}))
    assert "expenses" not in {s["source_id"] for s in page.structured_content["sources"]}


class _FailingAccess(Delegating):
    """Delegates to the store but its access check raises, as a lost connection would."""

    def check_source_access(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("grants table unreachable")


def test_a_failed_access_check_lists_nothing(parts):
    """If the grant check fails, list_sources answers an error, never an unfiltered page.

    If this fails, check that list_sources does not catch a failed check_source_access.
    """
    server = build_server(**{**parts, "store": _FailingAccess(parts["store"])}, authorization=ALICE)
    (page,) = _calls(server, ("list_sources", {}))
    assert page.is_error and page.structured_content is None


def test_ragport_errors_are_tool_errors_with_type_and_code(parts):
    """A query the store cannot hold (a NUL) is answered with the error type and code, not a
    crash.

    If this fails, check _tool_error in ragport/integrations/mcp.py.
    """
    no_status = {k: v for k, v in parts.items() if k != "status_store"}
    nul, bad_cursor, no_status_page = (
        *_calls(
            build_server(**parts),
            ("search", {"query": "leave\x00"}),
            ("list_sources", {"cursor": "garbage"}),
        ),
        *_calls(build_server(**no_status), ("list_sources", {})),
    )
    assert nul.is_error
    assert "ValidationError [ERR_RAG_VALIDATION] (field query)" in nul.content[0].text
    assert bad_cursor.is_error
    assert no_status_page.is_error


def _lexical_schema(server) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            schema = dict(tools["search"].input_schema["properties"]["lexical"])
            if "const" in schema:  # pydantic's schema of a one-name Literal
                schema["enum"] = [schema.pop("const")]
            return schema

    return anyio.run(run)


def test_search_offers_the_lexical_modes_the_store_serves(parts):
    """The search tool's ``lexical`` lists ``off`` and the modes the store serves, nothing
    else: ``bm25`` on the in-memory store (the same name as PostgreSQL's), only ``off`` on a
    store without a lexical leg; a name outside the list is refused before any retrieval, and
    ``bm25`` runs hybrid retrieval.

    If this fails, check _lexical_argument in ragport/integrations/mcp.py.
    """
    schema = _lexical_schema(build_server(**parts))
    assert schema["enum"] == ["off", "bm25"] and schema["default"] == "off"
    vector_only = build_server(**{**parts, "store": NoTransactionsStore(parts["store"])})
    assert _lexical_schema(vector_only)["enum"] == ["off"]
    hybrid, fts = _calls(
        build_server(**parts),
        ("search", {"query": "parental leave", "lexical": "bm25"}),
        ("search", {"query": "parental leave", "lexical": "fts"}),
    )
    assert not hybrid.is_error
    assert "hybrid" in {c["retrieval"] for c in hybrid.structured_content["citations"]}
    assert fts.is_error and "CapabilityError" not in fts.content[0].text
    (vector_refused,) = _calls(vector_only, ("search", {"query": "leave", "lexical": "bm25"}))
    assert vector_refused.is_error


def test_bad_server_options_are_refused(parts):
    """build_server validates the binding and option names before any tool exists.

    If this fails, check BoundRetrieval.bind.
    """
    import ragport

    with pytest.raises(ragport.ValidationError) as info:
        build_server(**parts, principal_id="ceo")
    assert info.value.field == "principal_id"


def test_an_unreachable_store_is_a_store_error_per_call():
    """A PostgreSQL store nobody listens on answers each tool call with StoreError, no crash.

    If this fails, check the OperationalError mapping in ragport/adapters/postgres/_driver.py
    and _tool_error in ragport/integrations/mcp.py.
    """
    from ragport.adapters.postgres import PostgresStatusStore, PostgresStore

    store = PostgresStore("postgresql://nobody@127.0.0.1:1/none", schema="x", create=False)
    server = build_server(
        store=store,
        status_store=PostgresStatusStore(store.engine, schema="x"),
        embedder=HashEmbedder(),
        scope=SCOPE,
    )
    try:
        results = _calls(server, ("search", {"query": "leave"}), ("list_sources", {}))
    finally:
        store.engine.dispose()
    for result in results:
        assert result.is_error and "StoreError [ERR_RAG_STORE]" in result.content[0].text
