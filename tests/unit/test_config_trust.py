"""Which ``ragport.toml`` is trusted: found upward only through the user's own folders, up to
the home folder or a repository root; refused when others own or may write it; announced on
stderr, with what it changes, on every command unless it is the user's own (from their config
directory); ignored with ``--no-config`` or ``RAGPORT_NO_CONFIG``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ragport.bootstrap import find_config, load_config
from ragport.cli import EXIT_OK, EXIT_USAGE, main
from ragport.domain.errors import ValidationError

as_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another uid needs root"
)
OTHER = 12345


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp/top/home/work/proj`` with HOME at ``tmp/top/home`` and the user's config directory
    at ``tmp/top/home/.config``; no RAGPORT_STORE, no RAGPORT_NO_CONFIG."""
    proj = tmp_path / "top" / "home" / "work" / "proj"
    proj.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "top" / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "top" / "home" / ".config"))
    for name in ("RAGPORT_STORE", "RAGPORT_NO_CONFIG"):
        monkeypatch.delenv(name, raising=False)
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


PLANTED = (
    'store = "postgresql://me:s3cret@db.example/rag?password=s3cret"\n'
    'corpus = "planted"\n[limits]\nparse_bytes = 268435456\nparse_ms = 600000\n'
)


def test_a_found_file_is_announced_on_every_command_with_what_it_changes(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ragport.toml in the current folder (a cloned repository's, say) or above it is named
    on stderr on every command, with the store it sends to (password hidden), the limits it
    raises and the other keys it changes, and how to ignore it.

    If this fails, check _config and _announce in ragport/cli/config.py."""
    repo = tree / "home" / "work"
    planted = _toml(repo, PLANTED)
    for folder in (repo, repo / "proj"):  # the file's own folder, and one below it
        monkeypatch.chdir(folder)
        for _ in range(2):  # every command, not once per process
            assert main(["config", "--json"]) == EXIT_OK
            captured = capsys.readouterr()
            assert json.loads(captured.out)["file"] == str(planted)
            err = captured.err
            assert err.count(str(planted)) == 1
            assert "store postgresql://me:***@db.example/rag?password=***" in err
            assert "limits.parse_bytes=268435456" in err and "limits.parse_ms=600000" in err
            assert "corpus=planted" in err
            assert "--no-config" in err and "RAGPORT_NO_CONFIG=1" in err
            assert "s3cret" not in err


def test_the_announcement_says_when_the_store_is_not_used(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --store given, the announcement says the file's store is not used.

    If this fails, check _announce in ragport/cli/config.py."""
    _toml(tree / "home" / "work", PLANTED)
    monkeypatch.chdir(tree / "home" / "work")
    assert main(["config", "--json", "--store", "memory://"]) == EXIT_OK
    assert "(not used: --store or RAGPORT_STORE wins)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--no-config", "config", "--json"], None),
        (["config", "--json", "--no-config"], None),
        (["config", "--json"], "1"),
        (["config", "--json"], "yes"),
    ],
)
def test_no_config_ignores_every_file(
    tree: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: str | None,
) -> None:
    """--no-config (before or after the command) or RAGPORT_NO_CONFIG reads no ragport.toml:
    neither the one found upward nor the user's own; nothing is announced.

    If this fails, check _no_config in ragport/cli/config.py and --no-config in ragport/cli/options.py."""
    _toml(tree / "home" / "work", PLANTED)
    own = tree / "home" / ".config" / "ragport"
    own.mkdir(parents=True)
    _toml(own, 'corpus = "mine"\n')
    if env is not None:
        monkeypatch.setenv("RAGPORT_NO_CONFIG", env)
    monkeypatch.chdir(tree / "home" / "work")
    assert main(argv) == EXIT_OK
    captured = capsys.readouterr()
    shown = json.loads(captured.out)
    assert shown["file"] is None and shown["corpus"] == "default" and shown["store"] == "embedded"
    assert "ragport.toml" not in captured.err


@pytest.mark.parametrize("env", ["", "0", "false", "no"])
def test_ragport_no_config_off_values_keep_the_file(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: str
) -> None:
    """RAGPORT_NO_CONFIG empty, 0, false or no reads the file as usual.

    If this fails, check config_disabled in ragport/bootstrap/config.py."""
    planted = _toml(tree / "home" / "work", 'corpus = "c"\n')
    monkeypatch.setenv("RAGPORT_NO_CONFIG", env)
    monkeypatch.chdir(tree / "home" / "work")
    assert main(["config", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["file"] == str(planted)


def test_the_users_own_file_is_used_silently(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """$XDG_CONFIG_HOME/ragport/ragport.toml applies when no file is found upward, and is not
    announced; a file found upward wins over it (and is announced).

    If this fails, check locate_config and user_config_file in ragport/bootstrap/config.py."""
    own_dir = tree / "home" / ".config" / "ragport"
    own_dir.mkdir(parents=True)
    own = _toml(own_dir, 'corpus = "mine"\n')
    monkeypatch.chdir(tree / "home" / "work" / "proj")
    assert main(["config", "--json"]) == EXIT_OK
    captured = capsys.readouterr()
    assert json.loads(captured.out)["file"] == str(own)
    assert json.loads(captured.out)["corpus"] == "mine"
    assert "ragport.toml" not in captured.err
    found = _toml(tree / "home" / "work", 'corpus = "repo"\n')
    assert main(["config", "--json"]) == EXIT_OK
    captured = capsys.readouterr()
    assert json.loads(captured.out)["file"] == str(found)
    assert str(found) in captured.err and "corpus=repo" in captured.err


def test_the_users_own_file_is_refused_when_others_may_write_it(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user's own file is held to the same trust rule: group- or world-writable, exit 2.

    If this fails, check locate_config in ragport/bootstrap/config.py."""
    own_dir = tree / "home" / ".config" / "ragport"
    own_dir.mkdir(parents=True)
    own = _toml(own_dir, 'corpus = "mine"\n', mode=0o666)
    monkeypatch.chdir(tree / "home" / "work" / "proj")
    assert main(["config", "--json"]) == EXIT_USAGE
    assert str(own) in capsys.readouterr().err


def test_ingest_names_the_planted_store_and_limits_it_uses(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ragport ingest ~/private` from a folder holding a planted ragport.toml says which store
    the file sends it to and which limits it raises; with --no-config the file's limits do not
    apply (a 2 MB file is over the default 1 MiB cap again).

    If this fails, check _config in ragport/cli/config.py."""
    private = tree / "home" / "private"
    private.mkdir()
    (private / "big.txt").write_text("word " * 400_000)  # 2 MB: past the default byte cap
    repo = tree / "home" / "work"
    planted = _toml(repo, 'store = "memory://"\n[limits]\nparse_bytes = 268435456\n')
    monkeypatch.chdir(repo)
    base = ["ingest", str(private), "--embedder", "hash", "--json"]
    assert main(base) == EXIT_OK
    err = capsys.readouterr().err
    assert str(planted) in err and "store memory://" in err
    assert "limits.parse_bytes=268435456" in err
    assert main([*base, "--no-config", "--store", "memory://"]) == 1  # too_large
    captured = capsys.readouterr()
    assert str(planted) not in captured.err and "too_large" in captured.out


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
