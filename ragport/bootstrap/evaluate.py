"""Reading the files of ``ragport eval`` bounded, with the file loader; the evaluation itself
(parsing, metrics, the runner) is ``ragport.application.evaluation``, whose names this module
still answers for its callers of old.

``read_judged_file`` reads a queries, qrels or documents file as the loaders read a document:
resolved, then opened without blocking and checked on its descriptor (a FIFO, a device such as
``/dev/zero`` or a socket is refused, even behind a symlink), and read to at most
``MAX_FILE_BYTES`` + 1 bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

from ragport.application.evaluation import (
    CUTOFF,
    MAX_FILE_BYTES,
    MAX_ID_CHARS,
    MAX_JUDGMENTS,
    MAX_QUERIES,
    MAX_QUERY_CHARS,
    MODES,
    EvalConfig,
    EvalResult,
    JudgedDocument,
    Query,
    QueryScore,
    evaluate,
    mrr_at,
    ndcg_at,
    parse_documents,
    parse_qrels,
    parse_queries,
    percentile,
    recall_at,
    retriever,
)
from ragport.domain.errors import LoadError, ValidationError
from ragport.domain.limits import HARD_LIMITS, Ceilings

__all__ = [
    "CUTOFF",
    "MAX_FILE_BYTES",
    "MAX_ID_CHARS",
    "MAX_JUDGMENTS",
    "MAX_QUERIES",
    "MAX_QUERY_CHARS",
    "MODES",
    "EvalConfig",
    "EvalResult",
    "JudgedDocument",
    "Query",
    "QueryScore",
    "evaluate",
    "mrr_at",
    "ndcg_at",
    "parse_documents",
    "parse_qrels",
    "parse_queries",
    "percentile",
    "read_judged_file",
    "recall_at",
    "retriever",
]

_UNREADABLE = {  # LoadError.reason -> why a judged file is refused
    "not_found": "not found",
    "not_a_file": "not a regular file (a folder, FIFO, device or socket is refused)",
    "too_large": "over {max_bytes} bytes",
    "outside_root": "changed while it was opened",
}


def read_judged_file(
    path: str | os.PathLike[str], *, field: str, max_bytes: int = MAX_FILE_BYTES
) -> str:
    """The UTF-8 text of the file ``path`` (``field``: ``queries``, ``qrels`` or ``documents``,
    as the errors name it), read bounded like a document (see step 1); otherwise a
    ``ValidationError(field=field)`` naming the file (``limit="max_bytes"`` when too large)."""
    from ragport.adapters.loaders.file import FileDocumentLoader

    def refuse(why: str, limit: str | None = None) -> ValidationError:
        return ValidationError(f"{field} file {os.fspath(path)}: {why}", field=field, limit=limit)

    try:
        resolved = Path(path).resolve(strict=True)
    except (OSError, RuntimeError, ValueError):  # missing, a symlink loop, a NUL
        raise refuse("not found") from None
    try:
        loader = FileDocumentLoader(
            root=resolved.parent,
            max_bytes=max_bytes,
            ceilings=Ceilings(parse_bytes=max(max_bytes, HARD_LIMITS.parse_bytes)),
        )
        data = loader.load(resolved.name).data
    except LoadError as exc:
        why = _UNREADABLE.get(exc.reason, "cannot be read").format(max_bytes=max_bytes)
        raise refuse(why, "max_bytes" if exc.reason == "too_large" else None) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise refuse("not UTF-8") from None
