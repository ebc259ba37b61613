"""FileDocumentLoader against a hostile filesystem: swaps between resolve and open, FIFOs,
NUL bytes and folders named as files. Each refusal is a typed ``LoadError`` with its reason.

Anything that could block (a FIFO) runs in a child under ``run_limited`` with a deadline, so
a hang fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os

import pytest
from hostile import run_limited

from ragport.adapters.loaders import FileDocumentLoader
from ragport.domain.errors import LoadError

SECRET = b"# Outside\n\nSECRET-OUTSIDE-BYTES\n"


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "leave.md").write_bytes(b"# Leave\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leave.md").write_bytes(SECRET)
    return root


def _swap_after_resolve(loader: FileDocumentLoader, swap) -> None:
    """Make ``loader.resolve`` run ``swap()`` right after it answers (the race window)."""
    resolve = loader.resolve

    def resolve_then_swap(uri):
        resolved = resolve(uri)
        swap()
        return resolved

    loader.resolve = resolve_then_swap  # type: ignore[method-assign]


def test_a_folder_swapped_for_a_symlink_after_resolve_is_outside_root(corpus):
    """A parent folder replaced by a symlink out of the root between resolve and open is
    refused (outside_root), and the outside bytes are never returned.

    If this fails, check that _files opens every component under its parent's fd with
    O_NOFOLLOW | O_DIRECTORY.
    """
    loader = FileDocumentLoader(root=corpus)

    def swap():
        (corpus / "guides").rename(corpus.parent / "guides-moved")
        os.symlink(corpus.parent / "outside", corpus / "guides")

    _swap_after_resolve(loader, swap)
    with pytest.raises(LoadError) as info:
        loader.load("guides/leave.md")
    assert info.value.reason == "outside_root"


def test_a_file_swapped_for_a_symlink_after_resolve_is_outside_root(corpus):
    """The file itself replaced by a symlink out of the root after resolve is refused.

    If this fails, check the O_NOFOLLOW of the final open in _files.
    """
    loader = FileDocumentLoader(root=corpus)

    def swap():
        (corpus / "guides" / "leave.md").unlink()
        os.symlink(corpus.parent / "outside" / "leave.md", corpus / "guides" / "leave.md")

    _swap_after_resolve(loader, swap)
    with pytest.raises(LoadError) as info:
        loader.load("guides/leave.md")
    assert info.value.reason == "outside_root"


def test_a_symlink_inside_the_root_still_loads(corpus):
    """A symlink whose target stays inside the root loads under the target's source id.

    If this fails, check that load walks the resolved path (not the spelling it was given).
    """
    (corpus / "alias").symlink_to(corpus / "guides")
    doc = FileDocumentLoader(root=corpus).load("alias/leave.md")
    assert (doc.source_id, doc.data) == ("guides/leave.md", b"# Leave\n")


def test_a_fifo_is_not_a_file_and_never_blocks(tmp_path):
    """A FIFO named directly, and a file swapped for a FIFO after resolve, are
    LoadError(not_a_file) at once (the child has 20 s; an open that blocks fails the test).

    If this fails, check that _files opens with O_NONBLOCK and checks S_ISREG on the fd.
    """
    out = run_limited(
        """
        import os, pathlib
        from ragport.adapters.loaders import FileDocumentLoader
        from ragport.domain.errors import LoadError
        root = pathlib.Path(os.environ["ROOT"])
        os.mkfifo(root / "pipe.md")
        (root / "doc.md").write_bytes(b"# Doc\\n")
        loader = FileDocumentLoader(root=root)
        reasons = []
        try:
            loader.load("pipe.md")
            reasons.append("loaded")
        except LoadError as exc:
            reasons.append(exc.reason)
        resolve = loader.resolve
        def swap(uri):
            resolved = resolve(uri)
            (root / "doc.md").unlink()
            os.mkfifo(root / "doc.md")
            return resolved
        loader.resolve = swap
        try:
            loader.load("doc.md")
            reasons.append("loaded")
        except LoadError as exc:
            reasons.append(exc.reason)
        emit(reasons)
        """,
        memory_mb=512,
        timeout_s=20,
        env={"ROOT": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    assert out.result == ["not_a_file", "not_a_file"]
    assert out.peak_mb < 200


def test_a_nul_in_the_path_is_a_load_error(corpus):
    """A NUL byte in the path is LoadError(not_found), from load and from source_id_for.

    If this fails, check the except clause of FileDocumentLoader.resolve (ValueError).
    """
    loader = FileDocumentLoader(root=corpus)
    for call in (loader.load, loader.source_id_for):
        with pytest.raises(LoadError) as info:
            call("guides/le\x00ave.md")
        assert info.value.reason == "not_found"
        assert info.value.__cause__ is None


def test_a_folder_is_not_a_file(corpus):
    """A folder under the root, and the root itself, are LoadError(not_a_file).

    If this fails, check the S_ISREG check in _files (before any read).
    """
    loader = FileDocumentLoader(root=corpus)
    for uri in ("guides", ".", str(corpus)):
        with pytest.raises(LoadError) as info:
            loader.load(uri)
        assert info.value.reason == "not_a_file"
