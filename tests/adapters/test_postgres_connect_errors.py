"""Why a connection failed: StoreError.reason for a missing database, refused credentials, a
refused connection and a timeout, never with the password in the message."""

from __future__ import annotations

import socket

import pytest
from sqlalchemy.engine import make_url

from ragport.adapters.postgres import PostgresStore
from ragport.domain.errors import StoreError
from ragport.domain.model import Scope

SCOPE = Scope("t", "r", "c")
PASSWORD = "s3cret-pw"


def _fails(url: str) -> StoreError:
    store = PostgresStore(url, create=False)
    try:
        with pytest.raises(StoreError) as info:
            store.current_generation(SCOPE)
    finally:
        store.engine.dispose()
    assert PASSWORD not in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None
    return info.value


def test_a_database_that_does_not_exist(pg_url):
    """A URL naming a missing database on a live server: reason database_missing.

    If this fails, check connect_failure_reason in ragport/adapters/postgres/_driver.py.
    """
    url = make_url(pg_url).set(database="no_such_database_here")
    error = _fails(url.render_as_string(hide_password=False))
    assert error.reason == "database_missing"


def test_refused_credentials():
    """A server that answers the login with SQLSTATE 28P01: reason authentication_failed.

    If this fails, check the sqlstate branch of _translate in _driver.py.
    """
    from fake_postgres import refusing_server

    port, listener = refusing_server("28P01")
    try:
        error = _fails(f"postgresql://u:{PASSWORD}@127.0.0.1:{port}/db")
    finally:
        listener.close()
    assert error.reason == "authentication_failed"


def test_nothing_listening_is_refused():
    """A port nobody listens on: reason refused.

    If this fails, check connect_failure_reason's 'connection refused' match.
    """
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    assert _fails(f"postgresql://u:{PASSWORD}@127.0.0.1:{port}/db").reason == "refused"


def test_a_server_that_never_answers_times_out():
    """A socket that accepts and never speaks, with connect_timeout=1: reason timeout.

    If this fails, check make_engine's connect_timeout and the 'timeout expired' match.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        port = listener.getsockname()[1]
        url = f"postgresql://u:{PASSWORD}@127.0.0.1:{port}/db?connect_timeout=1&sslmode=disable"
        assert _fails(url).reason == "timeout"
    finally:
        listener.close()
