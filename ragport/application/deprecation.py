"""One release of grace for the keywords a use case no longer takes (issue 42).

What ``Runtime`` holds (telemetry, redactor, secrets, limits, clock, abort) travels in one
``runtime=``, and the write side's options (chunk size, overlap, embed batch size, shared
generation, publish and skip flags, status store) in one ``write_options=``. A function
decorated with ``folds_keywords`` still accepts the keywords it took before, for one release:
each call that passes one warns (``DeprecationWarning`` naming the keywords and where they
go now) and folds them into the call's ``Runtime`` / ``WriteOptions``. A keyword given beside
a ``runtime`` or ``write_options`` wins over that value's field of the same name; the folded
value is checked as if built by hand (``ValidationError`` naming the field).

Static type checkers see only the new signature, so typed code is pointed at the new form.
docs/deprecations.md lists every keyword folded here and the release that removes it.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

import attrs

from ragport.application.runtime import DEFAULT_RUNTIME, check_runtime
from ragport.application.write_options import check_write_options

__all__ = [
    "REMOVED_IN",
    "RUNTIME_KEYWORDS",
    "WRITE_KEYWORDS",
    "fold_runtime",
    "fold_write_options",
    "folds_keywords",
]

REMOVED_IN = "0.2"
"""The release that drops the folded keywords (docs/deprecations.md)."""

RUNTIME_KEYWORDS = ("telemetry", "redactor", "secrets", "limits", "clock", "abort")
WRITE_KEYWORDS = (
    "size",
    "overlap",
    "batch_size",
    "shared_generation",
    "advance_generation",
    "skip_if_unchanged",
    "status_store",
)

F = TypeVar("F", bound=Callable[..., Any])


def fold_runtime(runtime: object, keywords: Mapping[str, Any]) -> Any:
    """``runtime`` (or the default one) with ``keywords`` as its fields: a ``Runtime``."""
    base = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    return attrs.evolve(base, **keywords) if keywords else base


def fold_write_options(options: object, keywords: Mapping[str, Any]) -> Any:
    """``options`` (or the default ones) with ``keywords`` as fields: a ``WriteOptions``."""
    base = check_write_options(options)
    return attrs.evolve(base, **keywords) if keywords else base


def _warn(name: str, given: Iterable[str], target: str) -> None:
    names = ", ".join(f"{k}=" for k in given)
    warnings.warn(
        f"{name}({names}) is deprecated and will be removed in ragport {REMOVED_IN}: pass "
        f"{target} instead (docs/deprecations.md)",
        DeprecationWarning,
        stacklevel=3,
    )


def folds_keywords(
    *,
    runtime: Iterable[str] = (),
    write: Iterable[str] = (),
    name: str | None = None,
    bound: bool = False,
) -> Callable[[F], F]:
    """Let the decorated function accept, deprecated, the ``runtime`` keywords (folded into
    its ``runtime=``) and the ``write`` keywords (folded into its ``write_options=``).

    ``name`` is how the warning names the function (default: its ``__qualname__``). ``bound``:
    a method of an object with a ``runtime`` attribute (``Rag``): with no ``runtime=`` given,
    the keywords change that bound runtime, not the default one."""
    runtime_names = tuple(runtime)
    write_names = tuple(write)
    unknown = (set(runtime_names) - set(RUNTIME_KEYWORDS)) | (
        set(write_names) - set(WRITE_KEYWORDS)
    )
    if unknown:
        raise TypeError(f"not a folded keyword: {sorted(unknown)}")

    def decorate(function: F) -> F:
        label = name or function.__qualname__

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            old_runtime = {k: kwargs.pop(k) for k in runtime_names if k in kwargs}
            old_write = {k: kwargs.pop(k) for k in write_names if k in kwargs}
            if old_runtime:
                _warn(label, old_runtime, "runtime=Runtime(...)")
                given = kwargs.get("runtime")
                if given is None and bound:
                    given = args[0].runtime
                kwargs["runtime"] = fold_runtime(given, old_runtime)
            if old_write:
                _warn(label, old_write, "write_options=WriteOptions(...)")
                kwargs["write_options"] = fold_write_options(kwargs.get("write_options"), old_write)
            return function(*args, **kwargs)

        call.__deprecated_keywords__ = runtime_names + write_names  # type: ignore[attr-defined]
        return cast(F, call)

    return decorate
