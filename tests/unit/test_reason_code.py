"""reason_code: the short, text-free reason sync and ingest report for a failed file."""

from __future__ import annotations

import pytest

from ragport.domain.errors import (
    EmbedderError,
    LoadError,
    ParseError,
    StoreError,
    SyncCursorError,
    UrlRejectedError,
    ValidationError,
    reason_code,
)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ParseError("secret body text", reason="timeout"), "timeout"),
        (LoadError("secret", reason="too_large"), "too_large"),
        (UrlRejectedError("secret", reason="private_address"), "private_address"),
        (SyncCursorError("secret", reason="expired"), "expired"),
        (StoreError("secret", reason="lost"), "lost"),
        (StoreError("secret"), "StoreError"),
        (ValidationError("secret", field="text", limit="parse_bytes"), "parse_bytes"),
        (ValidationError("secret", field="text"), "ValidationError"),
        (EmbedderError("secret"), "EmbedderError"),
        (KeyError("secret"), "KeyError"),
    ],
)
def test_the_reason_is_the_code_or_the_ceiling_or_the_type_never_the_message(error, expected):
    """If this fails, check reason_code in ragport/domain/errors.py."""
    assert reason_code(error) == expected
