"""``assert_conforms(store)``: a store has every ``ChunkStore`` member, statically and at run time.

Statically, the parameter type does the work: ``mypy --strict`` (or pyright) reports a call
``assert_conforms(MyStore(...))`` whose class lacks a member or types one differently, naming
the member (``"MyStore" is missing following "ChunkStore" protocol member: list_source_ids``).
The one-line equivalent without a call is ``_: ChunkStore = MyStore(...)``.

At run time it checks what ``isinstance(store, ChunkStore)`` cannot see (that only looks for
the names): ``capabilities`` is a ``Capabilities`` and ``provider`` a non-empty string; every
method of ``ChunkStore``, and of each optional protocol the store declares in its
capabilities, is defined (an optional one by the store's class) and accepts the port's parameters (the same
number of positional ones, every keyword-only one by name, a default wherever the port has
one); extra parameters need defaults. It raises ``AssertionError`` listing every problem.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ragport.domain.model import Capabilities
from ragport.ports.borrowed import SupportsBorrowedQuery
from ragport.ports.history import SupportsGenerationHistory
from ragport.ports.store import (
    ChunkStore,
    OptionalCapability,
    SupportsForgottenLookup,
    SupportsGuardedQuery,
    SupportsLexicalSearch,
    SupportsPreparation,
    declared,
)

__all__ = ["assert_conforms", "conformance_problems"]

_OPTIONAL: dict[OptionalCapability, type] = {
    "lexical": SupportsLexicalSearch,
    "guarded_query": SupportsGuardedQuery,
    "borrowed_query": SupportsBorrowedQuery,
    "preparation": SupportsPreparation,
    "generation_history": SupportsGenerationHistory,
    "forgotten_lookup": SupportsForgottenLookup,
}
_PROPERTIES = frozenset({"capabilities", "provider"})


def _port_methods(port: type) -> dict[str, Callable[..., object]]:
    return {
        name: value
        for name, value in vars(port).items()
        if not name.startswith("_") and name not in _PROPERTIES and inspect.isfunction(value)
    }


def _signature_problems(name: str, port: Callable[..., object], mine: object) -> list[str]:
    """How ``mine`` fails to accept every call the port's ``port`` method allows."""
    if not callable(mine):
        return [f"{name} is not callable"]
    try:
        have = inspect.signature(mine)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
        return []
    want = [p for p in inspect.signature(port).parameters.values() if p.name != "self"]
    params = list(have.parameters.values())
    kinds = {p.kind for p in params}
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    by_name = {p.name: p for p in params if p.kind != inspect.Parameter.POSITIONAL_ONLY}
    problems: list[str] = []
    used: set[str] = set()
    index = 0
    for p in want:
        if p.kind == inspect.Parameter.KEYWORD_ONLY:
            got = by_name.get(p.name)
            if got is None and inspect.Parameter.VAR_KEYWORD not in kinds:
                problems.append(f"{name} does not accept the keyword argument {p.name!r}")
                continue
        elif p.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            got = positional[index] if index < len(positional) else None
            index += 1
            if got is None and inspect.Parameter.VAR_POSITIONAL not in kinds:
                problems.append(f"{name} does not take the positional argument {p.name!r}")
                continue
        else:
            continue
        if got is not None:
            used.add(got.name)
            if p.default is not inspect.Parameter.empty and got.default is inspect.Parameter.empty:
                problems.append(f"{name}: {p.name!r} needs a default (the port gives one)")
    for extra in params:
        if (
            extra.name not in used
            and extra.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
            and extra.default is inspect.Parameter.empty
        ):
            problems.append(f"{name}: the extra parameter {extra.name!r} needs a default")
    return problems


def conformance_problems(store: object) -> list[str]:
    """Every way ``store`` falls short of ``ChunkStore`` (empty when it conforms)."""
    problems: list[str] = []
    cls = type(store)
    for prop in sorted(_PROPERTIES):
        if not hasattr(store, prop):
            problems.append(f"missing member {prop}")
    caps = getattr(store, "capabilities", None)
    if hasattr(store, "capabilities") and not isinstance(caps, Capabilities):
        problems.append(f"capabilities is a {type(caps).__name__}, not Capabilities")
    provider = getattr(store, "provider", None)
    if hasattr(store, "provider") and not (isinstance(provider, str) and provider.strip()):
        problems.append("provider is not a non-empty str")
    ports: list[type] = [ChunkStore]
    if isinstance(caps, Capabilities):
        ports += [_OPTIONAL[capability] for capability in declared(caps)]
    for port in ports:
        # ChunkStore's own methods may come through the instance (a delegating wrapper); an
        # optional capability's must be defined by the class, as ``supports`` requires.
        owner = store if port is ChunkStore else cls
        for name, method in _port_methods(port).items():
            if not callable(getattr(owner, name, None)):
                where = "" if port is ChunkStore else f" (capabilities declare {port.__name__})"
                problems.append(f"missing method {name}{where}")
                continue
            problems += _signature_problems(name, method, getattr(store, name))
    return problems


def assert_conforms(store: ChunkStore) -> ChunkStore:
    """``store`` itself, once it conforms to ``ChunkStore``; ``AssertionError`` listing what
    does not. Type checkers check the argument against the protocol (see the module)."""
    problems = conformance_problems(store)
    assert not problems, f"{type(store).__name__} does not conform to ChunkStore: " + "; ".join(
        problems
    )
    return store
