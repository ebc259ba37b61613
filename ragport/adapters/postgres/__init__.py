"""PostgreSQL + pgvector adapters (``pip install 'ragport[postgres]'``)."""

from ragport.adapters.postgres.checkpoints import PostgresCheckpointStore
from ragport.adapters.postgres.embedded import (
    EMBEDDED_SETTINGS,
    EmbeddedStatus,
    default_data_dir,
    embedded_server,
    embedded_status,
    stop_embedded_server,
)
from ragport.adapters.postgres.status import PostgresStatusStore
from ragport.adapters.postgres.store import PostgresStore

__all__ = [
    "EMBEDDED_SETTINGS",
    "EmbeddedStatus",
    "PostgresCheckpointStore",
    "PostgresStatusStore",
    "PostgresStore",
    "default_data_dir",
    "embedded_server",
    "embedded_status",
    "stop_embedded_server",
]
