"""The jsonb filter compiler: the SQL selects exactly the rows Filter.matches accepts."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from filter_strategies import cases, count_conditions
from hypothesis import assume, given, settings
from sqlalchemy import Connection, Engine, text

from ragport.adapters.postgres.filters import compile_filter
from ragport.domain.filters import Filter, matches, parse_filter, prefix_filter


@pytest.fixture(scope="module")
def conn(pg_engine: Engine) -> Iterator[Connection]:
    """One connection per module holding the temp table ``m`` (it survives commits)."""
    with pg_engine.connect() as connection:
        connection.execute(text("CREATE TEMP TABLE m (i int, metadata jsonb)"))
        connection.commit()
        yield connection


_INSERT = (
    "INSERT INTO m (i, metadata) SELECT (x.n - 1)::int, x.doc "
    "FROM jsonb_array_elements(CAST(:docs AS jsonb)) WITH ORDINALITY AS x(doc, n)"
)


def select(conn: Connection, rows: list[Any], flt: Filter) -> set[int]:
    """Load ``rows`` into ``m`` (a row may be None: SQL NULL) and return the ids the SQL selects."""
    sql, params = compile_filter(flt)
    with conn.begin():
        conn.execute(text("DELETE FROM m"))
        conn.execute(text(_INSERT), {"docs": json.dumps(rows)})
        return {r.i for r in conn.execute(text(f"SELECT i FROM m r WHERE {sql}"), params)}


def expected(rows: list[dict[str, Any]], flt: Filter | None) -> set[int]:
    return {i for i, md in enumerate(rows) if matches(flt, md)}


# -- property ----------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(case=cases())
def test_sql_selects_exactly_what_matches_accepts(
    conn: Connection, case: tuple[list[dict[str, Any]], dict[str, Any]]
) -> None:
    """On random rows and filters the jsonb SQL agrees with Filter.matches. If this fails, check compile_filter against Compare.matches."""
    rows, spec = case
    assume(count_conditions(spec) <= 64)
    flt = parse_filter(spec)
    assume(flt is not None)
    assert flt is not None
    assert select(conn, rows, flt) == expected(rows, flt)


# -- fixed examples ----------------------------------------------------------------------------

ROWS: list[dict[str, Any]] = [
    {"a": 1},  # 0
    {"a": 1.0},  # 1
    {"a": True},  # 2
    {"a": "x"},  # 3
    {"a": None},  # 4
    {},  # 5
    {"a": [1, 2]},  # 6
    {"a": {"k": [1, {"z": None}]}},  # 7
    {"a": 10**23},  # 8
    {"a": 1e23},  # 9
    {"a": "é"},  # 10
    {"a": "B"},  # 11
    {"a": "😀"},  # 12
    {"a": 2.5, "b": "y"},  # 13
    {"b": 1},  # 14
]

FIXED: list[tuple[dict[str, Any], set[int]]] = [
    ({"a": 1}, {0, 1}),
    ({"a": {"$eq": True}}, {2}),
    ({"a": None}, {4}),
    ({"a": [1, 2]}, {6}),
    ({"a": [2, 1]}, set()),
    ({"a": {"k": [1.0, {"z": None}]}}, {7}),
    ({"a": 1e23}, {8, 9}),
    ({"a": {"$ne": 1}}, set(range(15)) - {0, 1}),
    ({"a": {"$in": [1, "x", None]}}, {0, 1, 3, 4}),
    ({"a": {"$in": list(range(100, 356))}}, set()),
    ({"a": {"$nin": [True, "x"]}}, set(range(15)) - {2, 3}),
    ({"a": {"$gt": 1}}, {8, 9, 13}),
    ({"a": {"$gte": 1}}, {0, 1, 8, 9, 13}),
    ({"a": {"$lt": 2.5}}, {0, 1}),
    ({"a": {"$lte": 2.5}}, {0, 1, 13}),
    ({"a": {"$gt": "a"}}, {3, 10, 12}),
    ({"a": {"$lt": "x"}}, {11}),
    ({"a": {"$gte": "\uffff"}}, {12}),
    ({"a": {"$gte": 1, "$lt": 2}}, {0, 1}),
    ({"a": {"$exists": True}}, set(range(15)) - {5, 14}),
    ({"a": {"$exists": False}}, {5, 14}),
    ({"$and": [{"a": 2.5}, {"b": "y"}]}, {13}),
    ({"$or": [{"a": "x"}, {"b": {"$exists": True}}]}, {3, 13, 14}),
    ({"$not": {"a": {"$gt": 1}}}, set(range(15)) - {8, 9, 13}),
    ({"$not": {"$or": [{"a": 1}, {"a": {"$exists": False}}]}}, set(range(15)) - {0, 1, 5, 14}),
    ({"$not": {}}, set()),
    ({"$or": [{}]}, set(range(15))),
]


@pytest.mark.parametrize(("spec", "want"), FIXED)
def test_fixed_examples_per_operator(
    conn: Connection, spec: dict[str, Any], want: set[int]
) -> None:
    """Each operator selects the documented rows in SQL and in Python. If this fails, check compile_filter's branch for that operator."""
    flt = parse_filter(spec)
    assert flt is not None
    assert expected(ROWS, flt) == want
    assert select(conn, ROWS, flt) == want


def test_null_metadata_column_behaves_like_an_empty_object(conn: Connection) -> None:
    """A SQL NULL metadata column matches exactly what {} matches. If this fails, check the coalesce/CASE folding in compile_filter."""
    for spec, _ in FIXED:
        flt = parse_filter(spec)
        assert flt is not None
        assert select(conn, [None], flt) == ({0} if flt.matches({}) else set())


