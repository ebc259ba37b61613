"""The metadata filter language: parse once at the boundary, then evaluate or compile.

A filter is a mapping over TOP-LEVEL metadata keys (no dotted paths, no array indexing)::

    {"lang": "en"}                                  equality (shorthand for {"$eq": ...})
    {"lang": "en", "year": 2024}                    several keys: all must hold (AND)
    {"year": {"$gte": 2020, "$lt": 2024}}           operators; several on one key: AND
    {"$or": [{"lang": "en"}, {"lang": "de"}]}       logical operators where a filter goes
    {"$not": {"draft": true}, "$and": [{...}, ...]} (they combine with keys by AND too)

:func:`parse_filter` validates a spec and returns a small frozen AST (:class:`Filter` and its
subclasses :class:`Compare`, :class:`And`, :class:`Or`, :class:`Not`);
:meth:`Filter.matches` evaluates it in Python, and the PostgreSQL adapter compiles the same AST
to a jsonb predicate with exactly the same meaning. A filter narrows results; it is never
authorization.

Semantics (``m`` is the record's metadata, ``k`` a key, ``x = m[k]`` when present):

- **JSON equality** (``$eq``, ``$ne``, ``$in``, ``$nin`` and the shorthand) compares JSON
  values the way PostgreSQL's ``jsonb =`` does: the JSON types must agree (``true`` is not
  ``1``, ``"1"`` is not ``1``, ``null`` equals only ``null``), numbers compare by exact decimal
  value (``1`` equals ``1.0``), strings compare exactly (no case folding, no Unicode
  normalisation), arrays element by element in order, objects by equal key sets and equal
  values. A number's decimal value is the one its JSON text spells (``repr`` of a float, as
  ``json.dumps`` writes it and PostgreSQL stores it); this is Python's ``==`` except for an
  integer beyond 2**53 next to a float, where the float's shortest decimal wins (``1e23``
  equals ``10**23``). Python ``list``/``tuple`` are arrays, any ``Mapping`` is an object.
- ``{"k": v}`` and ``{"k": {"$eq": v}}``: ``k`` is present and ``x`` equals ``v``. ``v`` may be
  any JSON value; an object compares as a whole object. A mapping value is read as operators
  as soon as one of its keys starts with ``$`` (then all must be known operators); to compare
  with an object that has ``$`` keys, write ``{"k": {"$eq": {...}}}``.
- ``$ne: v``: NOT ``$eq: v``, so it **matches when ``k`` is missing** (as in MongoDB).
- ``$in: [v1, ...]``: ``k`` is present and ``x`` equals one of the items. ``$nin``: NOT
  ``$in``, so it **matches when ``k`` is missing**. The list is non-empty, at most 256 items,
  each a JSON scalar (null, bool, number, string); an array-valued ``x`` never equals a scalar.
- ``$gt $gte $lt $lte: b`` with ``b`` a number (not a bool) or a string: ``k`` is present and
  ``x`` has the same JSON type as ``b``; numbers compare by exact decimal value, strings by
  Unicode code point (byte order of UTF-8, PostgreSQL ``COLLATE "C"``). Anything else (missing,
  null, bool, array, object, a string against a number bound) does not match.
- ``$exists: true`` matches when ``k`` is present (even with value ``null``); ``false`` when it
  is missing. A present ``null`` is not a missing key.
- ``$and: [f, ...]``: all hold; ``$or: [f, ...]``: at least one holds (non-empty lists);
  ``$not: f``: ``f`` does not hold. Every condition is two-valued (never "unknown"), so
  ``$not`` is exact complement, also on missing keys.
- A string prefix is a range: ``x`` starts with ``p`` exactly when ``p <= x < q``, ``q`` being
  ``p`` with its last character raised by one code point (trailing U+10FFFF dropped first), so
  :func:`prefix_filter` writes ``{"path": {"$gte": "docs/", "$lt": "docs0"}}`` for the prefix
  ``docs/`` (what ``ragport query --under docs`` asks for, with ``path`` equal to ``docs``).
- Metadata keys that start with ``$`` cannot be filtered on (``$`` keys are operators).
- The empty filter ``{}`` matches everything; ``parse_filter({})`` and ``parse_filter(None)``
  return ``None`` (no filter). Nested, ``{}`` is a condition that always holds.

Validation raises :class:`~ragport.domain.errors.ValidationError` with
``field="metadata_filter"`` for: a filter that is not a mapping; a key that is not a string,
is empty, longer than 256 characters, or contains NUL or a lone surrogate; a top-level key
starting with ``$`` other than ``$and``/``$or``/``$not``; an unknown operator (any ``$`` key
that is not in the set, including ``$and`` under a key or ``$eq`` at the top level); a mapping
value mixing operators and plain keys; an operator value of the wrong type (``$gt: [1]``,
``$in: 3``, ``$exists: "yes"``, ``$and: {}``, ``$not: []``); an empty ``$and``/``$or``/``$in``
/``$nin`` or an ``$in``/``$nin`` list over 256 items; a value that is not JSON (non-string
object keys, other Python types), a NaN or infinite number, a string with NUL or a lone
surrogate (PostgreSQL cannot store either, so no record could match), a value nested deeper
than 32 levels or longer than 65,536 bytes of JSON; filter nesting deeper than 8 levels (the
outermost filter is level 1, each ``$and``/``$or``/``$not`` operand one level deeper); more
than 64 conditions in total (one per key-operator pair, shorthand equality included, and one
per nested empty filter).
"""

