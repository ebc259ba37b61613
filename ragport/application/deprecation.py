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

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

import attrs

from ragport.application.runtime import DEFAULT_RUNTIME, check_runtime
from ragport.application.write_options import check_write_options
from ragport.domain.deprecation import REMOVED_IN, Fold, keyword_folds, warn_deprecated

__all__ = [
    "REMOVED_IN",
    "RUNTIME_KEYWORDS",
    "WRITE_KEYWORDS",
    "fold_run_options",
    "fold_runtime",
    "fold_write_options",
    "folds_keywords",
]


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
OptionsT = TypeVar("OptionsT")


def fold_runtime(runtime: object, keywords: Mapping[str, Any]) -> Any:
    """``runtime`` (or the default one) with ``keywords`` as its fields: a ``Runtime``."""
    base = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    return attrs.evolve(base, **keywords) if keywords else base


def fold_write_options(options: object, keywords: Mapping[str, Any]) -> Any:
    """``options`` (or the default ones) with ``keywords`` as fields: a ``WriteOptions``."""
    base = check_write_options(options)
    return attrs.evolve(base, **keywords) if keywords else base


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

    def runtime_of(given: object, old: Mapping[str, Any], args: tuple[Any, ...]) -> Any:
        if given is None and bound:
            given = args[0].runtime
        return fold_runtime(given, old)

    return keyword_folds(
        (
            Fold("runtime", runtime_names, runtime_of, "runtime=Runtime(...)"),
            Fold(
                "write_options",
                write_names,
                lambda given, old, args: fold_write_options(given, old),
                "write_options=WriteOptions(...)",
            ),
        ),
        name=name,
    )


def fold_run_options(
    name: str,
    options: OptionsT,
    old: Mapping[str, Any],
    hint: str,
    *,
    write: Iterable[str],
    aside: Iterable[str] = (),
) -> tuple[OptionsT, dict[str, Any]]:
    """The deprecated keywords ``old`` of a pipeline run (``sync_knowledge``,
    ``sync_connector``, ``ingest_files``) folded into its ``options`` value (a ``SyncOptions``
    or ``IngestOptions``), after one ``DeprecationWarning`` naming them and ``hint``: the
    ``write`` ones into ``options.write``, the ``aside`` ones handed back for the caller to
    fold (into its ``runtime``), every other one into the field of ``options`` of its name."""
    if not old:
        return options, {}
    warn_deprecated(name, sorted(old), hint, stacklevel=3)
    given = dict(old)
    changes = {k: given.pop(k) for k in write if k in given}
    kept = {k: given.pop(k) for k in aside if k in given}
    if changes:
        given["write"] = attrs.evolve(cast(Any, options).write, **changes)
    return (attrs.evolve(cast(Any, options), **given) if given else options), kept
