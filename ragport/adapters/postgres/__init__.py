"""PostgreSQL + pgvector adapters (``pip install 'ragport[postgres]'``)."""

from ragport.adapters.postgres.checkpoints import PostgresCheckpointStore
from ragport.adapters.postgres.embedded import (
    EMBEDDED_SETTINGS,
    default_data_dir,
    embedded_server,
    stop_embedded_server,
)
from ragport.adapters.postgres.status import PostgresStatusStore
from ragport.adapters.postgres.store import PostgresStore

__all__ = [
    "EMBEDDED_SETTINGS",
    "PostgresCheckpointStore",
    "PostgresStatusStore",
    "PostgresStore",
    "default_data_dir",
    "embedded_server",
    "stop_embedded_server",
]
