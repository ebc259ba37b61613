"""Where a corpus's settings are kept for a store opened from a URL (``settings_store``); the
settings and their store are ``ragport.application.corpus_settings``, whose names this module
still answers."""

from __future__ import annotations

from ragport.application.corpus_settings import (
    SETTINGS_ID,
    CorpusSettings,
    CorpusSettingsStore,
    carry_recorded_roots,
)
from ragport.bootstrap.roots import CorpusRoots
from ragport.bootstrap.stores import Stores, is_memory_url

__all__ = [
    "SETTINGS_ID",
    "CorpusSettings",
    "CorpusSettingsStore",
    "carry_recorded_roots",
    "settings_store",
]


def settings_store(stores: Stores, url: str | None, *, key: str) -> CorpusSettingsStore:
    """The settings of ``stores`` (opened from ``url``): in its checkpoint store, unless that
    is only a process-local stand-in beside a store that lasts (a plugin's bare
    ``ChunkStore``); the data-directory roots of older ragports are read for any store but
    ``memory://`` (which keeps nothing)."""
    from ragport.adapters.memory import InMemoryCheckpointStore

    memory = is_memory_url(url)
    checkpoints = stores.checkpoints
    if isinstance(checkpoints, InMemoryCheckpointStore) and not memory:
        checkpoints = None
    return CorpusSettingsStore(checkpoints, roots=None if memory else CorpusRoots(), key=key)
