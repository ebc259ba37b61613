"""Compile a parsed metadata filter to a PostgreSQL boolean expression over a jsonb column.

The SQL has exactly the semantics of :meth:`ragport.domain.filters.Filter.matches` (see
:mod:`ragport.domain.filters`):

- every key and every value travels as a named bind parameter (``:mf0``, ``:mf1``, ...); only
  the trusted ``column`` expression and fixed SQL text are interpolated;
- equality is ``jsonb =`` (``true <> 1``, ``1 = 1.0``, deep for arrays and objects), which is
  the filter language's JSON equality by construction (numbers are compared as the decimal
  their JSON text spells, in Python and in ``numeric``), after a containment test
  (``column @> {key: value}``, implied by equality) that the GIN index on metadata serves;
  ``$in`` likewise after an ``OR`` of one containment per item;
- every condition is two-valued: missing keys (SQL ``NULL`` from ``->``) are folded to
  ``false`` with ``coalesce`` or ``CASE``, so ``NOT`` is an exact complement and ``$ne`` /
  ``$nin`` match a missing key; a SQL ``NULL`` column behaves like ``{}``;
- ordered comparisons first check ``jsonb_typeof`` inside a ``CASE`` (PostgreSQL does not
  promise the evaluation order of ``AND``), then compare ``numeric`` or ``text COLLATE "C"``
  (code point order).

The expression is fully parenthesised, so callers can ``AND`` it into any ``WHERE`` clause.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ragport.domain.filters import And, Compare, Filter, Not, Or

__all__ = ["compile_filter"]

_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ORDERED = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


class _Compiler:
    def __init__(self, column: str, prefix: str):
        self.column = column
        self.prefix = prefix
        self.params: dict[str, Any] = {}
        self.keys: dict[str, str] = {}

    def bind(self, value: Any) -> str:
        name = f"{self.prefix}{len(self.params)}"
        self.params[name] = value
        return f":{name}"

    def key(self, key: str) -> str:
        if key not in self.keys:
            self.keys[key] = self.bind(key)
        return self.keys[key]

    def compile(self, node: Filter) -> str:
        if isinstance(node, Compare):
            return self.compare(node)
        if isinstance(node, And):
            if not node.items:
                return "TRUE"
            return "(" + " AND ".join(self.compile(item) for item in node.items) + ")"
        if isinstance(node, Or):
            if not node.items:
                return "FALSE"
            return "(" + " OR ".join(self.compile(item) for item in node.items) + ")"
        if isinstance(node, Not):
            return f"(NOT {self.compile(node.item)})"
        raise TypeError(f"not a filter node: {type(node).__name__}")

    def compare(self, node: Compare) -> str:
        col = self.column
        k = self.key(node.key)
        field = f"({col} -> CAST({k} AS text))"
        op = node.op
        if op == "$exists":
            exists = f"coalesce({col} ? CAST({k} AS text), false)"
            return f"({exists})" if node.value else f"(NOT {exists})"
        if op in ("$eq", "$ne"):
            # Containment first: equal values are contained (``@>`` compares scalars as ``=``
            # does), and the GIN ``jsonb_path_ops`` index on metadata serves ``@>``, so a
            # selective equality can be read from the index; ``=`` then keeps the meaning
            # exact (``{"a": [1, 2]}`` contains ``{"a": [1]}`` but is not equal to it).
            contained = self.bind("{" + json.dumps(node.key) + ": " + node.value_json + "}")
            v = self.bind(node.value_json)
            # Never NULL: a NULL column makes the coalesce false, and so the AND.
            eq = (
                f"({col} @> CAST({contained} AS jsonb) "
                f"AND coalesce({field} = CAST({v} AS jsonb), false))"
            )
            return f"({eq})" if op == "$eq" else f"(NOT {eq})"
        if op in ("$in", "$nin"):
            v = self.bind(node.value_json)
            member = (
                f"coalesce({field} = ANY(ARRAY(SELECT jsonb_array_elements(CAST({v} AS jsonb)))), "
                "false)"
            )
            if op == "$nin":
                return f"(NOT {member})"
            # An OR of containments first, as for $eq: each is one GIN index probe (a
            # BitmapOr), and an equal value is always contained, so the exact test after it
            # decides alone. The items are scalars (at most MAX_IN_ITEMS).
            key = json.dumps(node.key, ensure_ascii=False)
            contained = " OR ".join(
                f"{col} @> CAST({self.bind('{' + key + ': ' + json.dumps(item) + '}')} AS jsonb)"
                for item in json.loads(node.value_json)
            )
            return f"(({contained}) AND {member})"
        sql_op = _ORDERED[op]
        text_value = f"({col} ->> CAST({k} AS text))"
        if isinstance(node.value, str):
            v = self.bind(node.value)
            return (
                f"(CASE WHEN jsonb_typeof({field}) = 'string' "
                f'THEN {text_value} COLLATE "C" {sql_op} CAST({v} AS text) COLLATE "C" '
                "ELSE false END)"
            )
        v = self.bind(node.value_json)  # the JSON text of a number is a valid numeric literal
        return (
            f"(CASE WHEN jsonb_typeof({field}) = 'number' "
            f"THEN CAST({text_value} AS numeric) {sql_op} CAST({v} AS numeric) "
            "ELSE false END)"
        )


def compile_filter(
    filter: Filter, *, column: str = "r.metadata", prefix: str = "mf"
) -> tuple[str, dict[str, Any]]:
    """Return ``(sql, params)``: a boolean SQL expression and its bind parameters.

    ``column`` is a trusted (dotted) identifier naming a ``jsonb`` column, never user input;
    ``prefix`` names the bind parameters ``{prefix}0``, ``{prefix}1``, ... (pick one that no
    other parameter of the statement starts with). Use with SQLAlchemy ``text()``.
    """
    if not isinstance(filter, Filter):
        raise TypeError("compile_filter takes a parsed Filter (see parse_filter)")
    if not _COLUMN.fullmatch(column):
        raise ValueError("column must be a dotted SQL identifier such as 'r.metadata'")
    if not _PREFIX.fullmatch(prefix):
        raise ValueError("prefix must be a SQL identifier such as 'mf'")
    compiler = _Compiler(column, prefix)
    sql = compiler.compile(filter)
    return sql, compiler.params
