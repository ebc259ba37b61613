"""Every default and hard ceiling in one frozen value object.

``DEFAULT_LIMITS`` holds the defaults; ``HARD_LIMITS`` holds the ceilings no configuration may
pass. Constructing a :class:`Limits` with any field above its hard ceiling (or below its floor)
raises :class:`~ragport.domain.errors.ValidationError` naming the field: ragport never clamps
and never truncates input silently.

Input caps (``document_chars``, ``chunks_per_source``, ``metadata_bytes``) are enforced with the
``limits=`` a caller passes; per-call parameters (``size``, ``top_k``, ...) default to the
values here and are checked against ``HARD_LIMITS``.
"""

from __future__ import annotations

from typing import Any

import attrs

from ragport.domain.errors import ValidationError

__all__ = ["DEFAULT_LIMITS", "HARD_LIMITS", "Limits", "check_limit"]

# field -> (default, hard ceiling, floor)
_TABLE: dict[str, tuple[int, int, int]] = {
    "chunk_size": (1_000, 16_384, 1),
    "overlap": (100, 4_096, 0),
    "document_chars": (1_048_576, 8_388_608, 1),
    "chunks_per_source": (2_048, 8_192, 1),
    "embed_batch": (32, 128, 1),
    "embed_concurrency": (4, 16, 1),
    "top_k": (5, 32, 1),
    "query_candidates": (20, 128, 1),
    "result_bytes": (65_536, 524_288, 1),
    "context_tokens": (2_000, 8_000, 1),
    "metadata_bytes": (8_192, 65_536, 2),
    "scopes_per_retrieve": (8, 8, 0),
    "group_ids": (32, 32, 0),
    "rrf_k": (60, 1_000, 1),
    "rerank_bytes": (65_536, 262_144, 1),
    "rerank_ms": (2_000, 10_000, 1),
    "rerank_concurrency": (2, 8, 1),
    "status_page": (50, 200, 1),
    "parse_ms": (30_000, 30_000, 1),
    "pdf_pages": (256, 4_096, 1),
    "parse_bytes": (1_048_576, 8_388_608, 1),
    "inflated_bytes": (33_554_432, 134_217_728, 1),
    "html_depth": (512, 2_000, 1),
    "lineage_depth": (8, 8, 1),
    "propagation_edges": (4_096, 4_096, 1),
    "repoint_page": (4_096, 4_096, 1),
    "compact_keep": (1, 1_000_000, 0),
}


def check_limit(name: str, value: int, ceiling: int | None = None) -> int:
    """Return ``value`` if it lies within ``name``'s floor and ``ceiling`` (default: the hard one).

    Raises ``ValidationError(field=name, limit=name)`` otherwise. ``bool`` is not an int here.
    """
    _default, hard, floor = _TABLE[name]
    top = hard if ceiling is None else ceiling
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be an integer", field=name, limit=name)
    if value < floor:
        raise ValidationError(
            f"{name} must be at least {floor} (got {value})", field=name, limit=name
        )
    if value > top:
        raise ValidationError(
            f"{name} is past its ceiling of {top} (got {value})", field=name, limit=name
        )
    return value


def _validate(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    check_limit(attribute.name, value)


def _field(name: str) -> Any:
    return attrs.field(default=_TABLE[name][0], validator=_validate)


@attrs.frozen
class Limits:
    """Defaults and caps for one deployment; every field is bounded by ``HARD_LIMITS``."""

    chunk_size: int = _field("chunk_size")
    overlap: int = _field("overlap")
    document_chars: int = _field("document_chars")
    chunks_per_source: int = _field("chunks_per_source")
    embed_batch: int = _field("embed_batch")
    embed_concurrency: int = _field("embed_concurrency")
    top_k: int = _field("top_k")
    query_candidates: int = _field("query_candidates")
    result_bytes: int = _field("result_bytes")
    context_tokens: int = _field("context_tokens")
    metadata_bytes: int = _field("metadata_bytes")
    scopes_per_retrieve: int = _field("scopes_per_retrieve")
    group_ids: int = _field("group_ids")
    rrf_k: int = _field("rrf_k")
    rerank_bytes: int = _field("rerank_bytes")
    rerank_ms: int = _field("rerank_ms")
    rerank_concurrency: int = _field("rerank_concurrency")
    status_page: int = _field("status_page")
    parse_ms: int = _field("parse_ms")
    pdf_pages: int = _field("pdf_pages")
    parse_bytes: int = _field("parse_bytes")
    inflated_bytes: int = _field("inflated_bytes")
    html_depth: int = _field("html_depth")
    lineage_depth: int = _field("lineage_depth")
    propagation_edges: int = _field("propagation_edges")
    repoint_page: int = _field("repoint_page")
    compact_keep: int = _field("compact_keep")

    def __attrs_post_init__(self) -> None:
        if self.overlap >= self.chunk_size:
            raise ValidationError(
                "overlap must be smaller than chunk_size", field="overlap", limit="overlap"
            )


DEFAULT_LIMITS = Limits()
HARD_LIMITS = Limits(**{name: spec[1] for name, spec in _TABLE.items()})
