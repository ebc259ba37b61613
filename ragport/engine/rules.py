"""The store's read rules composed over many rows, written once.

``ragport.domain.model`` holds the per-item rules (``is_visible``, ``is_forgotten``,
``decide_access``, ``strongest_tombstone``); this module composes them the way every read
needs them: which ids a scope's tombstones withhold, which sources a read screened, and
which rows a caller is granted. The engine's generic reads, the in-memory masks (memory's
pushdown, like PostgreSQL's SQL) and the application's generic paths all call these; a
backend pushdown may vectorize them but never restates them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ragport.domain.model import Authorization, Grant, Record, Tombstone, decide_access

__all__ = ["GrantRule", "forgotten_set", "screened_sources"]


def forgotten_set(tombstones: Iterable[Tombstone]) -> frozenset[str]:
    """The ids ``tombstones`` withhold from reads: those of the ``forgotten`` ones (a
    ``corrected`` tombstone withholds nothing). ``is_forgotten`` tests a row against it."""
    return frozenset(t.id for t in tombstones if t.reason == "forgotten")


def screened_sources(records: Iterable[Record]) -> tuple[str, ...]:
    """``LegAnswer.screened`` of ``records``: their access sources, each once, first seen
    first (a row with none lists its source id)."""
    return tuple(dict.fromkeys(s for r in records for s in r.access_sources or (r.source_id,)))


class GrantRule:
    """The grant rule of one caller over one read's grants.

    A source is allowed iff ``decide_access`` allows it (``allows``: decided once per source,
    then remembered); a row, derived or not, is granted iff it has access sources and every
    one is allowed (``admits``). A pushdown that vectorizes the rule asks ``allows_each`` for
    its distinct sources (the column a per-source gather reads: a chunk's access sources are
    its source alone) and ``admits`` for every other row.
    """

    __slots__ = ("_caller", "_decided", "_grants")

    def __init__(self, grants: Mapping[str, Grant], caller: Authorization) -> None:
        self._grants = grants
        self._caller = caller
        self._decided: dict[str, bool] = {}

    def allows(self, source: str) -> bool:
        allowed = self._decided.get(source)
        if allowed is None:
            allowed = decide_access(source, self._grants.get(source), self._caller).allowed
            self._decided[source] = allowed
        return allowed

    def allows_each(self, sources: Sequence[str]) -> list[bool]:
        """``allows`` of each of ``sources`` (distinct), in order, decided afresh."""
        grants, caller = self._grants, self._caller
        return [decide_access(s, grants.get(s), caller).allowed for s in sources]

    def admits(self, sources: tuple[str, ...]) -> bool:
        """Whether a row whose ``access_sources`` are ``sources`` is granted: at least one
        source, and every one allowed."""
        for source in sources:
            if not self.allows(source):
                return False
        return bool(sources)