NASTY = ["'; drop table m; --", '"', "\\", '\\"', "it's", ":mf0", "%s", "%(mf0)s", "?", "a$1", "\n"]


def _nasty_specs(x: str) -> list[dict[str, Any]]:
    return [
        {x: x},
        {x: {"$exists": True}},
        {x: {"$in": [x, "x"]}},
        {x: {"$gte": x}},
        {"k": {"$nin": [x]}},
        {"k": [x]},
        {"$not": {"k": x}},
    ]


@pytest.mark.parametrize("nasty", NASTY)
def test_sql_metacharacters_in_keys_and_values_are_data(conn: Connection, nasty: str) -> None:
    """Keys and values with quotes, backslashes or placeholders are bound, never spliced. If this fails, check that compile_filter binds every key and value."""
    rows: list[dict[str, Any]] = [{nasty: nasty}, {nasty: "other"}, {"k": nasty}, {"k": [nasty]}]
    wants = [{0}, {0, 1}, {0}, {0, 1} if nasty <= "other" else {0}, {0, 1, 3}, {3}, {0, 1, 3}]
    for spec, plain, want in zip(_nasty_specs(nasty), _nasty_specs("plain"), wants, strict=True):
        flt, plain_flt = parse_filter(spec), parse_filter(plain)
        assert flt is not None and plain_flt is not None
        sql, params = compile_filter(flt)
        assert sql == compile_filter(plain_flt)[0]  # the SQL text never depends on the data
        assert nasty in params.values() or json.dumps(nasty) in "".join(map(str, params.values()))
        assert expected(rows, flt) == want
        assert select(conn, rows, flt) == want
    assert conn.execute(text("SELECT count(*) FROM m")).scalar_one() == len(rows)
    conn.rollback()


# -- compiler shape ----------------------------------------------------------------------------


def test_bind_parameters_are_unique_and_prefixed() -> None:
    """Parameters are named prefix0, prefix1, ... and each is used. If this fails, check _Compiler.bind."""
    flt = parse_filter(
        {"a": 1, "b": {"$gt": 2, "$in": [1, 2]}, "$or": [{"a": {"$ne": 3}}, {"c": "x"}]}
    )
    assert flt is not None
    sql, params = compile_filter(flt, column="t.meta", prefix="q_")
    assert list(params) == [f"q_{i}" for i in range(len(params))]
    used = set(re.findall(r":(q_\d+)\b", sql))
    assert used == set(params)
    assert params["q_0"] == "a"
    assert sum(1 for v in params.values() if v == "a") == 1  # a key is bound once and reused
    assert "t.meta" in sql and "r.metadata" not in sql


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"column": "r.metadata; drop table m"}, ValueError),
        ({"column": "(select 1)"}, ValueError),
        ({"prefix": "mf-"}, ValueError),
        ({"prefix": "1mf"}, ValueError),
        ({"prefix": ""}, ValueError),
    ],
)
def test_compile_rejects_unsafe_column_or_prefix(
    kwargs: dict[str, str], error: type[Exception]
) -> None:
    """Only dotted identifiers and identifier prefixes reach the SQL text. If this fails, check compile_filter's guards."""
    flt = parse_filter({"a": 1})
    assert flt is not None
    with pytest.raises(error):
        compile_filter(flt, **kwargs)


def test_compile_rejects_unparsed_specs() -> None:
    """A raw mapping must go through parse_filter first. If this fails, check compile_filter's type guard."""
    with pytest.raises(TypeError):
        compile_filter({"a": 1})  # type: ignore[arg-type]


def test_filter_combines_with_other_predicates(conn: Connection) -> None:
    """The compiled SQL is parenthesised and ANDs safely with other bound parameters. If this fails, check the parentheses in _Compiler.compile."""
    flt = parse_filter({"$or": [{"a": 1}, {"a": "x"}]})
    assert flt is not None
    sql, params = compile_filter(flt)
    with conn.begin():
        conn.execute(text("DELETE FROM m"))
        conn.execute(text(_INSERT), {"docs": json.dumps(ROWS)})
        got = {
            r.i
            for r in conn.execute(
                text(f"SELECT i FROM m r WHERE r.i <> :skip AND {sql}"), {**params, "skip": 1}
            )
        }
    assert got == {0, 3}


PATHS = [
    "docs/guides/a.md", "docs/guides", "docs/guides-old/b.md", "docs/guidesX", "docs/guide",
    "Docs/guides/c.md", "docs/guides/é/😀.md", "docs/guides\uffff", "docs/guides0",
    "z\U0010ffff", "z\U0010ffff\U0010ffffq", "z", "\ud7ffx", "\ue000",
]  # fmt: skip


@pytest.mark.parametrize(
    "prefix", ["docs/guides/", "docs/guides", "docs/", "z\U0010ffff", "\U0010ffff", "\ud7ff", "é"]
)
def test_prefix_filters_select_the_same_rows_in_sql_as_startswith(
    conn: Connection, prefix: str
) -> None:
    """prefix_filter's range selects in PostgreSQL (text COLLATE "C") exactly the strings that
    start with the prefix, as Filter.matches does; numbers and missing keys never.

    If this fails, check the string branch of _Compiler.compare (COLLATE "C")."""
    rows: list[dict[str, Any]] = [{"path": p} for p in PATHS] + [{"path": 1}, {}]
    flt = parse_filter(prefix_filter("path", prefix))
    assert flt is not None
    want = {i for i, row in enumerate(rows) if str(row.get("path", 1)).startswith(prefix)}
    want -= {len(PATHS)}  # the number 1
    assert expected(rows, flt) == want
    assert select(conn, rows, flt) == want
