"""The engine's one translation point: what a backend raises becomes a typed ``StoreError``."""

from __future__ import annotations

from types import TracebackType
from typing import Literal

from ragport.domain.errors import RagportError, StoreError, raise_unchained

__all__ = ["Guard"]


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
