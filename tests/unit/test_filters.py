"""The metadata filter language: parsing, validation, truth tables and a reference property test."""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import attrs
import pytest
from filter_strategies import VALUES, cases, count_conditions
from hypothesis import given, settings
from hypothesis import strategies as st

from ragport.domain.errors import ValidationError
from ragport.domain.filters import (
    And,
    Compare,
    Filter,
    Not,
    Or,
    filter_json_equal,
    matches,
    parse_filter,
    prefix_filter,
)

# -- reference evaluator ---------------------------------------------------------------------------


def _norm(value: Any) -> tuple[Any, ...]:
    """A type-tagged form where Python == is JSON equality (numbers as their JSON decimal)."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("num", Decimal(json.dumps(value)))
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, (list, tuple)):
        return ("arr", tuple(_norm(v) for v in value))
    return ("obj", tuple(sorted(((k, _norm(v)) for k, v in value.items()), key=lambda p: p[0])))


_ORDER = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}


def _ref_op(md: Mapping[str, Any], key: str, op: str, value: Any) -> bool:
    present = key in md
    if op == "$exists":
        return present is value
    if op == "$eq":
        return present and _norm(md[key]) == _norm(value)
    if op == "$ne":
        return not _ref_op(md, key, "$eq", value)
    if op == "$in":
        return present and any(_norm(md[key]) == _norm(v) for v in value)
    if op == "$nin":
        return not _ref_op(md, key, "$in", value)
    if not present:
        return False
    x, bound = _norm(md[key]), _norm(value)
    return x[0] == bound[0] and bool(_ORDER[op](x[1], bound[1]))


def reference(spec: Mapping[str, Any], md: Mapping[str, Any]) -> bool:
    """A direct reading of the documented semantics on the raw spec."""
    result = True
    for key, cond in spec.items():
        if key == "$and":
            ok = all(reference(s, md) for s in cond)
        elif key == "$or":
            ok = any(reference(s, md) for s in cond)
        elif key == "$not":
            ok = not reference(cond, md)
        elif isinstance(cond, dict) and any(k.startswith("$") for k in cond):
            ok = all(_ref_op(md, key, op, v) for op, v in cond.items())
        else:
            ok = _ref_op(md, key, "$eq", cond)
        result = result and ok
    return result


# -- parsing ---------------------------------------------------------------------------------------


def test_parse_none_and_empty_mean_no_filter() -> None:
    """None and {} parse to None, which matches everything. If this fails, check parse_filter."""
    assert parse_filter(None) is None
    assert parse_filter({}) is None
    assert matches(None, {"a": 1})
    assert matches(None, {})


def test_parse_builds_the_expected_ast() -> None:
    """Shorthand, operators, several keys and logical ops map to AST nodes. If this fails, check _Parser."""
    assert parse_filter({"lang": "en"}) == Compare("lang", "$eq", "en")
    assert parse_filter({"y": {"$gte": 2020, "$lt": 2024}}) == And(
        (Compare("y", "$gte", 2020), Compare("y", "$lt", 2024))
    )
    assert parse_filter({"a": 1, "$not": {"b": {"$exists": True}}}) == And(
        (Compare("a", "$eq", 1), Not(Compare("b", "$exists", True)))
    )
    assert parse_filter({"$or": [{"a": 1}, {}]}) == Or((Compare("a", "$eq", 1), And(())))
    assert parse_filter({"a": {"x": 1}}) == Compare("a", "$eq", {"x": 1})
    assert parse_filter({"a": {}}) == Compare("a", "$eq", {})
    assert parse_filter({"a": {"$eq": {"$x": 1}}}) == Compare("a", "$eq", {"$x": 1})


def test_parsed_filters_are_frozen_hashable_and_unaliased() -> None:
    """The AST is immutable, hashable and copies values. If this fails, check Compare.__attrs_post_init__."""
    value = {"x": [1, 2]}
    spec = {"a": value, "b": {"$in": [1, "x"]}}
    parsed = parse_filter(spec)
    assert parsed is not None
    value["x"].append(3)
    assert parsed == parse_filter({"a": {"x": [1, 2]}, "b": {"$in": [1, "x"]}})
    assert hash(parsed) == hash(parse_filter({"a": {"x": [1, 2]}, "b": {"$in": (1, "x")}}))
    assert parsed.matches({"a": {"x": [1, 2]}, "b": "x"})
    assert isinstance(parsed, And)
    first = parsed.items[0]
    assert isinstance(first, Compare)
    assert first.value["x"] == (1, 2)
    with pytest.raises(TypeError):
        first.value["y"] = 1
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        first.key = "b"  # type: ignore[misc]
    assert parse_filter(parsed) is parsed


def test_parse_accepts_values_at_each_ceiling() -> None:
    """256-char keys, 256 $in items, depth 8 and 64 conditions parse. If this fails, check the MAX_* constants."""
    assert parse_filter({"k" * 256: 1}) is not None
    assert parse_filter({"a": {"$in": list(range(256))}}) is not None
    spec: dict[str, Any] = {"a": 1}
    for _ in range(7):
        spec = {"$not": spec}
    assert parse_filter(spec) is not None
    assert parse_filter({f"k{i}": i for i in range(64)}) is not None


def _nested_not(levels: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"a": 1}
    for _ in range(levels):
        spec = {"$not": spec}
    return spec


def _deep_value(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


INVALID: list[tuple[str, Any]] = [
    ("list-filter", [("a", 1)]),
    ("string-filter", "a"),
    ("int-filter", 3),
    ("unknown-key-op", {"a": {"$regex": "x"}}),
    ("unknown-top-op", {"$where": "x"}),
    ("eq-at-top", {"$eq": 1}),
    ("nor-at-top", {"$nor": [{"a": 1}]}),
    ("and-under-key", {"a": {"$and": [{"a": 1}]}}),
    ("not-under-key", {"a": {"$not": {"$gt": 1}}}),
    ("mixed-ops-and-keys", {"a": {"$gt": 1, "b": 2}}),
    ("gt-list", {"a": {"$gt": [1]}}),
    ("gt-bool", {"a": {"$gt": True}}),
    ("gt-null", {"a": {"$lte": None}}),
    ("gt-object", {"a": {"$lt": {"x": 1}}}),
    ("in-int", {"a": {"$in": 3}}),
    ("in-string", {"a": {"$in": "abc"}}),
    ("in-empty", {"a": {"$in": []}}),
    ("in-257", {"a": {"$in": list(range(257))}}),
    ("in-nested-list", {"a": {"$in": [[1]]}}),
    ("in-object", {"a": {"$in": [{"x": 1}]}}),
    ("nin-int", {"a": {"$nin": 3}}),
    ("nin-empty", {"a": {"$nin": []}}),
    ("exists-string", {"a": {"$exists": "yes"}}),
    ("exists-int", {"a": {"$exists": 1}}),
    ("and-mapping", {"$and": {}}),
    ("and-empty", {"$and": []}),
    ("or-empty", {"$or": []}),
    ("or-string", {"$or": "a"}),
    ("and-of-ints", {"$and": [1]}),
    ("not-list", {"$not": []}),
    ("not-string", {"$not": "a"}),
    ("empty-key", {"": 1}),
    ("long-key", {"k" * 257: 1}),
    ("nul-key", {"a\x00": 1}),
    ("surrogate-key", {"\ud800": 1}),
    ("int-key", {1: 2}),
    ("nan", {"a": math.nan}),
    ("inf-bound", {"a": {"$gt": math.inf}}),
    ("nan-in-list", {"a": {"$in": [math.nan]}}),
    ("nan-nested", {"a": [1, {"x": -math.inf}]}),
    ("object-value", {"a": object()}),
    ("bytes-value", {"a": b"x"}),
    ("set-value", {"a": {1, 2}}),
    ("int-key-in-value", {"a": {1: 2}}),
    ("nul-string", {"a": "x\x00"}),
    ("surrogate-string", {"a": {"$gt": "\udfff"}}),
    ("depth-9", _nested_not(8)),
    ("depth-9-or", {"$or": [_nested_not(7)]}),
    ("65-conditions", {f"k{i}": i for i in range(65)}),
    ("65-with-ops", {f"k{i}": {"$gt": 0, "$lt": 9} for i in range(33)}),
    ("65-with-empties", {"$and": [{}] * 65}),
    ("value-too-deep", {"a": _deep_value(40)}),
    ("value-too-long", {"a": "x" * 70_000}),
    ("huge-int", {"a": 10**5000}),
]


@pytest.mark.parametrize("spec", [s for _, s in INVALID], ids=[i for i, _ in INVALID])
def test_parse_rejects_invalid_filters(spec: Any) -> None:
    """Each malformed filter is a ValidationError on metadata_filter. If this fails, check _Parser and _check_operand."""
    with pytest.raises(ValidationError) as info:
        parse_filter(spec)
    assert info.value.field == "metadata_filter"


def test_compare_validates_when_built_directly() -> None:
    """Compare nodes check key, operator and operand themselves. If this fails, check Compare.__attrs_post_init__."""
    for args in [("a", "$regex", 1), ("", "$eq", 1), ("$a", "$eq", 1), ("a", "$in", 1)]:
        with pytest.raises(ValidationError) as info:
            Compare(*args)  # type: ignore[arg-type]
        assert info.value.field == "metadata_filter"


# -- truth tables ----------------------------------------------------------------------------------

TRUTH: list[tuple[dict[str, Any], dict[str, Any], bool]] = [
    # equality: JSON types must agree; numbers by value; deep containers
    ({"a": 1}, {"a": 1}, True),
    ({"a": 1}, {"a": 1.0}, True),
    ({"a": 1.0}, {"a": 1}, True),
    ({"a": 1}, {"a": True}, False),
    ({"a": True}, {"a": 1}, False),
    ({"a": 0}, {"a": False}, False),
    ({"a": "1"}, {"a": 1}, False),
    ({"a": None}, {"a": None}, True),
    ({"a": None}, {}, False),
    ({"a": 1}, {}, False),
    ({"a": [1, 2]}, {"a": [1, 2]}, True),
    ({"a": [1, 2]}, {"a": [2, 1]}, False),
    ({"a": [1]}, {"a": 1}, False),
    ({"a": 1}, {"a": [1]}, False),
    ({"a": {"x": [1.0, {"y": None}]}}, {"a": {"x": [1, {"y": None}]}}, True),
    ({"a": {"x": 1}}, {"a": {"x": 1, "y": 2}}, False),
    ({"a": {}}, {"a": {}}, True),
    ({"a": "e\u0301"}, {"a": "\u00e9"}, False),  # no Unicode normalisation
    ({"a": 10**23}, {"a": 1e23}, True),  # numbers by the decimal their JSON text spells
    ({"a": 2**53 + 1}, {"a": float(2**53)}, False),
    ({"a": 1, "b": 2}, {"a": 1, "b": 2}, True),
    ({"a": 1, "b": 2}, {"a": 1, "b": 3}, False),
    # $eq / $ne
    ({"a": {"$eq": {"$x": 1}}}, {"a": {"$x": 1}}, True),
    ({"a": {"$ne": 1}}, {"a": 2}, True),
    ({"a": {"$ne": 1}}, {"a": 1.0}, False),
    ({"a": {"$ne": 1}}, {"a": True}, True),
    ({"a": {"$ne": 1}}, {}, True),
    ({"a": {"$ne": None}}, {}, True),
    ({"a": {"$ne": None}}, {"a": None}, False),
    # $in / $nin
    ({"a": {"$in": [1, "x"]}}, {"a": 1.0}, True),
    ({"a": {"$in": [1, "x"]}}, {"a": "x"}, True),
    ({"a": {"$in": [1, "x"]}}, {"a": True}, False),
    ({"a": {"$in": [1, "x"]}}, {"a": [1]}, False),
    ({"a": {"$in": [None]}}, {"a": None}, True),
    ({"a": {"$in": [None]}}, {}, False),
    ({"a": {"$nin": [1, "x"]}}, {"a": 2}, True),
    ({"a": {"$nin": [1, "x"]}}, {"a": "x"}, False),
    ({"a": {"$nin": [1]}}, {}, True),
    # ordered: same JSON type only
    ({"a": {"$gt": 1}}, {"a": 2}, True),
    ({"a": {"$gt": 1}}, {"a": 1}, False),
    ({"a": {"$gte": 1}}, {"a": 1.0}, True),
    ({"a": {"$lt": 1}}, {"a": 0.5}, True),
    ({"a": {"$lte": 1}}, {"a": 1}, True),
    ({"a": {"$lte": 1}}, {"a": 1.5}, False),
    ({"a": {"$gt": 0}}, {"a": True}, False),
    ({"a": {"$gt": 0}}, {"a": "5"}, False),
    ({"a": {"$gt": 0}}, {"a": [5]}, False),
    ({"a": {"$gt": 0}}, {"a": None}, False),
    ({"a": {"$gt": 0}}, {}, False),
    ({"a": {"$lt": 0}}, {}, False),
    ({"a": {"$gt": "a"}}, {"a": "b"}, True),
    ({"a": {"$gt": "a"}}, {"a": "B"}, False),  # code point order: "B" < "a"
    ({"a": {"$gt": "z"}}, {"a": "é"}, True),
    ({"a": {"$lt": "\uffff"}}, {"a": "😀"}, False),  # U+1F600 > U+FFFF
    ({"a": {"$gte": ""}}, {"a": ""}, True),
    ({"a": {"$gt": "1"}}, {"a": 2}, False),
    ({"a": {"$gt": 2**53}}, {"a": 2**53 + 1}, True),
    ({"a": {"$lt": 10**23}}, {"a": 1e23}, False),
    ({"a": {"$gte": 2020, "$lt": 2024}}, {"a": 2023}, True),
    ({"a": {"$gte": 2020, "$lt": 2024}}, {"a": 2024}, False),
    # $exists
    ({"a": {"$exists": True}}, {"a": None}, True),
    ({"a": {"$exists": True}}, {}, False),
    ({"a": {"$exists": False}}, {}, True),
    ({"a": {"$exists": False}}, {"a": None}, False),
    # logical
    ({"$and": [{"a": 1}, {"b": 2}]}, {"a": 1, "b": 2}, True),
    ({"$and": [{"a": 1}, {"b": 2}]}, {"a": 1}, False),
    ({"$or": [{"a": 1}, {"b": 2}]}, {"b": 2}, True),
    ({"$or": [{"a": 1}, {"b": 2}]}, {}, False),
    ({"$not": {"a": 1}}, {}, True),
    ({"$not": {"a": {"$gt": 1}}}, {"a": "x"}, True),
    ({"$not": {"a": {"$ne": 1}}}, {}, False),
    ({"$not": {}}, {"a": 1}, False),
    ({"$or": [{}]}, {}, True),
    ({"a": 1, "$or": [{"b": 1}, {"c": 1}]}, {"a": 1, "c": 1}, True),
    ({"a": 1, "$or": [{"b": 1}, {"c": 1}]}, {"b": 1, "c": 1}, False),
]


@pytest.mark.parametrize(("spec", "metadata", "expected"), TRUTH)
def test_matches_truth_table(
    spec: dict[str, Any], metadata: dict[str, Any], expected: bool
) -> None:
    """Each documented rule gives the stated answer. If this fails, check Compare.matches and filter_json_equal."""
    parsed = parse_filter(spec)
    assert parsed is not None
    assert parsed.matches(metadata) is expected
    assert matches(parsed, metadata) is expected
    assert reference(spec, metadata) is expected


def test_base_filter_is_abstract() -> None:
    """The bare Filter base has no meaning of its own. If this fails, check Filter.matches."""
    with pytest.raises(NotImplementedError):
        Filter().matches({})


# -- properties ------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(case=cases())
def test_matches_agrees_with_reference_evaluator(
    case: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    """Filter.matches equals a direct reading of the semantics. If this fails, check Compare.matches against the module docstring."""
    rows, spec = case
    if count_conditions(spec) > 64:
        with pytest.raises(ValidationError):
            parse_filter(spec)
        return
    parsed = parse_filter(spec)
    for md in rows:
        assert matches(parsed, md) == reference(spec, md)
        if parsed is not None:
            assert Not(parsed).matches(md) is not parsed.matches(md)


@settings(max_examples=200, deadline=None)
@given(left=VALUES, right=VALUES)
def test_filter_equality_is_jsonb_equality(left: Any, right: Any) -> None:
    """Filter equality equals the reference JSON normalisation. If this fails, check filter_json_equal."""
    assert filter_json_equal(left, right) == (_norm(left) == _norm(right))


# -- string prefixes -------------------------------------------------------------------------------

PREFIX_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=5)
EDGE_PREFIXES = ["docs/", "a", "\ud7ff", "a\U0010ffff", "\U0010ffff", "\U0010ffff\U0010ffff"]


@settings(max_examples=150, deadline=None)
@given(
    prefix=st.one_of(st.sampled_from(EDGE_PREFIXES), PREFIX_TEXT.filter(bool)),
    tails=st.lists(PREFIX_TEXT, max_size=4),
    others=st.lists(st.one_of(PREFIX_TEXT, st.integers(), st.none()), max_size=4),
)
def test_prefix_filter_matches_exactly_the_strings_that_start_with_it(
    prefix: str, tails: list[str], others: list[Any]
) -> None:
    """prefix_filter(key, p) holds for a string value exactly when it starts with p (and for
    no other type, nor a missing key), also at the top of the code-point range.

    If this fails, check prefix_filter's successor (trailing U+10FFFF, surrogates)."""
    spec = prefix_filter("path", prefix)
    parsed = parse_filter(spec)
    assert parsed is not None
    values: list[Any] = [prefix + t for t in tails] + others
    values += [prefix[:-1], prefix[:-1] + chr(min(ord(prefix[-1]) + 1, 0x10FFFF))]
    for value in values:
        if isinstance(value, str) and 0xD800 <= ord(value[-1:] or "a") <= 0xDFFF:
            continue  # no stored string holds a lone surrogate
        want = isinstance(value, str) and value.startswith(prefix)
        assert parsed.matches({"path": value}) is want, (prefix, value)
    assert parsed.matches({}) is False


@pytest.mark.parametrize("prefix", ["", None, 3, "a\x00"])
def test_prefix_filter_refuses_what_no_value_could_start_with(prefix: Any) -> None:
    """An empty or non-string prefix, or one with NUL, is a ValidationError.

    If this fails, check prefix_filter's checks."""
    with pytest.raises(ValidationError) as caught:
        prefix_filter("path", prefix)
    assert caught.value.field == "metadata_filter"
