"""Ports: the typing.Protocol interfaces the application needs from the outside world.

Each docstring states the promises an adapter makes; ``ragport.contract_tests`` checks them.
"""

from ragport.ports.embedder import Embedder, Vector, VectorMatrix
from ragport.ports.runtime import Abort, Clock, NoopTelemetry, Redactor, Span, Telemetry
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import (
    ChunkStore,
    GenerationRepository,
    GrantRepository,
    RecordRepository,
    ScoredRecord,
    TombstoneRepository,
    UnitOfWork,
)

__all__ = [
    "Abort",
    "ChunkStore",
    "Clock",
    "Embedder",
    "GenerationRepository",
    "GrantRepository",
    "IngestionStatusStore",
    "NoopTelemetry",
    "RecordRepository",
    "Redactor",
    "ScoredRecord",
    "Span",
    "Telemetry",
    "TombstoneRepository",
    "UnitOfWork",
    "Vector",
    "VectorMatrix",
]
