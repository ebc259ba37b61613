"""Ports: the typing.Protocol interfaces the application needs from the outside world.

Each docstring states the promises an adapter makes; ``ragport.contract_tests`` checks them.
"""

from ragport.ports.derived import DerivedArtifactHandler
from ragport.ports.documents import DocumentLoader, LoadedDocument, ParsedDocument, Parser
from ragport.ports.embedder import Embedder, Vector, VectorMatrix
from ragport.ports.lexical import LexicalIndex
from ragport.ports.rerank import LocalRerankRuntime, Reranker, RerankScorer
from ragport.ports.runtime import Abort, Clock, NoopTelemetry, Redactor, Span, Telemetry
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import (
    ChunkStore,
    GenerationRepository,
    GrantRepository,
    RecordRepository,
    ScoredRecord,
    SupportsLexicalSearch,
    TombstoneRepository,
    UnitOfWork,
)
from ragport.ports.sync import CheckpointStore, Connector, ConnectorPage

__all__ = [
    "Abort",
    "CheckpointStore",
    "ChunkStore",
    "Clock",
    "Connector",
    "ConnectorPage",
    "DerivedArtifactHandler",
    "DocumentLoader",
    "Embedder",
    "GenerationRepository",
    "GrantRepository",
    "IngestionStatusStore",
    "LexicalIndex",
    "LoadedDocument",
    "LocalRerankRuntime",
    "NoopTelemetry",
    "ParsedDocument",
    "Parser",
    "RecordRepository",
    "Redactor",
    "RerankScorer",
    "Reranker",
    "ScoredRecord",
    "Span",
    "SupportsLexicalSearch",
    "Telemetry",
    "TombstoneRepository",
    "UnitOfWork",
    "Vector",
    "VectorMatrix",
]
