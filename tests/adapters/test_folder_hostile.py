"""FolderConnector against a hostile or changing folder: swaps between listing and load, FIFOs,
files that cannot be read at listing, many edits at once, folders that cannot be listed.

The connector-level tests drive ``bootstrap``/``changes`` directly; the end-to-end ones go
through ``ragport.sync_knowledge`` on the in-memory store and on PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from doubles import CountingEmbedder
from hostile import run_limited
from sync_support import Stores, sync_stores

import ragport
from ragport.adapters.connectors import FolderConnector
from ragport.adapters.parsers import parser_for
from ragport.domain.errors import LoadError
from ragport.ports.sync import Page

SECRET = b"# Outside\n\nSECRET-OUTSIDE-BYTES\n"
HOUR_NS = 3_600 * 10**9


def _follow(connector: FolderConnector, cursor: str) -> tuple[list[Page], str]:
    """Every page of one incremental run (``changes`` until exhausted) and the last cursor."""
    pages = []
    while True:
        page = connector.changes(cursor)
        pages.append(page)
        assert page.cursor is not None
        cursor = page.cursor
        if page.exhausted:
            return pages, cursor


def _bootstrap(connector: FolderConnector) -> tuple[list[Page], str]:
    pages = [connector.bootstrap()]
    while not pages[-1].exhausted:
        pages.append(connector.bootstrap(pages[-1].cursor))
    cursor = pages[-1].cursor
    assert cursor is not None
    return pages, cursor


def _ids(pages: list[Page]) -> list[str]:
    return [u.source_id for p in pages for u in p.upserts]


def _count_reads(connector: FolderConnector) -> list[str]:
    """Record every file the connector reads (to hash or to load)."""
    reads: list[str] = []
    read = connector._read

    def counted(source_id):
        reads.append(source_id)
        return read(source_id)

    connector._read = counted  # type: ignore[method-assign]
    return reads


@pytest.fixture
def folder(tmp_path) -> Path:
    root = tmp_path / "folder"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "doc.md").write_bytes(b"# Doc\n\ninside\n")
    (root / "top.md").write_bytes(b"# Top\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "doc.md").write_bytes(SECRET)
    return root


# --- reading outside the root (item 3) and FIFOs (item 10) --------------------------------------


def test_a_folder_swapped_for_a_symlink_after_listing_is_outside_root(folder):
    """A listed file's folder replaced by a symlink out of the root before load() is refused
    with LoadError(outside_root); the outside bytes are never read.

    If this fails, check FolderConnector._read (every component opened under its parent's fd
    with O_NOFOLLOW | O_DIRECTORY).
    """
    connector = FolderConnector(folder)
    page = connector.bootstrap()
    upsert = {u.source_id: u for u in page.upserts}["sub/doc.md"]
    (folder / "sub").rename(folder.parent / "sub-moved")
    os.symlink(folder.parent / "outside", folder / "sub")
    with pytest.raises(LoadError) as info:
        upsert.load()
    assert info.value.reason == "outside_root"


def test_a_folder_swapped_for_a_symlink_is_not_walked(folder):
    """After a folder becomes a symlink out of the root, its old files are deletions and no
    file behind the symlink is listed.

    If this fails, check FolderConnector._walk (folders opened with O_NOFOLLOW).
    """
    connector = FolderConnector(folder)
    _, cursor = _bootstrap(connector)
    (folder / "sub").rename(folder.parent / "sub-moved")
    os.symlink(folder.parent / "outside", folder / "sub")
    pages, _ = _follow(connector, cursor)
    assert _ids(pages) == []
    assert [d for p in pages for d in p.deletions] == ["sub/doc.md"]


def test_a_file_swapped_for_a_fifo_after_listing_is_not_a_file(tmp_path):
    """A listed file replaced by a FIFO before load() is LoadError(not_a_file) at once (the
    child has 20 s: an open that blocks fails the test).

    If this fails, check that _files opens with O_NONBLOCK and checks S_ISREG on the fd.
    """
    out = run_limited(
        """
        import os, pathlib
        from ragport.adapters.connectors import FolderConnector
        from ragport.domain.errors import LoadError
        root = pathlib.Path(os.environ["ROOT"])
        (root / "doc.md").write_bytes(b"# Doc\\n")
        page = FolderConnector(root).bootstrap()
        (root / "doc.md").unlink()
        os.mkfifo(root / "doc.md")
        try:
            page.upserts[0].load()
            emit("loaded")
        except LoadError as exc:
            emit(exc.reason)
        """,
        memory_mb=512,
        timeout_s=20,
        env={"ROOT": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    assert out.result == "not_a_file"
    assert out.peak_mb < 200


# --- hashing once per run (item 11) --------------------------------------------------------------


def _edit_many(root: Path, n: int, *, mtime_ns: int | None) -> list[str]:
    names = [f"d/{i:04d}.md" for i in range(n)]
    for name in names:
        path = root / name
        path.write_bytes(b"# edited " + name.encode() + b"\n")
        if mtime_ns is not None:
            os.utime(path, ns=(mtime_ns, mtime_ns))
    return names


def test_editing_many_files_reads_each_once_per_run(tmp_path):
    """300 edited files (mtimes an hour old) under page_size=50: one run of changes() reads
    each exactly once and lists each exactly once.

    If this fails, check that FolderConnector.changes tests the page size before hashing.
    """
    root = tmp_path / "many"
    (root / "d").mkdir(parents=True)
    old = os.stat(root).st_mtime_ns - 2 * HOUR_NS
    for i in range(300):
        (root / "d" / f"{i:04d}.md").write_bytes(b"# original\n")
        os.utime(root / "d" / f"{i:04d}.md", ns=(old, old))
    connector = FolderConnector(root, page_size=50)
    _, cursor = _bootstrap(connector)
    names = _edit_many(root, 300, mtime_ns=old + HOUR_NS)
    reads = _count_reads(connector)
    pages, cursor = _follow(connector, cursor)
    assert sorted(_ids(pages)) == names
    assert sorted(reads) == names  # each read once, not ~N^2 / (2 * page_size)
    reads.clear()
    again, _ = _follow(connector, cursor)
    assert (_ids(again), reads) == ([], [])


def test_fresh_edits_are_read_at_most_twice_per_run(tmp_path):
    """300 files edited just now (inside the racy window): one run reads each at most twice
    and lists each once; the run after lists nothing new.

    If this fails, check the racy rule in FolderConnector.changes (a record hashed earlier in
    the same run is not re-read while its mtime is still racy).
    """
    root = tmp_path / "fresh"
    (root / "d").mkdir(parents=True)
    for i in range(300):
        (root / "d" / f"{i:04d}.md").write_bytes(b"# original\n")
    connector = FolderConnector(root, page_size=50)
    _, cursor = _bootstrap(connector)
    names = _edit_many(root, 300, mtime_ns=None)
    reads = _count_reads(connector)
    pages, cursor = _follow(connector, cursor)
    assert sorted(_ids(pages)) == names
    assert len(reads) <= 2 * len(names)
    assert all(reads.count(name) <= 2 for name in names)


# --- files that cannot be read at listing (item 11) ---------------------------------------------


def test_a_file_over_max_bytes_at_listing_is_listed_with_a_failing_load(folder):
    """A file over max_bytes is listed (bootstrap and changes) with a load() that raises
    LoadError(too_large); it is listed once per run and again on the next run; once it fits
    it loads.

    If this fails, check how FolderConnector.bootstrap/changes handle a hash that fails.
    """
    connector = FolderConnector(folder, max_bytes=100, page_size=1)
    (folder / "big.md").write_bytes(b"x" * 200)
    pages, cursor = _bootstrap(connector)
    assert sorted(_ids(pages)) == ["big.md", "sub/doc.md", "top.md"]
    big = {u.source_id: u for p in pages for u in p.upserts}["big.md"]
    with pytest.raises(LoadError) as info:
        big.load()
    assert info.value.reason == "too_large"
    # The next run (two edits and the file still too large): listed once, still failing.
    for name in ("sub/doc.md", "top.md"):
        (folder / name).write_bytes(b"# edited " + name.encode() + b"\n")
    pages, cursor = _follow(connector, cursor)
    assert sorted(_ids(pages)) == ["big.md", "sub/doc.md", "top.md"]
    big = {u.source_id: u for p in pages for u in p.upserts}["big.md"]
    with pytest.raises(LoadError) as info:
        big.load()
    assert info.value.reason == "too_large"
    (folder / "big.md").write_bytes(b"# fits\n")
    pages, _ = _follow(connector, cursor)
    assert _ids(pages) == ["big.md"]
    assert pages[0].upserts[0].load().data == b"# fits\n"


def test_an_edit_that_grows_a_file_past_max_bytes_is_listed(folder):
    """An indexed file edited past max_bytes is an upsert whose load() fails (too_large), not
    a silent skip; it is not recorded as done (the next run lists it again).

    If this fails, check FolderConnector.changes (a failed hash must be listed and recorded
    without a hash).
    """
    connector = FolderConnector(folder, max_bytes=100)
    _, cursor = _bootstrap(connector)
    (folder / "top.md").write_bytes(b"y" * 500)
    pages, cursor = _follow(connector, cursor)
    assert _ids(pages) == ["top.md"]
    with pytest.raises(LoadError) as info:
        pages[0].upserts[0].load()
    assert info.value.reason == "too_large"
    pages, _ = _follow(connector, cursor)
    assert _ids(pages) == ["top.md"]


# --- folders that cannot be listed -----------------------------------------------------------------


def test_a_vanished_root_is_a_listing_error_not_deletions(folder):
    """A root removed after the connector was made is LoadError from changes(), never a page
    deleting every file.

    If this fails, check FolderConnector._walk (the root's open is not skipped on error).
    """
    connector = FolderConnector(folder)
    _, cursor = _bootstrap(connector)
    shutil.rmtree(folder)
    with pytest.raises(LoadError) as info:
        connector.changes(cursor)
    assert info.value.reason == "not_found"


def test_an_unreadable_subfolder_is_a_listing_error_not_deletions(folder, monkeypatch):
    """A subfolder that cannot be opened (EACCES) is LoadError(unreadable) from changes() and
    bootstrap(), never deletions of its files (tests run as root, so EACCES is simulated).

    If this fails, check the error handling of FolderConnector._walk.
    """
    connector = FolderConnector(folder)
    _, cursor = _bootstrap(connector)
    real_open, real_scandir = os.open, os.scandir

    def refuse(name):
        if os.fspath(name).rsplit("/", 1)[-1] == "sub":
            raise PermissionError(13, "Permission denied")

    def fake_open(path, flags, mode=0o777, *, dir_fd=None):
        refuse(path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def fake_scandir(path="."):
        if not isinstance(path, int):
            refuse(path)
        return real_scandir(path)

    with monkeypatch.context() as patch:
        patch.setattr(os, "open", fake_open)
        patch.setattr(os, "scandir", fake_scandir)
        for call in (lambda: connector.changes(cursor), connector.bootstrap):
            with pytest.raises(LoadError) as info:
                call()
            assert info.value.reason == "unreadable"


# --- end to end through sync_knowledge ---------------------------------------------------------------

SCOPE = ragport.Scope("tenant-1", "kb", "folder-hostile")


@pytest.fixture(params=["memory", "postgres"])
def stores(request) -> Iterator[Stores]:
    yield sync_stores(request)


def _sync(stores: Stores, connector) -> ragport.SyncResult:
    return ragport.bootstrap.sync_knowledge(
        connector=connector,
        checkpoints=stores.checkpoints,
        store=stores.store,
        embedder=CountingEmbedder(),
        scope=SCOPE,
        status_store=stores.status,
        parser=parser_for,
    )


def _texts(stores: Stores, source_id: str) -> list[str]:
    return [r.text for r in stores.store.get_by_source(SCOPE, source_id)]


def test_sync_reports_a_file_grown_past_max_bytes_as_failed_and_keeps_its_version(stores, folder):
    """An indexed file edited past max_bytes: failed == 1, status failed/stale, its previous
    chunks still served; still failed/stale on the next run; indexed again once it fits.

    If this fails, check that FolderConnector.changes lists the file with a failing load().
    """
    connector = FolderConnector(folder, max_bytes=100)
    assert _sync(stores, connector).upserted == 2
    before = _texts(stores, "top.md")
    (folder / "top.md").write_bytes(b"# Top\n\n" + b"z" * 200)
    result = _sync(stores, connector)
    assert (result.failed, result.upserted) == (1, 0)
    status = stores.status.get(SCOPE, "top.md")
    assert (status.state, status.freshness) == ("failed", "stale")
    assert _texts(stores, "top.md") == before
    _sync(stores, connector)
    status = stores.status.get(SCOPE, "top.md")
    assert (status.state, status.freshness) == ("failed", "stale")
    (folder / "top.md").write_bytes(b"# Top\n\nfits again\n")
    _sync(stores, connector)
    status = stores.status.get(SCOPE, "top.md")
    assert (status.state, status.freshness) == ("indexed", "current")
    assert "fits again" in " ".join(_texts(stores, "top.md"))


class VanishAfterListing:
    """Wraps a connector: after ``changes`` lists a page, the named file is deleted."""

    def __init__(self, inner: FolderConnector, path: Path):
        self.inner, self.path = inner, path

    @property
    def id(self) -> str:
        return self.inner.id

    def bootstrap(self, cursor=None):
        return self.inner.bootstrap(cursor)

    def changes(self, cursor):
        page = self.inner.changes(cursor)
        self.path.unlink(missing_ok=True)
        return page


def test_sync_reports_a_file_vanished_between_listing_and_load_as_failed(stores, folder):
    """A file edited, listed, then deleted before load(): failed == 1, status failed/stale,
    its previous chunks kept (the deletion is seen when a listing no longer finds it).

    If this fails, check FolderConnector's load() (a missing file is LoadError).
    """
    connector = FolderConnector(folder)
    assert _sync(stores, connector).upserted == 2
    before = _texts(stores, "top.md")
    (folder / "top.md").write_bytes(b"# Top\n\nedited, then gone\n")
    result = _sync(stores, VanishAfterListing(connector, folder / "top.md"))
    assert (result.failed, result.upserted) == (1, 0)
    status = stores.status.get(SCOPE, "top.md")
    assert (status.state, status.freshness) == ("failed", "stale")
    assert _texts(stores, "top.md") == before


# In memory only: the folder connector's behaviour at size does not depend on the store, and
# PostgreSQL takes 45 s here for the 2,000-file bootstrap (its sync is tested above and in
# tests/e2e/test_sync_knowledge.py).
@pytest.mark.slow
@pytest.mark.parametrize("stores", ["memory"], indirect=True)
def test_a_folder_of_two_thousand_files_syncs_and_follows_edits_renames_and_deletes(
    stores, tmp_path
):
    """2,000 files in 40 folders: the bootstrap indexes every one; after 300 edits, 100
    deletions and 50 renames, one run leaves the scope equal to the folder, reading each
    changed file once (not the unchanged 1,550).

    If this fails, check FolderConnector paging at size (the cursor, page_size) and the sync's
    retire/add of renamed ids."""
    root = tmp_path / "big"
    old = os.stat(tmp_path).st_mtime_ns - 2 * HOUR_NS
    for i in range(2000):
        path = root / f"d{i % 40:02d}" / f"{i:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# File {i}\n\nThe topic of file {i} is item{i}.\n")
        os.utime(path, ns=(old, old))
    connector = FolderConnector(root)
    first = _sync(stores, connector)
    assert (first.exhausted, first.upserted, first.failed) == (True, 2000, 0)

    files = sorted(p for p in root.rglob("*.md"))
    for path in files[:300]:
        path.write_text(path.read_text() + "\nEdited.\n")
        os.utime(path, ns=(old + HOUR_NS, old + HOUR_NS))
    for path in files[300:400]:
        path.unlink()
    for path in files[400:450]:
        path.rename(path.with_name("moved-" + path.name))
    changed = {p.relative_to(root).as_posix() for p in files[:300]} | {
        p.with_name("moved-" + p.name).relative_to(root).as_posix() for p in files[400:450]
    }
    reads = _count_reads(connector)
    second = _sync(stores, connector)
    assert second.failed == 0 and second.exhausted
    assert second.upserted == 350 and second.deleted == 150
    assert set(reads) == changed, "an unchanged file was read again"
    assert len(reads) <= 2 * len(changed)  # hashed once when listed, read once to load
    expected = {p.relative_to(root).as_posix() for p in root.rglob("*.md")}
    assert len(expected) == 1900
    stored: list[str] = []
    while page := stores.store.list_source_ids(SCOPE, after=stored[-1] if stored else None):
        stored.extend(page)
    assert set(stored) == expected
    assert _texts(stores, files[0].relative_to(root).as_posix())[0].endswith("Edited.")


# --- names no source id can hold (issue 43 item 15) -------------------------------------------


def test_a_file_no_source_id_can_name_is_unlisted_by_name(folder):
    """A document file whose name is not UTF-8, or holds a control character, is not listed
    but named in ``unlisted`` (with the reason ingest gives); the listing goes on, and a
    later listing without it has an empty ``unlisted``.

    If this fails, check FolderConnector._take and .unlisted."""
    raw_root = os.fsencode(folder)
    for name in (b"bad\xff.md", b"sub/ctl\x1b.md"):
        with open(os.path.join(raw_root, name), "wb") as file:
            file.write(b"# Unnamed\n")
    connector = FolderConnector(folder)
    assert connector.unlisted == ()
    pages, cursor = _bootstrap(connector)
    assert sorted(_ids(pages)) == ["sub/doc.md", "top.md"]
    unlisted = {u.name: u.reason for u in connector.unlisted}
    assert unlisted == {
        os.fsdecode(b"bad\xff.md"): "ValidationError",
        "sub/ctl\x1b.md": "ValidationError",
    }
    os.remove(os.path.join(raw_root, b"bad\xff.md"))
    os.remove(os.path.join(raw_root, b"sub/ctl\x1b.md"))
    _follow(connector, cursor)
    assert connector.unlisted == ()
