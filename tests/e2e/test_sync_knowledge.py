"""sync_knowledge on both stores: pages commit atomically, the checkpoint moves only after.

Every scenario runs on the in-memory store and on PostgreSQL (the session test server), with
the matching checkpoint and status stores, over ``DictConnector`` (tests/support).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from doubles import CountingEmbedder
from sync_support import DictConnector, Stores, sync_options, sync_stores

import ragport
from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore
from ragport.adapters.parsers import parser_for
from ragport.domain.errors import StoreError, SyncCursorError, ValidationError

SCOPE = ragport.Scope("tenant-1", "kb", "sync")
ITEMS = {
    f"doc-{i}.md": f"# Doc {i}\n\nThe topic of document {i} is item{i}.\n".encode()
    for i in range(7)
}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def stores(request) -> Iterator[Stores]:
    yield sync_stores(request)


def sync(stores: Stores, connector, embedder=None, **kwargs) -> ragport.SyncResult:
    return ragport.bootstrap.sync_knowledge(
        connector=connector,
        checkpoints=stores.checkpoints,
        store=stores.store,
        embedder=embedder or CountingEmbedder(),
        scope=SCOPE,
        status_store=stores.status,
        **sync_options(**{"parser": parser_for, **kwargs}),
    )


def rows(stores: Stores, ids) -> dict[str, list[tuple[str, str, str | None]]]:
    out = {}
    for source_id in sorted(ids):
        got = stores.store.get_by_source(SCOPE, source_id)
        if got:
            out[source_id] = [(r.id, r.text, r.content_hash) for r in got]
    return out


def visible_to(stores: Stores, principal: str, query: str) -> set[str]:
    result = ragport.application.retrieve_context(
        query,
        embedder=CountingEmbedder(),
        store=stores.store,
        scope=SCOPE,
        authorization=ragport.Authorization(principal_id=principal, tenant_id=SCOPE.tenant_id),
        request=ragport.RetrievalRequest(top_k=20),
    )
    return {h.source_id for h in result.hits}


def test_bootstrap_then_incremental(stores):
    """Seven items in pages of three: three pages, then nothing to do, then one edit page."""
    connector = DictConnector(ITEMS)
    embedder = CountingEmbedder()
    first = sync(stores, connector, embedder)
    assert (first.pages, first.upserted, first.exhausted, first.bootstrapped) == (3, 7, True, True)
    assert stores.checkpoints.get(connector.id, SCOPE).version == 3
    assert stores.store.current_generation(SCOPE) == 3, "one generation step per page"
    assert set(rows(stores, ITEMS)) == set(ITEMS)
    status = stores.status.get(SCOPE, "doc-0.md")
    assert (status.state, status.freshness) == ("indexed", "current")

    embedded, loads = len(embedder.texts), len(connector.loads)
    again = sync(stores, connector, embedder)
    assert (again.upserted, again.skipped, again.deleted, again.bootstrapped) == (0, 0, 0, False)
    assert (len(embedder.texts), len(connector.loads)) == (embedded, loads), (
        "nothing loaded or embedded"
    )
    assert stores.checkpoints.get(connector.id, SCOPE).version == 3, "no change, no write"

    connector.edit("doc-1.md", b"# Doc 1\n\nRewritten: now about zebras.\n")
    connector.add("doc-new.md", b"# New\n\nA new document about giraffes.\n")
    connector.remove("doc-2.md")
    third = sync(stores, connector, embedder)
    assert (third.pages, third.upserted, third.deleted) == (1, 2, 1)
    assert stores.store.current_generation(SCOPE) == 4
    assert "doc-2.md" not in rows(stores, ITEMS)
    assert stores.status.get(SCOPE, "doc-2.md") is None
    assert "zebras" in rows(stores, ["doc-1.md"])["doc-1.md"][0][1]
    assert visible_to(stores, "alice", "zebras giraffes") >= {"doc-1.md", "doc-new.md"}


def test_max_pages_resumes_where_it_stopped(stores):
    """max_pages=1 commits one page a run; the runs together equal one full run."""
    connector = DictConnector(ITEMS)
    results = [sync(stores, connector, max_pages=1) for _ in range(3)]
    assert [r.upserted for r in results] == [3, 3, 1]
    assert [r.exhausted for r in results] == [False, False, True]
    assert set(rows(stores, ITEMS)) == set(ITEMS)


def test_withheld_item_is_not_indexed_and_loses_visibility(stores):
    """access=None: not loaded, counted withheld, its previous rows retired, status unavailable."""
    connector = DictConnector(ITEMS)
    sync(stores, connector)
    connector.access["doc-3.md"] = None
    connector.edit("doc-3.md", b"# Doc 3\n\nSecret now.\n")
    loads = len(connector.loads)
    result = sync(stores, connector)
    assert (result.withheld, result.upserted, result.deleted) == (1, 0, 0)
    assert len(connector.loads) == loads, "a withheld item is never loaded"
    assert "doc-3.md" not in rows(stores, ITEMS)
    status = stores.status.get(SCOPE, "doc-3.md")
    assert (status.state, status.freshness) == ("failed", "unavailable")
    with stores.store.unit_of_work(SCOPE) as uow:
        assert uow.grants.get(["doc-3.md"])["doc-3.md"].is_empty


def test_revoked_access_disappears_from_every_principal(stores):
    """Access moved from alice to bob with unchanged bytes: skipped, but the grant changes."""
    connector = DictConnector(ITEMS)
    sync(stores, connector)
    assert "doc-4.md" in visible_to(stores, "alice", "item4")
    connector.access["doc-4.md"] = ragport.domain.Access(principal_ids=("bob",))
    connector.items["doc-4.md"] += b"\n"  # a change notification with the same text
    result = sync(stores, connector)
    assert result.upserted + result.skipped == 1
    assert "doc-4.md" not in visible_to(stores, "alice", "item4")
    assert "doc-4.md" in visible_to(stores, "bob", "item4")


def test_failed_item_keeps_its_previous_version_and_the_page_commits(stores):
    """A load failure marks the item failed/stale and keeps its rows; the rest commits."""
    connector = DictConnector(ITEMS)
    sync(stores, connector)
    before = rows(stores, ["doc-5.md"])
    connector.edit("doc-5.md", b"# Doc 5\n\nchanged\n")
    connector.edit("doc-6.md", b"# Doc 6\n\nchanged too, about lemurs\n")
    connector.fail_load.add("doc-5.md")
    result = sync(stores, connector)
    assert (result.failed, result.upserted) == (1, 1)
    assert rows(stores, ["doc-5.md"]) == before
    assert "lemurs" in rows(stores, ["doc-6.md"])["doc-6.md"][0][1]
    status = stores.status.get(SCOPE, "doc-5.md")
    assert (status.state, status.freshness) == ("failed", "stale")
    assert "LoadError" in status.error
    connector.fail_load.clear()
    connector.edit("doc-5.md", b"# Doc 5\n\nchanged again\n")
    assert sync(stores, connector).upserted == 1
    assert stores.status.get(SCOPE, "doc-5.md").freshness == "current"


def test_expired_cursor_bootstraps_and_sweeps(stores):
    """SyncCursorError from changes: one bootstrap; what it no longer lists is deleted."""
    connector = DictConnector(ITEMS)
    sync(stores, connector)
    # Upstream changes the connector's cursor can no longer tell us about.
    connector.remove("doc-0.md")
    connector.remove("doc-6.md")
    connector.expire = True
    with pytest.raises(SyncCursorError):
        sync(stores, connector, on_cursor_error="raise")
    connector.expire = True
    embedder = CountingEmbedder()
    result = sync(stores, connector, embedder)
    assert (result.bootstrapped, result.exhausted) == (True, True)
    assert (result.deleted, result.swept, result.upserted, result.skipped) == (2, 2, 0, 5)
    assert embedder.texts == [], "unchanged items are skipped by their skip key"
    assert set(rows(stores, ITEMS)) == set(ITEMS) - {"doc-0.md", "doc-6.md"}


def test_malformed_checkpoint_is_a_cursor_error(stores):
    """A checkpoint this use case did not write bootstraps (or raises with "raise")."""
    connector = DictConnector(ITEMS)
    assert stores.checkpoints.compare_and_set(connector.id, SCOPE, 0, "garbage")
    with pytest.raises(SyncCursorError) as caught:
        sync(stores, connector, on_cursor_error="raise")
    assert caught.value.reason == "malformed"
    assert sync(stores, connector).bootstrapped


class CrashBeforeCas:
    """A checkpoint store that dies (once) after the page committed, before the CAS."""

    def __init__(self, inner, *, crash_on: int):
        self.inner, self.crash_on, self.calls = inner, crash_on, 0

    def get(self, connector_id, scope):
        return self.inner.get(connector_id, scope)

    def compare_and_set(self, connector_id, scope, expected_version, cursor):
        self.calls += 1
        if self.calls == self.crash_on:
            raise KeyboardInterrupt("simulated crash")
        return self.inner.compare_and_set(connector_id, scope, expected_version, cursor)

    def delete(self, connector_id, scope):
        return self.inner.delete(connector_id, scope)


def test_crash_between_commit_and_cas_replays_the_page(stores):
    """The replayed page writes the same rows; nothing is duplicated and no generation added."""
    reference = Stores(InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore())
    sync(reference, DictConnector(ITEMS))
    connector = DictConnector(ITEMS)
    crashing = Stores(stores.store, CrashBeforeCas(stores.checkpoints, crash_on=2), stores.status)
    with pytest.raises(KeyboardInterrupt):
        sync(crashing, connector)
    assert stores.checkpoints.get(connector.id, SCOPE).version == 1
    generation = stores.store.current_generation(SCOPE)
    assert generation == 2, "the second page committed"
    result = sync(stores, connector)
    assert (result.pages, result.skipped, result.upserted) == (2, 3, 1)
    assert stores.store.current_generation(SCOPE) == 3, "the replay wrote nothing new"
    assert rows(stores, ITEMS) == rows(reference, ITEMS)


class AdvancedMeanwhile:
    """Another worker advances the checkpoint just before this worker's CAS."""

    def __init__(self, inner):
        self.inner = inner

    def get(self, connector_id, scope):
        return self.inner.get(connector_id, scope)

    def compare_and_set(self, connector_id, scope, expected_version, cursor):
        assert self.inner.compare_and_set(connector_id, scope, expected_version, cursor)
        return self.inner.compare_and_set(connector_id, scope, expected_version, cursor)

    def delete(self, connector_id, scope):
        return self.inner.delete(connector_id, scope)


