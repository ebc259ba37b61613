"""The checks every connector's cursor decoding shares (a cursor is compact JSON it wrote)."""

from __future__ import annotations

import json
from typing import Any

from ragport.domain.errors import SyncCursorError


def decode_cursor(
    cursor: object, bad: SyncCursorError, *, version: int, kind: str, owner: tuple[str, str]
) -> dict[str, Any]:
    """The JSON object ``cursor`` holds, when it is one this connector issued: a string of JSON
    whose ``v`` is ``version``, whose ``kind`` is ``kind`` and whose ``owner[0]`` field is
    ``owner[1]``; otherwise ``bad`` is raised (unchained). The caller checks its own fields."""
    if not isinstance(cursor, str):
        raise bad
    try:
        body = json.loads(cursor)
    except (ValueError, RecursionError):  # a deeply nested (hostile or corrupt) cursor
        raise bad from None
    if (
        not isinstance(body, dict)
        or body.get("v") != version
        or body.get("kind") != kind
        or body.get(owner[0]) != owner[1]
    ):
        raise bad
    return body
