"""Every default and hard ceiling in one frozen value object.

``DEFAULT_LIMITS`` holds the defaults; ``HARD_LIMITS`` holds the default ceilings. Constructing
a :class:`Limits` with any field above its ceiling (or below its floor) raises
:class:`~ragport.domain.errors.ValidationError` naming the field: ragport never clamps and
never truncates input silently.

Six ceilings about the size of one document (``parse_bytes``, ``parse_ms``,
``document_chars``, ``chunks_per_source``, ``pdf_pages``, ``inflated_bytes``) can be raised
by an operator, explicitly: ``Limits(ceilings=Ceilings(parse_bytes=...), parse_bytes=...)``.
A :class:`Ceilings` lies between ``HARD_LIMITS`` (it only raises) and ``ABSOLUTE_CAPS``, which
nothing passes. ``binary_bytes`` (the file cap of PDF and DOCX, whose bytes are not their
text; their extracted text stays under ``parse_bytes``) shares the ceiling of ``parse_bytes``.

A parse is budgeted by CPU time, not by the clock, so a busy machine does not fail ordinary
documents: ``parse_ms`` is the CPU time one document's parse may use (its worker process's,
or the parsing thread's for the in-process parsers), ``parse_wall_ms`` a much larger
wall-clock backstop for a parse that waits without computing.

Input caps (``document_chars``, ``chunks_per_source``, ``metadata_bytes``) are enforced with the
``limits=`` a caller passes; per-call parameters (``size``, ``top_k``, ...) default to the
values here and are checked against ``HARD_LIMITS``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import attrs

from ragport.domain.errors import ValidationError

__all__ = [
    "ABSOLUTE_CAPS",
    "DEFAULT_CEILINGS",
    "DEFAULT_LIMITS",
    "HARD_LIMITS",
    "RAISABLE",
    "Ceilings",
    "Limits",
    "ceiling_field",
    "check_ceilings",
    "check_limit",
    "how_to_raise",
]

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
    "group_ids": (1_024, 65_536, 0),
    "rrf_k": (60, 1_000, 1),
    "rerank_bytes": (65_536, 262_144, 1),
    # The seam's default suits a remote reranker; a model on a CPU needs local_rerank_ms (the
    # command line's default for the local and embedding kinds; docs/rerankers.md measures it).
    "rerank_ms": (2_000, 300_000, 1),
    "local_rerank_ms": (90_000, 300_000, 1),
    "rerank_concurrency": (2, 8, 1),
    "status_page": (50, 200, 1),
    "parse_ms": (30_000, 300_000, 1),
    "parse_wall_ms": (600_000, 3_600_000, 1),
    "pdf_pages": (256, 4_096, 1),
    "parse_bytes": (1_048_576, 8_388_608, 1),
    "binary_bytes": (8_388_608, 8_388_608, 1),
    "inflated_bytes": (33_554_432, 134_217_728, 1),
    "html_depth": (512, 2_000, 1),
    "lineage_depth": (8, 8, 1),
    "propagation_edges": (4_096, 4_096, 1),
    "repoint_page": (4_096, 4_096, 1),
    "compact_keep": (1, 1_000_000, 0),
    # A batched write (ingest of a folder, Rag.replace_sources): sources and chunks per
    # transaction; the chunks bound the vectors held in memory (a larger source goes alone).
    "write_batch": (100, 1_000, 1),
    "write_batch_chunks": (4_096, 65_536, 1),
}

# field -> absolute cap: the most a raised ceiling (``Ceilings``) may allow
_ABSOLUTE: dict[str, int] = {
    "parse_bytes": 268_435_456,  # 256 MiB
    "parse_ms": 600_000,  # 10 minutes
    "document_chars": 268_435_456,  # 256 Mi characters
    "chunks_per_source": 65_536,
    "pdf_pages": 65_536,
    "inflated_bytes": 1_073_741_824,  # 1 GiB
}
RAISABLE: tuple[str, ...] = tuple(_ABSOLUTE)
"""The fields whose ceiling a :class:`Ceilings` may raise."""

# field -> its default ceiling before it rose (issue 43: parse_ms became CPU time, 30 s -> 300 s);
# a Ceilings written for the old one, between the two, still holds, with a DeprecationWarning
_FORMER_HARD: dict[str, int] = {"parse_ms": 30_000}

# field -> the raisable field whose ceiling it shares: a PDF or DOCX file may be as large as
# any document may (its extracted text stays under ``parse_bytes``)
_SHARED: dict[str, str] = {"binary_bytes": "parse_bytes"}


_HOW_TO_RAISE: dict[str, str] = {
    "parse_bytes": "Limits.parse_bytes, ragport --max-bytes",
    "binary_bytes": "Limits.binary_bytes, [limits] binary_bytes in ragport.toml",
    "parse_ms": "Limits.parse_ms, ragport --timeout",
    "parse_wall_ms": "Limits.parse_wall_ms, ragport --wall-timeout",
}


def how_to_raise(name: str) -> str:
    """Where an operator raises the limit ``name`` (the ``Limits`` field, and the command-line
    option or ``ragport.toml`` key), for the message of a refusal at that limit."""
    return _HOW_TO_RAISE.get(name, f"Limits.{name}, [limits] {name} in ragport.toml")


def ceiling_field(name: str) -> str | None:
    """The :class:`Ceilings` field that bounds the ``Limits`` field ``name``, ``None`` when its
    ceiling is fixed (``binary_bytes`` shares the ceiling of ``parse_bytes``)."""
    name = _SHARED.get(name, name)
    return name if name in _ABSOLUTE else None


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


def _check_ceiling(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    name = attribute.name
    _default, hard, _floor = _TABLE[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"the {name} ceiling must be an integer", field=name, limit=name)
    if value < hard and value >= _FORMER_HARD.get(name, hard):
        warnings.warn(
            f"the {name} ceiling is {hard} by default now: Ceilings({name}={value}) lowers it; "
            f"leave {name} out of Ceilings",
            DeprecationWarning,
            stacklevel=3,
        )
    elif value < hard:
        raise ValidationError(
            f"the {name} ceiling cannot go below its default ceiling of {hard} (got {value}); "
            f"set the limit itself lower instead",
            field=name,
            limit=name,
        )
    if value > _ABSOLUTE[name]:
        raise ValidationError(
            f"the {name} ceiling is past its absolute cap of {_ABSOLUTE[name]} (got {value})",
            field=name,
            limit=name,
        )


def _ceiling(name: str) -> Any:
    return attrs.field(default=_TABLE[name][1], validator=_check_ceiling)


@attrs.frozen
class Ceilings:
    """Raised ceilings for the limits of one document, an operator's explicit choice.

    Each field defaults to its ``HARD_LIMITS`` value and may be raised up to
    ``ABSOLUTE_CAPS``; below the default ceiling or above the absolute cap is a
    ``ValidationError`` naming the field (never clamped). A ``Limits`` built with
    ``ceilings=`` checks these fields against them instead of ``HARD_LIMITS``; the parsers,
    loaders and connectors take ``ceilings=`` for their ``max_bytes=`` / ``timeout_s=`` /
    ``max_pages=`` / ``max_inflated_bytes=`` checks.
    """

    parse_bytes: int = _ceiling("parse_bytes")
    parse_ms: int = _ceiling("parse_ms")
    document_chars: int = _ceiling("document_chars")
    chunks_per_source: int = _ceiling("chunks_per_source")
    pdf_pages: int = _ceiling("pdf_pages")
    inflated_bytes: int = _ceiling("inflated_bytes")

    def of(self, name: str) -> int:
        """The ceiling of any ``Limits`` field: raised here, else its hard one."""
        name = _SHARED.get(name, name)
        return int(getattr(self, name)) if name in _ABSOLUTE else _TABLE[name][1]

    def check(self, name: str, value: int) -> int:
        """``check_limit(name, value)`` against this ceiling."""
        return check_limit(name, value, self.of(name))


DEFAULT_CEILINGS = Ceilings()
ABSOLUTE_CAPS = Ceilings(**_ABSOLUTE)


def check_ceilings(value: object) -> Ceilings:
    """``value`` when it is a ``Ceilings``, else ``ValidationError(field="ceilings")``."""
    if not isinstance(value, Ceilings):
        raise ValidationError("ceilings must be a Ceilings", field="ceilings")
    return value


def _validate(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    # attrs runs validators once every field is set, so ``ceilings`` is there already
    check_limit(attribute.name, value, instance.ceilings.of(attribute.name))


def _field(name: str) -> Any:
    return attrs.field(default=_TABLE[name][0], validator=_validate)


def _to_ceilings(value: Ceilings | Mapping[str, int]) -> Ceilings:
    """A ``Ceilings``, or a mapping of its fields (``attrs.asdict`` of a ``Limits`` round-trips),
    checked against the absolute caps all the same."""
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(RAISABLE))
        if unknown:
            raise ValidationError(f"{unknown[0]!r} is not a raisable ceiling", field="ceilings")
        return Ceilings(**value)
    return check_ceilings(value)


@attrs.frozen
class Limits:
    """Defaults and caps for one deployment; every field is bounded by its ceiling:
    ``HARD_LIMITS``, or for the fields of ``RAISABLE`` the ``ceilings=`` given."""

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
    parse_wall_ms: int = _field("parse_wall_ms")
    binary_bytes: int = _field("binary_bytes")
    local_rerank_ms: int = _field("local_rerank_ms")  # after the others: positions unchanged
    write_batch: int = _field("write_batch")
    write_batch_chunks: int = _field("write_batch_chunks")
    ceilings: Ceilings = attrs.field(default=DEFAULT_CEILINGS, kw_only=True, converter=_to_ceilings)

    def __attrs_post_init__(self) -> None:
        if self.overlap >= self.chunk_size:
            raise ValidationError(
                "overlap must be smaller than chunk_size", field="overlap", limit="overlap"
            )


DEFAULT_LIMITS = Limits()
_HARD: dict[str, Any] = {name: spec[1] for name, spec in _TABLE.items()}
HARD_LIMITS = Limits(**_HARD)
