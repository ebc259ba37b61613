"""Telemetry adapters (``pip install 'ragport[otel]'`` for OpenTelemetry)."""

from ragport.adapters.telemetry.otel import SPAN_NAMES, OpenTelemetryTelemetry

__all__ = ["SPAN_NAMES", "OpenTelemetryTelemetry"]
