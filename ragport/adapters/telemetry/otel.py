"""OpenTelemetryTelemetry: ragport's spans and counters on an OpenTelemetry tracer and meter.

Only the fixed span names below are emitted and only attribute keys of the form ``rag.*``
with numeric, boolean or short string values pass; anything else is dropped, so document
text can never reach a trace even if a caller tried.

An exception that leaves a span is recorded by its type only: the span gets
``rag.error.type`` (the class name) and status ERROR without a description. No ``exception``
event, message, stack trace or chained cause is recorded: an embedder or driver error may
quote the text it was given.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["SPAN_NAMES", "OpenTelemetryTelemetry"]

SPAN_NAMES = frozenset(
    {
        "rag.retrieve",
        "rag.embed",
        "rag.vector",
        "rag.lexical",
        "rag.hybrid",
        "rag.fuse",
        "rag.acl_recheck",
        "rag.rerank",
        "rag.render",
        "rag.replace",
        "rag.delete",
        "rag.repoint",
        "rag.readmit",
        "rag.sync.page",
    }
)
_MAX_STRING = 64


def _allowed(key: object, value: object) -> bool:
    if not isinstance(key, str) or not key.startswith("rag."):
        return False
    if isinstance(value, (bool, int, float)):
        return True
    return isinstance(value, str) and len(value) <= _MAX_STRING


class _Span:
    def __init__(self, span: Any):
        self._span = span

    def set_attribute(self, key: str, value: str | int | float | bool) -> None:
        if _allowed(key, value):
            self._span.set_attribute(key, value)


class _Dropped:
    def set_attribute(self, key: str, value: str | int | float | bool) -> None:
        return None


class OpenTelemetryTelemetry:
    """The ``Telemetry`` port on OpenTelemetry. Spans nest under the caller's current span."""

    def __init__(self, tracer: Any | None = None, meter: Any | None = None):
        if tracer is None:
            from opentelemetry import trace

            tracer = trace.get_tracer("ragport")
        self._tracer = tracer
        self._meter = meter
        self._counters: dict[str, Any] = {}

    @contextmanager
    def span(self, name: str) -> Iterator[_Span | _Dropped]:
        if name not in SPAN_NAMES:
            yield _Dropped()
            return
        with self._tracer.start_as_current_span(
            name, record_exception=False, set_status_on_exception=False
        ) as span:
            wrapped = _Span(span)
            try:
                yield wrapped
            except BaseException as exc:
                if not isinstance(exc, GeneratorExit):
                    from opentelemetry.trace import Status, StatusCode

                    wrapped.set_attribute("rag.error.type", type(exc).__name__)
                    span.set_status(Status(StatusCode.ERROR))
                raise

    def count(self, name: str, value: int = 1) -> None:
        if self._meter is None or not name.startswith("rag."):
            return
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = self._meter.create_counter(name)
        counter.add(value)
