"""One release of grace for keywords a function no longer takes (issue 42), for every layer.

A function whose keywords moved into one value (``runtime=Runtime(...)``,
``write_options=WriteOptions(...)``, ``http=HttpOptions(...)``, ...) still accepts the old
ones for one release: ``keyword_folds`` wraps it so that each call passing one warns
(``DeprecationWarning`` naming the keywords, their new home and docs/deprecations.md) and
folds them into that value. A keyword given beside the value wins over its field of the same
name; the folded value is built by ``attrs.evolve``, so it is checked as if built by hand.
Static type checkers see only the new signature. ``ragport.application.deprecation`` builds
the use cases' folds on this; adapters fold their own options values with it.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar, cast

import attrs

__all__ = [
    "REMOVED_IN",
    "Fold",
    "evolve_or_default",
    "keyword_folds",
    "warn_deprecated",
    "warn_removal",
]

REMOVED_IN = "0.2"
"""The release that drops the folded keywords (docs/deprecations.md)."""

F = TypeVar("F", bound=Callable[..., Any])


class Fold(NamedTuple):
    """Old keywords ``names`` fold into the keyword ``into`` (shown as ``hint``):
    ``fold(given, old, args)`` returns the value, from the ``into`` value the caller gave
    (or ``None``), the old keywords and the call's positional arguments."""

    into: str
    names: tuple[str, ...]
    fold: Callable[[Any, Mapping[str, Any], tuple[Any, ...]], Any]
    hint: str


def _outside_ragport(stacklevel: int) -> int:
    """``stacklevel`` moved past ragport's own frames (a wired wrapper such as
    ``ragport.bootstrap.replace_document``), so the warning names the caller's line."""
    frame = sys._getframe(stacklevel + 1)
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("ragport."):
        frame = frame.f_back
        stacklevel += 1
    return stacklevel


def warn_removal(what: str, instead: str, *, stacklevel: int = 2) -> None:
    """Warn ``DeprecationWarning`` in the one wording of every deprecation: ``what`` is
    deprecated and goes in ``REMOVED_IN``, ``instead`` says what replaces it, and
    docs/deprecations.md lists it. The warning points at the first caller outside ragport,
    ``stacklevel`` frames up (as for ``warnings.warn``) or further."""
    warnings.warn(
        f"{what} is deprecated and will be removed in ragport {REMOVED_IN}: {instead} "
        "(docs/deprecations.md)",
        DeprecationWarning,
        stacklevel=_outside_ragport(stacklevel) + 1,
    )


def warn_deprecated(name: str, given: Iterable[str], hint: str, *, stacklevel: int = 2) -> None:
    """Warn that ``name(given...)`` is deprecated in favour of ``hint`` (``warn_removal``)."""
    names = ", ".join(f"{k}=" for k in given)
    warn_removal(f"{name}({names})", f"pass {hint} instead", stacklevel=stacklevel + 1)


def evolve_or_default(
    given: object, old: Mapping[str, Any], default: Any, kind: type, field: str
) -> Any:
    """``given`` (a ``kind``, or ``default`` when ``None``) with ``old`` as its fields."""
    base = default if given is None else given
    if not isinstance(base, kind):
        from ragport.domain.errors import ValidationError

        raise ValidationError(f"{field} must be a {kind.__name__}", field=field)
    return attrs.evolve(cast(Any, base), **old) if old else base


def keyword_folds(folds: Sequence[Fold], *, name: str | None = None) -> Callable[[F], F]:
    """The decorated function accepts, deprecated, each fold's ``names`` (see the module
    docstring); ``name`` is how the warning names it (default: its ``__qualname__``)."""
    active = tuple(f for f in folds if f.names)

    def decorate(function: F) -> F:
        label = name or function.__qualname__

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            for fold in active:
                old = {k: kwargs.pop(k) for k in fold.names if k in kwargs}
                if old:
                    warn_deprecated(label, old, fold.hint, stacklevel=2)
                    kwargs[fold.into] = fold.fold(kwargs.get(fold.into), old, args)
            return function(*args, **kwargs)

        call.__deprecated_keywords__ = tuple(n for f in active for n in f.names)  # type: ignore[attr-defined]
        return cast(F, call)

    return decorate
