"""Argument rules every checkpoint store adapter applies before touching its storage."""

from __future__ import annotations

from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope

__all__ = ["check_cas_args", "check_checkpoint_args"]

MAX_CONNECTOR_ID = 512


def check_checkpoint_args(connector_id: object, scope: object) -> None:
    """The argument rules every checkpoint store applies before touching storage."""
    if (
        not isinstance(connector_id, str)
        or not connector_id
        or len(connector_id) > MAX_CONNECTOR_ID
    ):
        raise ValidationError(
            f"connector_id must be a non-empty string of at most {MAX_CONNECTOR_ID} characters",
            field="connector_id",
        )
    if not connector_id.isprintable():
        raise ValidationError("connector_id must be printable", field="connector_id")
    if not isinstance(scope, Scope):
        raise ValidationError("scope must be a Scope", field="scope")


def check_cas_args(expected_version: object, cursor: object) -> None:
    """``expected_version`` a non-negative int, ``cursor`` a string PostgreSQL can store."""
    if (
        isinstance(expected_version, bool)
        or not isinstance(expected_version, int)
        or expected_version < 0
    ):
        raise ValidationError(
            "expected_version must be a non-negative integer", field="expected_version"
        )
    if not isinstance(cursor, str) or "\x00" in cursor:
        raise ValidationError("cursor must be a string without NUL", field="cursor")
