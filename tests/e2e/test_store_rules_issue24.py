"""Issue 24 items 14, 17 and 20 on both stores: lineage to unknown records is refused, a
deleted source's grant goes with it, metadata integers are bounded, and a rollback corrects
the ingestion status of the sources it changed."""

from __future__ import annotations

from typing import Any

import pytest

import ragport
from ragport import Authorization, Chunk, Grant, Scope, ValidationError, WriteOptions
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.domain import Record, Tombstone
from ragport.domain.values import METADATA_INT_LIMIT

SCOPE = Scope("tenant-24", "kb", "docs")
EMB = HashEmbedder(32)
ALICE = Authorization("alice", "tenant-24")
BOB = Authorization("bob", "tenant-24")


@pytest.fixture(params=["memory", "postgres"])
def stores(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """(chunk store, status store): in memory, or PostgreSQL in a fresh schema."""
    if request.param == "memory":
        return InMemoryStore(), InMemoryStatusStore()
    from ragport.adapters.postgres import PostgresStatusStore, PostgresStore

    engine = request.getfixturevalue("pg_engine")
    schema = request.getfixturevalue("pg_schema")
    return (
        PostgresStore(engine, schema=schema, create=True),
        PostgresStatusStore(engine, schema=schema, create=True),
    )


def _put(store: Any, source_id: str, *texts: str, status: Any = None) -> ragport.ReplaceResult:
    return ragport.application.replace_source(
        source_id=source_id,
        chunks=[Chunk.of(source_id, i, t) for i, t in enumerate(texts)],
        embedder=EMB,
        store=store,
        scope=SCOPE,
        write_options=WriteOptions(status_store=status),
    )


def _derive(store: Any, record_id: str, lineage: list[str]) -> ragport.ReplaceResult:
    return ragport.application.index_derived(
        record_id=record_id,
        text=f"summary {record_id} of the memo",
        lineage=lineage,
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )


def _sources(store: Any, query: str, authorization: Authorization | None = None) -> set[str]:
    result = ragport.application.retrieve_context(
        query,
        embedder=EMB,
        store=store,
        scope=SCOPE,
        authorization=authorization,
        request=ragport.RetrievalRequest(top_k=32),
    )
    return {h.source_id for h in result.hits}


# -- item 17: a grant does not outlive delete_source --------------------------------------------


def test_a_recreated_source_does_not_inherit_the_deleted_ones_grant(stores):
    """Alice's grant on a deleted source does not open the document later written under its id.

    If this fails, check that delete_source replaces the source's grant in its unit of work.
    """
    store, _ = stores
    _put(store, "memo", "the memo alice may read")
    store.set_source_access(SCOPE, [Grant("memo", principal_ids=("alice",))])
    assert "memo" in _sources(store, "memo alice", ALICE)
    ragport.application.delete_source(source_id="memo", store=store, scope=SCOPE)
    _put(store, "memo", "the new memo nobody was granted")
    assert "memo" in _sources(store, "new memo granted")  # a trusted caller sees it
    assert "memo" not in _sources(store, "new memo granted", ALICE)
    (decision,) = store.check_source_access(SCOPE, ["memo"], ALICE).values()
    assert not decision.allowed and decision.reason == "no_grant"
    grant = store.get_source_access(SCOPE, ["memo"]).get("memo")
    assert grant is None or grant.is_empty


def test_deleting_one_source_keeps_the_other_grants(stores):
    """delete_source revokes only the deleted source's grant.

    If this fails, check that delete_source names exactly its source in grants.set.
    """
    store, _ = stores
    _put(store, "memo", "the memo alice may read")
    _put(store, "plan", "the plan alice may read")
    store.set_source_access(
        SCOPE, [Grant("memo", principal_ids=("alice",)), Grant("plan", principal_ids=("alice",))]
    )
    ragport.application.delete_source(source_id="memo", store=store, scope=SCOPE)
    assert _sources(store, "alice may read", ALICE) == {"plan"}


# -- item 14: lineage to a record that does not exist -------------------------------------------


def test_lineage_to_an_unknown_id_is_refused_and_writes_nothing(stores):
    """A derived record resting on an id that is neither a source nor a derived record is refused.

    If this fails, check the existence check of every lineage id in index_derived's _roots.
    """
    store, _ = stores
    _put(store, "memo", "the memo")
    for lineage in (["D1"], ["memo", "D1"]):
        with pytest.raises(ValidationError) as info:
            _derive(store, "D2", lineage)
        assert info.value.field == "lineage"
    assert store.get_by_source(SCOPE, "D2") == []
    assert "D2" not in _sources(store, "summary D2 memo")


def test_a_derived_record_on_a_refused_one_is_refused(stores):
    """The issue's chain: D1 rests on forgotten content and is refused, so D2 -> D1 is too.

    If this fails, check that index_derived does not take an unknown lineage id for a root.
    """
    store, _ = stores
    _put(store, "secret", "the secret memo")
    store.set_source_access(SCOPE, [Grant("secret", principal_ids=("alice",))])
    with store.unit_of_work(SCOPE) as uow:
        uow.tombstones.add([Tombstone("secret")])
        uow.commit()
    with pytest.raises(ValidationError) as first:
        _derive(store, "D1", ["secret"])
    assert first.value.field == "lineage"
    with pytest.raises(ValidationError) as second:
        _derive(store, "D2", ["D1"])
    assert second.value.field == "lineage"
    for who in (None, ALICE, BOB):
        assert _sources(store, "summary D2 memo", who) == set()


def test_lineage_to_a_deleted_source_is_refused(stores):
    """A source deleted with delete_source has no current rows: deriving from it is refused.

    If this fails, check that the lineage check reads the source's live rows.
    """
    store, _ = stores
    _put(store, "memo", "the memo")
    ragport.application.delete_source(source_id="memo", store=store, scope=SCOPE)
    with pytest.raises(ValidationError) as info:
        _derive(store, "D1", ["memo"])
    assert info.value.field == "lineage"


def test_two_level_lineage_to_known_records_is_accepted(stores):
    """D2 -> D1 -> memo is written, rests on memo's grant, and is served to memo's grantees only.

    If this fails, check that the lineage check accepts derived records and sources with rows.
    """
    store, _ = stores
    _put(store, "memo", "the memo")
    store.set_source_access(SCOPE, [Grant("memo", principal_ids=("alice",))])
    _derive(store, "D1", ["memo"])
    _derive(store, "D2", ["D1"])
    (d2,) = store.get_by_source(SCOPE, "D2")
    assert d2.lineage == ("D1",) and d2.roots == ("memo",)
    assert {"D1", "D2"} <= _sources(store, "summary D2 memo", ALICE)
    assert _sources(store, "summary D2 memo", BOB) == set()


def test_lineage_to_a_staged_source_is_accepted(stores):
    """A source written with advance_generation=False counts: index_derived publishes it.

    If this fails, check that the lineage check reads live rows (staged ones included).
    """
    store, _ = stores
    ragport.application.replace_source(
        source_id="memo",
        chunks=[Chunk.of("memo", 0, "the staged memo")],
        embedder=EMB,
        store=store,
        scope=SCOPE,
        write_options=WriteOptions(advance_generation=False),
    )
    _derive(store, "D1", ["memo"])
    assert {"memo", "D1"} <= _sources(store, "summary D1 memo")


# -- item 20: metadata integers are bounded -----------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [10**5000, -(10**5000), METADATA_INT_LIMIT, -METADATA_INT_LIMIT, [{"n": 10**400}]],
    ids=["5001-digits", "minus-5001-digits", "limit", "minus-limit", "nested-401-digits"],
)
def test_a_metadata_integer_past_the_bound_is_refused_at_entry(value):
    """Chunk.of, Record and index_derived refuse an integer at or past the documented bound.

    If this fails, check the integer branch of _freeze_value in ragport/domain/values.py.
    """
    with pytest.raises(ValidationError) as chunk:
        Chunk.of("memo", 0, "text", metadata={"n": value})
    assert chunk.value.field == "metadata"
    with pytest.raises(ValidationError) as record:
        Record(
            id="memo#0001",
            scope=SCOPE,
            source_id="memo",
            kind="chunk",
            text="t",
            metadata={"n": value},
        )
    assert record.value.field == "metadata"
    with pytest.raises(ValidationError) as derived:
        ragport.application.index_derived(
            record_id="D1",
            text="summary",
            lineage=["memo"],
            embedder=EMB,
            store=InMemoryStore(),
            scope=SCOPE,
            metadata={"n": value},
        )
    assert derived.value.field == "metadata"


