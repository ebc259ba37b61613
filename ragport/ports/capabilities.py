"""Optional store capabilities: declared in ``Capabilities``, defined by the store's class.

``supports(store, capability)`` is the one check the use cases make; ``missing_methods``
names what a store declares but does not define (the contract suite fails such a store).
"""

from __future__ import annotations

from typing import Literal

from ragport.domain.model import Capabilities

__all__ = ["OptionalCapability", "declared", "missing_methods", "supports"]

OptionalCapability = Literal[
    "lexical",
    "guarded_query",
    "borrowed_query",
    "preparation",
    "generation_history",
    "forgotten_lookup",
    "checkpoints_in_unit_of_work",
]

# Capabilities of a port without a ``Capabilities`` value (a checkpoint store): the class
# defining the methods is the declaration.
_UNDECLARED: frozenset[OptionalCapability] = frozenset({"checkpoints_in_unit_of_work"})

_METHODS: dict[OptionalCapability, tuple[str, ...]] = {
    "lexical": ("lexical_query", "hybrid_query"),
    "guarded_query": ("guarded_query",),
    "borrowed_query": ("borrowed_query",),
    "preparation": ("prepare",),
    "generation_history": ("generation_history",),
    "forgotten_lookup": ("forgotten_among",),
    "checkpoints_in_unit_of_work": ("joins", "compare_and_set_in"),
}


def _declares(capabilities: Capabilities, capability: OptionalCapability) -> bool:
    if capability == "lexical":
        return bool(capabilities.lexical_modes)
    return bool(getattr(capabilities, capability))


def declared(capabilities: Capabilities) -> tuple[OptionalCapability, ...]:
    """The optional capabilities a ``Capabilities`` value declares."""
    return tuple(
        name for name in _METHODS if name not in _UNDECLARED and _declares(capabilities, name)
    )


def missing_methods(store: object) -> dict[OptionalCapability, tuple[str, ...]]:
    """Per declared optional capability, the methods the store's *class* does not define.

    The class, not the instance: a wrapper that delegates unknown attributes to another store
    (``__getattr__``) does not implement ``guarded_query`` or ``hybrid_query`` itself, and
    calling the wrapped store's would bypass the wrapper's own ``query``.
    """
    caps = getattr(store, "capabilities", None)
    if not isinstance(caps, Capabilities):
        return {}
    out: dict[OptionalCapability, tuple[str, ...]] = {}
    for name in declared(caps):
        absent = tuple(m for m in _METHODS[name] if not callable(getattr(type(store), m, None)))
        if absent:
            out[name] = absent
    return out


def supports(
    store: object, capability: OptionalCapability, capabilities: Capabilities | None = None
) -> bool:
    """Whether ``store`` both declares ``capability`` and its class defines its methods.

    The one capability check of the use cases. A declared capability whose methods are
    missing counts as absent here (the safe path) and fails the contract suite.
    ``checkpoints_in_unit_of_work`` (``SupportsCheckpointsInUnitOfWork``) belongs to a
    checkpoint store, which has no ``Capabilities``: its class defining ``joins`` and
    ``compare_and_set_in`` is the declaration.
    """
    kind = type(store)
    if capability in _UNDECLARED:
        return all(callable(getattr(kind, m, None)) for m in _METHODS[capability])
    caps = capabilities if capabilities is not None else getattr(store, "capabilities", None)
    if not isinstance(caps, Capabilities) or not _declares(caps, capability):
        return False
    return all(callable(getattr(kind, m, None)) for m in _METHODS[capability])
