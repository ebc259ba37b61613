"""Stores from a URL (``memory://``, ``postgresql://``, the embedded server, or a scheme an
installed ``ragport.stores`` plugin names), the checkpoint store beside them, embedders by
name (built-in or a ``ragport.embedders`` plugin), a bound ``Rag``, and the wired public entry
points.

``sync_knowledge``, ``replace_document``, ``Rag`` (``ragport.Rag``) and ``open_rag`` are the
use cases with ``parser=`` defaulting to ``ragport.adapters.parsers.parser_for``: the
application keeps requiring an injected parser (it never imports an adapter), the wiring
supplies the default.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeGuard, TypeVar

import attrs

from ragport import application
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore
from ragport.adapters.parsers import parser_for
from ragport.application.runtime import Runtime
from ragport.bootstrap import plugins
from ragport.domain.errors import RagportError, ValidationError, raise_unchained
from ragport.domain.model import Scope
from ragport.engine import BackendStore
from ragport.ports.backend import StorageBackend
from ragport.ports.embedder import Embedder
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore
from ragport.ports.sync import CheckpointStore

EMBEDDED = "embedded"

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _parser_for_by_default(use_case: Callable[_P, _R]) -> Callable[_P, _R]:
    """``use_case`` with ``parser=`` (when omitted or None) set to ``parser_for``."""

    @functools.wraps(use_case)
    def wired(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if kwargs.get("parser") is None:
            kwargs["parser"] = parser_for
        return use_case(*args, **kwargs)

    return wired


sync_knowledge = _parser_for_by_default(application.sync_knowledge)
replace_document = _parser_for_by_default(application.replace_document)


class Rag(application.Rag):
    """``ragport.Rag``: the application's ``Rag`` whose ``replace_document`` parses with
    ``parser_for`` unless given ``parser=``."""

    default_parser = staticmethod(parser_for)


@attrs.frozen
class Stores:
    """A chunk store and an ingestion-status store over one backend, where it lives, and the
    checkpoint store of ``sync`` beside them (``None``: this backend keeps no checkpoints,
    and ``open_checkpoints`` refuses it)."""

    chunks: ChunkStore
    status: IngestionStatusStore
    description: str
    checkpoints: CheckpointStore | None = None


def is_memory_url(url: str | None) -> TypeGuard[str]:
    """``memory://`` (or ``memory``), with or without its ``?lexical_language=`` option."""
    return url is not None and (url == "memory" or url.split("?", 1)[0] == "memory://")


_MEMORY_LANGUAGES = ("simple", "english")


def _memory_language(url: str) -> str | None:
    """``memory://?lexical_language=english``: the in-memory BM25 analyzer (``simple``, the
    default, is ``tokenize_lexical`` alone; ``english`` drops stop words and stems, needing
    ``ragport[lexical]``). Any other option or value is refused naming the store URL."""
    from urllib.parse import parse_qsl

    query = url.partition("?")[2]
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError:
        pairs = [("", "")]  # malformed: refused below
    languages = [value for key, value in pairs if key == "lexical_language"]
    if len(languages) != len(pairs) or len(languages) > 1 or set(languages) - {*_MEMORY_LANGUAGES}:
        raise ValidationError(
            "memory:// takes one option, lexical_language=simple or english "
            "(e.g. memory://?lexical_language=english)",
            field="store",
        )
    return languages[0] if languages and languages[0] != "simple" else None


