"""A corpus's sources over ``Stores`` (``ragport sources``); the listing and re-embedding
themselves are ``ragport.application.corpus``, whose names this module still answers."""

from __future__ import annotations

from collections.abc import Iterator

from ragport.application.corpus import (
    FORGOTTEN,
    ReindexResult,
    SourceRow,
    list_corpus_sources,
    reindex_corpus,
)
from ragport.bootstrap.stores import Stores
from ragport.domain.model import Scope

__all__ = ["FORGOTTEN", "ReindexResult", "SourceRow", "list_sources", "reindex_corpus"]


def list_sources(
    stores: Stores,
    scope: Scope,
    *,
    start: str | None = None,
    limit: int | None = None,
    counts: bool = True,
) -> Iterator[SourceRow]:
    """``list_corpus_sources`` over the chunk and status stores of ``stores``."""
    return list_corpus_sources(
        stores.chunks, stores.status, scope, start=start, limit=limit, counts=counts
    )
