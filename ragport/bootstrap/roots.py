"""The corpus root of ``ragport ingest``: recorded per corpus, chosen on the first ingest,
widened (ids kept) when later paths fall outside it.

- ``CorpusRoots``: the root recorded for each corpus in the user's data directory, by older
  ragports and for stores that keep no settings (``ragport.bootstrap.corpus_settings`` keeps
  the root with the corpus in its store).
- ``first_root``: the root of a corpus's first ingest: a folder given is its own root; a file
  is rooted at the current folder when it lies under it, else at its own folder; several
  paths share their deepest common folder.
- ``widened_root``: the common folder of the recorded root and paths outside it.
- ``check_root``: refuses a root chosen automatically that is ``/`` or holds the home folder.
- ``widen_corpus_root``: re-files the sources already named under the old root, so that each
  file keeps one id (its path relative to the new root) and its rows, grants, lineage,
  statuses and forgotten tombstones: ``ragport.application.corpus_roots.widen_corpus_root``
  asking this file system which files are still under the old root.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from ragport.application.corpus_roots import RootWidening
from ragport.application.corpus_roots import widen_corpus_root as widen_root
from ragport.application.deprecation import folds_keywords
from ragport.application.runtime import Runtime
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore


class CorpusRoots:
    """The root recorded for each corpus on its first ingest, in the user's data directory.

    Keyed by store, schema and scope, so ``ragport ingest corpus`` and, later,
    ``cd corpus && ragport ingest nodejs`` name the same file with the same id. Where the roots
    were kept before they moved into the store (``CorpusSettingsStore`` reads them there), and
    still are for a store that keeps no settings.
    """

    def __init__(self, path: Path | None = None) -> None:
        if path is None:
            import platformdirs

            path = Path(platformdirs.user_data_dir("ragport")) / "corpus-roots.json"
        self.path = path

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def get(self, key: str) -> Path | None:
        value = self._load().get(key)
        return Path(value) if value else None

    def entries(self) -> dict[str, Path]:
        """Every recorded key and its root."""
        return {k: Path(v) for k, v in self._load().items() if v}

    def set(self, key: str, root: Path) -> None:
        data = self._load()
        data[key] = str(root)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(self.path)


def _folder(path: Path) -> Path:
    return path if path.is_dir() else path.parent


def too_wide(root: Path, *, home: Path | None = None) -> bool:
    """Whether ``root`` is ``/`` or a folder above the home folder (the home folder itself,
    and folders beside it such as ``/srv/docs``, are fine)."""
    if root == Path(root.anchor):
        return True
    try:
        mine = (home if home is not None else Path.home()).resolve()
    except (OSError, RuntimeError):  # no home folder
        return False
    return mine != root and mine.is_relative_to(root)


def first_root(
    paths: Sequence[str | os.PathLike[str]], *, cwd: Path, home: Path | None = None
) -> Path:
    """The root of a corpus's first ingest (``paths`` exist): a folder given is its own root; a
    file under ``cwd`` is rooted at ``cwd`` (unless ``cwd`` is too wide to be a root), another
    file at its own folder; several paths share their deepest common folder.

    So ``ragport ingest docs/a.md`` names the file ``docs/a.md``, as ``ragport ingest .``
    later does, and ``ragport ingest docs`` names it ``a.md``.
    """
    here = cwd.resolve()
    folders = []
    for raw in paths:
        path = Path(raw).resolve()
        if not path.is_dir() and path.is_relative_to(here) and not too_wide(here, home=home):
            folders.append(here)
        else:
            folders.append(_folder(path))
    return Path(os.path.commonpath(folders)) if folders else here


def widened_root(recorded: Path, paths: Sequence[str | os.PathLike[str]]) -> Path | None:
    """The deepest folder holding ``recorded`` and every path outside it, or ``None`` when
    every path is under ``recorded`` (a file is held by its folder)."""
    outside = [p for p in (Path(raw).resolve() for raw in paths) if not p.is_relative_to(recorded)]
    if not outside:
        return None
    return Path(os.path.commonpath([recorded, *(_folder(p) for p in outside)]))


def check_root(root: Path, *, old: Path | None = None, home: Path | None = None) -> Path:
    """``root`` unless it is too wide to choose without being asked (``too_wide``): then a
    ``ValidationError(field="root")`` that names ``--root``."""
    if too_wide(root, home=home):
        what = f"widen from {old} to {root}" if old is not None else f"be {root}"
        raise ValidationError(
            f"the corpus root would {what}, the top folder or one above your home folder: "
            f"pass --root {root} to use it anyway, or --root with a narrower folder",
            field="root",
        )
    return root


@folds_keywords(runtime=("abort",))
def widen_corpus_root(
    *,
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    scope: Scope,
    old: Path,
    new: Path,
    runtime: Runtime | None = None,
) -> RootWidening:
    """``ragport.application.corpus_roots.widen_corpus_root`` over this file system: a source
    moves when ``old / source_id`` still exists (a dangling symlink included)."""
    return widen_root(
        store=store, status_store=status_store, scope=scope, old=old, new=new,
        exists=os.path.lexists, runtime=runtime,
    )  # fmt: skip
