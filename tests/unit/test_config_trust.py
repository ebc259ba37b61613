"""Which ``ragport.toml`` is trusted: found upward only through the user's own folders, up to
the home folder or a repository root; refused when others own or may write it; announced on
stderr (once) when it comes from a folder above the current one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ragport.bootstrap import find_config, load_config
from ragport.cli import EXIT_OK, EXIT_USAGE, main
from ragport.cli import config as cli_config
from ragport.domain.errors import ValidationError

as_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another uid needs root"
)
OTHER = 12345


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp/top/home/work/proj`` with HOME at ``tmp/top/home``; the announcements reset."""
    proj = tmp_path / "top" / "home" / "work" / "proj"
    proj.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "top" / "home"))
    monkeypatch.setattr(cli_config, "_ANNOUNCED", set())
    return tmp_path / "top"


def _toml(folder: Path, body: str = 'corpus = "planted"\n', mode: int = 0o644) -> Path:
    path = folder / "ragport.toml"
    path.write_text(body)
    path.chmod(mode)
    return path


def test_a_file_above_the_home_folder_is_not_read(tree: Path) -> None:
    """A ragport.toml above the home folder is not found from inside it.

    If this fails, check the home stop in find_config (ragport/bootstrap/config.py)."""
    _toml(tree)
    assert find_config(tree / "home" / "work" / "proj") is None
    own = _toml(tree / "home")
    assert find_config(tree / "home" / "work" / "proj") == own  # home itself is checked


def test_the_search_stops_at_a_repository_root(tree: Path) -> None:
    """A ragport.toml above a folder holding .git is not read; one in the root is.

    If this fails, check the .git stop in find_config."""
    repo = tree / "home" / "work"
    (repo / ".git").mkdir()
    _toml(tree / "home")
    assert find_config(repo / "proj") is None
    in_root = _toml(repo)
    assert find_config(repo / "proj") == in_root


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_a_file_others_may_write_is_refused(tree: Path, mode: int) -> None:
    """A group- or world-writable ragport.toml is a ValidationError(field="config").

    If this fails, check _check_trusted in ragport/bootstrap/config.py."""
    _toml(tree / "home" / "work", mode=mode)
    with pytest.raises(ValidationError) as caught:
        find_config(tree / "home" / "work" / "proj")
    assert caught.value.field == "config"


def test_the_cli_refuses_a_writable_file_with_exit_2(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ragport config` with a world-writable ragport.toml in the folder exits 2, naming it.

    If this fails, check _config in ragport/cli/config.py."""
    path = _toml(tree / "home" / "work" / "proj", mode=0o666)
    monkeypatch.chdir(tree / "home" / "work" / "proj")
    assert main(["config", "--json"]) == EXIT_USAGE
    assert str(path) in capsys.readouterr().err


@as_root
def test_a_file_owned_by_another_user_is_refused(tree: Path) -> None:
    """A ragport.toml owned by another uid is refused even in the user's own folder.

    If this fails, check _check_trusted in ragport/bootstrap/config.py."""
    path = _toml(tree / "home" / "work")
    os.chown(path, OTHER, OTHER)
    with pytest.raises(ValidationError) as caught:
        find_config(tree / "home" / "work" / "proj")
    assert caught.value.field == "config"


@as_root
def test_the_search_stops_at_a_folder_owned_by_another_user(tree: Path) -> None:
    """Nothing in or above a folder owned by another uid is read.

    If this fails, check the ownership stop in find_config."""
    _toml(tree / "home" / "work")  # the user's own file, but behind a foreign folder
    os.chown(tree / "home" / "work", OTHER, OTHER)
    assert find_config(tree / "home" / "work" / "proj") is None


def test_a_file_from_a_parent_folder_is_announced_once(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ragport.toml found above the current folder is named on stderr once per process;
    one in the current folder is silent.

    If this fails, check _announce in ragport/cli/config.py."""
    parent = _toml(tree / "home" / "work", 'store = "memory://"\ncorpus = "c"\n')
    monkeypatch.chdir(tree / "home" / "work" / "proj")
    assert main(["config", "--json"]) == EXIT_OK
    captured = capsys.readouterr()
    assert json.loads(captured.out)["file"] == str(parent)
    assert captured.err.count(str(parent)) == 1 and "store from" in captured.err
    assert main(["config", "--json"]) == EXIT_OK
    assert str(parent) not in capsys.readouterr().err  # once per process
    monkeypatch.chdir(tree / "home" / "work")
    monkeypatch.setattr(cli_config, "_ANNOUNCED", set())
    assert main(["config", "--json"]) == EXIT_OK
    assert str(parent) not in capsys.readouterr().err  # the current folder's own file


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_a_symlink_planted_by_another_user_is_refused(tmp_path, monkeypatch):
    """A ragport.toml that is a symlink owned by another user (to a file the user owns) is
    refused: the link's owner counts, not only its target's."""
    project = tmp_path / "project"
    project.mkdir()
    own = tmp_path / "mine.toml"
    own.write_text('store = "memory://"\n')
    link = project / "ragport.toml"
    link.symlink_to(own)
    os.lchown(link, 12345, 12345)
    with pytest.raises(ValidationError) as caught:
        find_config(project, home=tmp_path)
    assert caught.value.field == "config"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ('corpus = "kb"\nembedder = = "hash"\n', "at line 2, column 12"),
        ('corpus = "kb"\n[query\n', "at line 2"),
    ],
)
def test_a_toml_syntax_error_names_its_line_and_not_the_text(
    tmp_path: Path, body: str, where: str
) -> None:
    path = tmp_path / "ragport.toml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ValidationError) as caught:
        load_config(path)
    message = str(caught.value)
    assert where in message and caught.value.field == "config"
    assert "hash" not in message and "query" not in message  # the position, never the text
