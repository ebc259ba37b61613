"""``ragport.toml``: store, scope, embedder and query defaults, found upward from a folder."""

from __future__ import annotations

from pathlib import Path

import attrs

from ragport.domain.errors import ValidationError


@attrs.frozen
class QueryDefaults:
    """``[query]`` in ragport.toml: defaults for ``ragport query``."""

    top_k: int = 5
    mode: str = "vector"
    lexical: str | None = None
    rerank: str | None = None


@attrs.frozen
class CliConfig:
    """A ``ragport.toml``: store, scope, embedder and query defaults (every key optional)."""

    store: str | None = None
    schema: str = "ragport"
    tenant: str = "local"
    resource: str = "default"
    corpus: str = "default"
    embedder: str = "minilm"
    query: QueryDefaults = QueryDefaults()


CONFIG_FILE = "ragport.toml"


def find_config(start: Path) -> Path | None:
    """The nearest ``ragport.toml`` in ``start`` or a folder above it."""
    for folder in [start, *start.parents]:
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
    return None


def load_config(path: Path) -> CliConfig:
    """Read ``path`` (TOML); an unknown key or a wrong type is a ``ValidationError`` naming it."""
    import tomllib

    import cattrs

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, tomllib.TOMLDecodeError) as exc:
        raise ValidationError(
            f"{path} is not readable TOML ({type(exc).__name__})", field="config"
        ) from None
    converter = cattrs.Converter(forbid_extra_keys=True)
    try:
        config = converter.structure(data, CliConfig)
    except (cattrs.BaseValidationError, cattrs.ForbiddenExtraKeysError) as exc:
        found = "; ".join(cattrs.transform_error(exc, path=str(path)))
        raise ValidationError(f"invalid configuration: {found}", field="config") from None
    if config.query.mode not in ("vector", "lexical", "hybrid"):
        raise ValidationError(
            f"{path}: query.mode must be vector, lexical or hybrid", field="query.mode"
        )
    if config.embedder not in ("minilm", "hash"):
        raise ValidationError(f"{path}: embedder must be minilm or hash", field="embedder")
    return config
