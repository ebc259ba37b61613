"""GoogleDriveConnector against a hostile Drive: deeply nested JSON, malformed
``permissions``, and page tokens that repeat (a listing that would never end), each served
over loopback HTTP by the fake Drive (tests/support/fake_drive.py) with ``tamper``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_drive import FOLDER, FakeDrive
from fake_http import Reply
from flat_options import drive_parts
from hostile import run_limited

from ragport.adapters.connectors import GoogleDriveConnector, drive_permissions_access
from ragport.domain.errors import LoadError, SyncCursorError
from ragport.domain.sync import Access

NESTED = b"[" * 100_000 + b"]" * 100_000  # 200 kB, under the byte cap; past any parser stack
LIST_CAP = 40  # a tamper answers 500 after this many requests, so a loop ends (max_retries=0)


def _connector(url: str, **kwargs: Any) -> GoogleDriveConnector:
    options: dict[str, Any] = {
        "token_provider": lambda: "token-1",
        "resolve_access": drive_permissions_access,
        "base_url": url,
        "allow_loopback": True,
        "max_retries": 0,
        "sleep": lambda s: None,
        **kwargs,
    }
    return GoogleDriveConnector(**drive_parts(**options))


def _json(body: dict[str, Any]) -> Reply:
    return Reply(200, json.dumps(body).encode())


class Counting:
    """A tamper for one path: ``answer(query, reply)`` rewrites it, up to LIST_CAP times."""

    def __init__(self, path: str, answer):
        self.path = path
        self.answer = answer
        self.calls = 0

    def __call__(self, path: str, query: dict[str, str], reply: Reply) -> Reply:
        if path != self.path:
            return reply
        self.calls += 1
        if self.calls > LIST_CAP:
            return Reply(500, b"{}")
        return self.answer(query, reply)


# --- deeply nested JSON ---------------------------------------------------------------------

NESTED_CASES = {
    # case -> (path answered nested, status, expected reason)
    "start_token": ("/drive/v3/changes/startPageToken", 200, "malformed"),
    "files_list": ("/drive/v3/files", 200, "malformed"),
    "rate_limit_body": ("/drive/v3/changes/startPageToken", 403, "status"),
    "changes_list": ("/drive/v3/changes", 200, "malformed"),
}


def test_deeply_nested_answers_are_typed_errors(serve) -> None:
    """A nested-past-the-stack answer (200 JSON or a 403 body read for rate limits) is a
    LoadError, never a RecursionError, in bounded memory. If this fails, check that
    ``GoogleDriveConnector._json`` and ``_rate_limited`` catch RecursionError."""
    urls = {}
    for case, (path, status, _) in NESTED_CASES.items():
        drive = FakeDrive()
        drive.add("a.txt", data=b"alpha")

        def nested(p, q, reply, path=path, status=status):
            return Reply(status, NESTED) if p == path else reply

        drive.tamper = nested  # the bootstrap never asks for changes.list
        urls[case] = serve(drive).url
    code = """
import os, json
from ragport.adapters.connectors import (
    DriveOptions, GoogleDriveConnector, HttpOptions, drive_permissions_access)
urls = json.loads(os.environ["DRIVE_URLS"])
out = {}
for case, url in urls.items():
    connector = GoogleDriveConnector(token_provider=lambda: "token-1",
        resolve_access=drive_permissions_access, base_url=url,
        http=HttpOptions(allow_loopback=True),
        options=DriveOptions(max_retries=0, sleep=lambda s: None))
    try:
        page = connector.bootstrap()
        while not page.exhausted:
            page = connector.bootstrap(page.cursor)
        connector.changes(page.cursor)
        out[case] = {"error": None}
    except Exception as exc:
        out[case] = {"error": type(exc).__name__, "reason": getattr(exc, "reason", None),
                     "chained": exc.__cause__ is not None or exc.__context__ is not None}
