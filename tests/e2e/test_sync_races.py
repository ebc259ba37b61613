"""sync_knowledge under what users bring (issue 24): a second worker with a stale page, items
that fail and must be retried, parsers that raise anything, an id that names a derived record.

Every scenario runs on the in-memory store and on PostgreSQL, each with its own checkpoint
and status stores (which join the store's unit of work).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import attrs
import pytest
from doubles import CountingEmbedder
from flat_options import flat
from sync_support import DictConnector, Stores, sync_options, sync_stores

import ragport
from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore
from ragport.adapters.parsers import parser_for
from ragport.domain.errors import ParseError
from ragport.ports.documents import ParsedDocument
from ragport.ports.sync import Page, Upsert

SCOPE = ragport.Scope("tenant-1", "kb", "races")


@pytest.fixture(params=["memory", "postgres"])
def stores(request) -> Iterator[Stores]:
    yield sync_stores(request)


_WORKERS = [1]


@pytest.fixture(autouse=True, params=[1, 3], ids=["serial", "pipelined"])
def workers(request) -> int:
    """Every race runs with the page's items parsed one by one and on 3 threads."""
    _WORKERS[0] = request.param
    return request.param


@attrs.define
class Clock:
    at: datetime = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.at


def sync(stores: Stores, connector, **kwargs) -> ragport.SyncResult:
    return ragport.bootstrap.sync_knowledge(
        connector=connector,
        checkpoints=stores.checkpoints,
        store=stores.store,
        embedder=CountingEmbedder(),
        scope=SCOPE,
        status_store=stores.status,
        **flat(**sync_options(**{"parser": parser_for, "workers": _WORKERS[0], **kwargs})),
    )


def stored(stores: Stores, source_id: str) -> list[str]:
    return [r.text for r in stores.store.get_by_source(SCOPE, source_id)]


class Gated:
    """A connector whose pages' ``load()`` calls wait for ``go`` (a worker paused between
    listing a page and committing it)."""

    def __init__(self, inner: DictConnector):
        self.inner = inner
        self.listed = threading.Event()
        self.go = threading.Event()

    @property
    def id(self) -> str:
        return self.inner.id

    def _gate(self, page: Page) -> Page:
        def gated(upsert: Upsert) -> Upsert:
            def load():
                self.go.wait(30)
                return upsert.load()

            return attrs.evolve(upsert, load=load)

        self.listed.set()
        return attrs.evolve(page, upserts=[gated(u) for u in page.upserts])

    def bootstrap(self, cursor=None) -> Page:
        return self._gate(self.inner.bootstrap(cursor))

    def changes(self, cursor) -> Page:
        return self._gate(self.inner.changes(cursor))


def test_a_stale_worker_cannot_resurrect_a_deleted_document(stores):
    """Worker B lists an edit of b.md, worker A then syncs its deletion; B's page must not
    commit: b.md stays deleted, B reports lost, and later runs keep it deleted."""
    items = {"a.md": b"# A\n\nalpha text\n", "b.md": b"# B\n\nbravo text\n"}
    first = sync(stores, DictConnector(items))
    assert first.upserted == 2
    version = stores.checkpoints.get("dict", SCOPE).version

    stale = DictConnector({**items, "b.md": b"# B\n\nbravo edited\n"})
    worker_b = Gated(stale)
    results: dict[str, ragport.SyncResult] = {}
    thread = threading.Thread(target=lambda: results.setdefault("b", sync(stores, worker_b)))
    thread.start()
    assert worker_b.listed.wait(30)

    upstream = DictConnector({"a.md": items["a.md"]})  # b.md deleted after B listed it
    results["a"] = sync(stores, upstream)
    assert results["a"].deleted == 1
    worker_b.go.set()
    thread.join(60)
    assert not thread.is_alive()

    assert results["b"].lost is True
    assert results["b"].upserted == 0 and results["b"].pages == 0
    assert stored(stores, "b.md") == [], "the loser's stale page was committed"
    assert stores.status.get(SCOPE, "b.md") is None, "the loser wrote a status row"
    assert stores.checkpoints.get("dict", SCOPE).version == version + 1
    again = sync(stores, upstream)
    assert (again.lost, again.upserted) == (False, 0)
    assert stored(stores, "b.md") == []
    assert stored(stores, "a.md")


