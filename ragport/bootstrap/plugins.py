"""Stores, embedders and parsers installed by other distributions as entry points.

``ragport.stores``: the entry point's name is a URL scheme (``sqlite`` for
``sqlite:///tmp/x.db``), its object a callable taking the whole URL and returning a
``ragport.bootstrap.Stores``, a bare ``ChunkStore`` or a ``StorageBackend`` (the narrow port,
which ``open_stores`` wraps in ``ragport.engine.BackendStore``); to a bare one ``open_stores``
adds an in-memory status store and checkpoint store. ``ragport.embedders``: a name (what
``--embedder`` and ``ragport.toml`` say) and a callable of no arguments returning an
``Embedder``. ``ragport.parsers``: a media type and a callable returning a ``Parser`` (see
``ragport.adapters.parsers.parser_for``).

Built-ins come first: a plugin named like a built-in scheme, embedder or media type is never
used (``ragport config`` lists it as shadowed). Entry points are read on first use and kept
(``clear_cache()`` forgets them); one is imported only when asked for by name. A plugin asked
for that does not import, fails or returns the wrong type is a ``ValidationError`` naming the
entry point, never skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from ragport.adapters import _entry_points
from ragport.adapters._entry_points import (
    EMBEDDERS,
    GROUPS,
    PARSERS,
    STORES,
    Plugin,
    broken,
    clear_cache,
    load,
)
from ragport.domain.errors import RagportError, ValidationError, raise_unchained
from ragport.ports.embedder import Embedder

__all__ = [
    "BUILTIN_EMBEDDERS",
    "BUILTIN_SCHEMES",
    "EMBEDDERS",
    "GROUPS",
    "PARSERS",
    "STORES",
    "InstalledPlugin",
    "Plugin",
    "broken",
    "clear_cache",
    "embedder_names",
    "installed_plugins",
    "load_embedder",
    "load_store_factory",
    "unknown_embedder",
    "url_scheme",
]

BUILTIN_SCHEMES = ("memory", "embedded", "postgresql", "postgres", "postgresql+psycopg")
BUILTIN_EMBEDDERS = ("minilm", "hash")


def _builtin_media_types() -> frozenset[str]:
    from ragport.adapters.parsers import PARSERS as BUILTIN_PARSERS

    return frozenset(t for cls in BUILTIN_PARSERS for t in cls.media_types)


def url_scheme(url: str) -> str:
    """The scheme of a store URL, lower-cased (``sqlite`` for ``SQLite:///x.db``)."""
    return url.split("://", 1)[0].lower() if "://" in url else url.split(":", 1)[0].lower()


@attrs.frozen
class InstalledPlugin:
    """One row of ``ragport config``'s plugin listing.

    ``status``: ``available``, ``shadowed`` (a built-in has that name and wins) or
    ``conflict`` (two distributions offer the name: asking for it is an error).
    """

    group: str
    name: str
    value: str
    distribution: str | None
    status: str


def installed_plugins() -> list[InstalledPlugin]:
    """Every installed entry point of the three groups, without importing any of them."""
    builtins = {
        STORES: frozenset(BUILTIN_SCHEMES),
        EMBEDDERS: frozenset(BUILTIN_EMBEDDERS),
        PARSERS: _builtin_media_types(),
    }
    rows = []
    for group in GROUPS:
        for name, plugins in _entry_points.installed(group).items():
            status = (
                "shadowed"
                if name in builtins[group]
                else "conflict"
                if len(plugins) > 1
                else "available"
            )
            rows += [InstalledPlugin(group, name, p.value, p.distribution, status) for p in plugins]
    return rows


def embedder_names() -> tuple[str, ...]:
    """The names ``build_embedder`` takes: the built-ins, then the installed plugins'."""
    plugins = [n for n in _entry_points.installed(EMBEDDERS) if n not in BUILTIN_EMBEDDERS]
    return (*BUILTIN_EMBEDDERS, *plugins)


def load_store_factory(scheme: str) -> tuple[Plugin, Callable[[str], object]] | None:
    """The ``ragport.stores`` entry point of ``scheme`` and its callable, loaded; ``None``
    when none is installed or the scheme is a built-in one."""
    return _load_callable(STORES, scheme, BUILTIN_SCHEMES)


def _load_callable(
    group: str, name: str, builtins: Iterable[str]
) -> tuple[Plugin, Callable[..., object]] | None:
    """The entry point ``name`` of ``group`` and its loaded callable; ``None`` when none is
    installed or ``name`` is a built-in (built-ins win). Not callable: ``broken``."""
    if name in builtins:
        return None
    found = load(group, name)
    if found is None:
        return None
    plugin, factory = found
    if not callable(factory):
        raise broken(plugin, "is not callable")
    return plugin, factory


def load_embedder(name: str) -> Embedder | None:
    """The embedder of the ``ragport.embedders`` entry point ``name`` (``None``: none, or a
    built-in name). Its callable is called with no arguments and must return an ``Embedder``
    whose ``id`` is a non-empty string and ``dimensions`` a positive integer."""
    found = _load_callable(EMBEDDERS, name, BUILTIN_EMBEDDERS)
    if found is None:
        return None
    plugin, factory = found
    try:
        embedder = factory()
    except RagportError:
        raise
    except Exception as exc:
        raise_unchained(broken(plugin, f"raised {type(exc).__name__}"))
    if not isinstance(embedder, Embedder):
        raise broken(plugin, f"returned a {type(embedder).__name__}, not an Embedder")
    dims = embedder.dimensions
    if not isinstance(embedder.id, str) or not embedder.id:
        raise broken(plugin, "returned an embedder without a string id")
    if isinstance(dims, bool) or not isinstance(dims, int) or dims <= 0:
        raise broken(plugin, "returned an embedder whose dimensions are not a positive integer")
    return embedder


def unknown_embedder(name: str) -> ValidationError:
    """The error for an embedder name neither built in nor installed."""
    return ValidationError(
        f"unknown embedder {name[:100]!r} (use {', '.join(embedder_names())})", field="embedder"
    )
