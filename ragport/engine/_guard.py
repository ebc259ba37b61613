"""The engine's one translation point: what a backend raises becomes a typed ``StoreError``."""

from __future__ import annotations

from types import TracebackType
from typing import Literal

import attrs

from ragport.domain.errors import RagportError, StoreError, raise_unchained
from ragport.domain.model import Record

__all__ = ["Guard", "hand_out"]


class Guard:
    """``with guard:`` around backend calls: a ``RagportError`` passes unchanged; any other
    ``Exception`` becomes ``StoreError("<provider>: <exception type>")`` with no cause and no
    context (a driver's message may quote parameters, hence document text)."""

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
        if error is None or isinstance(error, RagportError) or not isinstance(error, Exception):
            return False
        name = type(error).__qualname__
        raise_unchained(StoreError(f"{self._provider}: {name}"))


def hand_out(record: Record) -> Record:
    """A copy the caller owns: the constructor runs again, so its metadata is a new deep copy."""
    return attrs.evolve(record)