def test_a_stale_worker_cannot_restore_a_revoked_grant(stores):
    """B lists b.md while alice may read it; A then syncs alice's revocation; B's page (grants
    included) rolls back, so alice stays denied."""
    items = {"a.md": b"# A\n\nalpha text\n", "b.md": b"# B\n\nbravo text\n"}
    sync(stores, DictConnector(items))
    before = DictConnector({**items, "b.md": b"# B\n\nbravo edited\n"})
    worker_b = Gated(before)
    results: dict[str, ragport.SyncResult] = {}
    thread = threading.Thread(target=lambda: results.setdefault("b", sync(stores, worker_b)))
    thread.start()
    assert worker_b.listed.wait(30)
    revoked = DictConnector({**items, "b.md": b"# B\n\nbravo edited\n"})
    revoked.access["b.md"] = ragport.domain.Access(principal_ids=("bob",))
    sync(stores, revoked)
    worker_b.go.set()
    thread.join(60)
    assert results["b"].lost is True
    result = ragport.application.retrieve_context(
        "bravo",
        embedder=CountingEmbedder(),
        store=stores.store,
        scope=SCOPE,
        authorization=ragport.Authorization(principal_id="alice", tenant_id=SCOPE.tenant_id),
        request=ragport.RetrievalRequest(top_k=10),
    )
    assert "b.md" not in {h.source_id for h in result.hits}


def test_a_failed_item_is_retried_until_it_succeeds(stores):
    """A new item whose load fails is indexed by the next run though nothing changed upstream
    (the checkpoint kept it for a retry); then nothing is left to retry."""
    connector = DictConnector({"a.md": b"# A\n\nalpha\n", "b.md": b"# B\n\nbravo\n"})
    connector.fail_load.add("b.md")
    first = sync(stores, connector)
    assert (first.failed, first.retrying) == (1, 1)
    assert stored(stores, "b.md") == []
    connector.fail_load.clear()
    second = sync(stores, connector)
    assert (second.upserted, second.failed, second.retrying) == (1, 0, 0)
    assert stored(stores, "b.md")
    status = stores.status.get(SCOPE, "b.md")
    assert (status.state, status.freshness) == ("indexed", "current")
    loads = len(connector.loads)
    third = sync(stores, connector)
    assert (third.upserted, third.bootstrapped, third.retrying) == (0, False, 0)
    assert len(connector.loads) == loads, "nothing due, yet items were loaded again"


def test_a_withheld_item_is_retried_once_its_access_is_mapped(stores):
    """An item the access mapping withheld is indexed by a later run once it maps, with no
    upstream change in between."""
    connector = DictConnector({"a.md": b"# A\n\nalpha\n", "b.md": b"# B\n\nbravo\n"})
    connector.access["b.md"] = None
    first = sync(stores, connector)
    assert (first.withheld, first.retrying) == (1, 1)
    del connector.access["b.md"]
    second = sync(stores, connector)
    assert (second.upserted, second.retrying) == (1, 0)
    assert stored(stores, "b.md")