emit(out)
"""
    out = run_limited(code, memory_mb=1024, timeout_s=60, env={"DRIVE_URLS": json.dumps(urls)})
    assert out.returncode == 0, out.stderr
    assert out.result == {
        case: {"error": "LoadError", "reason": reason, "chained": False}
        for case, (_, _, reason) in NESTED_CASES.items()
    }
    assert out.peak_mb < 300


# --- permissions ----------------------------------------------------------------------------

BAD_PERMISSIONS = {
    "a string": "alice@example.com",
    "an object": {"type": "user", "emailAddress": "alice@example.com"},
    "a number": 5,
    "a list of strings": ["alice@example.com"],
    "a null entry": [None],
    "a number address": [{"type": "user", "role": "reader", "emailAddress": 5}],
    "a list type": [{"type": ["user"], "role": "reader", "emailAddress": "alice@example.com"}],
    "a number role": [{"type": "user", "role": 1, "emailAddress": "alice@example.com"}],
}


@pytest.mark.parametrize("permissions", list(BAD_PERMISSIONS.values()), ids=list(BAD_PERMISSIONS))
def test_malformed_permissions_withhold_the_file(permissions) -> None:
    """Anything but a list of objects with string fields withholds the file (None), never a
    TypeError/AttributeError nor a partial grant. If this fails, check the shape checks in
    ``drive_permissions_access``."""
    assert drive_permissions_access({"id": "f1", "permissions": permissions}) is None


def test_well_formed_permissions_still_map() -> None:
    """Users become principals, groups group ids; no permissions listed is ``Access()``.
    If this fails, check ``drive_permissions_access``."""
    file = {
        "permissions": [
            {"type": "user", "role": "reader", "emailAddress": "Alice@Example.com"},
            {"type": "group", "role": "reader", "emailAddress": "team@example.com"},
            {"type": "anyone", "role": "reader"},
        ]
    }
    assert drive_permissions_access(file) == Access(
        principal_ids=("alice@example.com",), group_ids=("team@example.com",)
    )
    assert drive_permissions_access({"id": "f1"}) == Access()


def test_a_listed_file_with_malformed_permissions_is_withheld(serve) -> None:
    """Over the wire: the bad file's upsert is withheld (access None), its sibling is not.
    If this fails, check ``drive_permissions_access`` as the connector's resolve_access."""
    drive = FakeDrive()
    good = drive.add("good.txt", data=b"good")
    bad = drive.add("bad.txt", data=b"bad", permissions="alice@example.com")
    page = _connector(serve(drive).url).bootstrap()
    access = {u.source_id: u.access for u in page.upserts}
    assert access == {bad: None, good: Access(principal_ids=("alice@example.com",))}


def test_non_list_parents_in_a_change_mean_outside_the_tree(serve) -> None:
    """A changed file whose ``parents`` is not a list is judged outside the folder (a
    deletion), never a TypeError. If this fails, check ``GoogleDriveConnector.changes``."""
    drive = FakeDrive()
    file_id = drive.add("a.txt", data=b"alpha")
    connector = _connector(serve(drive).url)
    cursor = _exhausted(connector)
    drive.update(file_id, parents=5)
    changed = connector.changes(cursor)
    assert list(changed.deletions) == [file_id] and list(changed.upserts) == []


def test_a_non_list_changes_field_is_malformed(serve) -> None:
    """``changes`` that is not a list is LoadError(malformed). If this fails, check
    ``GoogleDriveConnector.changes``."""
    drive = FakeDrive()
    drive.add("a.txt", data=b"alpha")
    connector = _connector(serve(drive).url)
    cursor = _exhausted(connector)
    drive.tamper = Counting(
        "/drive/v3/changes", lambda q, r: _json({"changes": 5, "newStartPageToken": "9"})
    )
    with pytest.raises(LoadError) as caught:
        connector.changes(cursor)
    assert caught.value.reason == "malformed"


# --- repeating page tokens ------------------------------------------------------------------


def _exhausted(connector: GoogleDriveConnector) -> str:
    page = connector.bootstrap()
    while not page.exhausted:
        page = connector.bootstrap(page.cursor)
    return page.cursor


def test_a_files_list_token_repeating_within_one_call_is_a_cursor_error(serve) -> None:
    """files.list answering the same nextPageToken (and no files) is SyncCursorError after the
    repeat, not thousands of requests. If this fails, check the seen-token set in
    ``GoogleDriveConnector.bootstrap``."""
    drive = FakeDrive()
    drive.tamper = tamper = Counting(
        "/drive/v3/files", lambda q, r: _json({"files": [], "nextPageToken": "again"})
    )
    with pytest.raises(SyncCursorError) as caught:
        _connector(serve(drive).url).bootstrap()
    assert caught.value.reason == "invalid"
    assert tamper.calls == 2


