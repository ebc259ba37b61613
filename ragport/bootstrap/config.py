"""``ragport.toml``: store, scope, embedder, query defaults and ``[limits]``, found upward from a
folder (only through folders the current user owns, up to the home folder or a repository
root), else in the user's own configuration directory (``user_config_file``).

``locate_config`` says which file applies and whether it is the user's own (from their
configuration directory) or one found upward (perhaps planted by a cloned repository: the
command line names it, and what it changes, on every run); ``config_changes`` lists what a
file changes from the built-in defaults.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

import attrs

from ragport.domain.errors import ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, Ceilings, Limits, ceiling_field


@attrs.frozen
class QueryDefaults:
    """``[query]`` in ragport.toml: defaults for ``ragport query``."""

    top_k: int = 5
    mode: str = "vector"
    lexical: str | None = None
    rerank: str | None = None


@attrs.frozen
class LimitsConfig:
    """``[limits]`` in ragport.toml: the per-document caps of ``ingest`` and ``sync``, each one
    an operator's choice that also raises its ceiling (``Ceilings``) up to ``ABSOLUTE_CAPS``.

    A key left out keeps its default (and its default ceiling, ``HARD_LIMITS``). A key set is
    the value those commands use (``parse_bytes`` the default of ``--max-bytes``, ``parse_ms``
    of ``--timeout``, ``parse_wall_ms`` of ``--wall-timeout``) and the ceiling their flags may
    go up to (or its default ceiling, when that is higher); ``binary_bytes`` (the file cap of
    PDF and DOCX) raises the ceiling it shares with ``parse_bytes``. ``parse_wall_ms`` has a
    fixed ceiling (``HARD_LIMITS``).
    """

    parse_bytes: int | None = None
    parse_ms: int | None = None
    document_chars: int | None = None
    chunks_per_source: int | None = None
    pdf_pages: int | None = None
    inflated_bytes: int | None = None
    parse_wall_ms: int | None = None
    binary_bytes: int | None = None

    def limits(self) -> Limits:
        """``DEFAULT_LIMITS`` with the keys set here, under the ceilings they raise."""
        given = {k: v for k, v in attrs.asdict(self).items() if v is not None}
        raised: dict[str, int] = {}
        for key, value in given.items():
            name = ceiling_field(key)
            if name is not None:
                raised[name] = max(value, raised.get(name, 0), Ceilings().of(name))
        return attrs.evolve(DEFAULT_LIMITS, ceilings=Ceilings(**raised), **given)


LIMIT_KEYS: tuple[str, ...] = tuple(a.name for a in attrs.fields(LimitsConfig))


@attrs.frozen
class CliConfig:
    """A ``ragport.toml``: store, scope, embedder and query defaults (every key optional)."""

    store: str | None = None
    schema: str = "ragport"
    tenant: str = "local"
    resource: str = "default"
    corpus: str = "default"
    embedder: str = "minilm"
    encoding: str = "utf-8"  # ingest and sync folder: utf-8, auto or a codec name
    query: QueryDefaults = QueryDefaults()
    limits: LimitsConfig = LimitsConfig()


CONFIG_FILE = "ragport.toml"
NO_CONFIG_ENV = "RAGPORT_NO_CONFIG"


@attrs.frozen
class ConfigFile:
    """A ``ragport.toml`` that applies: its path, and ``own``: whether it is the user's own
    file (``user_config_file``) rather than one found upward from the current folder."""

    path: Path
    own: bool


def user_config_file(environ: Mapping[str, str] | None = None) -> Path | None:
    """The user's own ``ragport.toml``: ``$XDG_CONFIG_HOME/ragport/ragport.toml``, else
    ``~/.config/ragport/ragport.toml`` (on Windows ``%APPDATA%\\ragport\\ragport.toml``);
    ``None`` when there is no home folder to put it in."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or (env.get("APPDATA") if os.name == "nt" else None)
    if base and Path(base).is_absolute():
        return Path(base) / "ragport" / CONFIG_FILE
    try:
        return Path.home() / ".config" / "ragport" / CONFIG_FILE
    except (OSError, RuntimeError):
        return None


