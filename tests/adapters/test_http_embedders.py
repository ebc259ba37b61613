"""OpenAICompatibleEmbedder and TeiEmbedder against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import attrs
import httpx
import numpy as np
import pytest
from fake_http import FakeServer, Reply
from flat_options import http_parts

from ragport.adapters.embedders import (
    HashEmbedder,
    HttpOptions,
    OpenAICompatibleEmbedder,
    TeiEmbedder,
)
from ragport.contract_tests._support import error_mentions
from ragport.domain.errors import EmbedderError, RagportError, ValidationError

DIMS = 16
API_KEY = "sk-test-9f8e7d6c5b4a-DO-NOT-LEAK"
SECRET_TEXT = "CONFIDENTIAL-merger-plan-zebra"
_HASH = HashEmbedder(dimensions=DIMS)


def vectors(texts: list[str]) -> list[list[float]]:
    return _HASH.embed(texts).astype(np.float64).tolist()


def openai_answer(request: dict[str, Any]) -> Reply:
    texts = request["json"]["input"]
    data = [
        {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors(texts))
    ]
    data.reverse()  # the format allows any order: the client must use "index"
    return Reply(body=json.dumps({"object": "list", "data": data, "model": "m"}).encode())


def tei_answer(request: dict[str, Any]) -> Reply:
    return Reply(body=json.dumps(vectors(request["json"]["inputs"])).encode())


def openai(server: FakeServer, **kwargs: Any) -> OpenAICompatibleEmbedder:
    kwargs.setdefault("dimensions", DIMS)
    kwargs.setdefault("allow_loopback", True)
    return OpenAICompatibleEmbedder(server.url + "/v1", "test-model", **http_parts(**kwargs))


def tei(server: FakeServer, **kwargs: Any) -> TeiEmbedder:
    kwargs.setdefault("dimensions", DIMS)
    kwargs.setdefault("allow_loopback", True)
    return TeiEmbedder(server.url, **http_parts(**kwargs))


DIALECTS = {"openai": (openai, openai_answer), "tei": (tei, tei_answer)}


@pytest.fixture(params=sorted(DIALECTS))
def dialect(request: pytest.FixtureRequest) -> tuple[Callable[..., Any], Callable[..., Reply]]:
    return DIALECTS[request.param]


def fixed(reply: Reply) -> Callable[[dict[str, Any]], Reply]:
    return lambda request: reply


def chain(error: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


# --- happy path -------------------------------------------------------------------------


def test_openai_happy_path(serve):
    """Vectors come back per text in input order, unit length, and the request is as specified.

    If this fails, check the /embeddings path, the {"model", "input"} payload and index mapping.
    """
    server = serve(openai_answer)
    texts = ["alpha beta", "gamma", "delta epsilon zeta"]
    with openai(server, api_key=API_KEY) as embedder:
        out = embedder.embed(texts)
    np.testing.assert_allclose(out, _HASH.embed(texts), rtol=0, atol=1e-6)
    assert out.dtype == np.float32 and out.flags["C_CONTIGUOUS"]
    [request] = server.requests
    assert request["path"] == "/v1/embeddings"
    assert request["json"] == {"model": "test-model", "input": texts}
    assert request["headers"]["Authorization"] == f"Bearer {API_KEY}"
    assert embedder.id == f"openai:test-model:{DIMS}"
    assert embedder.dimensions == DIMS


def test_openai_sends_dimensions_only_when_asked(serve):
    """`"dimensions"` is in the request body only with send_dimensions=True.

    If this fails, check OpenAICompatibleEmbedder._payload.
    """
    server = serve(openai_answer)
    openai(server).embed(["a"])
    openai(server, send_dimensions=True).embed(["a"])
    assert "dimensions" not in server.requests[0]["json"]
    assert server.requests[1]["json"]["dimensions"] == DIMS


def test_tei_happy_path(serve):
    """TEI vectors come back in order; the request asks for normalize=true, truncate=false.

    If this fails, check the /embed path and the {"inputs", "normalize", "truncate"} payload.
    """
    server = serve(tei_answer)
    texts = ["alpha beta", "gamma"]
    embedder = tei(server, model="bge-small")
    np.testing.assert_allclose(embedder.embed(texts), _HASH.embed(texts), rtol=0, atol=1e-6)
    [request] = server.requests
    assert request["path"] == "/embed"
    assert request["json"] == {"inputs": texts, "normalize": True, "truncate": False}
    assert "Authorization" not in request["headers"]
    assert embedder.id == f"tei:bge-small:{DIMS}"


def test_tei_id_falls_back_to_the_host(serve):
    """Without model=, the TEI id names host and port.

    If this fails, check TeiEmbedder.id.
    """
    server = serve(tei_answer)
    assert tei(server).id == f"tei:127.0.0.1:{server.server_address[1]}:{DIMS}"


def test_rows_are_l2_normalised_whatever_the_server_sends(serve):
    """A server answering [3, 4, 0, ...] gives [0.6, 0.8, 0, ...]; an all-zero row stays zero.

    If this fails, check _normalise in the http adapter.
    """
    row = [3.0, 4.0] + [0.0] * (DIMS - 2)
    zero = [0] * DIMS
    server = serve(fixed(Reply(body=json.dumps([row, zero]).encode())))
    out = tei(server).embed(["a", "b"])
    np.testing.assert_allclose(out[0][:2], [0.6, 0.8], atol=1e-6)
    assert not out[1].any()


def test_empty_input_makes_no_request(serve, dialect):
    """embed([]) returns shape (0, d) without calling the server.

    If this fails, check the batching loop in _HttpEmbedder.embed.
    """
    build, answer = dialect
    server = serve(answer)
    assert build(server).embed([]).shape == (0, DIMS)
    assert server.requests == []


def test_batches_never_exceed_batch_size(serve, dialect):
    """Seven texts with batch_size=3 become requests of 3, 3 and 1, results in input order.

    The requests may arrive in any order (batches are concurrent, issue 27). If this fails,
    check the batching loop and the row offsets in _HttpEmbedder.embed.
    """
    build, answer = dialect
    server = serve(answer)
    texts = [f"text number {i}" for i in range(7)]
    out = build(server, batch_size=3).embed(texts)
    sizes = [len(r["json"].get("input") or r["json"].get("inputs")) for r in server.requests]
    assert sorted(sizes) == [1, 3, 3]
    np.testing.assert_allclose(out, _HASH.embed(texts), rtol=0, atol=1e-6)


def test_injected_client_is_used_and_left_open(serve):
    """A caller's httpx.Client carries the requests (its headers arrive) and is not closed.

    If this fails, check that `client=` replaces the built-in client and close() spares it.
    """
    server = serve(tei_answer)
    client = httpx.Client(headers={"X-Host-Owned": "yes"})
    embedder = tei(server, client=client)
    embedder.embed(["a"])
    embedder.close()
    assert server.requests[0]["headers"]["X-Host-Owned"] == "yes"
    assert not client.is_closed
    client.close()


# --- malformed answers ------------------------------------------------------------------

GOOD = [0.25] * DIMS

OPENAI_MALFORMED = {
    "short": {"data": [{"index": 0, "embedding": GOOD}]},
    "long": {"data": [{"index": i, "embedding": GOOD} for i in range(3)]},
    "duplicate index": {"data": [{"index": 0, "embedding": GOOD}, {"index": 0, "embedding": GOOD}]},
    "missing index": {"data": [{"index": 0, "embedding": GOOD}, {"embedding": GOOD}]},
    "index out of range": {
        "data": [{"index": 0, "embedding": GOOD}, {"index": 2, "embedding": GOOD}]
    },
    "index as string": {
        "data": [{"index": 0, "embedding": GOOD}, {"index": "1", "embedding": GOOD}]
    },
    "index as bool": {
        "data": [{"index": 0, "embedding": GOOD}, {"index": True, "embedding": GOOD}]
    },
    "value as string": {
        "data": [{"index": 0, "embedding": GOOD}, {"index": 1, "embedding": ["0.5"] * DIMS}]
    },
    "value as bool": {
        "data": [{"index": 0, "embedding": GOOD}, {"index": 1, "embedding": [True] * DIMS}]
    },
    "value null": {
        "data": [{"index": 0, "embedding": GOOD}, {"index": 1, "embedding": [None] * DIMS}]
    },
    "wrong dimension": {
        "data": [{"index": 0, "embedding": GOOD}, {"index": 1, "embedding": GOOD[:-1]}]
    },
    "embedding not a list": {
        "data": [{"index": 0, "embedding": GOOD}, {"index": 1, "embedding": "AAAA"}]
    },
    "item not an object": {"data": [{"index": 0, "embedding": GOOD}, GOOD]},
    "data not a list": {"data": {"0": GOOD, "1": GOOD}},
    "no data": {"embeddings": [GOOD, GOOD]},
    "top-level list": [GOOD, GOOD],
}

TEI_MALFORMED = {
    "short": [GOOD],
    "long": [GOOD, GOOD, GOOD],
    "wrong dimension": [GOOD, GOOD[:-1]],
    "ragged rows": [GOOD, [*GOOD, 0.1]],
    "value as string": [GOOD, ["0.5"] * DIMS],
    "value as bool": [GOOD, [False] * DIMS],
    "value null": [GOOD, [None] * DIMS],
    "row not a list": [GOOD, {"embedding": GOOD}],
    "object at top": {"embeddings": [GOOD, GOOD]},
}


def _raw(row: str) -> bytes:
    """A two-row TEI body whose second row is `row` verbatim (for tokens json.dumps refuses)."""
    return ("[" + json.dumps(GOOD) + ", [" + ", ".join([row] * DIMS) + "]]").encode()


RAW_MALFORMED = {
    "NaN token": _raw("NaN"),
    "Infinity token": _raw("Infinity"),
    "-Infinity token": _raw("-Infinity"),
    "huge number overflowing to inf": _raw("1e999"),
    "huge integer": _raw("9" * 400),
    "not JSON": b"<html>502 Bad Gateway</html>",
    "empty body": b"",
    "truncated JSON": json.dumps([GOOD, GOOD]).encode()[:-5],
    "invalid UTF-8": b"[\xff\xfe]",
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.parametrize("case", sorted(OPENAI_MALFORMED))
def test_openai_malformed_answers_are_refused(serve, case):
    """Every malformed /embeddings answer raises EmbedderError (not retryable).

    If this fails, check OpenAICompatibleEmbedder._parse and _row for the named case.
    """
    server = serve(fixed(Reply(body=json.dumps(OPENAI_MALFORMED[case]).encode())))
    with pytest.raises(EmbedderError) as caught:
        openai(server).embed(["first", "second"])
    assert caught.value.retryable is False


@pytest.mark.parametrize("case", sorted(TEI_MALFORMED))
def test_tei_malformed_answers_are_refused(serve, case):
    """Every malformed /embed answer raises EmbedderError (not retryable).

    If this fails, check TeiEmbedder._parse and _row for the named case.
    """
    server = serve(fixed(Reply(body=json.dumps(TEI_MALFORMED[case]).encode())))
    with pytest.raises(EmbedderError) as caught:
        tei(server).embed(["first", "second"])
    assert caught.value.retryable is False


@pytest.mark.parametrize("case", sorted(RAW_MALFORMED))
def test_non_finite_and_unparsable_answers_are_refused(serve, case):
    """NaN/Infinity tokens, overflowing numbers and broken JSON raise EmbedderError.

    If this fails, check the json.loads parse_constant hook, the finiteness check in
    _normalise and the ValueError handling in _HttpEmbedder._json.
    """
    server = serve(fixed(Reply(body=RAW_MALFORMED[case])))
    with pytest.raises(EmbedderError) as caught:
        tei(server).embed(["first", "second"])
    assert caught.value.retryable is False


# --- limits: time and size --------------------------------------------------------------


def test_a_slow_answer_times_out(serve, dialect):
    """A server that waits past timeout_s raises a retryable EmbedderError, promptly.

    If this fails, check that timeout_s reaches the request (httpx timeout) and its mapping.
    """
    build, answer = dialect
    server = serve(lambda request: attrs.evolve(answer(request), delay_s=2.0))
    embedder = build(server, timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(EmbedderError) as caught:
        embedder.embed(["a"])
    assert caught.value.retryable is True
    assert time.monotonic() - started < 1.5


def test_a_dripping_answer_hits_the_overall_deadline(serve):
    """A body sent one byte every 50 ms (each read within the timeout) still fails by the deadline.

    If this fails, check the deadline check between body chunks in _HttpEmbedder._post.
    """
    server = serve(lambda request: attrs.evolve(tei_answer(request), drip_s=0.05))
    embedder = tei(server, timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(EmbedderError) as caught:
        embedder.embed(["a"])
    assert caught.value.retryable is True
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_past_the_byte_ceiling_is_refused(serve, chunked):
    """A 2 KiB+ answer with max_response_bytes=1024 raises EmbedderError (not retryable).

    If this fails, check the Content-Length check and the streamed byte count in _post.
    """
    server = serve(lambda request: attrs.evolve(tei_answer(request), chunked=chunked))
    embedder = tei(server, max_response_bytes=1024)
    with pytest.raises(EmbedderError) as caught:
        embedder.embed([f"text {i}" for i in range(8)])
    assert caught.value.retryable is False


# --- HTTP failures ----------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 413, 429, 500, 503, 302])
def test_http_error_statuses_raise_embedder_error(serve, dialect, status):
    """A non-2xx answer (redirects included: they are not followed) raises EmbedderError with
    the status; 429 and 5xx are retryable, the others not.

    If this fails, check the status check at the top of _HttpEmbedder._post.
    """
    build, _ = dialect
    body = json.dumps({"error": {"message": "nope"}}).encode()
    reply = Reply(status=status, body=body, headers={"Location": "https://example.invalid/"})
    server = serve(fixed(reply))
    with pytest.raises(EmbedderError) as caught:
        build(server).embed(["a"])
    assert caught.value.status == status
    assert caught.value.retryable is (status == 429 or status >= 500)
    assert len(server.requests) == 1


def test_connection_refused_raises_embedder_error():
    """A loopback port with no server raises a retryable EmbedderError, not an httpx one.

    If this fails, check the httpx.HTTPError mapping in _HttpEmbedder._post.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = TeiEmbedder(
        f"http://127.0.0.1:{port}", dimensions=DIMS, http=HttpOptions(allow_loopback=True)
    )
    with pytest.raises(EmbedderError) as caught:
        embedder.embed(["a"])
    assert caught.value.retryable is True
    assert caught.value.__cause__ is None and caught.value.__context__ is None


