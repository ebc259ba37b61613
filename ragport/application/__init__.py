"""Use cases: orchestrate the domain and the ports. No SQL, no HTTP, no file I/O."""

from ragport.application.generations import compact, publish_generation, rollback_generation
from ragport.application.indexing import delete_source, index_chunks, replace_source
from ragport.application.rerank import rerank_hits
from ragport.application.results import (
    CompactResult,
    IndexResult,
    ReplaceResult,
    RetrievalResult,
    RollbackResult,
)
from ragport.application.retrieval import estimate_tokens, retrieve_context
from ragport.application.status import list_ingestion_status

__all__ = [
    "CompactResult",
    "IndexResult",
    "ReplaceResult",
    "RetrievalResult",
    "RollbackResult",
    "compact",
    "delete_source",
    "estimate_tokens",
    "index_chunks",
    "list_ingestion_status",
    "publish_generation",
    "replace_source",
    "rerank_hits",
    "retrieve_context",
    "rollback_generation",
]
