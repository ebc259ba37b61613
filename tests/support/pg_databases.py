"""A fresh database on the test server, for tests that need one without the ``vector`` extension
(the session database has it in ``public``) or that run documentation verbatim on the default
schema names."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.engine import make_url

__all__ = ["fresh_database"]


@contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """The URL of a new, empty database on ``server_url``'s server; dropped afterwards (with
    the connections still open to it)."""
    name = "db_" + uuid.uuid4().hex[:16]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
