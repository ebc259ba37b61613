"""The ``:name`` -> ``%(name)s`` conversion the PostgreSQL store uses for reads on psycopg."""

from __future__ import annotations

import pytest

from ragport.adapters.postgres.reads import pyformat as _pyformat


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT :a", "SELECT %(a)s"),
        ("x = ANY(:ids) AND y = :y2", "x = ANY(%(ids)s) AND y = %(y2)s"),
        ("CAST(:q AS text)::regconfig", "CAST(%(q)s AS text)::regconfig"),
        ("r.embedding::vector(384) <=> :q", "r.embedding::vector(384) <=> %(q)s"),
        ("'english'::regconfig", "'english'::regconfig"),
        ("x LIKE 'a%' AND z = :z", "x LIKE 'a%%' AND z = %(z)s"),
        ("metadata ? CAST(:k AS text)", "metadata ? CAST(%(k)s AS text)"),
    ],
)
def test_binds_become_pyformat_and_nothing_else_changes(sql: str, expected: str) -> None:
    assert _pyformat(sql) == expected
    assert _pyformat(sql) is _pyformat(sql), "memoised"