def test_lost_cas_stops_the_worker(stores):
    """A checkpoint store that cannot join the unit of work and loses its compare-and-set after
    the commit ends the run after that page: lost=True, no page 2."""
    connector = DictConnector(ITEMS)
    result = sync(
        Stores(stores.store, AdvancedMeanwhile(stores.checkpoints), stores.status), connector
    )
    assert (result.lost, result.pages, result.exhausted) == (True, 1, False)
    assert stores.store.current_generation(SCOPE) == 1
    assert len(rows(stores, ITEMS)) == 3


class Recording:
    """Records every successful CAS (version it moved from, worker)."""

    def __init__(self, inner, log, worker):
        self.inner, self.log, self.worker = inner, log, worker

    def get(self, connector_id, scope):
        return self.inner.get(connector_id, scope)

    def compare_and_set(self, connector_id, scope, expected_version, cursor):
        won = self.inner.compare_and_set(connector_id, scope, expected_version, cursor)
        if won:
            self.log.append((expected_version, self.worker))
        return won

    def delete(self, connector_id, scope):
        return self.inner.delete(connector_id, scope)


def test_two_racing_workers_advance_each_page_once(stores):
    """Two workers over the same upstream: every version step is taken by exactly one."""
    items = {f"doc-{i:02d}.md": f"# D{i}\n\nbody {i} word{i}\n".encode() for i in range(20)}
    log: list[tuple[int, str]] = []
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def worker(name: str) -> None:
        connector = DictConnector(items, page_size=2)
        barrier.wait(10)
        try:
            for _ in range(20):
                r = sync(
                    Stores(stores.store, Recording(stores.checkpoints, log, name), stores.status),
                    connector,
                )
                if r.exhausted and not r.lost:
                    break
            results[name] = r
        except Exception as exc:  # reported by the assertion below
            results[name] = exc

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(isinstance(r, ragport.SyncResult) for r in results.values()), results
    versions = [v for v, _ in log]
    assert versions == list(range(len(versions))) and len(versions) == 10, log
    reference = Stores(InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore())
    sync(reference, DictConnector(items, page_size=2))
    assert rows(stores, items) == rows(reference, items)


