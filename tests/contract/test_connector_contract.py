"""Connectors against the shipped ConnectorContract, and a broken connector caught by it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sync_support import DictConnector

from ragport.adapters.connectors import FolderConnector
from ragport.contract_tests import ConnectorContract
from ragport.ports.sync import Page


class FolderHarness:
    def __init__(self, root: Path):
        self.root = root

    def add(self, name: str, data: bytes) -> str:
        path = self.root / "sub" / name if name.startswith("doc-1") else self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path.relative_to(self.root).as_posix()

    def edit(self, source_id: str, data: bytes) -> None:
        path = self.root / source_id
        path.write_bytes(data)
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000))

    def remove(self, source_id: str) -> None:
        (self.root / source_id).unlink()


class TestFolderConnector(ConnectorContract):
    @pytest.fixture
    def connector_harness(self, tmp_path) -> Iterator[FolderHarness]:
        root = tmp_path / "folder"
        root.mkdir()
        yield FolderHarness(root)

    @pytest.fixture
    def connector(self, connector_harness) -> Iterator[FolderConnector]:
        yield FolderConnector(connector_harness.root, page_size=7, suffixes=None)


class TestDictConnector(ConnectorContract):
    """The test fake passes the same contract (so the sync tests rest on a faithful fake)."""

    @pytest.fixture
    def connector_harness(self) -> Iterator[DictConnector]:
        yield DictConnector(page_size=4)

    @pytest.fixture
    def connector(self, connector_harness) -> Iterator[DictConnector]:
        yield connector_harness


class ForgetfulConnector(DictConnector):
    """Answers changes with everything as new, ignores foreign cursors and pages sloppily."""

    def bootstrap(self, cursor=None):
        page = super().bootstrap(cursor)
        # Repeats the first item of every page on the next one.
        return Page(page.upserts + page.upserts[:1], page.deletions, page.cursor, page.exhausted)

    def changes(self, cursor):
        try:
            return super().changes(cursor)
        except Exception:
            return Page([], [], cursor, True)


FAILURE = (AssertionError, pytest.fail.Exception)


@pytest.mark.parametrize(
    ("test", "args"),
    [
        ("test_bootstrap_lists_every_item_once_with_its_bytes", ()),
        ("test_a_foreign_cursor_is_a_sync_cursor_error", ("not-a-cursor",)),
    ],
)
def test_the_contract_catches_a_forgetful_connector(test, args):
    """Duplicated listings and swallowed cursor errors fail the contract.

    If this fails, a ConnectorContract test no longer checks what its docstring says.
    """
    broken = ForgetfulConnector(page_size=4)
    suite = ConnectorContract()
    method = getattr(suite, test)
    with pytest.raises(FAILURE):
        if test.startswith("test_bootstrap"):
            method(broken, broken)
        else:
            method(broken, *args)
