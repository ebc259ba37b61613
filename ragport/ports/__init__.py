"""Ports: the typing.Protocol interfaces the application needs from the outside world.

Each docstring states the promises an adapter makes; ``ragport.contract_tests`` checks them.
Every public name of every port module is re-exported here (a test pins it).
"""

from ragport.ports.backend import (
    BackendReader,
    BackendWriter,
    GenerationState,
    RowKey,
    StorageBackend,
)
from ragport.ports.borrowed import SupportsBorrowedQuery
from ragport.ports.derived import (
    DerivedArtifactHandler,
)
from ragport.ports.documents import (
    DocumentLoader,
    LoadedDocument,
    ParsedDocument,
    Parser,
)
from ragport.ports.embedder import (
    Embedder,
    Vector,
    VectorMatrix,
)
from ragport.ports.history import (
    GenerationChange,
    SupportsGenerationHistory,
    check_history_args,
)
from ragport.ports.lexical import (
    LexicalIndex,
)
from ragport.ports.rerank import (
    LocalRerankRuntime,
    Reranker,
    RerankScorer,
    SupportsInterruptibleRerank,
    SupportsInterruptibleScore,
)
from ragport.ports.runtime import (
    Abort,
    Clock,
    NoopTelemetry,
    Redactor,
    Span,
    Telemetry,
)
from ragport.ports.status import (
    IngestionStatusStore,
)
from ragport.ports.store import (
    ChunkStore,
    EmbedderKey,
    GuardedQuery,
    HybridAnswer,
    OptionalCapability,
    ScoredRecord,
    StoredVersion,
    SupportsForgottenLookup,
    SupportsGuardedQuery,
    SupportsLexicalSearch,
    SupportsPreparation,
    check_records_for_add,
    check_rekey_moves,
    check_stored_ids,
    declared,
    missing_methods,
    rekey_collides,
    supports,
)
from ragport.ports.sync import (
    Checkpoint,
    CheckpointStore,
    Connector,
    Page,
    SupportsCheckpointsInUnitOfWork,
    Upsert,
)
from ragport.ports.unit_of_work import (
    GenerationRepository,
    GrantRepository,
    RecordRepository,
    TombstoneRepository,
    UnitOfWork,
)

__all__ = [
    "Abort",
    "BackendReader",
    "BackendWriter",
    "Checkpoint",
    "CheckpointStore",
    "ChunkStore",
    "Clock",
    "Connector",
    "DerivedArtifactHandler",
    "DocumentLoader",
    "Embedder",
    "EmbedderKey",
    "GenerationChange",
    "GenerationRepository",
    "GenerationState",
    "GrantRepository",
    "GuardedQuery",
    "HybridAnswer",
    "IngestionStatusStore",
    "LexicalIndex",
    "LoadedDocument",
    "LocalRerankRuntime",
    "NoopTelemetry",
    "OptionalCapability",
    "Page",
    "ParsedDocument",
    "Parser",
    "RecordRepository",
    "Redactor",
    "RerankScorer",
    "Reranker",
    "RowKey",
    "ScoredRecord",
    "Span",
    "StorageBackend",
    "StoredVersion",
    "SupportsBorrowedQuery",
    "SupportsCheckpointsInUnitOfWork",
    "SupportsForgottenLookup",
    "SupportsGenerationHistory",
    "SupportsGuardedQuery",
    "SupportsInterruptibleRerank",
    "SupportsInterruptibleScore",
    "SupportsLexicalSearch",
    "SupportsPreparation",
    "Telemetry",
    "TombstoneRepository",
    "UnitOfWork",
    "Upsert",
    "Vector",
    "VectorMatrix",
    "check_history_args",
    "check_records_for_add",
    "check_rekey_moves",
    "check_stored_ids",
    "declared",
    "missing_methods",
    "rekey_collides",
    "supports",
]