def test_arguments_are_checked(stores):
    """Bad arguments are ValidationErrors before anything is read."""
    connector = DictConnector(ITEMS)
    for bad in ({"max_pages": 0}, {"on_cursor_error": "ignore"}):
        with pytest.raises(ValidationError):
            sync(stores, connector, **bad)
    from ragport.application.sync import sync_knowledge as core_sync

    with pytest.raises(ValidationError) as caught:  # the core keeps requiring an injected parser
        core_sync(
            connector=connector,
            checkpoints=stores.checkpoints,
            store=stores.store,
            embedder=CountingEmbedder(),
            scope=SCOPE,
        )
    assert caught.value.field == "parser"
    with pytest.raises(ValidationError):
        ragport.bootstrap.sync_knowledge(
            connector=object(),
            checkpoints=stores.checkpoints,
            store=stores.store,
            embedder=CountingEmbedder(),
            scope=SCOPE,
            parser=parser_for,
        )


CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from doubles import CountingEmbedder
from sync_support import DictConnector
import ragport
from ragport.adapters.parsers import parser_for
from ragport.adapters.postgres import PostgresCheckpointStore, PostgresStatusStore, PostgresStore

url, schema = sys.argv[2], sys.argv[3]
items = {k: v.encode() for k, v in json.loads(sys.argv[4]).items()}
inner = PostgresCheckpointStore(url, schema=schema)