# --- secrets ----------------------------------------------------------------------------

FAILURES = {
    "401": fixed(Reply(status=401, body=b'{"error": "bad key"}')),
    "400 quoting the input": lambda request: Reply(
        status=400, body=json.dumps({"error": request["json"]}).encode()
    ),
    "200 quoting the input": lambda request: Reply(
        body=json.dumps({"error": request["json"]}).encode()
    ),
    "malformed": fixed(Reply(body=b'{"data": "nope"}')),
    "not JSON": lambda request: Reply(body=json.dumps(request["json"]).encode()[:-1]),
    "too large": fixed(Reply(body=b"[" + b"0," * 4096 + b"0]")),
    "slow": lambda request: attrs.evolve(openai_answer(request), delay_s=1.0),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_errors_never_carry_the_api_key_or_the_text(serve, failure):
    """No raised error (or its cause chain) shows the API key or an input text.

    If this fails, check every message built in the http adapter: host and status only.
    """
    server = serve(FAILURES[failure])
    embedder = openai(server, api_key=API_KEY, timeout_s=0.3, max_response_bytes=4096)
    with pytest.raises(RagportError) as caught:
        embedder.embed([SECRET_TEXT])
    assert error_mentions(caught.value, API_KEY) == []
    assert error_mentions(caught.value, SECRET_TEXT) == []
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_repr_never_shows_the_api_key(serve):
    """repr() and vars() of both embedders show that a key is set, never the key.

    If this fails, check __repr__ and the Secret holder in ragport/adapters/_http.py.
    """
    server = serve(tei_answer)
    for embedder in (openai(server, api_key=API_KEY), tei(server, api_key=API_KEY)):
        assert API_KEY not in repr(embedder)
        assert API_KEY not in repr(vars(embedder))


# --- construction -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/v1",
        "http://10.0.0.1:8080",
        "http://192.168.1.10",
        "http://127.0.0.1.nip.io",
        "http://[fe80::1]",
        "ftp://127.0.0.1",
        "https://user:pass@example.com",
        "https://example.com/v1?key=abc",
        "https://example.com/v1#frag",
        "https:///v1",
        "example.com",
        "",
        "https://exa mple.com",
    ],
)
def test_unsafe_base_urls_are_refused(url):
    """Non-loopback http, other schemes, credentials, queries and junk raise at construction.

    If this fails, check check_base_url in ragport/adapters/_http.py.
    """
    for build in (
        lambda: OpenAICompatibleEmbedder(
            url, "m", dimensions=DIMS, http=HttpOptions(allow_loopback=True)
        ),
        lambda: TeiEmbedder(url, dimensions=DIMS, http=HttpOptions(allow_loopback=True)),
    ):
        with pytest.raises(ValidationError) as caught:
            build()
        assert caught.value.field == "base_url"


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "http://localhost", "http://[::1]:80"])
def test_loopback_http_needs_allow_loopback(url):
    """Plain http to a loopback host raises without allow_loopback=True and builds with it.

    If this fails, check the allow_loopback branch of _check_base_url.
    """
    with pytest.raises(ValidationError) as caught:
        TeiEmbedder(url, dimensions=DIMS)
    assert caught.value.field == "base_url"
    TeiEmbedder(url, dimensions=DIMS, http=HttpOptions(allow_loopback=True)).close()