def test_a_files_list_token_cycle_is_a_cursor_error(serve) -> None:
    """Tokens cycling A -> B -> A are caught as well. If this fails, check that bootstrap
    remembers every token of the folder's listing, not just the last."""
    drive = FakeDrive()
    following = {None: "A", "A": "B", "B": "A"}
    drive.tamper = tamper = Counting(
        "/drive/v3/files",
        lambda q, r: _json({"files": [], "nextPageToken": following[q.get("pageToken")]}),
    )
    with pytest.raises(SyncCursorError):
        _connector(serve(drive).url).bootstrap()
    assert tamper.calls == 3


def test_a_files_list_token_repeating_across_pages_is_a_cursor_error(serve) -> None:
    """A repeat spread over bootstrap pages (each with an upsert, so each call returns) is
    caught through the cursor. If this fails, check that the bootstrap cursor carries the
    seen tokens."""
    drive = FakeDrive()
    drive.add("a.txt", data=b"alpha")

    first: list[bytes] = []

    def same_token(query, reply):
        first.append(reply.body)  # the real first page (later ones are 400: unknown token)
        return _json({"files": json.loads(first[0])["files"], "nextPageToken": "again"})

    drive.tamper = tamper = Counting("/drive/v3/files", same_token)
    connector = _connector(serve(drive).url)
    page = connector.bootstrap()
    assert not page.exhausted and len(page.upserts) == 1
    with pytest.raises(SyncCursorError):
        connector.bootstrap(page.cursor)
    assert tamper.calls == 2


def test_distinct_folders_may_reuse_a_token_string(serve) -> None:
    """Seen tokens are per folder listing: two folders whose listings use the same token
    text both finish. If this fails, check that the seen set resets on the next folder."""
    drive = FakeDrive()
    sub = drive.folder("sub")
    drive.add("a.txt", data=b"alpha")
    drive.add("b.txt", parent=sub, data=b"beta")

    def shared_token(query, reply):
        body = json.loads(reply.body)
        if query.get("pageToken") is None:
            return _json({"files": body.get("files", []), "nextPageToken": "page-2"})
        return _json({"files": []})  # the last page of this folder

    drive.tamper = Counting("/drive/v3/files", shared_token)
    connector = _connector(serve(drive).url)
    page = connector.bootstrap()
    ids = [u.source_id for u in page.upserts]
    while not page.exhausted:
        page = connector.bootstrap(page.cursor)
        ids += [u.source_id for u in page.upserts]
    assert sorted(ids) == sorted(f for f, v in drive.files.items() if v["mimeType"] != FOLDER)


def test_a_changes_token_answered_back_is_a_cursor_error(serve) -> None:
    """changes.list answering its own page token as nextPageToken is SyncCursorError. If this
    fails, check the seen-token set in ``GoogleDriveConnector.changes``."""
    drive = FakeDrive()
    drive.add("a.txt", data=b"alpha")
    connector = _connector(serve(drive).url)
    cursor = _exhausted(connector)
    drive.tamper = Counting(
        "/drive/v3/changes",
        lambda q, r: _json({"changes": [], "nextPageToken": q["pageToken"]}),
    )
    with pytest.raises(SyncCursorError) as caught:
        connector.changes(cursor)
    assert caught.value.reason == "invalid"


def test_a_changes_token_cycle_across_pages_is_a_cursor_error(serve) -> None:
    """A cycle over two changes pages (N -> X -> N) is caught through the cursor. If this
    fails, check that the changes cursor carries the run's seen tokens."""
    drive = FakeDrive()
    drive.add("a.txt", data=b"alpha")
    connector = _connector(serve(drive).url)
    cursor = _exhausted(connector)
    start = json.loads(cursor)["token"]
    following = {start: "X", "X": start}
    drive.tamper = Counting(
        "/drive/v3/changes",
        lambda q, r: _json({"changes": [], "nextPageToken": following[q["pageToken"]]}),
    )
    page = connector.changes(cursor)
    assert not page.exhausted
    with pytest.raises(SyncCursorError):
        connector.changes(page.cursor)


