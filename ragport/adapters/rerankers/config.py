"""``resolve_reranker``: a reranker from a plain mapping (a TOML table, a JSON object, a dict).

``{"kind": ..., ...}`` where ``kind`` is one of ``local``, ``embedding``, ``tei``,
``openai-compatible``, ``voyage``, ``fake`` or ``none``, and the other keys are that kind's
constructor arguments (plain JSON/TOML types only)::

    {"kind": "tei", "base_url": "https://rerank.internal", "max_batch": 32}
    {"kind": "embedding", "embedder": "minilm"}
    {"kind": "none"}                                   # -> None: no reranking

The mapping is structured with a cattrs converter that forbids unknown keys and does not
coerce: ``"2000"`` is not an int and ``"false"`` is not a bool. Every problem is a
``ValidationError`` whose ``field`` is the key at fault (``"kind"`` for a missing or unknown
kind) and whose message lists cattrs' findings with their paths (``reranker.timeout_ms``).
Values are never quoted in messages, so an ``api_key`` cannot leak through one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import cattrs

from ragport.domain.errors import ValidationError
from ragport.ports.rerank import Reranker

__all__ = ["RERANKER_KINDS", "resolve_reranker"]

_ROOT = "reranker"


@attrs.frozen
class _Local:
    model: str
    cache_dir: str | None = None
    allow_remote_models: bool = False


@attrs.frozen
class _Embedding:
    embedder: str
    batch_size: int = 8


@attrs.frozen
class _Tei:
    base_url: str
    model: str | None = None
    timeout_ms: int = 2_000
    max_response_bytes: int = 65_536
    api_key: str | None = None
    allow_loopback: bool = False
    max_batch: int | None = None


@attrs.frozen
class _OpenAICompatible:
    base_url: str
    model: str
    api_key: str | None = None
    timeout_ms: int = 2_000
    max_response_bytes: int = 65_536
    allow_loopback: bool = False


@attrs.frozen
class _Voyage:
    api_key: str
    model: str = "rerank-2"
    base_url: str = "https://api.voyageai.com/v1"
    timeout_ms: int = 2_000
    max_response_bytes: int = 65_536
    allow_loopback: bool = False


@attrs.frozen
class _Nothing:
    """A kind without options (``fake``, ``none``)."""


def _build_local(spec: _Local) -> Reranker:
    from ragport.adapters.rerankers.local import LocalReranker

    return LocalReranker(
        spec.model, cache_dir=spec.cache_dir, allow_remote_models=spec.allow_remote_models
    )


def _build_embedding(spec: _Embedding) -> Reranker:
    from ragport.adapters.rerankers.simple import EmbeddingReranker

    if spec.embedder == "hash":
        from ragport.adapters.embedders.hash import HashEmbedder

        return EmbeddingReranker(HashEmbedder(), batch_size=spec.batch_size)
    if spec.embedder == "minilm":
        from ragport.adapters.embedders import MiniLmEmbedder

        return EmbeddingReranker(MiniLmEmbedder(), batch_size=spec.batch_size)
    raise ValidationError('embedder must be "hash" or "minilm"', field="embedder")


def _with_http(spec: _Tei | _OpenAICompatible | _Voyage) -> dict[str, Any]:
    """A config table's fields as constructor keywords, its transport in ``http=``."""
    from ragport.adapters.http_options import HttpOptions

    fields = attrs.asdict(spec)
    fields["http"] = HttpOptions(
        allow_loopback=fields.pop("allow_loopback"),
        max_response_bytes=fields.pop("max_response_bytes"),
    )
    return fields


def _build_tei(spec: _Tei) -> Reranker:
    from ragport.adapters.rerankers.http import TeiReranker

    return TeiReranker(**_with_http(spec))


def _build_openai(spec: _OpenAICompatible) -> Reranker:
    from ragport.adapters.rerankers.http import OpenAICompatibleReranker

    return OpenAICompatibleReranker(**_with_http(spec))


def _build_voyage(spec: _Voyage) -> Reranker:
    from ragport.adapters.rerankers.http import VoyageReranker

    return VoyageReranker(**_with_http(spec))


def _build_fake(spec: _Nothing) -> Reranker:
    from ragport.adapters.rerankers.simple import FakeReranker

    return FakeReranker()


def _build_none(spec: _Nothing) -> None:
    return None


_KINDS: dict[str, tuple[type[Any], Callable[[Any], Reranker | None]]] = {
    "local": (_Local, _build_local),
    "embedding": (_Embedding, _build_embedding),
    "tei": (_Tei, _build_tei),
    "openai-compatible": (_OpenAICompatible, _build_openai),
    "voyage": (_Voyage, _build_voyage),
    "fake": (_Nothing, _build_fake),
    "none": (_Nothing, _build_none),
}
RERANKER_KINDS = tuple(_KINDS)


def _strict(kind: type[Any], name: str) -> Callable[[Any, Any], Any]:
    # cattrs would coerce ("2000" -> 2000, "false" -> True); a config file must say what it means.
    def hook(value: Any, _type: Any) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {name}")
        return value

    return hook


def _converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(str, _strict(str, "a string"))
    converter.register_structure_hook(int, _strict(int, "an integer"))
    converter.register_structure_hook(bool, _strict(bool, "true or false"))
    return converter


_CONVERTER = _converter()


def _first_field(exc: BaseException) -> str | None:
    """The key at fault in a cattrs error (the first one, in the converter's order)."""
    if isinstance(exc, cattrs.ClassValidationError):
        with_notes, without = exc.group_exceptions()
        for _inner, note in with_notes:
            return str(note.name)
        for inner in without:
            if isinstance(inner, cattrs.ForbiddenExtraKeysError):
                return sorted(inner.extra_fields)[0]
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return sorted(exc.extra_fields)[0]
    return None


def resolve_reranker(config: Mapping[str, Any]) -> Reranker | None:
    """The reranker ``config`` describes, or ``None`` for ``{"kind": "none"}``.

    Nothing loads or connects here: local models load on the first rerank, HTTP clients
    connect on the first request. Raises ``ValidationError(field=<key>)`` for a non-mapping,
    a missing or unknown ``kind``, an unknown key, a value of the wrong type, or an argument
    the reranker's constructor refuses (its own ``field``).
    """
    if not isinstance(config, Mapping) or not all(isinstance(key, str) for key in config):
        raise ValidationError("a reranker config must be a mapping with string keys", field=_ROOT)
    kind = config.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ValidationError(
            f"{_ROOT}.kind must be one of {', '.join(RERANKER_KINDS)}", field="kind"
        )
    spec_type, build = _KINDS[kind]
    options = {key: value for key, value in config.items() if key != "kind"}
    try:
        spec = _CONVERTER.structure(options, spec_type)
    except (cattrs.BaseValidationError, cattrs.ForbiddenExtraKeysError) as exc:
        found = "; ".join(cattrs.transform_error(exc, path=_ROOT))
        raise ValidationError(
            f"invalid {kind!r} reranker config: {found}", field=_first_field(exc) or _ROOT
        ) from exc
    return build(spec)
