"""The answer-reading helpers both HTTP adapter families share (ragport/adapters/_http.py).

Each maps to the error the calling adapter passes in, chains nothing and quotes no text; the
adapters' own tests check them again end to end against a server.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from ragport.adapters._http import (
    HttpFailure,
    check_count,
    failure_error,
    parse_json,
    place_by_index,
)
from ragport.domain.errors import CapabilityError, RerankError, ValidationError, raise_unchained

SECRET = "sk-do-not-show"


class Malformed(Exception):
    pass


def _map(failure: HttpFailure, **kw: Any) -> Exception:
    return failure_error(
        failure, service="rerank", host="h.example", within="2 s", max_bytes=10, **kw
    )


@pytest.mark.parametrize(
    "failure",
    [
        HttpFailure("status", status=503),
        HttpFailure("timeout"),
        HttpFailure("timeout", detail="ReadTimeout"),
        HttpFailure("transport", detail="ConnectError"),
        HttpFailure("too_large"),
    ],
    ids=["status", "timeout", "timeout-detail", "transport", "too-large"],
)
def test_every_failure_kind_becomes_the_adapters_error(failure: HttpFailure) -> None:
    """Each kind maps to the class the adapter passed, naming the host. If this fails, check failure_error."""
    error = _map(failure, error=RerankError)
    assert type(error) is RerankError
    assert "h.example" in str(error)


def test_a_body_past_the_ceiling_can_have_its_own_error() -> None:
    """too_large uses its own factory (fields filled by a partial); the others use error. If this fails, check failure_error's too_large branch."""
    kw: dict[str, Any] = {
        "error": functools.partial(CapabilityError, capability="embedding"),
        "too_large": functools.partial(ValidationError, field="response", limit="x"),
    }
    big = _map(HttpFailure("too_large"), **kw)
    assert type(big) is ValidationError and (big.field, big.limit) == ("response", "x")
    down = _map(HttpFailure("status", status=500), **kw)
    assert type(down) is CapabilityError and down.capability == "embedding"


@pytest.mark.parametrize(
    ("failure", "retryable"),
    [
        (HttpFailure("timeout"), True),
        (HttpFailure("transport"), True),
        (HttpFailure("status", status=429), True),
        (HttpFailure("status", status=503), True),
        (HttpFailure("status", status=400), False),
        (HttpFailure("status", status=401), False),
        (HttpFailure("too_large"), False),
    ],
)
def test_retryable_failures(failure: HttpFailure, retryable: bool) -> None:
    """Timeouts, transport failures, 408/425/429 and 5xx may succeed later. If this fails, check HttpFailure.retryable."""
    assert failure.retryable is retryable


@pytest.mark.parametrize("body", [b"{", b"[NaN]", b"[Infinity]", b"[" * 100_000, b"\xff"])
def test_invalid_json_raises_the_adapters_error_unchained(body: bytes) -> None:
    """Bad JSON (NaN and Infinity included) is malformed(...), with no chain to json's error. If this fails, check parse_json."""
    with pytest.raises(Malformed) as caught:
        parse_json(body + SECRET.encode(), Malformed)
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert SECRET not in str(caught.value)


def test_valid_json_is_returned() -> None:
    """Plain JSON parses as json.loads would. If this fails, check parse_json."""
    assert parse_json(b'{"a": [1, 2.5, null]}', Malformed) == {"a": [1, 2.5, None]}


def _read(item: dict[str, Any]) -> str:
    return str(item["v"])


def test_answers_are_placed_by_their_index() -> None:
    """Answers in any order come back in input order. If this fails, check place_by_index."""
    items = [{"index": 2, "v": "c"}, {"index": 0, "v": "a"}, {"index": 1, "v": "b"}]
    assert place_by_index(items, 3, _read, Malformed) == ["a", "b", "c"]
    assert place_by_index([], 0, _read, Malformed) == []


@pytest.mark.parametrize(
    "items",
    [
        [{"index": 0, "v": "a"}],
        [{"index": 0, "v": "a"}, {"index": 1, "v": "b"}, {"index": 2, "v": "c"}],
        [{"index": 0, "v": "a"}, {"index": 0, "v": "b"}],
        [{"index": 0, "v": "a"}, {"index": 2, "v": "b"}],
        [{"index": 0, "v": "a"}, {"index": -1, "v": "b"}],
        [{"index": 0, "v": "a"}, {"index": True, "v": "b"}],
        [{"index": 0, "v": "a"}, {"index": 1.0, "v": "b"}],
        [{"index": 0, "v": "a"}, {"v": "b"}],
        [{"index": 0, "v": "a"}, ["index", 1]],
    ],
    ids=[
        "too-few",
        "too-many",
        "repeated",
        "out-of-range",
        "negative",
        "bool",
        "float",
        "missing",
        "not-an-object",
    ],
)
def test_anything_but_each_index_once_is_malformed(items: list[Any]) -> None:
    """Count, type, range and repetition of every index are checked. If this fails, check place_by_index."""
    with pytest.raises(Malformed):
        place_by_index(items, 2, _read, Malformed)


def test_a_bad_answer_raises_the_readers_own_error() -> None:
    """read's error passes through unchanged. If this fails, check that place_by_index calls read."""

    def refuse(item: dict[str, Any]) -> str:
        raise RerankError("bad score")

    with pytest.raises(RerankError):
        place_by_index([{"index": 0}], 1, refuse, Malformed)


def test_check_count() -> None:
    """One answer per input or malformed. If this fails, check check_count."""
    check_count([1, 2], 2, Malformed)
    with pytest.raises(Malformed):
        check_count([1], 2, Malformed)


def test_mapped_errors_raised_unchained_keep_no_httpx_context() -> None:
    """The adapters raise failure_error's result with raise_unchained inside their except. If this fails, check raise_unchained."""
    try:
        try:
            raise OSError(SECRET)
        except OSError:
            raise_unchained(
                _map(HttpFailure("transport", detail="ConnectError"), error=RerankError)
            )
    except RerankError as error:
        assert error.__cause__ is None and error.__context__ is None
        assert SECRET not in str(error)
