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
  statuses and forgotten tombstones: ``apply_source_renames``, nothing re-embedded, no new
  generation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from ragport.application import apply_source_renames
from ragport.application.runtime import Runtime
from ragport.domain.errors import ValidationError
from ragport.domain.model import Grant, Rename, Scope, Tombstone
from ragport.domain.status import IngestionStatus
from ragport.ports.runtime import Abort
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


@attrs.frozen
class RootWidening:
    """What ``widen_corpus_root`` did: ``renamed`` sources moved to ids under the new root;
    ``kept`` sources whose file is gone from the old root (or that are forgotten) keep their
    ids; ``failures`` ``(old id, error)`` that could not move."""

    old: Path
    new: Path
    renamed: int = 0
    kept: int = 0
    failures: tuple[tuple[str, str], ...] = ()


def _listed(store: ChunkStore, scope: Scope) -> list[str]:
    found: list[str] = []
    after: str | None = None
    while True:
        page = list(store.list_source_ids(scope, after=after, limit=1_000))
        found.extend(page)
        if len(page) < 1_000:
            return found
        after = page[-1]


def _batches(renames: list[Rename]) -> list[list[Rename]]:
    """Longest ids first, split where a rename would chain onto another of its batch: a
    new id ``p/x`` may be the old id of a deeper file, which must move out of the way first."""
    batches: list[list[Rename]] = []
    sources: set[str] = set()
    targets: set[str] = set()
    for rename in sorted(renames, key=lambda r: (-len(r.from_id), r.from_id)):
        if not batches or rename.to_id in sources or rename.from_id in targets:
            batches.append([])
            sources, targets = set(), set()
        batches[-1].append(rename)
        sources.add(rename.from_id)
        targets.add(rename.to_id)
    return batches


def widen_corpus_root(
    *,
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    scope: Scope,
    old: Path,
    new: Path,
    abort: Abort | None = None,
) -> RootWidening:
    """Re-file the sources named relative to ``old`` under ``new`` (an ancestor of it).

    A source is renamed when its file is still under ``old`` (``old / source_id`` exists, a
    dangling symlink included), so a run interrupted half way and run again renames only the
    rest. Each rename is ``apply_source_renames`` (rows re-keyed with their vectors, offsets,
    content hashes and generations: the next ingest finds them unchanged; lineage rewritten;
    no new generation). Then, for the same ids, grants are copied to the new id and the old id
    gets an empty grant (it may name another file under the new root: it must not inherit
    the grant); ingestion statuses move; a ``forgotten`` tombstone is copied to the new id
    (the file stays withheld under its new name). Forgotten sources themselves do not move.
    Failures are collected, not raised: the caller must not ingest (or record ``new``) when
    any occurred, or the files that did not move would get a second id.
    """
    if new == old or not old.is_relative_to(new):
        raise ValidationError(f"{new} does not hold {old}", field="root")
    prefix = old.relative_to(new).as_posix()

    def moved(source_id: str) -> str:
        return f"{prefix}/{source_id}"

    def under_old(source_id: str) -> bool:
        return os.path.lexists(old / source_id)

    with store.unit_of_work(scope) as uow:
        tombstones = list(uow.tombstones.list())
    forgotten = {t.id for t in tombstones if t.reason == "forgotten"}
    carried = [
        Tombstone(moved(t.id), "forgotten")
        for t in tombstones
        if t.id in forgotten and under_old(t.id.split("#", 1)[0])
    ]
    if carried:  # before any row moves: a file never shows under its new id meanwhile
        with store.unit_of_work(scope) as uow:
            uow.tombstones.add(carried)
            uow.commit()
    listed = _listed(store, scope)
    ids = [s for s in listed if under_old(s) and s not in forgotten]
    renames = [Rename(s, moved(s)) for s in ids]
    failures: list[tuple[str, str]] = []
    for batch in _batches(renames):
        result = apply_source_renames(
            scope=scope,
            store=store,
            renames=batch,
            continue_on_error=True,
            runtime=Runtime(abort=abort),
        )
        failures.extend((f.from_id, f.error) for f in result.failures)
    failed = {old_id for old_id, _ in failures}
    done = [s for s in ids if s not in failed]
    grants = store.get_source_access(scope, done) if done else {}
    if grants:
        store.set_source_access(
            scope,
            [
                *(attrs.evolve(g, source_id=moved(s)) for s, g in grants.items()),
                *(Grant(s, access_version=g.access_version) for s, g in grants.items()),
            ],
        )
    if status_store is not None:
        _move_statuses(
            status_store, scope, moved=moved, wanted=lambda s: under_old(s) and s not in failed
        )
    return RootWidening(
        old=old,
        new=new,
        renamed=len(done),
        kept=len(listed) - len(ids),
        failures=tuple(failures),
    )


def _move_statuses(
    status_store: IngestionStatusStore,
    scope: Scope,
    *,
    moved: Callable[[str], str],
    wanted: Callable[[str], bool],
) -> None:
    """Each wanted status to its new id (unless the new id holds one that is not moving)."""
    items: list[IngestionStatus] = []
    cursor: str | None = None
    while True:
        page = status_store.list_page(scope, limit=200, cursor=cursor)
        items.extend(page.items)
        if page.cursor is None:
            break
        cursor = page.cursor
    names = {s.source_id for s in items}
    # longest first, as for the rows: ``a`` -> ``p/a`` waits for ``p/a`` -> ``p/p/a``
    for status in sorted(items, key=lambda s: -len(s.source_id)):
        old, new = status.source_id, moved(status.source_id)
        if wanted(old) and new not in names:
            status_store.put(attrs.evolve(status, source_id=new))
            status_store.delete(scope, old)
            names = (names - {old}) | {new}
