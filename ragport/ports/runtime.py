"""Small runtime seams: abort signals, clocks, redaction and telemetry."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = ["Abort", "Clock", "NoopTelemetry", "Redactor", "Span", "Telemetry"]


@runtime_checkable
class Abort(Protocol):
    """A ``threading.Event``-like signal; use cases check it between steps (``AbortedError``)."""

    def is_set(self) -> bool:
        """Whether the caller asked to stop."""
        ...


class Clock(Protocol):
    """Tells the time (timezone-aware UTC). Injected so tests can fix it."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class Redactor(Protocol):
    """Removes secrets from text before it is embedded, stored, reranked or rendered."""

    def redact(self, text: str) -> str:
        """``text`` with every secret the host knows of replaced."""
        ...


class Span(Protocol):
    """An open span. Attribute keys start with ``rag.``; values never hold document text."""

    def set_attribute(self, key: str, value: str | int | float | bool) -> None:
        """Attach one ``rag.*`` attribute (numbers, booleans, short strings; no text)."""
        ...


class Telemetry(Protocol):
    """Spans and counters with fixed names (``rag.retrieve``, ``rag.embed``, ...)."""

    def span(self, name: str) -> AbstractContextManager[Span]:
        """Open a span named ``name`` (one of the fixed ``rag.*`` names) for the block.

        An exception leaving the block is recorded by its type only, never its message."""
        ...

    def count(self, name: str, value: int = 1) -> None:
        """Add ``value`` to the counter ``name``."""
        ...


class _NoopSpan:
    """A span that records nothing, and its own context manager (no generator per span)."""

    def set_attribute(self, key: str, value: str | int | float | bool) -> None:
        return None

    def __enter__(self) -> _NoopSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NOOP_SPAN = _NoopSpan()


class NoopTelemetry:
    """The default telemetry: does nothing, costs (almost) nothing."""

    def span(self, name: str) -> AbstractContextManager[Span]:
        return _NOOP_SPAN

    def count(self, name: str, value: int = 1) -> None:
        return None
