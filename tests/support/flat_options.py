"""Tests that vary one retrieval option at a time pass it by name; ``flat`` folds such names
into the ``request=RetrievalRequest(...)`` and ``runtime=Runtime(...)`` retrieve_context takes."""

from __future__ import annotations

from typing import Any

import attrs

from ragport import RetrievalRequest, Runtime, WriteOptions

REQUEST_FIELDS = frozenset(a.name for a in attrs.fields(RetrievalRequest) if a.init)
RUNTIME_FIELDS = frozenset(a.name for a in attrs.fields(Runtime) if a.init)


def flat(**kwargs: Any) -> dict[str, Any]:
    """``kwargs`` with request and runtime fields moved into ``request=`` / ``runtime=``."""
    request = {k: kwargs.pop(k) for k in list(kwargs) if k in REQUEST_FIELDS}
    runtime = {k: kwargs.pop(k) for k in list(kwargs) if k in RUNTIME_FIELDS}
    if request:
        kwargs["request"] = RetrievalRequest(**request)
    if runtime:
        kwargs["runtime"] = Runtime(**runtime)
    return kwargs


WRITE_FIELDS = frozenset(a.name for a in attrs.fields(WriteOptions) if a.init)


def flat_write(**kwargs: Any) -> dict[str, Any]:
    """``flat`` for a write use case: write-option names go into ``write_options=``."""
    write = {k: kwargs.pop(k) for k in list(kwargs) if k in WRITE_FIELDS}
    if write:
        kwargs["write_options"] = WriteOptions(**write)
    return flat(**kwargs)


def http_parts(**kwargs: Any) -> dict[str, Any]:
    """An HTTP adapter's flat transport names (client, allow_loopback, timeout_s, ...) moved
    into ``http=HttpOptions(...)``; for a Drive connector, its settings into
    ``options=DriveOptions(...)`` too (see ``drive_parts``)."""
    from ragport.adapters.http_options import HTTP_KEYWORDS, HttpOptions

    http = {k: kwargs.pop(k) for k in list(kwargs) if k in HTTP_KEYWORDS}
    if http:
        kwargs["http"] = HttpOptions(**http)
    return kwargs


def drive_parts(**kwargs: Any) -> dict[str, Any]:
    """``http_parts`` plus the Drive settings moved into ``options=DriveOptions(...)``."""
    from ragport.adapters.connectors import DriveOptions

    names = {a.name for a in attrs.fields(DriveOptions)}
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
    if options:
        kwargs["options"] = DriveOptions(**options)
    return http_parts(**kwargs)
