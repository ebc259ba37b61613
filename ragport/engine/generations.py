"""The generation rules, written once: each a pure step from one ``GenerationState`` to the
next. ``BackendUnitOfWork`` (so every backend, ``InMemoryStore`` and ``PostgresStore``)
moves its counter, pointer and floor through these."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ragport.domain.errors import ValidationError
from ragport.ports.backend import GenerationState

__all__ = [
    "GenerationSteps",
    "check_generation",
    "floor_raised",
    "published",
    "reset_to",
    "staged",
]


def check_generation(value: object, field: str = "generation") -> int:
    """A generation argument: a non-negative ``int`` (not a bool), else ``ValidationError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"{field} must be a non-negative int", field=field)
    return value


def staged(s: GenerationState) -> GenerationState:
    """``GenerationRepository.stage``: the open staged generation is the counter when it is
    above the pointer, else a new one (the counter plus one)."""
    return s if s.counter > s.pointer else attrs.evolve(s, counter=s.counter + 1)


def published(s: GenerationState, generation: int) -> GenerationState:
    """``publish``: the pointer moves to ``generation``, which must lie in
    ``pointer..counter`` (``ValidationError(field="generation")`` otherwise)."""
    g = check_generation(generation)
    if not s.pointer <= g <= s.counter:
        raise ValidationError("publish needs pointer <= generation <= counter", field="generation")
    return attrs.evolve(s, pointer=g)


def reset_to(s: GenerationState, generation: int) -> GenerationState:
    """``reset``: pointer and counter both become ``generation``, which may not lie below the
    floor (nothing below it can be restored: ``ValidationError(field="generation")``)."""
    g = check_generation(generation)
    if g < s.floor:
        raise ValidationError("cannot reset below the compaction floor", field="generation")
    return attrs.evolve(s, counter=g, pointer=g)


def floor_raised(s: GenerationState, generation: int) -> GenerationState:
    """``raise_floor``: the floor rises to ``generation``, never above the pointer and never
    down."""
    g = check_generation(generation)
    return attrs.evolve(s, floor=max(s.floor, min(g, s.pointer)))


class GenerationSteps:
    """``stage``, ``publish``, ``reset`` and ``raise_floor`` of a ``GenerationRepository``
    through the steps above: a store's repository subclasses it and defines ``_step``
    (read the state, apply the step, store it when it changed, return the new state)."""

    def _step(self, step: Callable[[GenerationState], GenerationState]) -> GenerationState:
        raise NotImplementedError

    def stage(self) -> int:
        return self._step(staged).counter

    def publish(self, generation: int) -> None:
        self._step(lambda s: published(s, generation))

    def reset(self, generation: int) -> None:
        self._step(lambda s: reset_to(s, generation))

    def raise_floor(self, generation: int) -> None:
        self._step(lambda s: floor_raised(s, generation))
