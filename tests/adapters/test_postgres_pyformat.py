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


@pytest.mark.parametrize(
    ("sql", "expected", "names"),
    [
        ("SELECT :a", "SELECT $1", ("a",)),
        ("x = :b AND y = :a AND z = :b", "x = $1 AND y = $2 AND z = $1", ("b", "a")),
        ("CAST(:q AS text)::regconfig", "CAST($1 AS text)::regconfig", ("q",)),
        ("x LIKE 'a%' AND g = :g AND gens = :gens", "x LIKE 'a%' AND g = $1 AND gens = $2",
         ("g", "gens")),
        ("'english'::regconfig", "'english'::regconfig", ()),
    ],
)  # fmt: skip
def test_numbered_binds_are_postgres_placeholders_one_per_name(
    sql: str, expected: str, names: tuple[str, ...]
) -> None:
    """``statements.numbered``: the form ``psycopg.RawCursor`` sends as it is (no parse per
    call), each name once, in number order."""
    from ragport.adapters.postgres.statements import numbered

    assert numbered(sql) == (expected, names)
    assert numbered(sql) is numbered(sql), "memoised"
