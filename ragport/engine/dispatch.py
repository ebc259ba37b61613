"""Which pushdowns a backend defines, found once on its class, and the capabilities they give.

``found(backend)`` binds every method of ``ragport.ports.pushdowns.PUSHDOWNS`` the backend's
*class* defines (an instance attribute or a ``__getattr__`` that delegates does not count, as
with ``ragport.ports.supports``); ``Pushdowns()`` is the generic path alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ragport.domain.errors import ValidationError
from ragport.domain.lexical import check_lexical_mode
from ragport.domain.model import Capabilities
from ragport.ports.pushdowns import PUSHDOWNS

__all__ = ["GENERIC_LEXICAL_MODE", "Pushdowns", "capabilities_of", "found"]

GENERIC_LEXICAL_MODE = "bm25"
"""The lexical mode the engine answers itself, over ``rows()``, for every backend."""

_Method = Callable[..., Any] | None


@attrs.frozen
class Pushdowns:
    """The pushdown methods of one backend, bound (``None``: the engine's generic path)."""

    search_vectors: _Method = None
    search_lexical: _Method = None
    guarded_search: _Method = None
    retrieval_read: _Method = None
    lexical_modes: tuple[str, ...] = ()
    embedders: _Method = None
    source_id_page: _Method = None
    history: _Method = None
    forgotten_among: _Method = None
    tombstones_among: _Method = None
    dependents: _Method = None
    retire: _Method = None
    delete_where: _Method = None
    restore_above: _Method = None
    move: _Method = None
    rename_lineage: _Method = None
    merge_tombstones: _Method = None
    revoke_grants: _Method = None
    delete_source: _Method = None
    prepare: _Method = None

    @property
    def names(self) -> tuple[str, ...]:
        """The pushdowns in use, by method name."""
        return tuple(n for n in PUSHDOWNS if getattr(self, n) is not None)


def _modes(kind: type) -> tuple[str, ...]:
    declared = getattr(kind, "lexical_modes", ())
    if isinstance(declared, str) or not isinstance(declared, tuple | list):
        raise ValidationError(
            "a backend's lexical_modes is a tuple of names", field="lexical_modes"
        )
    return tuple(dict.fromkeys(check_lexical_mode(m, field="lexical_modes") for m in declared))


def found(backend: object) -> Pushdowns:
    """The pushdowns ``backend``'s class defines, bound to ``backend``."""
    kind = type(backend)
    methods = {
        name: getattr(backend, name) for name in PUSHDOWNS if callable(getattr(kind, name, None))
    }
    modes = _modes(kind) if "search_lexical" in methods else ()
    if not modes:
        methods.pop("search_lexical", None)
    return Pushdowns(lexical_modes=modes, **methods)


def capabilities_of(pushdowns: Pushdowns) -> Capabilities:
    """What ``BackendStore`` promises over a backend with ``pushdowns``: the whole port, the
    lexical modes the backend answers plus the generic ``bm25``, and the optional reads whose
    cost only a pushdown makes what the port promises."""
    modes = pushdowns.lexical_modes
    if GENERIC_LEXICAL_MODE not in modes:
        modes = (*modes, GENERIC_LEXICAL_MODE)
    return Capabilities(
        lexical_modes=modes,
        authorization="acl",
        generations=True,
        transactions=True,
        generation_history=True,
        guarded_query=True,
        private_reads=True,  # every record handed out is a fresh copy (hand_out)
        forgotten_lookup=(
            pushdowns.forgotten_among is not None or pushdowns.tombstones_among is not None
        ),
        preparation=pushdowns.prepare is not None,
        borrowed_query=(
            pushdowns.search_vectors is not None or pushdowns.guarded_search is not None
        ),
    )
