"""The engine's one translation point: what a backend raises becomes a typed ``StoreError``."""

from __future__ import annotations

from types import TracebackType
from typing import Literal

import attrs

from ragport.domain.errors import RagportError, StoreError, raise_unchained
from ragport.domain.model import Record, copy_frozen

__all__ = ["Guard", "hand_out", "take_in"]


class Guard:
    """``with guard:`` around backend calls: a ``RagportError`` passes with its chain cut; any
    other ``Exception`` becomes ``StoreError("<provider>: <exception type>")`` with no cause
    and no context (a driver's message may quote parameters, hence document text)."""

    def __init__(self, provider: str) -> None:
        self._provider = provider

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> Literal[False]:
        if error is None or not isinstance(error, Exception):
            return False
        if isinstance(error, RagportError):
            # A backend's own typed error goes on, but never with what it was raised from
            # (``raise StoreError(...) from exc`` would hand the driver's message on).
            error.__cause__ = None
            error.__context__ = None
            error.__suppress_context__ = True
            return False
        name = type(error).__qualname__
        raise_unchained(StoreError(f"{self._provider}: {name}"))


# Record's slot descriptors: setting through them skips the frozen class's __setattr__.
_SET = {a.name: Record.__dict__[a.name].__set__ for a in attrs.fields(Record)}
_new_record = object.__new__


def take_in(record: Record) -> Record:
    """A caller's record entering a store: the constructor runs again (every check), so the
    store's copy shares no metadata dict or list with the caller's."""
    return attrs.evolve(record)


def hand_out(record: Record) -> Record:
    """A copy of a stored record for a caller: its metadata is its own, so writing to what a
    read returned never changes the store.

    A ``Record`` was validated (and its metadata frozen to JSON types) when it was built, and
    it is frozen, so the copy skips the constructor's checks (2 us instead of 16 us a record);
    anything that is not exactly a ``Record`` goes through ``attrs.evolve``. Every field is
    named here (``tests/adapters/test_memory_hand_out.py`` fails when one is missing).
    """
    if type(record) is not Record:
        return attrs.evolve(record)
    out = _new_record(Record)
    _SET["id"](out, record.id)
    _SET["scope"](out, record.scope)
    _SET["source_id"](out, record.source_id)
    _SET["kind"](out, record.kind)
    _SET["text"](out, record.text)
    _SET["metadata"](out, copy_frozen(record.metadata))
    _SET["embedder_id"](out, record.embedder_id)
    _SET["dimensions"](out, record.dimensions)
    _SET["generation"](out, record.generation)
    _SET["retired_generation"](out, record.retired_generation)
    _SET["content_hash"](out, record.content_hash)
    _SET["lineage"](out, record.lineage)
    _SET["roots"](out, record.roots)
    _SET["chunk_index"](out, record.chunk_index)
    _SET["start"](out, record.start)
    _SET["end"](out, record.end)
    return out