def test_the_largest_allowed_integers_round_trip_in_both_stores(stores):
    """Integers just inside the bound are stored and read back exactly by either store.

    If this fails, check that both stores keep metadata numbers exactly (jsonb numeric).
    """
    store, _ = stores
    inside = {"big": METADATA_INT_LIMIT - 1, "small": -(METADATA_INT_LIMIT - 1), "i64": 2**63}
    ragport.application.replace_source(
        source_id="memo",
        chunks=[Chunk.of("memo", 0, "the memo", metadata=inside)],
        embedder=EMB,
        store=store,
        scope=SCOPE,
    )
    (record,) = store.get_by_source(SCOPE, "memo")
    assert {k: record.metadata[k] for k in inside} == inside


# -- item 20: a rollback corrects the ingestion status ------------------------------------------


def _status(status_store: Any, source_id: str) -> tuple[str, str | None, int, int] | None:
    found = status_store.get(SCOPE, source_id)
    if found is None:
        return None
    return found.state, found.freshness, found.chunks_total, found.chunks_indexed


def test_rollback_drops_the_status_of_sources_it_discarded(stores):
    """A source written above the target has no status after the rollback; one it brought back
    to an older version says indexed but stale, with that version's chunk count.

    If this fails, check the status step of rollback_generation.
    """
    store, status = stores
    _put(store, "a", "a one", status=status)  # generation 1
    _put(store, "untouched", "u one", status=status)  # generation 2
    _put(store, "b", "b one", status=status)  # generation 3
    _put(store, "a", "a two", "a three", status=status)  # generation 4
    untouched = status.get(SCOPE, "untouched")
    assert _status(status, "b") == ("indexed", None, 1, 1)
    ragport.application.rollback_generation(store=store, scope=SCOPE, to=2, status_store=status)
    assert _status(status, "b") is None
    assert _status(status, "a") == ("indexed", "stale", 1, 1)
    assert status.get(SCOPE, "untouched") == untouched
    page = ragport.application.list_ingestion_status(store=status, scope=SCOPE)
    assert [i.source_id for i in page.items] == ["a", "untouched"]


