"""Use cases: orchestrate the domain and the ports. No SQL, no HTTP, no file I/O."""

from ragport.application.admission import ReadmitResult, readmit_source
from ragport.application.batch import (
    ReplaceBatchResult,
    SourceFailure,
    SourceWrite,
    replace_sources,
)
from ragport.application.context import (
    ContextBlock,
    Evidence,
    RagContextProvider,
    evidence_from_citation,
)
from ragport.application.documents import document_skip_key, replace_document
from ragport.application.erasure import DerivedErasureHandler
from ragport.application.facade import Rag
from ragport.application.forgetting import (
    DeletionPropagator,
    PropagationResult,
    RagDeletionHandler,
    RenameBatchResult,
    RenameEvent,
    RenameFailure,
    RepointResult,
    apply_source_renames,
    create_deletion_propagator,
    index_derived,
    repoint_source,
)
from ragport.application.generations import compact, publish_generation, rollback_generation
from ragport.application.indexing import delete_source, index_chunks, replace_source
from ragport.application.ingest import IngestOptions
from ragport.application.rerank import rerank_hits
from ragport.application.results import (
    CompactResult,
    IndexResult,
    ReplaceResult,
    RetrievalResult,
    RollbackResult,
)
from ragport.application.retrieval import estimate_tokens, retrieve_context
from ragport.application.retrieval_request import RetrievalRequest
from ragport.application.runtime import Runtime
from ragport.application.shared_generation import SharedGeneration
from ragport.application.status import list_ingestion_status
from ragport.application.sync import SyncFailure, SyncOptions, SyncResult, sync_knowledge
from ragport.application.write_options import WriteOptions

__all__ = [
    "CompactResult",
    "ContextBlock",
    "DeletionPropagator",
    "DerivedErasureHandler",
    "Evidence",
    "IndexResult",
    "IngestOptions",
    "PropagationResult",
    "Rag",
    "RagContextProvider",
    "RagDeletionHandler",
    "ReadmitResult",
    "RenameBatchResult",
    "RenameEvent",
    "RenameFailure",
    "ReplaceBatchResult",
    "ReplaceResult",
    "RepointResult",
    "RetrievalRequest",
    "RetrievalResult",
    "RollbackResult",
    "Runtime",
    "SharedGeneration",
    "SourceFailure",
    "SourceWrite",
    "SyncFailure",
    "SyncOptions",
    "SyncResult",
    "WriteOptions",
    "apply_source_renames",
    "compact",
    "create_deletion_propagator",
    "delete_source",
    "document_skip_key",
    "estimate_tokens",
    "evidence_from_citation",
    "index_chunks",
    "index_derived",
    "list_ingestion_status",
    "publish_generation",
    "readmit_source",
    "replace_document",
    "replace_source",
    "replace_sources",
    "repoint_source",
    "rerank_hits",
    "retrieve_context",
    "rollback_generation",
    "sync_knowledge",
]
