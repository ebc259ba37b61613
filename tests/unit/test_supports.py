"""``ragport.ports.supports``: the one capability check, for stores and checkpoint stores."""

from __future__ import annotations

from typing import Any

import attrs

from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStore
from ragport.ports import supports
from ragport.ports.capabilities import declared


class _PlainCheckpoints:
    """compare_and_set only: a checkpoint store that cannot join a unit of work."""

    def get(self, *args: Any) -> Any: ...

    def compare_and_set(self, *args: Any) -> bool:
        return True


class _HalfJoining(_PlainCheckpoints):
    def joins(self, uow: object) -> bool:
        return True


class _Overclaiming(InMemoryStore):
    """Declares forgotten_lookup on a class whose forgotten_among is not callable."""

    forgotten_among = None  # type: ignore[assignment]


def test_a_checkpoint_store_supports_joining_only_when_its_class_defines_both_methods() -> None:
    """No Capabilities on a checkpoint store: its class defining joins and compare_and_set_in
    is the declaration. If this fails, check _UNDECLARED in ragport/ports/capabilities.py."""
    assert supports(InMemoryCheckpointStore(), "checkpoints_in_unit_of_work")
    assert not supports(_PlainCheckpoints(), "checkpoints_in_unit_of_work")
    assert not supports(_HalfJoining(), "checkpoints_in_unit_of_work")


def test_a_store_capability_needs_the_declaration_and_the_methods() -> None:
    """A store supports an optional capability only if Capabilities declares it and its
    class defines the methods; checkpoint joining is never a store declaration. If this
    fails, check supports and declared."""
    store = InMemoryStore()
    assert supports(store, "forgotten_lookup")
    assert not supports(_Overclaiming(), "forgotten_lookup")
    quiet = attrs.evolve(store.capabilities, forgotten_lookup=False)
    assert not supports(store, "forgotten_lookup", quiet)
    assert "checkpoints_in_unit_of_work" not in declared(store.capabilities)