def test_rollback_of_a_deletion_brings_the_status_back(stores):
    """Rolling back a delete_source gives the restored source a status again (indexed, stale).

    If this fails, check that rollback_generation also covers sources it restored.
    """
    store, status = stores
    _put(store, "a", "a one", "a two", status=status)  # generation 1
    ragport.application.delete_source(
        source_id="a", store=store, scope=SCOPE, write_options=WriteOptions(status_store=status)
    )
    assert _status(status, "a") is None
    ragport.application.rollback_generation(store=store, scope=SCOPE, to=1, status_store=status)
    assert _status(status, "a") == ("indexed", "stale", 2, 2)


def test_rollback_without_a_status_store_still_works(stores):
    """status_store stays optional: the content is restored and nothing else is touched.

    If this fails, check that rollback_generation only writes statuses when given a store.
    """
    store, status = stores
    _put(store, "a", "a one", status=status)
    _put(store, "b", "b one", status=status)
    result = ragport.application.rollback_generation(store=store, scope=SCOPE, to=1)
    assert result.discarded == 1
    assert _status(status, "b") == ("indexed", None, 1, 1)


class _NoHistory:
    """Delegates to a store whose generation history the use case must not use (its class
    defines no ``generation_history``), so rollback compares status rows instead."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_rollback_without_history_compares_the_status_rows(stores):
    """Without generation history the status rows are still corrected, the untouched kept.

    If this fails, check the status-row fallback (_status_ids) of rollback_generation.
    """
    inner, status = stores
    store = _NoHistory(inner)
    _put(store, "a", "a one", status=status)  # generation 1
    _put(store, "untouched", "u one", status=status)  # generation 2
    status.put(ragport.domain.IngestionStatus(scope=SCOPE, source_id="failed", state="failed"))
    _put(store, "b", "b one", status=status)  # generation 3
    _put(store, "a", "a two", "a three", status=status)  # generation 4
    kept = {s: status.get(SCOPE, s) for s in ("untouched", "failed")}
    ragport.application.rollback_generation(store=store, scope=SCOPE, to=2, status_store=status)
    assert _status(status, "b") is None
    assert _status(status, "a") == ("indexed", "stale", 1, 1)
    assert {s: status.get(SCOPE, s) for s in kept} == kept


def test_cli_rollback_corrects_ragport_status(tmp_path, monkeypatch, pg_url, pg_schema, capsys):
    """`ragport rollback` passes the status store: `ragport status` stops listing b.md.

    If this fails, check that _rollback in ragport/cli/lifecycle.py passes stores.status.
    """
    import json

    from ragport.cli import EXIT_OK, main

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    store = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *store]) == EXIT_OK
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nfirst a\n")
    assert main(["ingest", str(docs / "a.md"), "--corpus", "kb", "--embedder", "hash", *store]) == 0
    (docs / "b.md").write_text("# B\n\nfirst b\n")
    assert main(["ingest", str(docs / "b.md"), "--corpus", "kb", "--embedder", "hash", *store]) == 0
    capsys.readouterr()

    def listed() -> set[str]:
        assert main(["status", "--corpus", "kb", "--json", *store]) == EXIT_OK
        out = json.loads(capsys.readouterr().out)
        items = out["items"] if isinstance(out, dict) else out
        return {i["source_id"] for i in items}

    # a file under the current folder is rooted there (docs/cli.md, "The corpus root")
    assert listed() == {"docs/a.md", "docs/b.md"}
    assert main(["rollback", "--to", "1", "--corpus", "kb", "--yes", *store]) == EXIT_OK
    capsys.readouterr()
    assert listed() == {"docs/a.md"}


def test_the_facade_rollback_corrects_its_status_store():
    """Rag.rollback passes its bound status store, so Rag.status stops listing a discarded source.

    If this fails, check Rag.rollback in ragport/application/facade.py.
    """
    from ragport.application.facade import Rag

    rag = Rag(store=InMemoryStore(), embedder=EMB, scope=SCOPE, status_store=InMemoryStatusStore())
    rag.replace_source(source_id="a", chunks=[Chunk.of("a", 0, "a one")])
    rag.replace_source(source_id="b", chunks=[Chunk.of("b", 0, "b one")])
    rag.rollback(to=1)
    assert [i.source_id for i in rag.status().items] == ["a"]