from __future__ import annotations

import json
import math
import types
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final, Literal, cast

import attrs

from ragport.domain.errors import ValidationError

__all__ = [
    "COMPARE_OPERATORS",
    "LOGICAL_OPERATORS",
    "MAX_CONDITIONS",
    "MAX_DEPTH",
    "MAX_IN_ITEMS",
    "MAX_KEY_LENGTH",
    "MAX_VALUE_BYTES",
    "MAX_VALUE_DEPTH",
    "And",
    "Compare",
    "CompareOp",
    "Filter",
    "Not",
    "Or",
    "filter_json_equal",
    "matches",
    "parse_filter",
    "prefix_filter",
]

CompareOp = Literal["$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists"]

COMPARE_OPERATORS: Final = frozenset(
    {"$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists"}
)
LOGICAL_OPERATORS: Final = frozenset({"$and", "$or", "$not"})
MAX_DEPTH: Final = 8
MAX_CONDITIONS: Final = 64
MAX_IN_ITEMS: Final = 256
MAX_KEY_LENGTH: Final = 256
MAX_VALUE_DEPTH: Final = 32
MAX_VALUE_BYTES: Final = 65_536

_FIELD: Final = "metadata_filter"
_MISSING: Final = object()


def _fail(message: str) -> ValidationError:
    return ValidationError(message, field=_FIELD)


# -- JSON values -----------------------------------------------------------------------------------


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _decimal(value: object) -> Decimal | None:
    """The exact decimal a JSON number spells, or None for non-numbers and non-finite floats."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    return None


def filter_json_equal(left: object, right: object) -> bool:
    """JSON equality as filters (and ``jsonb =``) use it: see the module docstring."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) and _is_number(right):
        a, b = _decimal(left), _decimal(right)
        return a is not None and b is not None and a == b
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(
            filter_json_equal(a, b) for a, b in zip(left, right, strict=True)
        )
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(
            filter_json_equal(left[k], right[k]) for k in left
        )
    if isinstance(left, str) and isinstance(right, str):
        return left == right
    return left is None and right is None


