"""Re-filing a corpus's sources under a wider root (``ragport ingest`` when later paths fall
outside the recorded root): each file keeps one id, its path relative to the new root, and
its rows, grants, lineage, statuses and forgotten tombstones (``apply_source_renames``:
nothing re-embedded, no new generation). Whether a source's file is still under the old root
is asked of ``exists`` (the wiring passes the file system's; ``ragport.bootstrap.roots``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs

from ragport.application.forgetting import apply_source_renames
from ragport.application.runtime import Runtime
from ragport.domain.errors import ValidationError
from ragport.domain.model import Grant, Rename, Scope, Tombstone
from ragport.domain.status import IngestionStatus
from ragport.engine.rules import forgotten_set
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

__all__ = ["RootWidening", "widen_corpus_root"]


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


@attrs.frozen
class _Move:
    """Ids relative to ``old`` re-filed under ``prefix`` (``old`` relative to the new root)."""

    old: Path
    prefix: str
    exists: Callable[[Path], bool]

    def moved(self, source_id: str) -> str:
        return f"{self.prefix}/{source_id}"

    def under_old(self, source_id: str) -> bool:
        return self.exists(self.old / source_id)


def widen_corpus_root(
    *,
    store: ChunkStore,
    status_store: IngestionStatusStore | None,
    scope: Scope,
    old: Path,
    new: Path,
    exists: Callable[[Path], bool],
    runtime: Runtime | None = None,
) -> RootWidening:
    """Re-file the sources named relative to ``old`` under ``new`` (an ancestor of it).

    A source is renamed when its file is still under ``old`` (``exists(old / source_id)``; the
    file system's answer counts a dangling symlink), so a run interrupted half way and run again renames only the
    rest. Each rename is ``apply_source_renames`` (rows re-keyed with their vectors, offsets,
    content hashes and generations: the next ingest finds them unchanged; lineage rewritten;
    no new generation). Then, for the same ids, grants are copied to the new id and the old id
    gets an empty grant (it may name another file under the new root: it must not inherit
    the grant); ingestion statuses move; a ``forgotten`` tombstone is copied to the new id
    (the file stays withheld under its new name). Forgotten sources themselves do not move.
    Failures are collected, not raised: the caller must not ingest (or record ``new``) when
    any occurred, or the files that did not move would get a second id. ``runtime`` serves
    each rename (its abort stops the run between renames).
    """
    if new == old or not old.is_relative_to(new):
        raise ValidationError(f"{new} does not hold {old}", field="root")
    move = _Move(old, old.relative_to(new).as_posix(), exists)
    forgotten = _carry_forgotten(store, scope, move)
    listed = _listed(store, scope)
    ids = [s for s in listed if move.under_old(s) and s not in forgotten]
    failures = _renamed(store, scope, move, ids, runtime)
    failed = {old_id for old_id, _ in failures}
    done = [s for s in ids if s not in failed]
    _move_grants(store, scope, move, done)
    if status_store is not None:
        _move_statuses(
            status_store,
            scope,
            moved=move.moved,
            wanted=lambda s: move.under_old(s) and s not in failed,
        )
    return RootWidening(
        old=old,
        new=new,
        renamed=len(done),
        kept=len(listed) - len(ids),
        failures=tuple(failures),
    )


def _carry_forgotten(store: ChunkStore, scope: Scope, move: _Move) -> frozenset[str]:
    """The scope's forgotten ids; each one whose file is still under the old root gets a
    ``forgotten`` tombstone under its new id too, before any row moves (a file never shows
    under its new id meanwhile)."""
    with store.unit_of_work(scope) as uow:
        tombstones = list(uow.tombstones.list())
    forgotten = forgotten_set(tombstones)
    carried = [
        Tombstone(move.moved(t.id), "forgotten")
        for t in tombstones
        if t.id in forgotten and move.under_old(t.id.split("#", 1)[0])
    ]
    if carried:
        with store.unit_of_work(scope) as uow:
            uow.tombstones.add(carried)
            uow.commit()
    return forgotten


def _renamed(
    store: ChunkStore, scope: Scope, move: _Move, ids: list[str], runtime: Runtime | None
) -> list[tuple[str, str]]:
    """Each of ``ids`` renamed to its new id, batch by batch; the ``(old id, error)`` of
    those that could not move."""
    failures: list[tuple[str, str]] = []
    for batch in _batches([Rename(s, move.moved(s)) for s in ids]):
        result = apply_source_renames(
            scope=scope,
            store=store,
            renames=batch,
            continue_on_error=True,
            runtime=runtime,
        )
        failures.extend((f.from_id, f.error) for f in result.failures)
    return failures


def _move_grants(store: ChunkStore, scope: Scope, move: _Move, done: list[str]) -> None:
    """Each moved source's grant copied to its new id; its old id gets an empty grant (it may
    name another file under the new root, which must not inherit the grant)."""
    grants = store.get_source_access(scope, done) if done else {}
    if grants:
        store.set_source_access(
            scope,
            [
                *(attrs.evolve(g, source_id=move.moved(s)) for s, g in grants.items()),
                *(Grant(s, access_version=g.access_version) for s, g in grants.items()),
            ],
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