def test_retries_back_off_and_end_when_the_item_is_deleted(stores):
    """A failing item is retried on the next run, then not before its backoff (1 minute after
    the second failure); deleted upstream, it is no longer retried."""
    clock = Clock()
    connector = DictConnector({"a.md": b"# A\n\nalpha\n", "b.md": b"# B\n\nbravo\n"})
    connector.fail_load.add("b.md")
    assert sync(stores, connector, clock=clock).retrying == 1
    second = sync(stores, connector, clock=clock)  # due at once: a full listing, fails again
    assert (second.bootstrapped, second.failed, second.retrying) == (True, 1, 1)
    loads = connector.loads.count("b.md")
    third = sync(stores, connector, clock=clock)  # backoff: not due yet
    assert (third.bootstrapped, third.failed) == (False, 0)
    assert connector.loads.count("b.md") == loads
    clock.at += timedelta(seconds=61)
    fourth = sync(stores, connector, clock=clock)
    assert (fourth.bootstrapped, fourth.failed) == (True, 1)
    connector.remove("b.md")
    fifth = sync(stores, connector, clock=clock)
    assert fifth.retrying == 0
    clock.at += timedelta(days=2)
    sixth = sync(stores, connector, clock=clock)
    assert (sixth.bootstrapped, sixth.retrying) == (False, 0)


def _exception_types() -> list[type[BaseException]]:
    """Every builtin Exception class (aliases such as IOError once)."""
    found = {
        value
        for value in vars(builtins).values()
        if isinstance(value, type) and issubclass(value, Exception)
    }
    return sorted(found, key=lambda t: t.__name__)


EXCEPTIONS = _exception_types()


class RaisingParser:
    """Raises the builtin exception its input names (not a BaseParser: nothing translates)."""

    id = "raising-v1"
    max_bytes = 1 << 20

    def parse(self, data: bytes, *, media_type=None, abort=None) -> ParsedDocument:
        name = data.decode()
        if name == "fine":
            return ParsedDocument("a fine document about gamma", {}, "text/plain")
        error = getattr(builtins, name)
        if issubclass(error, UnicodeDecodeError):
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")
        if issubclass(error, UnicodeEncodeError):
            raise UnicodeEncodeError("ascii", "\xff", 0, 1, "bad")
        if issubclass(error, UnicodeTranslateError):
            raise UnicodeTranslateError("\xff", 0, 1, "bad")
        raise error("secret document text")


def test_any_exception_from_one_item_fails_only_that_item(stores):
    """A parser raising each builtin exception type (RecursionError, MemoryError, KeyError...)
    fails that item alone: the page commits the fine item, and no error quotes the text."""
    assert len(EXCEPTIONS) > 40
    items = {f"{t.__name__}.txt": t.__name__.encode() for t in EXCEPTIONS}
    items["fine.txt"] = b"fine"
    connector = DictConnector(items, page_size=len(items))
    result = sync(stores, connector, parser=lambda _: RaisingParser())
    assert (result.pages, result.upserted, result.failed) == (1, 1, len(EXCEPTIONS))
    assert stored(stores, "fine.txt")
    for error in EXCEPTIONS:
        status = stores.status.get(SCOPE, f"{error.__name__}.txt")
        assert (status.state, status.freshness) == ("failed", "stale"), error
        assert "secret" not in (status.error or ""), error


def test_an_id_naming_a_derived_record_fails_that_item_not_the_page(stores):
    """A listed id equal to a derived record's id is that item's failure on every run; the
    other items of its page commit."""
    sync(stores, DictConnector({"a.md": b"# A\n\nalpha\n"}))
    ragport.application.index_derived(
        record_id="summary.md",
        text="a summary of alpha",
        lineage=["a.md"],
        embedder=CountingEmbedder(),
        store=stores.store,
        scope=SCOPE,
    )
    connector = DictConnector(
        {"a.md": b"# A\n\nalpha\n", "b.md": b"# B\n\nbravo\n", "summary.md": b"# S\n\nx\n"}
    )
    for _ in range(2):
        result = sync(stores, connector)
        assert result.lost is False
        assert result.failed == 1
    assert stored(stores, "b.md")
    assert [r.kind for r in stores.store.get_by_source(SCOPE, "summary.md")] == ["derived"]
    status = stores.status.get(SCOPE, "summary.md")
    assert (status.state, status.freshness) == ("failed", "stale")


