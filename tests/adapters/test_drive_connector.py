"""GoogleDriveConnector against a fake Drive v3 API served over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from fake_drive import DOC, FORM, SHEET, SHORTCUT, FakeDrive
from fake_http import Reply
from flat_options import drive_parts

import ragport
from ragport.adapters.connectors import GoogleDriveConnector, drive_permissions_access
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore
from ragport.adapters.parsers import parser_for
from ragport.contract_tests import ConnectorContract
from ragport.contract_tests._support import error_chain
from ragport.domain.errors import LoadError, ParseError, SyncCursorError, ValidationError

SECRET = "ya29.SECRET-token-value"


class Tokens:
    """A token_provider whose answers the test controls; counts calls."""

    def __init__(self, *values: str):
        self.values = list(values)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return self.values[min(self.calls, len(self.values)) - 1]


@pytest.fixture
def drive() -> FakeDrive:
    return FakeDrive()


@pytest.fixture
def server(serve, drive):
    return serve(drive)


@pytest.fixture
def make(server):
    sleeps: list[float] = []
    made: list[GoogleDriveConnector] = []

    def build(**kwargs) -> GoogleDriveConnector:
        options = {
            "token_provider": Tokens("token-1"),
            "resolve_access": drive_permissions_access,
            "base_url": server.url,
            "allow_loopback": True,
            "sleep": sleeps.append,
            **kwargs,
        }
        connector = GoogleDriveConnector(**drive_parts(**options))
        made.append(connector)
        return connector

    build.sleeps = sleeps
    yield build
    for connector in made:
        connector.close()


def bootstrap_all(connector):
    pages = [connector.bootstrap(None)]
    while not pages[-1].exhausted:
        pages.append(connector.bootstrap(pages[-1].cursor))
    return pages, pages[-1].cursor


def changes_all(connector, cursor):
    pages = [connector.changes(cursor)]
    while not pages[-1].exhausted:
        pages.append(connector.changes(pages[-1].cursor))
    return pages, pages[-1].cursor


def listed(pages):
    return {u.source_id: u for p in pages for u in p.upserts}


def deleted(pages):
    return [d for p in pages for d in p.deletions]


class DriveHarness:
    def __init__(self, drive: FakeDrive, folder: str):
        self.drive, self.folder = drive, folder

    def add(self, name: str, data: bytes) -> str:
        return self.drive.add(name, parent=self.folder, data=data)

    def edit(self, source_id: str, data: bytes) -> None:
        self.drive.edit(source_id, data)

    def remove(self, source_id: str) -> None:
        self.drive.trash(source_id)


class TestGoogleDriveConnector(ConnectorContract):
    @pytest.fixture
    def connector_harness(self, drive) -> Iterator[DriveHarness]:
        yield DriveHarness(drive, drive.folder("Team"))

    @pytest.fixture
    def connector(self, connector_harness, make) -> Iterator[GoogleDriveConnector]:
        yield make(folder_id=connector_harness.folder, page_size=7)


@pytest.fixture
def tree(drive):
    """Team/ (a.txt, Notes doc, Budget sheet, Survey form, shortcut), Team/Sub/ (b.md, c.pdf),
    Team/Sub/Deep/ (d.txt); Other/ (outside.txt)."""
    from pdf_bytes import pdf

    team = drive.folder("Team")
    sub = drive.folder("Sub", parent=team)
    deep = drive.folder("Deep", parent=sub)
    other = drive.folder("Other")
    ids = {
        "team": team,
        "sub": sub,
        "deep": deep,
        "other": other,
        "a": drive.add("a.txt", parent=team, data=b"Alpha text.\n"),
        "doc": drive.add(
            "Notes",
            parent=team,
            mime=DOC,
            data=b"<html><body><h1>Notes</h1><p>Doc body.</p></body></html>",
        ),
        "sheet": drive.add("Budget", parent=team, mime=SHEET, data=b"a,b\n1,2\n"),
        "form": drive.add("Survey", parent=team, mime=FORM),
        "b": drive.add("b.md", parent=sub, mime="text/markdown", data=b"# Bee\n\nBees buzz.\n"),
        "c": drive.add("c.pdf", parent=sub, mime="application/pdf", data=pdf(["Page one text."])),
        "d": drive.add("d.txt", parent=deep, data=b"Deep text.\n"),
        "outside": drive.add("outside.txt", parent=other, data=b"not in the folder\n"),
    }
    ids["shortcut"] = drive.add(
        "link-to-outside",
        parent=team,
        mime=SHORTCUT,
        shortcutDetails={"targetId": ids["outside"], "targetMimeType": "text/plain"},
    )
    return ids


def test_bootstrap_lists_the_folder_and_its_subfolders(make, tree, server):
    """Files of nested folders are listed once with path, title and link; nothing outside,
    no folders, no shortcuts; files.list is asked with q, fields, pageSize and pageToken."""
    connector = make(folder_id=tree["team"], page_size=2)
    pages, cursor = bootstrap_all(connector)
    items = listed(pages)
    assert set(items) == {tree[k] for k in ("a", "doc", "sheet", "form", "b", "c", "d")}
    assert items[tree["d"]].metadata["path"] == "Sub/Deep/d.txt"
    assert items[tree["b"]].metadata["title"] == "b.md"
    assert items[tree["b"]].metadata["url"].endswith(tree["b"])
    assert items[tree["b"]].access == ragport.domain.Access(principal_ids=("alice@example.com",))
    lists = [
        urlsplit(r["path"])
        for r in server.requests
        if urlsplit(r["path"]).path == "/drive/v3/files"
    ]
    queries = [parse_qs(u.query) for u in lists]
    assert all("fields" in q and q["pageSize"] == ["2"] for q in queries)
    assert any("pageToken" in q for q in queries)
    assert {q["q"][0] for q in queries} >= {f"'{tree['team']}' in parents and trashed = false"}
    assert any(
        urlsplit(r["path"]).path == "/drive/v3/changes/startPageToken" for r in server.requests
    )
    assert json.loads(cursor)["kind"] == "changes"


def test_content_is_exported_or_downloaded(make, tree, drive):
    """Docs export as HTML, Sheets as text, other types download with alt=media; a form is
    refused without a download."""
    connector = make(folder_id=tree["team"])
    items = listed(bootstrap_all(connector)[0])
    doc = items[tree["doc"]].load()
    assert doc.media_type == "text/html" and b"<h1>Notes</h1>" in doc.data
    assert items[tree["sheet"]].load().media_type == "text/plain"
    assert items[tree["c"]].load().data.startswith(b"%PDF")
    before = list(drive.downloads)
    with pytest.raises(ParseError) as caught:
        items[tree["form"]].load()
    assert caught.value.reason == "unsupported_type"
    assert drive.downloads == before


def test_a_file_over_the_byte_cap_is_refused_before_download(make, drive):
    """A listed size over max_bytes is LoadError(too_large) without fetching the bytes."""
    folder = drive.folder("Big")
    big = drive.add("big.txt", parent=folder, data=b"x" * 5000)
    items = listed(bootstrap_all(make(folder_id=folder, max_bytes=1024))[0])
    with pytest.raises(LoadError) as caught:
        items[big].load()
    assert caught.value.reason == "too_large"
    assert big not in drive.downloads


def test_shared_drive_items_need_the_all_drives_parameters(make, drive, server):
    """A shared drive is listed with corpora=drive, driveId, supportsAllDrives and
    includeItemsFromAllDrives (the fake hides its items otherwise)."""
    drive.folder("Shared", file_id="drive-1", drive_id="drive-1")
    sub = drive.folder("Specs", parent="drive-1", drive_id="drive-1")
    one = drive.add("spec.txt", parent=sub, data=b"Spec.\n", drive_id="drive-1")
    connector = make(shared_drive_id="drive-1")
    pages, cursor = bootstrap_all(connector)
    assert set(listed(pages)) == {one}
    assert listed(pages)[one].load().data == b"Spec.\n"
    query = parse_qs(
        urlsplit(next(r["path"] for r in server.requests if "/drive/v3/files?" in r["path"])).query
    )
    assert query["corpora"] == ["drive"] and query["driveId"] == ["drive-1"]
    assert query["supportsAllDrives"] == ["true"] and query["includeItemsFromAllDrives"] == ["true"]
    drive.edit(one, b"Spec v2.\n")
    assert set(listed(changes_all(connector, cursor)[0])) == {one}


def test_changes_follow_renames_moves_trash_and_removal(make, tree, drive):
    """Renamed: upsert (new title); moved out, trashed, removed: deletions; moved in: upsert;
    a folder moved in is listed whole; a trashed folder takes its files with it."""
    connector = make(folder_id=tree["team"], page_size=3)
    _, cursor = bootstrap_all(connector)
    drive.update(tree["a"], name="a-renamed.txt")
    drive.move(tree["b"], tree["other"])
    drive.trash(tree["sheet"])
    drive.delete(tree["doc"])
    drive.move(tree["outside"], tree["sub"])
    incoming = drive.folder("Incoming", parent=tree["other"])
    e = drive.add("e.txt", parent=incoming, data=b"E.\n")
    pages, cursor = changes_all(connector, cursor)
    assert set(listed(pages)) == {tree["a"], tree["outside"]}
    assert listed(pages)[tree["a"]].metadata["title"] == "a-renamed.txt"
    assert sorted(deleted(pages)) == sorted([tree["b"], tree["sheet"], tree["doc"]])

    drive.move(incoming, tree["team"])
    drive.trash(tree["deep"])
    pages, cursor = changes_all(connector, cursor)
    assert set(listed(pages)) == {e}
    assert listed(pages)[e].metadata["path"] == "Incoming/e.txt"
    assert deleted(pages) == [tree["d"]]

    pages, _ = changes_all(connector, cursor)
    assert (listed(pages), deleted(pages)) == ({}, [])


def test_expired_and_invalid_page_tokens_are_cursor_errors(make, tree, drive):
    """410 from changes.list is SyncCursorError(reason="expired"); a token Drive calls
    invalid (400) is SyncCursorError too."""
    connector = make(folder_id=tree["team"])
    _, cursor = bootstrap_all(connector)
    drive.expired_below = 10_000
    with pytest.raises(SyncCursorError) as caught:
        connector.changes(cursor)
    assert caught.value.reason == "expired"
    body = json.loads(cursor)
    body["token"] = "999999"
    with pytest.raises(SyncCursorError):
        connector.changes(json.dumps(body))


def test_429_and_5xx_are_retried_with_backoff_honouring_retry_after(make, tree, drive):
    """429 with Retry-After: 3 waits 3 s; two 503s wait 0.5 then 1 s; then it succeeds."""
    connector = make(folder_id=tree["team"])
    drive.fail_next = [
        Reply(429, b"{}", headers={"Retry-After": "3"}),
        Reply(503, b"{}"),
        Reply(503, b"{}"),
    ]
    pages, _ = bootstrap_all(connector)
    assert listed(pages)
    assert make.sleeps == [3.0, 1.0, 2.0] or make.sleeps == [3.0, 0.5 * 2, 0.5 * 4]


def test_backoff_is_bounded(make, tree, drive):
    """After max_retries retryable answers the call fails with LoadError(status)."""
    connector = make(folder_id=tree["team"], max_retries=2, max_backoff_s=1.5)
    drive.fail_next = [Reply(500, b"{}")] * 5 + [Reply(429, b"{}", headers={"Retry-After": "999"})]
    with pytest.raises(LoadError) as caught:
        connector.bootstrap(None)
    assert caught.value.reason == "status"
    assert len(make.sleeps) == 2 and max(make.sleeps) <= 1.5


def test_a_token_expiring_mid_run_is_refreshed_once(make, tree, drive):
    """A 401 asks token_provider once more; the new token is used from then on."""
    tokens = Tokens("token-1", "token-2")
    connector = make(folder_id=tree["team"], token_provider=tokens)
    first = connector.bootstrap(None)
    drive.tokens = {"token-2"}
    while not first.exhausted:
        first = connector.bootstrap(first.cursor)
    assert tokens.calls == 2


def test_the_token_never_appears_in_errors(make, tree, drive):
    """A refused token and a failing server: errors name statuses, never the token, chain nothing."""
    drive.tokens = {"other"}
    connector = make(folder_id=tree["team"], token_provider=Tokens(SECRET))
    with pytest.raises(LoadError) as caught:
        connector.bootstrap(None)
    assert caught.value.reason == "unauthorized"
    for exc in error_chain(caught.value):
        assert SECRET not in str(exc) and SECRET not in repr(exc.args)
    assert caught.value.__cause__ is None
    drive.tokens = {SECRET}
    drive.fail_next = [Reply(500, SECRET.encode())] * 10
    with pytest.raises(LoadError) as caught:
        connector.bootstrap(None)
    assert SECRET not in str(caught.value)
    assert SECRET not in repr(connector.__dict__.get("_client"))


def test_transport_failures_are_load_errors_with_nothing_chained(make):
    """A closed port: LoadError(transport), __cause__ and __context__ None."""
    connector = make(folder_id="x", base_url="http://127.0.0.1:9", max_retries=0)
    with pytest.raises(LoadError) as caught:
        connector.bootstrap(None)
    assert caught.value.reason in ("transport", "timeout")
    assert caught.value.__cause__ is None and caught.value.__context__ is None


@pytest.mark.parametrize(
    "url", ["http://drive.example.com", "ftp://x", "https://user:pw@x", "http://10.0.0.1"]
)
def test_base_url_must_be_https_or_loopback(url):
    """Plain http only to a loopback host with allow_loopback=True; no credentials."""
    with pytest.raises(ValidationError) as caught:
        GoogleDriveConnector(
            token_provider=lambda: "t", resolve_access=drive_permissions_access, base_url=url
        )
    assert caught.value.field == "base_url"
    with pytest.raises(ValidationError):
        GoogleDriveConnector(
            token_provider=lambda: "t",
            resolve_access=drive_permissions_access,
            base_url="http://127.0.0.1:1",
        )


def test_sync_from_drive_follows_revoked_permissions(make, tree, drive):
    """sync_knowledge over the fake Drive: a permission removed upstream removes the file
    from that principal's results after the next sync; a withheld file is not indexed."""
    store, checkpoints, status = InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore()
    scope = ragport.Scope("t", "drive", "team")
    embedder = HashEmbedder(64)

    def withhold_forms(file):
        return None if file.get("name") == "Budget" else drive_permissions_access(file)

    connector = make(folder_id=tree["team"], resolve_access=withhold_forms, page_size=3)

    def run():
        return ragport.bootstrap.sync_knowledge(
            connector=connector,
            checkpoints=checkpoints,
            store=store,
            embedder=embedder,
            scope=scope,
            status_store=status,
            parser=parser_for,
        )

    def sees(principal, query):
        result = ragport.application.retrieve_context(
            query,
            embedder=embedder,
            store=store,
            scope=scope,
            authorization=ragport.Authorization(principal, "t"),
            request=ragport.RetrievalRequest(top_k=20),
        )
        return {h.source_id for h in result.hits}

    first = run()
    assert (first.withheld, first.failed) == (1, 1)  # the sheet withheld, the form unsupported
    assert status.get(scope, tree["form"]).freshness == "stale"
    assert tree["b"] in sees("alice@example.com", "bees buzz")
    titles = {r.metadata["title"] for r in store.get_by_source(scope, tree["doc"])}
    assert titles == {"Notes"}
    drive.update(
        tree["b"],
        permissions=[{"type": "user", "role": "reader", "emailAddress": "bob@example.com"}],
    )
    second = run()
    # The withheld sheet is due for a retry, so the second run re-lists the folder (the
    # unsupported form is a parser's verdict on its bytes: not retried).
    assert second.skipped >= 1 and second.bootstrapped
    assert (second.withheld, second.retrying) == (1, 1)
    assert tree["b"] not in sees("alice@example.com", "bees buzz")
    assert tree["b"] in sees("bob@example.com", "bees buzz")

    drive.expired_below = 10_000
    drive.delete(tree["a"])
    third = run()
    assert third.bootstrapped and third.swept == 1
    assert store.get_by_source(scope, tree["a"]) == []


@pytest.mark.skipif(
    not os.environ.get("RAGPORT_TEST_DRIVE_ACCESS_TOKEN"),
    reason="live probe: set RAGPORT_TEST_DRIVE_ACCESS_TOKEN (and RAGPORT_TEST_DRIVE_FOLDER_ID)",
)
def test_live_drive_probe():
    """Against the real Drive API: the first bootstrap page and the start token come back."""
    token = os.environ["RAGPORT_TEST_DRIVE_ACCESS_TOKEN"]
    with GoogleDriveConnector(
        token_provider=lambda: token,
        resolve_access=drive_permissions_access,
        folder_id=os.environ.get("RAGPORT_TEST_DRIVE_FOLDER_ID"),
        page_size=5,
    ) as connector:
        page = connector.bootstrap(None)
        assert page.cursor
        for upsert in page.upserts:
            assert upsert.source_id and upsert.metadata.get("title")
