"""Small runtime seams: abort signals, clocks, redaction and telemetry."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = ["Abort", "Clock", "NoopTelemetry", "Redactor", "Span", "Telemetry"]


@runtime_checkable
class Abort(Protocol):
    """A ``threading.Event``-like signal; use cases check it between steps (``AbortedError``)."""

    def is_set(self) -> bool: ...


class Clock(Protocol):
    """Tells the time (timezone-aware UTC). Injected so tests can fix it."""

    def now(self) -> datetime: ...


class Redactor(Protocol):
    """Removes secrets from text before it is embedded, stored, reranked or rendered."""

    def redact(self, text: str) -> str: ...


class Span(Protocol):
    """An open span. Attribute keys start with ``rag.``; values never hold document text."""

    def set_attribute(self, key: str, value: str | int | float | bool) -> None: ...


class Telemetry(Protocol):
    """Spans and counters with fixed names (``rag.retrieve``, ``rag.embed``, ...)."""

    def span(self, name: str) -> AbstractContextManager[Span]: ...

    def count(self, name: str, value: int = 1) -> None: ...


class _NoopSpan:
    def set_attribute(self, key: str, value: str | int | float | bool) -> None:
        return None


class NoopTelemetry:
    """The default telemetry: does nothing, costs (almost) nothing."""

    @contextmanager
    def span(self, name: str) -> Iterator[Span]:
        yield _NoopSpan()

    def count(self, name: str, value: int = 1) -> None:
        return None
