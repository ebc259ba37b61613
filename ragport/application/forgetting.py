"""Forgetting and moving, one module per use case (kept as one import path).

- ``ragport.application.derived``: ``index_derived``.
- ``ragport.application.propagation``: ``DeletionPropagator``, ``create_deletion_propagator``,
  ``RagDeletionHandler``.
- ``ragport.application.repoint``: ``repoint_source``, ``apply_source_renames``.
"""

from ragport.application.derived import index_derived
from ragport.application.propagation import (
    DeletionPropagator,
    PropagationResult,
    RagDeletionHandler,
    create_deletion_propagator,
)
from ragport.application.repoint import (
    RenameBatchResult,
    RenameEvent,
    RenameFailure,
    RepointResult,
    apply_source_renames,
    repoint_source,
)

__all__ = [
    "DeletionPropagator",
    "PropagationResult",
    "RagDeletionHandler",
    "RenameBatchResult",
    "RenameEvent",
    "RenameFailure",
    "RepointResult",
    "apply_source_renames",
    "create_deletion_propagator",
    "index_derived",
    "repoint_source",
]
