"""In-memory adapters: the reference fakes. They pass every contract suite."""

from ragport.adapters.memory.checkpoints import InMemoryCheckpointStore
from ragport.adapters.memory.status import InMemoryStatusStore
from ragport.adapters.memory.store import InMemoryStore

__all__ = ["InMemoryCheckpointStore", "InMemoryStatusStore", "InMemoryStore"]
