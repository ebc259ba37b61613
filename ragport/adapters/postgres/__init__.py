"""PostgreSQL + pgvector adapters (``pip install 'ragport[postgres]'``)."""

from ragport.adapters.postgres.backup import copy_schema, dump_schema, restore_schema
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
    "copy_schema",
    "default_data_dir",
    "dump_schema",
    "embedded_server",
    "restore_schema",
    "stop_embedded_server",
]
