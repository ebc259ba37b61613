"""Adapters installed by other distributions, found through entry points.

Three groups: ``ragport.stores`` (name: a URL scheme), ``ragport.embedders`` (name: what
``--embedder`` and ``ragport.toml`` say) and ``ragport.parsers`` (name: a media type). The
groups are read on first use, never at import, and kept until ``clear_cache()``; an entry
point is imported only when asked for by name. Callers consult them *after* their built-ins,
so a plugin never replaces a built-in scheme, name or media type.

This module lives among the adapters so that ``parser_for`` can reach it (adapters do not
import ``bootstrap``); ``ragport.bootstrap.plugins`` builds stores and embedders on it.

A plugin that is asked for by name and cannot be imported, or that two distributions both
offer, is a ``ValidationError`` naming the group, the name and the object reference (and the
exception's type, never its message, which a plugin controls): never skipped silently.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from collections.abc import Mapping

import attrs

from ragport.domain.errors import ValidationError, raise_unchained

__all__ = [
    "EMBEDDERS",
    "GROUPS",
    "PARSERS",
    "STORES",
    "Plugin",
    "broken",
    "clear_cache",
    "installed",
    "load",
]

STORES = "ragport.stores"
EMBEDDERS = "ragport.embedders"
PARSERS = "ragport.parsers"
GROUPS = (STORES, EMBEDDERS, PARSERS)

_FIELD = {STORES: "store", EMBEDDERS: "embedder", PARSERS: "parser"}


@attrs.frozen
class Plugin:
    """One installed entry point: its group, name, object reference and distribution."""

    group: str
    name: str
    value: str
    distribution: str | None

    @property
    def shown(self) -> str:
        """``group 'name' (module:attr from dist)``, for messages."""
        where = f" from {self.distribution}" if self.distribution else ""
        return f"{self.group} plugin {self.name!r} ({self.value}{where})"


@functools.cache
def _group(group: str) -> Mapping[str, tuple[Plugin, ...]]:
    found: dict[str, list[Plugin]] = {}
    for ep in importlib.metadata.entry_points(group=group):
        dist = ep.dist.name if ep.dist is not None else None
        plugin = Plugin(group, ep.name, ep.value, dist)
        same = found.setdefault(ep.name, [])
        if plugin not in same:
            same.append(plugin)
    return {name: tuple(plugins) for name, plugins in sorted(found.items())}


def installed(group: str) -> Mapping[str, tuple[Plugin, ...]]:
    """The entry points of ``group`` by name (more than one when distributions collide)."""
    if group not in GROUPS:
        raise ValidationError(f"unknown plugin group {group!r}", field="group")
    return _group(group)


def clear_cache() -> None:
    """Forget what was read and loaded (after installing a distribution in this process)."""
    _group.cache_clear()
    _load.cache_clear()
    importlib.invalidate_caches()


def load(group: str, name: str) -> tuple[Plugin, object] | None:
    """The object of entry point ``name`` in ``group``, or ``None`` when none is installed.

    Two distributions offering the same name, or an entry point that does not import, are a
    ``ValidationError(field=...)`` naming it (``store``, ``embedder`` or ``parser``).
    """
    plugins = installed(group).get(name)
    if not plugins:
        return None
    if len(plugins) > 1:
        raise ValidationError(
            f"{group} plugin {name!r} is offered by more than one distribution: "
            + ", ".join(
                p.value + (f" from {p.distribution}" if p.distribution else "") for p in plugins
            ),
            field=_FIELD[group],
        )
    return plugins[0], _load(plugins[0])


@functools.cache
def _load(plugin: Plugin) -> object:
    ep = importlib.metadata.EntryPoint(plugin.name, plugin.value, plugin.group)
    try:
        return ep.load()
    except Exception as exc:  # an import or attribute error of someone else's code
        raise_unchained(
            ValidationError(
                f"{plugin.shown} could not be loaded ({type(exc).__name__})",
                field=_FIELD[plugin.group],
            )
        )


def broken(plugin: Plugin, what: str) -> ValidationError:
    """The error for a plugin whose callable failed or returned the wrong thing."""
    return ValidationError(f"{plugin.shown} {what}", field=_FIELD[plugin.group])