def test_an_idle_changes_feed_is_not_a_repeat(serve) -> None:
    """An exhausted changes page whose newStartPageToken is the token just used (nothing
    changed) is no repeat: the next sync asks again. If this fails, check that the seen set
    resets when a changes run is exhausted."""
    drive = FakeDrive()
    drive.add("a.txt", data=b"alpha")
    connector = _connector(serve(drive).url)
    cursor = _exhausted(connector)
    for _ in range(3):
        page = connector.changes(cursor)
        assert page.exhausted and json.loads(page.cursor)["token"] == json.loads(cursor)["token"]
        cursor = page.cursor


def test_a_moved_in_folder_listing_with_a_repeating_token_is_a_cursor_error(serve) -> None:
    """A folder moved in is listed whole inside changes(); a repeating token there is
    SyncCursorError too. If this fails, check ``GoogleDriveConnector._folder_change``."""
    drive = FakeDrive()
    outside = drive.folder("outside", parent="elsewhere")
    drive.add("x.txt", parent=outside, data=b"x")
    team = drive.folder("team")
    connector = _connector(serve(drive).url, folder_id=team)
    cursor = _exhausted(connector)
    drive.move(outside, team)
    drive.tamper = tamper = Counting(
        "/drive/v3/files",
        lambda q, r: (
            _json({"files": [], "nextPageToken": "again"}) if outside in q.get("q", "") else r
        ),
    )
    with pytest.raises(SyncCursorError):
        connector.changes(cursor)
    assert tamper.calls == 2


# --- endless pages with new tokens ----------------------------------------------------------


def _endless_folders(query: dict[str, str], reply: Reply) -> Reply:
    """files.list answering one new subfolder and a new token each time, never a file."""
    n = int((query.get("pageToken") or "t0")[1:]) + 1
    folder = {"id": f"dir-{n}", "name": f"dir-{n}", "mimeType": FOLDER, "parents": ["x"]}
    return _json({"files": [folder], "nextPageToken": f"t{n}"})


def test_endless_folder_only_pages_stop_at_the_request_budget(serve) -> None:
    """A Drive answering folder-only pages with a new token each time (no repeat to catch)
    is LoadError(reason="request_budget") after max_list_requests requests in the run, not
    thousands of requests. If this fails, check ``GoogleDriveConnector._count_request`` and
    ``max_list_requests`` in ``GoogleDriveConnector``."""
    drive = FakeDrive()
    drive.tamper = tamper = Counting("/drive/v3/files", _endless_folders)
    connector = _connector(serve(drive).url, max_list_requests=25)
    with pytest.raises(LoadError) as caught:
        connector.bootstrap()
    assert caught.value.reason == "request_budget"
    assert tamper.calls == 23  # 25 minus changes.getStartPageToken and the root look-up


def test_the_request_budget_is_per_run(serve) -> None:
    """The count restarts when a run ends (an exhausted page, or an error): a connector kept
    for many runs, each within the budget, never hits it; after the budget error the next run
    has the whole budget again. If this fails, check ``GoogleDriveConnector._in_run``."""
    drive = FakeDrive()
    drive.add("a.txt", data=b"alpha")
    connector = _connector(serve(drive).url, max_list_requests=4)
    cursor = _exhausted(connector)  # start token, root, one files.list page: 3 requests
    for _ in range(6):  # one changes.list request a run
        page = connector.changes(cursor)
        assert page.exhausted
        cursor = page.cursor
    tokens = iter(range(1_000))
    drive.tamper = Counting(
        "/drive/v3/changes",
        lambda q, r: _json({"changes": [], "nextPageToken": f"n{next(tokens)}"}),
    )
    with pytest.raises(LoadError) as caught:
        page = connector.changes(cursor)
        while not page.exhausted:
            page = connector.changes(page.cursor)
    assert caught.value.reason == "request_budget"
    drive.tamper = None
    assert connector.changes(cursor).exhausted  # a new run: the budget is whole again


@pytest.mark.parametrize("value", [0, -1, 1_000_001, True, 2.5])
def test_max_list_requests_is_checked(value) -> None:
    """max_list_requests outside 1..1,000,000 (or not an integer) is a ValidationError naming
    it. If this fails, check the constructor of ``GoogleDriveConnector``."""
    from ragport.domain.errors import ValidationError

    with pytest.raises(ValidationError) as caught:
        _connector("http://127.0.0.1:9", max_list_requests=value)
    assert caught.value.field == "max_list_requests"
