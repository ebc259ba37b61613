"""Values as they enter the domain: text, ids, content hashes and JSON metadata.

Each ``validate_*`` returns its argument or raises ``ValidationError`` naming the field;
``freeze_metadata`` is the one conversion of caller metadata into the domain's JSON values.
``copy_frozen`` copies metadata the domain already froze, without checking it again: the
path for values that leave a validated record (a store's read, a hit built from a record).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ragport.domain.errors import ValidationError

__all__ = [
    "ID_MAX",
    "METADATA_INT_LIMIT",
    "SCOPE_ID_MAX",
    "copy_frozen",
    "freeze_metadata",
    "is_valid_content_hash",
    "metadata_bytes",
    "validate_content_hash",
    "validate_id",
    "validate_text",
]

SCOPE_ID_MAX = 256
METADATA_INT_LIMIT = 10**308
"""Metadata integers must lie strictly between ``-METADATA_INT_LIMIT`` and ``METADATA_INT_LIMIT``
(at most 308 decimal digits): inside the range of a finite double, so a JSON reader that
parses numbers as doubles reads a finite number, and far below the 640 digits that are the
lowest integer-to-text limit Python can be set to (``sys.set_int_max_str_digits``)."""
ID_MAX = 1_024
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _unencodable(value: str) -> str | None:
    """What keeps ``value`` from being stored as UTF-8 text: a NUL or a lone surrogate."""
    if "\x00" in value:
        return "NUL characters"
    if not value.isascii() and _SURROGATE.search(value):
        return "lone surrogates (not valid Unicode)"
    return None


def validate_text(value: object, *, field: str) -> str:
    """Return ``value`` if it is a string that every store can hold: no NUL, no lone surrogate.

    PostgreSQL refuses NUL in text and psycopg cannot encode a lone surrogate; the in-memory
    store would accept both and then fail later. Refusing them where values enter the domain
    makes both stores give the same answer. Empty strings pass (callers decide emptiness).
    """
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string", field=field)
    problem = _unencodable(value)
    if problem is not None:
        raise ValidationError(f"{field} must not contain {problem}", field=field)
    return value


def validate_id(value: object, *, field: str, max_length: int = ID_MAX) -> str:
    """Return ``value`` if it is a non-empty, bounded string without control characters."""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string", field=field)
    if not value or not value.strip():
        raise ValidationError(f"{field} must not be empty", field=field)
    if len(value) > max_length:
        raise ValidationError(f"{field} is longer than {max_length} characters", field=field)
    if _CONTROL.search(value):
        raise ValidationError(f"{field} contains control characters", field=field)
    if not value.isascii() and _SURROGATE.search(value):
        raise ValidationError(f"{field} contains lone surrogates (not valid Unicode)", field=field)
    return value


def is_valid_content_hash(value: object) -> bool:
    """True for a SHA-256 hex digest (64 hexadecimal characters, either case)."""
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def validate_content_hash(value: str | None) -> str | None:
    """Normalise a content hash to lower case, or raise ``ValidationError``."""
    if value is None:
        return None
    if not is_valid_content_hash(value):
        raise ValidationError("content_hash must be a SHA-256 hex digest", field="content_hash")
    return value.lower()


def freeze_metadata(value: Mapping[str, Any] | None, *, field: str = "metadata") -> dict[str, Any]:
    """A deep copy of ``value`` holding JSON types only: no aliasing, nothing coerced.

    Keys must be strings (``json.dumps`` would turn ``1`` and ``None`` into ``"1"`` and
    ``"null"`` and silently drop a colliding value); numbers must be finite, integers of
    magnitude below ``METADATA_INT_LIMIT`` (10**308); strings (keys and
    values, at any depth) must not hold NUL or lone surrogates. Tuples become lists and
    subclasses of str, int and float their base type, as a JSON round trip would make them.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"{field} must be a mapping", field=field)
    try:
        return _freeze_object(value, field, set())
    except RecursionError:
        raise ValidationError(f"{field} is nested too deeply", field=field) from None


def _freeze_object(value: Mapping[Any, Any], field: str, path: set[int]) -> dict[str, Any]:
    if id(value) in path:
        raise ValidationError(f"{field} must not contain itself", field=field)
    path.add(id(value))
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValidationError(f"{field} keys must be strings", field=field)
        problem = _unencodable(key)
        if problem is not None:
            raise ValidationError(f"{field} keys must not contain {problem}", field=field)
        out[str.__str__(key)] = _freeze_value(item, field, path)
    path.discard(id(value))
    return out


def _freeze_value(value: object, field: str, path: set[int]) -> Any:
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        problem = _unencodable(value)
        if problem is not None:
            raise ValidationError(f"{field} strings must not contain {problem}", field=field)
        return str.__str__(value)
    if isinstance(value, int):
        if not -METADATA_INT_LIMIT < value < METADATA_INT_LIMIT:
            raise ValidationError(f"{field} integers must have at most 308 digits", field=field)
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"{field} numbers must be finite", field=field)
        return float(value)
    if isinstance(value, Mapping):
        return _freeze_object(value, field, path)
    if isinstance(value, (list, tuple)):
        if id(value) in path:
            raise ValidationError(f"{field} must not contain itself", field=field)
        path.add(id(value))
        items = [_freeze_value(item, field, path) for item in value]
        path.discard(id(value))
        return items
    raise ValidationError(
        f"{field} values must be JSON values (str, number, bool, None, list, mapping), "
        f"not {type(value).__name__}",
        field=field,
    )


def metadata_bytes(metadata: Mapping[str, Any]) -> int:
    """The size the ``metadata_bytes`` cap measures: UTF-8 bytes of compact JSON.

    ``json.dumps(metadata, separators=(",", ":"), ensure_ascii=False)`` encoded as UTF-8:
    "é" counts 2 bytes, never the 6 of its ``\\u00e9`` escape. The one definition the
    chunkers and the use cases share.
    """
    text = json.dumps(metadata, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return len(text.encode("utf-8"))


_CONTAINERS = (dict, list)
_SCALARS = frozenset({str, int, float, bool, type(None)})


class _NotFrozen(Exception):
    """A value of a type ``freeze_metadata`` never produces: the metadata is checked anew."""


def copy_frozen(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of metadata that ``freeze_metadata`` produced (a record's or a hit's).

    Dicts and lists are copied; everything else in frozen metadata is an immutable JSON
    scalar, and is not checked again: it was checked when it entered the domain. Should a
    value of another type show up (metadata changed in place after it was frozen), the whole
    mapping goes through ``freeze_metadata`` instead, which converts or refuses it.
    """
    if type(value) is not dict:
        return freeze_metadata(value)
    out = value.copy()
    try:
        for key, item in out.items():  # replacing values only: the dict's size never changes
            kind = type(item)
            if kind in _CONTAINERS:
                out[key] = _copy_json(item)
            elif kind not in _SCALARS:
                raise _NotFrozen
    except _NotFrozen:
        return freeze_metadata(value)
    return out


def _copy_json(value: Any) -> Any:
    if type(value) is dict:
        out = value.copy()
        for key, item in out.items():
            kind = type(item)
            if kind in _CONTAINERS:
                out[key] = _copy_json(item)
            elif kind not in _SCALARS:
                raise _NotFrozen
        return out
    items = list(value)
    for i, item in enumerate(items):
        kind = type(item)
        if kind in _CONTAINERS:
            items[i] = _copy_json(item)
        elif kind not in _SCALARS:
            raise _NotFrozen
    return items