def test_https_builds_without_any_request():
    """An https base_url builds (no socket opens at construction) and keeps its path.

    If this fails, check that the constructor does no I/O.
    """
    embedder = OpenAICompatibleEmbedder(
        "https://embeddings.example.com/v1/", "text-embedding-3-small", dimensions=1536
    )
    assert embedder.id == "openai:text-embedding-3-small:1536"
    assert "https://embeddings.example.com/v1'" in repr(embedder)
    embedder.close()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 129}, "batch_size"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"timeout_s": 601}, "timeout_s"),
        ({"max_response_bytes": 10}, "max_response_bytes"),
        ({"max_response_bytes": 2**40}, "max_response_bytes"),
        ({"dimensions": 0}, "dimensions"),
        ({"dimensions": "384"}, "dimensions"),
        ({"api_key": "two\nlines"}, "api_key"),
        ({"api_key": ""}, "api_key"),
        ({"client": object()}, "client"),
        ({"model": ""}, "model"),
    ],
)
def test_bad_arguments_are_refused(kwargs, field):
    """Out-of-range or mistyped arguments raise ValidationError naming the argument.

    If this fails, check the argument checks in _HttpEmbedder.__init__.
    """
    kwargs = {"dimensions": DIMS, **kwargs}
    model = kwargs.pop("model", "m")
    with pytest.raises(ValidationError) as caught:
        OpenAICompatibleEmbedder("https://example.com", model, **http_parts(**kwargs))
    assert caught.value.field == field


def test_bad_texts_are_refused(serve):
    """A bare string or a non-string item raises ValidationError(field="texts"), no request.

    If this fails, check _check_texts.
    """
    server = serve(tei_answer)
    embedder = tei(server)
    for texts in ("one string", ["ok", 3]):
        with pytest.raises(ValidationError) as caught:
            embedder.embed(texts)
        assert caught.value.field == "texts"
    assert server.requests == []
