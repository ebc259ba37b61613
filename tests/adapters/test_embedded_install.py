"""The embedded server belongs to one installation: a server running from other binaries (or
from removed ones) is restarted with this installation's, and the data directory records which."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from ragport.adapters.postgres import (
    embedded,
    embedded_server,
    embedded_status,
    stop_embedded_server,
)


@pytest.fixture
def data_dir():
    base = Path(tempfile.mkdtemp(prefix="ragport-install-"))
    yield base / "postgres"
    stop_embedded_server(base / "postgres")
    shutil.rmtree(base, ignore_errors=True)


def test_a_server_from_other_binaries_is_restarted_and_recorded(data_dir, monkeypatch):
    """With a server running on the data directory, an installation whose binaries live
    elsewhere stops it and starts its own (a new pid), and records its binaries and version;
    `db status` reports them.

    If this fails, check _stop_foreign_server and the record written in embedded_server
    (ragport/adapters/postgres/embedded.py).
    """
    with embedded_server(data_dir):
        pass
    first = embedded_status(data_dir)
    assert first.running and first.ours
    assert first.recorded_binaries == first.our_binaries and first.size_bytes > 0

    real = embedded._our_binaries()
    monkeypatch.setattr(embedded, "_our_binaries", lambda: (Path("/elsewhere/bin"), "0.0"))
    with embedded_server(data_dir):
        pass
    record = json.loads(embedded._record_path(data_dir).read_text())
    assert record == {"binaries": "/elsewhere/bin", "version": "0.0"}
    monkeypatch.setattr(embedded, "_our_binaries", lambda: real)
    second = embedded_status(data_dir)
    assert second.running and second.pid != first.pid
