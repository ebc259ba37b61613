"""Deterministic character chunking (placeholder: being written)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragport.domain.limits import DEFAULT_LIMITS, Limits
from ragport.domain.model import Chunk

__all__ = ["chunk_markdown", "chunk_text"]


def chunk_text(
    text: str,
    *,
    source_id: str,
    size: int = DEFAULT_LIMITS.chunk_size,
    overlap: int = DEFAULT_LIMITS.overlap,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[Chunk, ...]:
    raise NotImplementedError


def chunk_markdown(
    markdown: str,
    *,
    source_id: str,
    size: int = DEFAULT_LIMITS.chunk_size,
    overlap: int = DEFAULT_LIMITS.overlap,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[Chunk, ...]:
    raise NotImplementedError
