"""The in-memory store's lexical leg: one BM25 index per scope, synced to the snapshot it reads."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from ragport.adapters.lexical import Bm25Index
from ragport.adapters.memory.snapshot import Snapshot, hand_out, report_denied
from ragport.domain.filters import Filter
from ragport.domain.model import AccessDecision, Authorization, decide_access
from ragport.ports.store import ScoredRecord

__all__ = ["ScopeLexicon"]


class ScopeLexicon:
    """One scope's BM25 index, kept in step with the installed snapshot on demand."""

    def __init__(self, analyzer: Callable[[str], list[str]]) -> None:
        self.index = Bm25Index(analyzer=analyzer)
        self.generations: dict[str, int] = {}
        self.synced: Snapshot | None = None
        self.lock = threading.Lock()

    def sync(self, snap: Snapshot) -> None:
        """Make the index hold exactly ``snap``'s searchable records (called under ``lock``):
        visible and not forgotten, so forgotten records count in no statistic (as on
        PostgreSQL, which subtracts them when their tombstone is written)."""
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

    def search(
        self,
        snapshot: Callable[[], Snapshot],
        text: str,
        limit: int,
        authorization: Authorization | None,
        flt: Filter | None,
        on_denied: Callable[[Sequence[AccessDecision]], None] | None,
    ) -> tuple[ScoredRecord, ...]:
        """BM25 over the searchable records that pass the grants and the filter, in the
        snapshot ``snapshot()`` returns once the index is locked."""
        with self.lock:
            snap = snapshot()
            self.sync(snap)
            rows = snap.searchable()
            if authorization is not None or flt is not None:
                decisions: dict[str, bool] = {}

                def allowed(source: str) -> bool:
                    assert authorization is not None
                    if source not in decisions:
                        decisions[source] = decide_access(
                            source, snap.grants.get(source), authorization
                        ).allowed
                    return decisions[source]

                candidates = [
                    r.id
                    for r in rows.values()
                    if (flt is None or flt.matches(r.metadata))
                    and (
                        authorization is None
                        or (
                            bool(r.access_sources) and all(allowed(src) for src in r.access_sources)
                        )
                    )
                ]
            else:
                candidates = list(rows)
            found = self.index.search(text, limit=limit, candidates=candidates)
            if on_denied is not None and authorization is not None:
                matching = [r.id for r in rows.values() if flt is None or flt.matches(r.metadata)]
                unfiltered = self.index.search(text, limit=limit, candidates=matching)
                report_denied(snap, [rows[rid] for rid, _ in unfiltered], authorization, on_denied)
        return tuple(ScoredRecord(hand_out(rows[rid]), score) for rid, score in found)
