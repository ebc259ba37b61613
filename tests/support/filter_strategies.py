"""Hypothesis strategies for the metadata filter language, shared by the in-memory and the
PostgreSQL filter tests (so both check the same space of filters and metadata)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "BOUNDS",
    "FILTER_KEYS",
    "KEYS",
    "METADATA",
    "SCALARS",
    "VALUES",
    "cases",
    "count_conditions",
    "filter_specs",
]

KEYS = ["a", "b", "c"]
FILTER_KEYS = [*KEYS, "zz"]  # "zz" never appears in metadata: always a missing key
INTS = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([2**53, 2**53 + 1, -(2**63), 10**23, 10**30]),
)
FLOATS = st.one_of(
    st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.5, -1.5, 1e23, 9007199254740992.0, 1e-7, 1e300]),
    st.floats(allow_nan=False, allow_infinity=False),
)
STRINGS = st.one_of(
    st.sampled_from(["", "a", "b", "B", "ab", "é", "😀", "\uffff", "1", "a b"]),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=4),
)
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, STRINGS)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=2),
    st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=2),
)
BOUNDS = st.one_of(INTS, FLOATS, STRINGS)
METADATA = st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=1, max_size=3)


def _scalars_in(rows: list[dict[str, Any]]) -> list[Any]:
    out: list[Any] = []
    for md in rows:
        for v in md.values():
            out.extend(v if isinstance(v, list) else v.values() if isinstance(v, dict) else [v])
    return out


@st.composite
def filter_specs(
    draw: st.DrawFn, rows: list[dict[str, Any]] | None = None, depth: int = 4
) -> dict[str, Any]:
    """A raw filter spec nested at most ``depth`` levels; constants often come from ``rows``."""
    rows = rows or []
    pairs = [(k, v) for md in rows for k, v in md.items()]
    seen = [v for _, v in pairs]
    scalars = _scalars_in(rows)
    values = st.one_of(st.sampled_from(seen), VALUES) if seen else VALUES
    pool = st.one_of(st.sampled_from(scalars), SCALARS) if scalars else SCALARS
    bounds = [v for v in scalars if isinstance(v, (int, float, str)) and not isinstance(v, bool)]
    bound = st.one_of(st.sampled_from(bounds), BOUNDS) if bounds else BOUNDS
    one_operator = st.one_of(
        st.tuples(st.sampled_from(["$eq", "$ne"]), values),
        st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(pool, min_size=1, max_size=4)),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), bound),
        st.tuples(st.just("$exists"), st.booleans()),
    )
    operators = st.lists(one_operator, min_size=1, max_size=2, unique_by=lambda t: t[0]).map(dict)
    kinds = ["key", "key", "$and", "$or", "$not"] if depth > 1 else ["key"]
    spec: dict[str, Any] = {}
    for _ in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(kinds))
        if kind == "key" and bool(pairs) and draw(st.booleans()):
            key, value = draw(st.sampled_from(pairs))  # an equality that some row satisfies
            spec[key] = value
        elif kind == "key":
            spec[draw(st.sampled_from(FILTER_KEYS))] = draw(st.one_of(values, operators))
        elif kind == "$not":
            spec["$not"] = draw(_operand(rows, depth - 1))
        else:
            spec[kind] = draw(st.lists(_operand(rows, depth - 1), min_size=1, max_size=2))
    return spec


def _operand(rows: list[dict[str, Any]], depth: int) -> st.SearchStrategy[dict[str, Any]]:
    """A nested filter: usually a spec, sometimes the always-true empty filter."""
    return st.integers(0, 3).flatmap(lambda n: st.just({}) if n == 0 else filter_specs(rows, depth))


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Metadata rows and a filter whose constants often occur in those rows."""
    rows = draw(st.lists(METADATA, min_size=1, max_size=8))
    return rows, draw(filter_specs(rows))


def count_conditions(spec: Mapping[str, Any], nested: bool = False) -> int:
    """Conditions as the parser counts them: key-operator pairs and nested empty filters."""
    if not spec:
        return 1 if nested else 0
    total = 0
    for key, cond in spec.items():
        if key in ("$and", "$or"):
            total += sum(count_conditions(s, True) for s in cond)
        elif key == "$not":
            total += count_conditions(cond, True)
        elif isinstance(cond, dict) and any(k.startswith("$") for k in cond):
            total += len(cond)
        else:
            total += 1
    return total