def _check_string(value: str, what: str) -> None:
    if "\x00" in value:
        raise _fail(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(f"{what} must be valid Unicode (no lone surrogates)") from None


def _freeze(value: object, depth: int = 1) -> Any:
    """Validate a JSON value and return an immutable copy (arrays -> tuples, objects -> proxies)."""
    if depth > MAX_VALUE_DEPTH:
        raise _fail(f"filter values nest at most {MAX_VALUE_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail("filter numbers must be finite (no NaN or infinity)")
        return value
    if isinstance(value, str):
        _check_string(value, "filter strings")
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item, depth + 1) for item in value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _fail("object keys in filter values must be strings")
            _check_string(key, "object keys in filter values")
            out[key] = _freeze(item, depth + 1)
        return types.MappingProxyType(out)
    raise _fail(f"filter values must be JSON values, not {type(value).__name__}")


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    return value


def _to_json(value: Any) -> str:
    try:
        text = json.dumps(_thaw(value), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:  # e.g. an int past Python's digit limit
        raise _fail("filter value is not JSON-serialisable") from exc
    if len(text.encode("utf-8")) > MAX_VALUE_BYTES:
        raise _fail(f"filter values are at most {MAX_VALUE_BYTES} bytes of JSON")
    return text


def _check_key(key: object) -> None:
    if not isinstance(key, str):
        raise _fail("filter keys must be strings")
    if not key:
        raise _fail("filter keys must not be empty")
    if len(key) > MAX_KEY_LENGTH:
        raise _fail(f"filter keys are at most {MAX_KEY_LENGTH} characters")
    if key.startswith("$"):
        raise _fail("filter keys starting with $ are operators")
    _check_string(key, "filter keys")


def _check_operand(op: str, operand: object) -> None:
    if op not in COMPARE_OPERATORS:
        raise _fail(f"unknown filter operator {op[:32]!r}")
    if op in ("$in", "$nin"):
        if not isinstance(operand, (list, tuple)):
            raise _fail(f"{op} takes a list of JSON scalars")
        if not operand:
            raise _fail(f"{op} takes a non-empty list")
        if len(operand) > MAX_IN_ITEMS:
            raise _fail(f"{op} takes at most {MAX_IN_ITEMS} items")
        for item in operand:
            if isinstance(item, (list, tuple, Mapping)):
                raise _fail(f"{op} items must be JSON scalars (null, bool, number, string)")
    elif op in ("$gt", "$gte", "$lt", "$lte"):
        if not (_is_number(operand) or isinstance(operand, str)):
            raise _fail(f"{op} takes a number or a string")
    elif op == "$exists" and not isinstance(operand, bool):
        raise _fail("$exists takes true or false")


# -- AST -------------------------------------------------------------------------------------------


@attrs.frozen
class Filter:
    """Base of the filter AST. Build filters with :func:`parse_filter`."""

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        """True when ``metadata`` (a record's top-level metadata) satisfies this filter."""
        raise NotImplementedError


@attrs.frozen
class Compare(Filter):
    """One condition on one top-level key: ``{key: {op: value}}``.

    ``value`` is an immutable JSON value (arrays are tuples, objects read-only mappings); for
    ``$in``/``$nin`` a tuple of scalars, for ``$exists`` a bool. ``value_json`` is its JSON text
    (what the SQL compiler binds); equality and hashing use it instead of ``value``. Built
    directly, it validates key, operator and operand like :func:`parse_filter` does.
    """

    key: str
    op: CompareOp
    value: Any = attrs.field(eq=False, hash=False)
    value_json: str = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        _check_key(self.key)
        _check_operand(self.op, self.value)
        frozen = _freeze(self.value)
        object.__setattr__(self, "value", frozen)
        object.__setattr__(self, "value_json", _to_json(frozen))

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        present = self.key in metadata
        x = metadata[self.key] if present else _MISSING
        op, value = self.op, self.value
        if op == "$exists":
            return present is value
        if op == "$eq":
            return present and filter_json_equal(x, value)
        if op == "$ne":
            return not (present and filter_json_equal(x, value))
        if op == "$in":
            return present and any(filter_json_equal(x, v) for v in value)
        if op == "$nin":
            return not (present and any(filter_json_equal(x, v) for v in value))
        if isinstance(value, str):
            if not isinstance(x, str):
                return False
            return _ordered(op, x, value)
        left, right = _decimal(x), _decimal(value)
        if left is None or right is None:
            return False
        return _ordered(op, left, right)


def _ordered(op: str, left: Any, right: Any) -> bool:
    if op == "$gt":
        return bool(left > right)
    if op == "$gte":
        return bool(left >= right)
    if op == "$lt":
        return bool(left < right)
    return bool(left <= right)  # $lte


@attrs.frozen
class And(Filter):
    """All ``items`` hold; ``And(())`` always holds (the nested empty filter ``{}``)."""

    items: tuple[Filter, ...]

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        return all(item.matches(metadata) for item in self.items)


@attrs.frozen
class Or(Filter):
    """At least one of ``items`` holds (``parse_filter`` never builds an empty one)."""

    items: tuple[Filter, ...]

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        return any(item.matches(metadata) for item in self.items)


@attrs.frozen
class Not(Filter):
    """``item`` does not hold."""

    item: Filter

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        return not self.item.matches(metadata)


def matches(filter: Filter | None, metadata: Mapping[str, Any]) -> bool:
    """``filter.matches(metadata)``, with ``None`` (no filter) matching everything."""
    return True if filter is None else filter.matches(metadata)


# -- parsing ---------------------------------------------------------------------------------------


class _Parser:
    def __init__(self) -> None:
        self.conditions = 0

    def count(self) -> None:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise _fail(f"a filter has at most {MAX_CONDITIONS} conditions")

    def filter(self, spec: object, depth: int) -> Filter:
        if depth > MAX_DEPTH:
            raise _fail(f"filters nest at most {MAX_DEPTH} levels")
        if not isinstance(spec, Mapping):
            raise _fail("a filter must be a mapping")
        if not spec:
            self.count()
            return And(())
        items: list[Filter] = []
        for key, value in spec.items():
            if not isinstance(key, str):
                raise _fail("filter keys must be strings")
            if key.startswith("$"):
                items.append(self.logical(key, value, depth))
            else:
                items.extend(self.key(key, value))
        return items[0] if len(items) == 1 else And(tuple(items))

    def logical(self, op: str, value: object, depth: int) -> Filter:
        if op == "$not":
            if not isinstance(value, Mapping):
                raise _fail("$not takes one filter (a mapping)")
            return Not(self.filter(value, depth + 1))
        if op not in ("$and", "$or"):
            raise _fail(f"unknown filter operator {op[:32]!r} (keys starting with $)")
        if not isinstance(value, (list, tuple)):
            raise _fail(f"{op} takes a list of filters")
        if not value:
            raise _fail(f"{op} takes a non-empty list of filters")
        items = tuple(self.filter(item, depth + 1) for item in value)
        return And(items) if op == "$and" else Or(items)

    def key(self, key: str, value: object) -> list[Filter]:
        _check_key(key)
        if isinstance(value, Mapping) and any(
            isinstance(k, str) and k.startswith("$") for k in value
        ):
            out: list[Filter] = []
            for op, operand in value.items():
                if not (isinstance(op, str) and op.startswith("$")):
                    raise _fail("an operator mapping must not mix operators and plain keys")
                out.append(self.compare(key, op, operand))
            return out
        return [self.compare(key, "$eq", value)]

    def compare(self, key: str, op: str, operand: object) -> Compare:
        if op not in COMPARE_OPERATORS:
            raise _fail(f"unknown filter operator {op[:32]!r}")
        self.count()
        return Compare(key, cast(CompareOp, op), operand)


def parse_filter(spec: Mapping[str, Any] | Filter | None) -> Filter | None:
    """Validate a filter spec and return its AST, or ``None`` for no filter (``None``/``{}``).

    An already parsed :class:`Filter` is returned unchanged. Raises ``ValidationError`` with
    ``field="metadata_filter"`` (see the module docstring for the full list).
    """
    if spec is None:
        return None
    if isinstance(spec, Filter):
        return spec
    if not isinstance(spec, Mapping):
        raise _fail("metadata_filter must be a mapping")
    if not spec:
        return None
    return _Parser().filter(spec, 1)


_LAST_CODE_POINT: Final = "\U0010ffff"


def prefix_filter(key: str, prefix: str) -> dict[str, Any]:
    """A filter spec: ``metadata[key]`` is a string that starts with ``prefix``.

    Written with the range operators (strings compare by code point, in Python and in
    PostgreSQL ``COLLATE "C"``), so every store that speaks the filter language answers it
    the same way: ``{key: {"$gte": prefix, "$lt": q}}`` where ``q`` is the least string above
    every string starting with ``prefix`` (``prefix`` without its trailing U+10FFFF, its last
    character raised by one code point, the surrogates skipped); ``{key: {"$gte": prefix}}``
    when there is none (a prefix of U+10FFFF only). ``key`` is checked as a filter key;
    ``prefix`` must be a non-empty string without NUL or lone surrogates
    (``ValidationError(field="metadata_filter")``).
    """
    _check_key(key)
    if not isinstance(prefix, str) or not prefix:
        raise _fail("a prefix is a non-empty string")
    _check_string(prefix, "a prefix")
    head = prefix.rstrip(_LAST_CODE_POINT)
    if not head:
        return {key: {"$gte": prefix}}
    following = ord(head[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:  # no string holds a lone surrogate: skip them
        following = 0xE000
    return {key: {"$gte": prefix, "$lt": head[:-1] + chr(following)}}
