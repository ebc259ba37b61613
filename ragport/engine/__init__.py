"""The generation engine: ``ChunkStore`` written once over the narrow ``StorageBackend`` port.

A new store adapter implements the 15 members of ``ragport.ports.backend`` and wraps its
backend: ``BackendStore(MyBackend(...))`` is a full ``ChunkStore`` (docs/adapters.md).
"""

from ragport.engine.copies import hand_out, take_in
from ragport.engine.ranking import rank_by_cosine
from ragport.engine.store import BackendStore
from ragport.engine.unit_of_work import BackendUnitOfWork

__all__ = ["BackendStore", "BackendUnitOfWork", "hand_out", "rank_by_cosine", "take_in"]