class Pausing:
    calls = 0
    def get(self, c, s):
        return inner.get(c, s)
    def compare_and_set(self, c, s, v, cursor):
        Pausing.calls += 1
        if Pausing.calls == 2:
            print(json.dumps({"committed": 2}), flush=True)
            sys.stdin.readline()  # killed here
        return inner.compare_and_set(c, s, v, cursor)
    def delete(self, c, s):
        return inner.delete(c, s)

ragport.sync_knowledge(
    connector=DictConnector(items), checkpoints=Pausing(),
    store=PostgresStore(url, schema=schema), embedder=CountingEmbedder(),
    scope=ragport.Scope("tenant-1", "kb", "sync"),
    status_store=PostgresStatusStore(url, schema=schema), parser=parser_for,
)
print(json.dumps({"done": True}), flush=True)
"""


def test_killed_child_between_commit_and_cas_replays(pg_url, pg_engine, pg_schema, tmp_path: Path):
    """A real process killed after its second page committed: the next run replays that page."""
    from child_process import Child

    from ragport.adapters.postgres import (
        PostgresCheckpointStore,
        PostgresStatusStore,
        PostgresStore,
    )

    stores = Stores(
        PostgresStore(pg_engine, schema=pg_schema, create=True),
        PostgresCheckpointStore(pg_engine, schema=pg_schema),
        PostgresStatusStore(pg_engine, schema=pg_schema),
    )
    support = str(Path(__file__).parents[1] / "support")
    items = json.dumps({k: v.decode() for k, v in ITEMS.items()})
    import os

    child = Child(
        CHILD, [support, pg_url, pg_schema, items], dict(os.environ), tmp_path / "child.log"
    )
    try:
        assert child.expect(60) == {"committed": 2}
        child.proc.kill()
        child.proc.wait(10)
    finally:
        child.stop()
    connector = DictConnector(ITEMS)
    assert stores.checkpoints.get(connector.id, SCOPE).version == 1
    assert stores.store.current_generation(SCOPE) == 2
    result = sync(stores, connector)
    assert (result.pages, result.skipped, result.upserted) == (2, 3, 1)
    assert stores.store.current_generation(SCOPE) == 3
    reference = Stores(InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore())
    sync(reference, DictConnector(ITEMS))
    assert rows(stores, ITEMS) == rows(reference, ITEMS)
    assert stores.checkpoints.get(connector.id, SCOPE).version == 3


def test_store_failure_sinks_the_page_and_keeps_the_checkpoint(stores):
    """An embedder failure commits nothing and leaves the checkpoint where it was."""

    class Broken(CountingEmbedder):
        def embed(self, texts):
            raise StoreError("down")

    connector = DictConnector(ITEMS)
    with pytest.raises(StoreError):
        sync(stores, connector, Broken())
    assert stores.checkpoints.get(connector.id, SCOPE).version == 0
    assert stores.store.current_generation(SCOPE) == 0


def test_folder_sync_follows_adds_edits_renames_and_deletes(stores, tmp_path):
    """FolderConnector through sync_knowledge: the scope equals the folder after every run."""
    from ragport.adapters.connectors import FolderConnector

    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    for name, text in {
        "a.md": "# A\n\nalpha\n",
        "sub/b.md": "# B\n\nbeta\n",
        "c.txt": "gamma\n",
    }.items():
        (root / name).write_text(text)
    connector = FolderConnector(root, page_size=2)
    first = sync(stores, connector)
    assert (first.upserted, first.pages) == (3, 2)
    (root / "a.md").write_text("# A\n\nalpha, edited\n")
    (root / "c.txt").rename(root / "sub" / "c2.txt")
    (root / "sub" / "b.md").unlink()
    (root / "d.md").write_text("# D\n\ndelta\n")
    second = sync(stores, connector)
    assert (second.upserted, second.deleted) == (3, 2)
    expected = {"a.md", "sub/c2.txt", "d.md"}
    assert set(rows(stores, expected | {"sub/b.md", "c.txt"})) == expected
    assert "edited" in rows(stores, ["a.md"])["a.md"][0][1]
    embedder = CountingEmbedder()
    assert sync(stores, connector, embedder).upserted == 0 and embedder.texts == []


def _ingest_outside_sync(stores: Stores, names: dict[str, str]) -> None:
    for name, text in names.items():
        ragport.application.replace_source(
            source_id=name,
            chunks=ragport.domain.chunk_markdown(text, source_id=name),
            embedder=CountingEmbedder(),
            store=stores.store,
            scope=SCOPE,
        )


@pytest.mark.parametrize("adopt", [True, False])
def test_adopt_makes_the_scope_equal_the_connector_across_pages(stores, adopt):
    """Sources written before the first sync (by ingest) and gone from the connector: with
    adopt the first full listing (three pages here) retires them; without, they stay.
    A derived record resting on a kept source is not a source and stays either way."""
    _ingest_outside_sync(
        stores, {"doc-0.md": "# Doc 0\n\nold zero\n", "gone.md": "# Gone\n\ngone\n"}
    )
    ragport.application.index_derived(
        record_id="summary-0",
        text="a summary of document zero",
        lineage=["doc-0.md"],
        embedder=CountingEmbedder(),
        store=stores.store,
        scope=SCOPE,
    )
    result = sync(stores, DictConnector(ITEMS), adopt=adopt)
    assert result.pages == 3 and result.exhausted
    kept = set(rows(stores, [*ITEMS, "gone.md", "summary-0"]))
    assert kept == set(ITEMS) | {"summary-0"} | (set() if adopt else {"gone.md"})
    assert result.swept == (1 if adopt else 0)
    # the next run has a checkpoint: nothing is adopted again
    again = sync(stores, DictConnector(ITEMS), adopt=adopt)
    assert again.swept == 0 and again.upserted == 0


def test_adopt_must_be_a_bool(stores):
    with pytest.raises(ValidationError) as caught:
        sync(stores, DictConnector(ITEMS), adopt="yes")
    assert caught.value.field == "adopt"