@contextmanager
def open_stores(
    url: str | None,
    *,
    schema: str = "ragport",
    upgrade: bool | None = None,
    read_url: str | None = None,
    partitions: int | None = None,
) -> Iterator[Stores]:
    """Stores for ``url``: ``memory://``, a ``postgresql://`` URL, or ``None`` / ``embedded``
    for the embedded PostgreSQL server under the user's data directory (started on demand,
    left running for the next command); else the ``ragport.stores`` plugin named by the URL's
    scheme (see ``ragport.bootstrap.plugins``), called with the URL. A plugin returning a bare
    ``ChunkStore`` (or a ``StorageBackend``, which ``BackendStore`` wraps) gets an in-memory status store and checkpoint store (not durable); one
    returning ``Stores`` is used as it is. ``schema`` and ``upgrade`` are PostgreSQL's: a
    plugin store ignores them; ``read_url`` and ``partitions`` it refuses.

    ``upgrade`` applies migrations first: the default is yes for the embedded server (ragport
    owns it) and no for a server someone else runs (use ``ragport db upgrade``).

    ``read_url`` names a streaming replica of the PostgreSQL server: retrieval and status
    reads go there (see ``PostgresStore``). ``partitions`` (with ``upgrade``) creates a new
    schema's tables partitioned by tenant.
    """
    if read_url is not None and not read_url.startswith(
        ("postgresql://", "postgres://", "postgresql+psycopg://")
    ):
        raise ValidationError("the read store must be a postgresql:// URL", field="read_store")
    if is_memory_url(url):
        if read_url is not None:
            raise ValidationError("the in-memory store has no read replica", field="read_store")
        yield Stores(
            InMemoryStore(lexical_language=_memory_language(url)),
            InMemoryStatusStore(),
            "in-memory store",
            InMemoryCheckpointStore(),
        )
        return
    if url not in (None, "", EMBEDDED) and not _is_postgres(url):
        yield _plugin_stores(url, read_url=read_url, partitions=partitions)
        return
    from ragport.adapters.postgres import (
        PostgresCheckpointStore,
        PostgresStatusStore,
        PostgresStore,
    )

    if url in (None, "", EMBEDDED):
        from ragport.adapters.postgres import default_data_dir, embedded_server

        with embedded_server(default_data_dir()) as server_url:
            store = PostgresStore(
                server_url,
                schema=schema,
                create=upgrade is not False,
                read_url=read_url,
                partitions=partitions,
            )
            try:
                yield Stores(
                    store,
                    PostgresStatusStore(store.engine, schema=schema, read_url=store.read_engine),
                    f"embedded PostgreSQL in {default_data_dir()}",
                    PostgresCheckpointStore(store.engine, schema=schema),
                )
            finally:
                _dispose(store)
        return
    assert url is not None
    store = PostgresStore(
        url, schema=schema, create=bool(upgrade), read_url=read_url, partitions=partitions
    )
    status = PostgresStatusStore(store.engine, schema=schema, read_url=store.read_engine)
    checkpoints = PostgresCheckpointStore(store.engine, schema=schema)
    try:
        yield Stores(
            store, status, "PostgreSQL" + (" + read replica" if read_url else ""), checkpoints
        )
    finally:
        _dispose(store)


def _is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://"))


def _plugin_stores(url: str, *, read_url: str | None, partitions: int | None) -> Stores:
    """The stores of the ``ragport.stores`` plugin named by ``url``'s scheme."""
    scheme = plugins.url_scheme(url)
    found = plugins.load_store_factory(scheme) if scheme else None
    if found is None:
        installed = [n for n in plugins.installed_plugins() if n.group == plugins.STORES]
        others = sorted({p.name for p in installed if p.status == "available"})
        hint = f"; installed plugins: {', '.join(others)}" if others else ""
        raise ValidationError(
            f"unsupported store URL scheme {scheme[:40]!r} (built in: memory://, "
            f"postgresql://, embedded{hint})",
            field="store",
        )
    plugin, factory = found
    if read_url is not None:
        raise ValidationError(f"the {scheme} store has no read replica", field="read_store")
    if partitions is not None:
        raise ValidationError(f"the {scheme} store has no partitions", field="partitions")
    try:
        made = factory(url)
    except RagportError:
        raise
    except Exception as exc:  # someone else's code: its message may quote the URL's secret
        raise_unchained(plugins.broken(plugin, f"raised {type(exc).__name__}"))
    if isinstance(made, Stores):
        return made
    if isinstance(made, StorageBackend) and not isinstance(made, ChunkStore):
        made = BackendStore(made)  # the narrow port: the engine makes it a ChunkStore
    if isinstance(made, ChunkStore):
        where = f" ({plugin.distribution})" if plugin.distribution else ""
        return Stores(
            made,
            InMemoryStatusStore(),
            f"{scheme} store{where}, ingestion status and checkpoints in memory",
            InMemoryCheckpointStore(),
        )
    raise plugins.broken(
        plugin, f"returned a {type(made).__name__}, not Stores, a ChunkStore or a StorageBackend"
    )


