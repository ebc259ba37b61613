"""The store's read rules composed over many rows, written once.

``ragport.domain.model`` holds the per-item rules (``is_visible``, ``is_forgotten``,
``decide_access``, ``strongest_tombstone``); this module composes them the way every read
needs them: which ids a scope's tombstones withhold, which sources a read screened, and
which rows a caller is granted. The engine's generic reads, the in-memory masks (memory's
pushdown, like PostgreSQL's SQL) and the application's generic paths all call these; a
backend pushdown may vectorize them but never restates them.
"""

from __future__ import annotations

from collections.abc import Iterable

from ragport.domain.model import Record, Tombstone

__all__ = ["forgotten_set", "screened_sources"]


def forgotten_set(tombstones: Iterable[Tombstone]) -> frozenset[str]:
    """The ids ``tombstones`` withhold from reads: those of the ``forgotten`` ones (a
    ``corrected`` tombstone withholds nothing). ``is_forgotten`` tests a row against it."""
    return frozenset(t.id for t in tombstones if t.reason == "forgotten")


def screened_sources(records: Iterable[Record]) -> tuple[str, ...]:
    """``LegAnswer.screened`` of ``records``: their access sources, each once, first seen
    first (a row with none lists its source id)."""
    return tuple(dict.fromkeys(s for r in records for s in r.access_sources or (r.source_id,)))