def test_a_parsers_verdict_on_the_bytes_is_not_retried(stores):
    """A real parser's refusal of the bytes (empty Markdown) fails the item but is not kept for
    a retry: the next run with nothing changed upstream lists nothing again."""
    connector = DictConnector({"a.md": b"# A\n\nalpha\n", "empty.md": b"   \n"})
    result = sync(stores, connector)
    assert (result.upserted, result.failed, result.retrying) == (1, 1, 0)
    again = sync(stores, connector)
    assert (again.bootstrapped, again.failed) == (False, 0)
    assert issubclass(ParseError, ragport.RagportError)


KILLED_INSIDE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from doubles import CountingEmbedder
from sync_support import DictConnector
import ragport
from ragport.adapters.parsers import parser_for
from ragport.adapters.postgres import PostgresCheckpointStore, PostgresStatusStore, PostgresStore

url, schema = sys.argv[2], sys.argv[3]
items = {f"doc-{i}.md": f"# Doc {i}\n\nitem{i} text\n".encode() for i in range(7)}

class Pausing(PostgresCheckpointStore):
    calls = 0
    def compare_and_set_in(self, uow, c, s, v, cursor):
        won = super().compare_and_set_in(uow, c, s, v, cursor)
        Pausing.calls += 1
        if Pausing.calls == 2:
            print(json.dumps({"inside": 2, "won": won}), flush=True)
            sys.stdin.readline()  # killed here: the page's rows and its CAS are uncommitted
        return won

ragport.sync_knowledge(
    connector=DictConnector(items), checkpoints=Pausing(url, schema=schema),
    store=PostgresStore(url, schema=schema), embedder=CountingEmbedder(),
    scope=ragport.Scope("tenant-1", "kb", "races"),
    status_store=PostgresStatusStore(url, schema=schema), parser=parser_for,
)
"""


def test_a_process_killed_inside_the_page_commits_neither_rows_nor_checkpoint(
    pg_url, pg_engine, pg_schema, tmp_path
):
    """A real process killed after its joined compare-and-set, before the commit: the server
    aborts both, so the checkpoint and the pointer are still at page 1; the next run replays
    page 2 and ends equal to an uninterrupted sync."""
    import os
    from pathlib import Path

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
    child = Child(
        KILLED_INSIDE, [support, pg_url, pg_schema], dict(os.environ), tmp_path / "child.log"
    )
    try:
        assert child.expect(60) == {"inside": 2, "won": True}
        child.proc.kill()
        child.proc.wait(10)
    finally:
        child.stop()
    items = {f"doc-{i}.md": f"# Doc {i}\n\nitem{i} text\n".encode() for i in range(7)}
    assert stores.checkpoints.get("dict", SCOPE).version == 1
    assert stores.store.current_generation(SCOPE) == 1, "page 2 committed without its CAS"
    result = sync(stores, DictConnector(items))
    assert (result.lost, result.exhausted) == (False, True)
    reference = Stores(InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore())
    sync(reference, DictConnector(items))
    for source_id in items:
        assert stored(stores, source_id) == stored(reference, source_id), source_id
    assert stores.checkpoints.get("dict", SCOPE).version == 3


def test_a_deeply_nested_checkpoint_or_connector_cursor_is_a_cursor_error(stores, tmp_path):
    """A checkpoint (or a folder cursor) of JSON nested far past the interpreter's recursion
    limit is a SyncCursorError, never a raw RecursionError; with on_cursor_error="bootstrap"
    the sync starts over."""
    from ragport.adapters.connectors import FolderConnector
    from ragport.domain.errors import SyncCursorError

    nested = "[" * 100_000 + "]" * 100_000
    assert stores.checkpoints.compare_and_set("dict", SCOPE, 0, nested)
    with pytest.raises(SyncCursorError):
        sync(stores, DictConnector({"a.md": b"# A\n\nalpha\n"}), on_cursor_error="raise")
    assert sync(stores, DictConnector({"a.md": b"# A\n\nalpha\n"})).bootstrapped
    (tmp_path / "a.md").write_text("# A\n\nalpha\n")
    with pytest.raises(SyncCursorError):
        FolderConnector(tmp_path).changes(nested)
