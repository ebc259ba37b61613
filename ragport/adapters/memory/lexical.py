"""The in-memory lexical pushdown: one BM25 index per scope, synced to the snapshot it reads."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ragport.adapters.lexical import Bm25Index
from ragport.adapters.memory.snapshot import Snapshot
from ragport.engine.rules import GrantRule, screened_sources
from ragport.ports.pushdowns import Admission, LegAnswer
from ragport.ports.store import ScoredRecord

__all__ = ["ScopeLexicon"]


class ScopeLexicon:
    """One scope's BM25 index, kept in step with the snapshot it is asked about."""

    def __init__(self, analyzer: Callable[[str], list[str]]) -> None:
        self.index = Bm25Index(analyzer=analyzer)
        self.generations: dict[str, int] = {}
        self.synced: Snapshot | None = None
        self.lock = threading.Lock()

    def sync(self, snap: Snapshot) -> None:
        """Make the index hold exactly ``snap``'s searchable records (called under ``lock``):
        visible and not forgotten, so forgotten records count in no statistic."""
        if self.synced is snap:
            return
        visible = snap.searchable()
        gone = [rid for rid in self.generations if rid not in visible]
        changed = [r for rid, r in visible.items() if self.generations.get(rid) != r.generation]
        if gone:
            self.index.remove(gone)
            for rid in gone:
                del self.generations[rid]
        if changed:
            self.index.add([r.id for r in changed], [r.text for r in changed])
            for r in changed:
                self.generations[r.id] = r.generation
        self.synced = snap

    def search(self, snap: Snapshot, text: str, limit: int, admission: Admission) -> LegAnswer:
        """``search_lexical`` in mode ``bm25`` over ``snap``'s searchable records: statistics
        over all of them, then the admission's filter and grants before ``limit``."""
        flt, who = admission.metadata_filter, admission.authorization
        with self.lock:
            self.sync(snap)
            rows = snap.searchable()
            # ``None``: every row. ``sync`` made the index hold exactly ``rows``, so without a
            # filter no candidate list (and no check and mask of every id per query) is needed.
            matching = (
                None if flt is None else [i for i, r in rows.items() if flt.matches(r.metadata)]
            )
            if who is None:
                candidates = matching
            else:
                admits = GrantRule(snap.grants, who).admits
                everyone = rows if matching is None else matching
                candidates = [i for i in everyone if admits(rows[i].access_sources)]
            found = self.index.search(text, limit=limit, candidates=candidates)
            screened: tuple[str, ...] = ()
            if admission.report_denied and who is not None:
                unfiltered = self.index.search(text, limit=limit, candidates=matching)
                screened = screened_sources(rows[rid] for rid, _ in unfiltered)
        return LegAnswer(tuple(ScoredRecord(rows[rid], score) for rid, score in found), screened)
