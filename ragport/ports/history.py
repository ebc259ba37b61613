"""Generation history: what each recent generation of a scope changed (optional capability).

A store that declares ``capabilities.generation_history`` implements
``SupportsGenerationHistory``; ``ragport generations`` reads it. The history is derived from
the stored rows (a row records the generation that wrote it and the one that retired it), so
it follows rollback and compaction:

- only generations in ``(floor, current]`` are reported: compaction purged what older
  generations retired, so their entries could not be complete; generations above the pointer
  (staged, not published) are not history yet;
- after ``rollback_generation(to=p)`` the generations above ``p`` are gone (their rows were
  discarded, what they retired is visible again), and a later write reuses their numbers;
- a source replaced at ``g`` is both written and retired at ``g``; a deleted one only retired;
- rows the forgotten predicate withholds (``is_forgotten``: a ``forgotten`` tombstone on the
  row's id, source, a lineage id or a root, as in every read) are never listed and never
  counted: ``sources_*`` and ``records_*`` leave them out too;
- the history is per exact scope: another corpus or tenant sees none of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope

__all__ = ["GenerationChange", "SupportsGenerationHistory", "check_history_args"]

MAX_HISTORY = 1_000
"""The most generations one ``generation_history`` call returns."""
MAX_HISTORY_IDS = 10_000
"""The most source ids one list of a ``GenerationChange`` holds."""


@attrs.frozen
class GenerationChange:
    """What generation ``generation`` changed in a scope.

    ``written`` / ``retired``: the distinct source ids with rows written / retired at this
    generation, sorted by code point, at most ``max_ids`` each. ``sources_written`` /
    ``sources_retired`` count all of them, so ``len(written) < sources_written`` says the list
    was capped (never silently). ``records_written`` / ``records_retired`` count rows.
    """

    generation: int
    written: tuple[str, ...]
    retired: tuple[str, ...]
    sources_written: int
    sources_retired: int
    records_written: int
    records_retired: int


def check_history_args(limit: object, max_ids: object) -> tuple[int, int]:
    """``limit`` in 1..1000 and ``max_ids`` in 0..10000 (integers, not bools), or
    ``ValidationError``; the one argument check every implementation calls."""
    return _bounded("limit", limit, 1, MAX_HISTORY), _bounded(
        "max_ids", max_ids, 0, MAX_HISTORY_IDS
    )


def _bounded(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{name} must be an integer in {low}..{high}", field=name)
    return value


@runtime_checkable
class SupportsGenerationHistory(Protocol):
    """A store that reports what each recent generation changed (declared as
    ``capabilities.generation_history``); see the module docstring for the rules."""

    def generation_history(
        self, scope: Scope, *, limit: int = 10, max_ids: int = 100
    ) -> Sequence[GenerationChange]:
        """One ``GenerationChange`` per generation ``g`` with ``floor < g <= current``, newest
        first, at most ``limit`` of them (every generation in the range, empty lists where a
        generation changed nothing visible now); an empty sequence for a scope never written.
        Reads one consistent snapshot of exactly ``scope`` (another corpus or tenant sees no
        history); forgotten ids are left out of the lists and the counts. ``limit`` 1..1000,
        ``max_ids`` 0..10000 (integers, not bools), else ``ValidationError`` (call
        ``check_history_args``); a ``scope`` that is not a ``Scope`` is ``ScopeError``."""
        ...