def config_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``RAGPORT_NO_CONFIG`` asks for no configuration file at all (any value but
    empty, ``0``, ``false`` or ``no``)."""
    env = os.environ if environ is None else environ
    return env.get(NO_CONFIG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def locate_config(start: Path, *, home: Path | None = None) -> ConfigFile | None:
    """The ``ragport.toml`` that applies from ``start``: the nearest one upward
    (``find_config``), else the user's own (``user_config_file``), else ``None``. Either is
    refused (``ValidationError``) when another user owns it or others may write it."""
    own = user_config_file()
    found = find_config(start, home=home)
    if found is not None:
        return ConfigFile(found, own=own is not None and _same_file(found, own))
    if own is not None and own.is_file():
        _check_trusted(own, os.getuid() if hasattr(os, "getuid") else None)
        return ConfigFile(own, own=True)
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False


def config_changes(config: CliConfig) -> dict[str, object]:
    """What ``config`` changes from the built-in defaults, as ``{key: value}``: ``store``
    first, then each ``limits.KEY``, then the other keys (``query.KEY`` for ``[query]``)."""
    defaults = attrs.asdict(CliConfig())
    changed: dict[str, object] = {}
    if config.store is not None:
        changed["store"] = config.store
    for key, value in attrs.asdict(config.limits).items():
        if value is not None:
            changed[f"limits.{key}"] = value
    for key, value in attrs.asdict(config).items():
        if key in ("store", "limits"):
            continue
        if isinstance(value, dict):
            changed.update({f"{key}.{k}": v for k, v in value.items() if v != defaults[key][k]})
        elif value != defaults[key]:
            changed[key] = value
    return changed


def find_config(start: Path, *, home: Path | None = None) -> Path | None:
    """The nearest trusted ``ragport.toml`` in ``start`` or a folder above it.

    The search goes up from ``start`` and stops: before the first folder not owned by the
    current user (its file is not read), and after the home folder (``home``, default
    ``Path.home()``) and after a repository root (a folder holding ``.git``). A file found
    that is not owned by the current user, or that others (group or world) may write, is a
    ``ValidationError(field="config")`` naming it: it is refused, never skipped for one
    further up. Where the operating system has no user ids (Windows) only the home and
    repository stops apply.
    """
    uid = os.getuid() if hasattr(os, "getuid") else None
    try:
        stop_home = (home if home is not None else Path.home()).resolve()
    except (OSError, RuntimeError):  # no home folder to stop at
        stop_home = None
    start = start.resolve()
    for folder in [start, *start.parents]:
        try:
            owner = folder.stat().st_uid
        except OSError:
            return None
        if uid is not None and owner != uid:
            return None
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            _check_trusted(candidate, uid)
            return candidate
        if folder == stop_home or (folder / ".git").exists():
            return None
    return None


def _check_trusted(path: Path, uid: int | None) -> None:
    # A symlink is judged by its own owner too: in a folder others may write, a link planted
    # by them to a file the user owns would otherwise pass.
    link = path.lstat()
    info = path.stat()
    if uid is not None and (info.st_uid != uid or link.st_uid != uid):
        raise ValidationError(
            f"{path} is not owned by the current user: refusing to read it", field="config"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ValidationError(
            f"{path} is writable by other users: refusing to read it (chmod go-w {path})",
            field="config",
        )


def _toml_position(exc: ValueError) -> str:
    """`` at line L, column C`` of a TOML error (never the file's text)."""
    line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
    if not isinstance(line, int):  # Python < 3.14 keeps the position only in the message
        found = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        if found is None:
            found = re.search(r"\(at end of document\)", str(exc))
            return " at the end of the file" if found else ""
        line, column = int(found[1]), int(found[2])
    return f" at line {line}, column {column}"


def load_config(path: Path) -> CliConfig:
    """Read ``path`` (TOML); an unknown key or a wrong type is a ``ValidationError`` naming it."""
    import tomllib

    import cattrs

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(
            f"{path} is not valid TOML{_toml_position(exc)}", field="config"
        ) from None
    except (OSError, UnicodeError) as exc:
        raise ValidationError(
            f"{path} is not readable TOML ({type(exc).__name__})", field="config"
        ) from None
    # [limits] is read here, strictly: cattrs would turn 1.5 or "16" into an integer
    limits = _limits_table(data.pop("limits", {}), path)
    converter = cattrs.Converter(forbid_extra_keys=True)
    try:
        config = attrs.evolve(converter.structure(data, CliConfig), limits=limits)
    except (cattrs.BaseValidationError, cattrs.ForbiddenExtraKeysError) as exc:
        found = "; ".join(cattrs.transform_error(exc, path=str(path)))
        raise ValidationError(f"invalid configuration: {found}", field="config") from None
    if config.query.mode not in ("vector", "lexical", "hybrid"):
        raise ValidationError(
            f"{path}: query.mode must be vector, lexical or hybrid", field="query.mode"
        )
    from ragport.bootstrap.plugins import embedder_names

    if config.embedder not in embedder_names():  # the built-ins, then installed plugins
        names = ", ".join(embedder_names())
        raise ValidationError(f"{path}: embedder must be one of {names}", field="embedder")
    return config


def _limits_table(table: object, path: Path) -> LimitsConfig:
    """``[limits]``: only the keys of ``LimitsConfig``, integers, within floor and ceiling
    (``ABSOLUTE_CAPS`` for the raisable ones); anything else is a
    ``ValidationError(field="limits.KEY")`` naming the key and the file."""
    if not isinstance(table, dict):
        raise ValidationError(f"{path}: limits must be a table ([limits])", field="limits")
    for key, value in table.items():
        if key not in LIMIT_KEYS:
            raise ValidationError(
                f"{path}: limits.{key} is not a key of [limits] (one of {', '.join(LIMIT_KEYS)})",
                field=f"limits.{key}",
            )
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"{path}: limits.{key} must be an integer", field=f"limits.{key}")
    config = LimitsConfig(**table)
    try:
        config.limits()
    except ValidationError as exc:
        key = f"limits.{exc.field}"
        raise ValidationError(f"{path}: {key}: {exc}", field=key, limit=exc.limit) from None
    return config
