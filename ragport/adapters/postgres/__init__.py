"""PostgreSQL + pgvector adapters (``pip install 'ragport[postgres]'``)."""

from ragport.adapters.postgres.backend import PostgresBackend
from ragport.adapters.postgres.backup import copy_schema, dump_schema, restore_schema
from ragport.adapters.postgres.checkpoints import PostgresCheckpointStore
from ragport.adapters.postgres.embedded import (
    EMBEDDED_SETTINGS,
    EmbeddedStatus,
    default_data_dir,
    embedded_server,
    embedded_status,
    stop_embedded_server,
)
from ragport.adapters.postgres.host_migrations import (
    alembic_include_name,
    migrate,
    pending_sql,
)
from ragport.adapters.postgres.settings import VectorIndexSettings, WriteSettings
from ragport.adapters.postgres.status import PostgresStatusStore
from ragport.adapters.postgres.store import PostgresStore

__all__ = [
    "EMBEDDED_SETTINGS",
    "EmbeddedStatus",
    "PostgresBackend",
    "PostgresCheckpointStore",
    "PostgresStatusStore",
    "PostgresStore",
    "VectorIndexSettings",
    "WriteSettings",
    "alembic_include_name",
    "copy_schema",
    "default_data_dir",
    "dump_schema",
    "embedded_server",
    "embedded_status",
    "migrate",
    "pending_sql",
    "restore_schema",
    "stop_embedded_server",
]
