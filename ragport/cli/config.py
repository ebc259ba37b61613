"""Where a command's store, scope and embedder come from: options, environment, ``ragport.toml``
(found upward from the current directory), built-in defaults; and ``ragport config``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from ragport.bootstrap import (
    CliConfig,
    Stores,
    build_embedder,
    embedder_name_for,
    load_config,
    open_stores,
)
from ragport.bootstrap.config import config_changes, config_disabled, locate_config
from ragport.bootstrap.stores import is_memory_url
from ragport.cli.options import Parents, command
from ragport.cli.output import EXIT_OK, _json, _note, _table
from ragport.domain.errors import (
    EmbedderMismatchError,
    RagportError,
    ValidationError,
)
from ragport.domain.limits import Limits, ceiling_field
from ragport.domain.model import Scope
from ragport.ports.embedder import Embedder


def _option(args: argparse.Namespace, name: str) -> Any:
    """The option ``name`` of ``args``, ``None`` when the command has no such option."""
    return vars(args).get(name)


def _config(args: argparse.Namespace) -> CliConfig:
    """The ``ragport.toml`` in effect (read once per command): none with ``--no-config`` or
    ``RAGPORT_NO_CONFIG``; one not from the user's own configuration directory is announced
    on stderr, with what it changes."""
    cached = _option(args, "_config")
    if isinstance(cached, CliConfig):
        return cached
    found = None if _no_config(args) else locate_config(Path.cwd())
    config = load_config(found.path) if found is not None else CliConfig()
    if found is not None and not found.own:
        _announce(found.path, config, args)
    args._config = config
    args._config_path = found.path if found is not None else None
    return config


def _no_config(args: argparse.Namespace) -> bool:
    return bool(_option(args, "no_config")) or config_disabled()


def _announce(path: Path, config: CliConfig, args: argparse.Namespace) -> None:
    """Name on stderr, on every command, a ragport.toml that is not the user's own (found in
    the current folder or above it: a cloned repository may hold one) and what it changes."""
    changes = config_changes(config)
    shown = []
    for key, value in changes.items():
        if key == "store":
            overridden = _option(args, "store") or os.environ.get("RAGPORT_STORE")
            note = " (not used: --store or RAGPORT_STORE wins)" if overridden else ""
            shown.append(f"store {_redact_url(str(value))}{note}")
        else:
            shown.append(f"{key}={value}")
    what = ", ".join(shown) if shown else "nothing"
    _note(
        f"configuration from {path} (not your own config directory) changes: {what}; "
        "to ignore it pass --no-config or set RAGPORT_NO_CONFIG=1"
    )


def _resolve(args: argparse.Namespace) -> None:
    """Fill the options left unset from ragport.toml, then the built-in defaults."""
    config = _config(args)
    given = vars(args)
    defaults = {"schema": config.schema, "tenant": config.tenant, "resource": config.resource}
    for name, default in defaults.items():
        if name in given and given[name] is None:
            setattr(args, name, default)
    if _option(args, "corpus_many"):
        if not args.corpus:
            args.corpus = [config.corpus]
    elif "corpus" in given and args.corpus is None:
        args.corpus = config.corpus
    if args.command == "query":
        if args.top_k is None:
            args.top_k = config.query.top_k
        if args.mode is None:
            # --lexical alone asks for the fused (hybrid) mode, as it always has.
            args.mode = "hybrid" if args.lexical is not None else config.query.mode
        if args.lexical is None and args.mode != "vector":
            args.lexical = config.query.lexical
    if "rerank" in given and args.rerank is None:
        args.rerank = config.query.rerank


def _limits(args: argparse.Namespace) -> Limits:
    """The caps of ``ingest`` and ``sync``: ``[limits]`` in ragport.toml (its keys raise their
    ceilings), then ``--max-bytes``, ``--timeout`` (CPU seconds) and ``--wall-timeout``, each
    checked against the ceiling in effect here, before any store opens: past it is a
    ``ValidationError`` naming the flag."""
    from ragport.bootstrap.ingest import ingest_limits

    base = _config(args).limits.limits()
    where = _option(args, "_config_path")
    hint = f"raise it with [limits] {{key}} in {where or 'ragport.toml'} (docs/limits.md)"
    max_bytes = _option(args, "max_bytes")
    if max_bytes is None:
        max_bytes = base.parse_bytes
    try:
        base.ceilings.check("parse_bytes", max_bytes)
    except ValidationError as exc:
        raise ValidationError(
            f"--max-bytes: {exc}; {hint.format(key='parse_bytes')}",
            field="max_bytes",
            limit="parse_bytes",
        ) from None
    for flag, key in (("timeout", "parse_ms"), ("wall_timeout", "parse_wall_ms")):
        seconds = _option(args, flag)
        if seconds is not None:
            base = _with_seconds(base, flag, key, seconds, hint)
    return ingest_limits(max_bytes, base=base)


def _with_seconds(base: Limits, flag: str, key: str, seconds: float, hint: str) -> Limits:
    """``base`` with the limit ``key`` (milliseconds) set from ``--FLAG SECONDS``, or a
    ``ValidationError`` naming the flag, its ceiling and (for a raisable one) the toml key."""
    import math

    ms = round(seconds * 1000) if math.isfinite(seconds) and seconds > 0 else 0
    try:
        changes: dict[str, Any] = {key: base.ceilings.check(key, ms)}
        return attrs.evolve(base, **changes)
    except ValidationError as exc:
        option = "--" + flag.replace("_", "-")
        ceiling = base.ceilings.of(key) / 1000
        raised = "; " + hint.format(key=key) if ceiling_field(key) else ""
        raise ValidationError(
            f"{option} must be above 0 and at most {ceiling:g} seconds (got {seconds:g})" + raised,
            field=flag,
            limit=exc.limit,
        ) from None


def _store_url(args: argparse.Namespace) -> str | None:
    return args.store or os.environ.get("RAGPORT_STORE") or _config(args).store or None


def _read_url(args: argparse.Namespace) -> str | None:
    return _option(args, "read_store") or os.environ.get("RAGPORT_READ_STORE") or None


def _scope(args: argparse.Namespace, corpus: str | None = None) -> Scope:
    name = corpus if corpus is not None else args.corpus
    if isinstance(name, list):
        name = name[0]
    return Scope(args.tenant, args.resource, name)


def _is_memory(url: str | None) -> bool:
    return is_memory_url(url)


def _stores(
    args: argparse.Namespace, *, upgrade: bool | None = None, partitions: int | None = None
) -> Any:
    url = _store_url(args)
    if _is_memory(url):
        _note("warning: memory:// keeps nothing: every command starts from an empty store")
    return open_stores(
        url, schema=args.schema, upgrade=upgrade, read_url=_read_url(args), partitions=partitions
    )


def _embedder(args: argparse.Namespace, stores: Stores, scopes: Sequence[Scope]) -> Embedder:
    """``--embedder``, else the embedder the corpus was ingested with, else ragport.toml's.

    An explicit embedder other than the corpus's is refused (it would mix vector spaces).
    """
    recorded: set[str] = set()
    for scope in scopes:
        for embedder_id, _dims in stores.chunks.list_embedders(scope):
            if embedder_id is not None:
                recorded.add(embedder_id)
    wanted: str | None = args.embedder
    if wanted is None:
        names = {embedder_name_for(e) for e in recorded}
        wanted = names.pop() if len(names) == 1 else None
        if wanted is None and len(recorded) == 1:
            wanted = _plugin_embedder_for(next(iter(recorded)))
        wanted = wanted or _config(args).embedder
    embedder = build_embedder(wanted)
    if recorded and embedder.id not in recorded:
        raise EmbedderMismatchError(
            f"corpus {scopes[0].corpus_id!r} was embedded with {', '.join(sorted(recorded))}, "
            f"not {embedder.id}; to switch, run `ragport reindex --embedder {wanted} "
            f"--corpus {scopes[0].corpus_id}`",
            expected_id=embedder.id,
            expected_dimensions=embedder.dimensions,
            found_id=sorted(recorded)[0],
            found_dimensions=None,
        )
    return embedder


def _plugin_embedder_for(embedder_id: str) -> str | None:
    """The installed ``ragport.embedders`` plugin whose embedder has ``embedder_id``.

    Only for a corpus embedded by no built-in: each available plugin is built in turn (one
    that fails is passed over here, since none was asked for by name).
    """
    from ragport.bootstrap.plugins import EMBEDDERS, installed_plugins, load_embedder

    for row in installed_plugins():
        if row.group != EMBEDDERS or row.status != "available":
            continue
        try:
            candidate = load_embedder(row.name)
        except RagportError:
            continue
        if candidate is not None and candidate.id == embedder_id:
            return row.name
    return None


def _config_show(args: argparse.Namespace) -> int:
    config = _config(args)
    path = _option(args, "_config_path")
    store = args.store or os.environ.get("RAGPORT_STORE") or config.store
    where = (
        "--store"
        if args.store
        else "RAGPORT_STORE"
        if os.environ.get("RAGPORT_STORE")
        else str(path)
        if config.store
        else "default"
    )
    values = {**_json.unstructure(config), "store": _redact_url(store) if store else "embedded"}
    from ragport.bootstrap.plugins import installed_plugins

    plugins = [_json.unstructure(p) for p in installed_plugins()]
    if args.json:
        print(
            json.dumps(
                {"file": str(path) if path else None, "store_from": where, **values}
                | {"plugins": plugins},
                indent=2,
            )
        )
    else:
        none = (
            "(ignored: --no-config or RAGPORT_NO_CONFIG)"
            if _no_config(args)
            else "(none found upward from here, nor in your config directory)"
        )
        print(f"configuration file: {path or none}")
        print(f"store ({where}): {values['store']}")
        _table(
            ["key", "value"],
            [(k, v) for k, v in values.items() if k not in ("store", "query", "limits")]
            + [(f"query.{k}", v) for k, v in values["query"].items()]
            + [(f"limits.{k}", v) for k, v in values["limits"].items() if v is not None],
        )
        if plugins:
            print("installed plugins (entry points; built-ins come first):")
            _table(
                ["group", "name", "object", "distribution", "status"],
                [
                    (p["group"], p["name"], p["value"], p["distribution"] or "", p["status"])
                    for p in plugins
                ],
            )
        else:
            print(
                "installed plugins: none (entry point groups ragport.stores, "
                "ragport.embedders, ragport.parsers)"
            )
    return EXIT_OK


def _redact_url(url: str) -> str:
    """The URL with any password (``user:PASSWORD@`` or a ``password=`` parameter) replaced
    by ``***``."""
    import re

    url = re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", url)
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, at, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in credentials else ''}{at}{host}"


def register(sub: Any, parents: Parents) -> None:
    """``config`` on ``sub``."""
    config = command(sub, "config", "show the configuration in effect and where it came from",
                     ["ragport config"], [parents.stored, parents.one_corpus, parents.json_out])  # fmt: skip
    config.set_defaults(func=_config_show)