@contextmanager
def postgres_url(url: str | None) -> Iterator[str]:
    """The PostgreSQL URL behind ``url``: a ``postgresql://`` URL as given, or for ``None`` /
    ``embedded`` the embedded server's (started on demand, left running)."""
    if url in (None, "", EMBEDDED):
        from ragport.adapters.postgres import default_data_dir, embedded_server

        with embedded_server(default_data_dir()) as server_url:
            yield server_url
        return
    assert url is not None
    if not _is_postgres(url):
        raise ValidationError("this command needs a PostgreSQL store", field="store")
    yield url


def _dispose(store: Any) -> None:
    finish = getattr(store, "finish_maintenance", None)
    if finish is not None:
        with contextlib.suppress(RagportError):  # the writes committed; it only logs
            finish()
    store.engine.dispose()
    if store.read_engine is not None:
        store.read_engine.dispose()


def build_embedder(name: str = "minilm") -> Embedder:
    """The embedder named ``name``: ``minilm`` (all-MiniLM-L6-v2 int8, offline; the default)
    or ``hash`` (deterministic, zero dependencies, not semantic), else the ``ragport.embedders``
    plugin of that name (see ``ragport.bootstrap.plugins``)."""
    if name == "minilm":
        from ragport.adapters.embedders import MiniLmEmbedder

        return MiniLmEmbedder()
    if name == "hash":
        return HashEmbedder(dimensions=256)
    embedder = plugins.load_embedder(name) if isinstance(name, str) and name else None
    if embedder is None:
        raise plugins.unknown_embedder(str(name))
    return embedder


def embedder_name_for(embedder_id: str) -> str | None:
    """The ``build_embedder`` name of a stored embedder id (``None`` for one ragport did not build)."""
    if embedder_id.startswith("hash-v1:256"):
        return "hash"
    if embedder_id.startswith("all-minilm-l6-v2"):
        return "minilm"
    return None


@contextmanager
def open_rag(
    url: str | None,
    *,
    scope: Scope,
    embedder: str | Embedder = "minilm",
    schema: str = "ragport",
    upgrade: bool | None = None,
    runtime: Runtime | None = None,
) -> Iterator[Rag]:
    """A ``Rag`` bound to ``scope`` over the stores of ``url`` (see ``open_stores``), with
    the embedder named ``embedder`` (or the one given), the backend's status store and
    ``runtime`` (telemetry, redaction, limits, clock, abort: ``Rag.runtime``)."""
    with open_stores(url, schema=schema, upgrade=upgrade) as stores:
        yield Rag(
            store=stores.chunks,
            embedder=build_embedder(embedder) if isinstance(embedder, str) else embedder,
            scope=scope,
            runtime=runtime,
            status_store=stores.status,
        )


def open_checkpoints(stores: Stores, *, schema: str = "ragport") -> CheckpointStore:
    """The checkpoint store beside ``stores`` (``Stores.checkpoints``): in memory for the
    in-memory store and a plugin's bare ``ChunkStore``, the ``sync_checkpoints`` table of the
    PostgreSQL schema ``open_stores`` was given for PostgreSQL. ``schema`` is kept for
    callers of old; the checkpoints are those of the schema the stores were opened in. Stores
    without one are a ``ValidationError(field="store")``."""
    del schema
    if stores.checkpoints is None:
        raise ValidationError("this store has no checkpoint store beside it", field="store")
    return stores.checkpoints
