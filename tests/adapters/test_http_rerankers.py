"""TeiReranker, OpenAICompatibleReranker and VoyageReranker against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import attrs
import httpx
import pytest
from fake_http import FakeServer, Reply, relevance
from flat_options import http_parts

from ragport.adapters.rerankers import (
    HttpOptions,
    OpenAICompatibleReranker,
    TeiReranker,
    VoyageReranker,
)
from ragport.application.rerank import rerank_hits
from ragport.contract_tests._support import error_mentions
from ragport.contract_tests.reranker import contract_hits
from ragport.domain.errors import RerankError, ValidationError

API_KEY = "sk-rerank-test-4d3c2b1a-DO-NOT-LEAK"
SECRET_TEXT = "CONFIDENTIAL-merger-plan-zebra"
QUERY = "parental leave weeks"
TEI_MAX_CLIENT_BATCH = 32  # TEI's default --max-client-batch-size


# --- the three APIs, as the fake servers speak them -------------------------------------


@attrs.frozen
class Api:
    """One rerank dialect: how to build the client, read a request, and wrap an answer."""

    name: str
    documents_key: str
    score_key: str
    request_keys: frozenset[str]
    build: Callable[..., Any]
    wrap: Callable[[list[Any]], Any]
    wrong_top_level: Any

    def documents(self, request: dict[str, Any]) -> list[str]:
        return list(request["json"][self.documents_key])

    def items(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        query = request["json"]["query"]
        scored = [
            {"index": i, self.score_key: relevance(query, doc)}
            for i, doc in enumerate(self.documents(request))
        ]
        # Real servers answer best first; the client must use "index", not the position.
        return sorted(scored, key=lambda item: -item[self.score_key])

    def answer(self, request: dict[str, Any]) -> Reply:
        return Reply(body=json.dumps(self.wrap(self.items(request))).encode())


def _tei(server: FakeServer, **kwargs: Any) -> TeiReranker:
    kwargs.setdefault("allow_loopback", True)
    return TeiReranker(server.url, **http_parts(**kwargs))


def _openai(server: FakeServer, **kwargs: Any) -> OpenAICompatibleReranker:
    kwargs.setdefault("allow_loopback", True)
    return OpenAICompatibleReranker(server.url + "/v1", "test-reranker", **http_parts(**kwargs))


def _voyage(server: FakeServer, **kwargs: Any) -> VoyageReranker:
    kwargs.setdefault("allow_loopback", True)
    kwargs.setdefault("api_key", API_KEY)
    return VoyageReranker(base_url=server.url + "/v1", **http_parts(**kwargs))


APIS = {
    "tei": Api(
        name="tei",
        documents_key="texts",
        score_key="score",
        request_keys=frozenset({"query", "texts", "raw_scores"}),
        build=_tei,
        wrap=lambda items: items,
        wrong_top_level={"results": []},
    ),
    "openai": Api(
        name="openai",
        documents_key="documents",
        score_key="relevance_score",
        request_keys=frozenset({"model", "query", "documents"}),
        build=_openai,
        wrap=lambda items: {"id": "r-1", "results": items, "usage": {"total_tokens": 7}},
        wrong_top_level=[],
    ),
    "voyage": Api(
        name="voyage",
        documents_key="documents",
        score_key="relevance_score",
        request_keys=frozenset({"model", "query", "documents"}),
        build=_voyage,
        wrap=lambda items: {"object": "list", "data": items, "model": "rerank-2"},
        wrong_top_level=[],
    ),
}


@pytest.fixture(params=sorted(APIS))
def api(request: pytest.FixtureRequest) -> Api:
    return APIS[request.param]


def fixed(reply: Reply) -> Callable[[dict[str, Any]], Reply]:
    return lambda request: reply


def chain(error: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def assert_nothing_leaks(error: BaseException) -> None:
    shown = "".join(traceback.format_exception(error)) + "".join(repr(e) for e in chain(error))
    assert API_KEY not in shown
    assert SECRET_TEXT not in shown
    # The whole chain, attributes included (a JSONDecodeError keeps the body in .doc).
    assert error_mentions(error, API_KEY) == []
    assert error_mentions(error, SECRET_TEXT) == []
    assert error.__cause__ is None and error.__context__ is None


def hits(n: int = 6) -> tuple[Any, ...]:
    texts = [
        "Parental leave lasts sixteen weeks.",
        f"{SECRET_TEXT} forklift safety course.",
        "Leave requests need two weeks notice.",
        "The cafeteria opens at noon.",
        "Parental leave can be split.",
        "Salary bands are reviewed yearly.",
    ]
    return contract_hits([texts[i % len(texts)] + f" ({i})" for i in range(n)])


def expected_order(given: tuple[Any, ...]) -> list[str]:
    order = sorted(range(len(given)), key=lambda i: -relevance(QUERY, given[i].text))
    return [given[i].id for i in order]


# --- happy path -------------------------------------------------------------------------


def test_answers_are_scored_pairs_best_first(serve, api):
    """rerank returns (hit, score) pairs of the given objects, highest score first.

    If this fails, check the dialect's _items/_parse and the sort in _HttpReranker.rerank.
    """
    server = serve(api.answer)
    given = hits()
    with api.build(server, api_key=API_KEY) as reranker:
        out = reranker.rerank(QUERY, given)
    assert [hit.id for hit, _ in out] == expected_order(given)
    assert all(any(hit is g for g in given) for hit, _ in out)
    assert [score for _, score in out] == sorted((s for _, s in out), reverse=True)
    assert all(type(score) is float for _, score in out)


def test_request_is_one_post_with_the_documented_body(serve, api):
    """One POST to {base_url}/rerank with exactly the documented keys, no top_k, Bearer auth.

    If this fails, check the dialect's _payload and the headers built in _HttpReranker._post.
    """
    server = serve(api.answer)
    given = hits()
    api.build(server, api_key=API_KEY).rerank(QUERY, given)
    [request] = server.requests
    body = request["json"]
    assert request["path"] == ("/rerank" if api.name == "tei" else "/v1/rerank")
    assert set(body) == api.request_keys
    assert not {"top_k", "top_n"} & set(body)
    assert body["query"] == QUERY
    assert api.documents(request) == [hit.text for hit in given]
    assert request["headers"]["Authorization"] == f"Bearer {API_KEY}"
    if api.name == "tei":
        assert body["raw_scores"] is False
    else:
        assert body["model"] == ("test-reranker" if api.name == "openai" else "rerank-2")


def test_exactly_one_request_per_rerank(serve, api):
    """Each rerank of 50 candidates is one HTTP request, counted on the server.

    If this fails, check that rerank sends all candidates in a single request.
    """
    server = serve(api.answer)
    reranker = api.build(server)
    for round_ in range(1, 4):
        reranker.rerank(QUERY, hits(50))
        assert len(server.requests) == round_


def test_no_request_for_no_hits(serve, api):
    """An empty candidate list returns [] without touching the network.

    If this fails, check rerank's early return.
    """
    server = serve(api.answer)
    assert api.build(server).rerank(QUERY, []) == []
    assert server.requests == []


def test_works_through_the_seam(serve, api):
    """rerank_hits accepts the adapter's answer and returns the same Hit objects reordered.

    If this fails, check the (hit, score) pairs the adapter returns.
    """
    server = serve(api.answer)
    given = hits()
    out = rerank_hits(QUERY, given, reranker=api.build(server))
    assert [hit.id for hit in out] == expected_order(given)
    assert sorted(map(id, out)) == sorted(map(id, given))


def test_equal_scores_keep_the_input_order(serve, api):
    """Ties are broken by input position (a stable sort), whatever order the server used.

    If this fails, check that the sort key is the score alone and the sort is stable.
    """
    given = hits(5)
    items = [{"index": i, api.score_key: 0.5} for i in reversed(range(5))]
    server = serve(fixed(Reply(body=json.dumps(api.wrap(items)).encode())))
    out = api.build(server).rerank(QUERY, given)
    assert [hit for hit, _ in out] == list(given)


# --- malformed answers ------------------------------------------------------------------

MALFORMED: dict[str, Callable[[Api, int], Any]] = {
    "short": lambda api, n: [{"index": i, api.score_key: 0.1} for i in range(n - 1)],
    "long": lambda api, n: [{"index": i, api.score_key: 0.1} for i in range(n + 1)],
    "duplicate index": lambda api, n: [{"index": min(i, 1), api.score_key: 0.1} for i in range(n)],
    "out-of-range index": lambda api, n: [{"index": i + 1, api.score_key: 0.1} for i in range(n)],
    "negative index": lambda api, n: [{"index": i - 1, api.score_key: 0.1} for i in range(n)],
    "bool index": lambda api, n: [
        {"index": True if i == 1 else i, api.score_key: 0.1} for i in range(n)
    ],
    "float index": lambda api, n: [{"index": float(i), api.score_key: 0.1} for i in range(n)],
    "string index": lambda api, n: [{"index": str(i), api.score_key: 0.1} for i in range(n)],
    "missing index": lambda api, n: [{api.score_key: 0.1} for _ in range(n)],
    "NaN score": lambda api, n: [{"index": i, api.score_key: float("nan")} for i in range(n)],
    "Infinity score": lambda api, n: [{"index": i, api.score_key: float("inf")} for i in range(n)],
    "string score": lambda api, n: [{"index": i, api.score_key: "0.9"} for i in range(n)],
    "bool score": lambda api, n: [{"index": i, api.score_key: True} for i in range(n)],
    "null score": lambda api, n: [{"index": i, api.score_key: None} for i in range(n)],
    "missing score": lambda api, n: [{"index": i} for i in range(n)],
    "wrong score key": lambda api, n: [{"index": i, "logit": 0.1} for i in range(n)],
    "items not objects": lambda api, n: list(range(n)),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_items_are_rerank_errors(serve, api, case):
    """Short, long, duplicate, out-of-range or mistyped indices and bad scores fail closed.

    If this fails, check _HttpReranker._parse for the case named in the test id.
    """
    n = 4
    body = json.dumps(api.wrap(MALFORMED[case](api, n))).encode()  # NaN/Infinity as tokens
    server = serve(fixed(Reply(body=body)))
    with pytest.raises(RerankError) as info:
        api.build(server, api_key=API_KEY).rerank(QUERY, hits(n))
    assert_nothing_leaks(info.value)


RAW_BODIES: dict[str, Callable[[Api], bytes]] = {
    "wrong top-level type": lambda api: json.dumps(api.wrong_top_level).encode(),
    "items not a list": lambda api: json.dumps(
        api.wrap({"0": 1}) if api.name == "tei" else api.wrap("none")  # type: ignore[arg-type]
    ).encode(),
    "a score past float range": lambda api: (
        json.dumps(api.wrap([{"index": i, api.score_key: 12345.5} for i in range(4)]))
        .replace("12345.5", "1e999")
        .encode()
    ),
    "an integer score past float range": lambda api: (
        json.dumps(api.wrap([{"index": i, api.score_key: 12345} for i in range(4)]))
        .replace("12345", "9" * 400)
        .encode()
    ),
    "not JSON": lambda api: b"<html>Bad gateway " + SECRET_TEXT.encode() + b"</html>",
    "empty body": lambda api: b"",
    "truncated JSON": lambda api: json.dumps(
        api.wrap([{"index": i, api.score_key: 0.5} for i in range(4)])
    ).encode()[:-3],
    "a JSON string": lambda api: b'"ok"',
}


@pytest.mark.parametrize("case", sorted(RAW_BODIES))
def test_malformed_bodies_are_rerank_errors(serve, api, case):
    """Wrong JSON types, non-JSON, empty, truncated or out-of-range bodies fail closed.

    If this fails, check the dialect's _items and _HttpReranker._json.
    """
    server = serve(fixed(Reply(body=RAW_BODIES[case](api))))
    with pytest.raises(RerankError) as info:
        api.build(server, api_key=API_KEY).rerank(QUERY, hits(4))
    assert_nothing_leaks(info.value)


# --- status, deadline, size, transport failures -----------------------------------------


@pytest.mark.parametrize("status", [401, 413, 429, 500, 503])
def test_http_errors_name_status_and_host_only(serve, api, status):
    """A non-2xx answer is a RerankError naming the status and host, not the body or key.

    If this fails, check the status branch in _HttpReranker._post.
    """
    server = serve(
        lambda request: Reply(
            status=status, body=json.dumps({"error": API_KEY, "echo": request["json"]}).encode()
        )
    )
    with pytest.raises(RerankError) as info:
        api.build(server, api_key=API_KEY).rerank(QUERY, hits())
    message = str(info.value)
    assert str(status) in message
    assert f"127.0.0.1:{server.server_address[1]}" in message
    assert "/rerank" not in message
    assert_nothing_leaks(info.value)


def test_a_redirect_is_not_followed(serve, api):
    """A 3xx answer is a RerankError; the client never follows it.

    If this fails, check follow_redirects=False on the client.
    """
    server = serve(fixed(Reply(status=307, headers={"Location": "http://127.0.0.1:9/rerank"})))
    with pytest.raises(RerankError):
        api.build(server).rerank(QUERY, hits())
    assert len(server.requests) == 1


def test_a_slow_answer_past_the_deadline_fails(serve, api):
    """A server that waits past timeout_ms before answering is a RerankError, on time.

    If this fails, check the per-request timeout passed to httpx in _HttpReranker._post.
    """
    server = serve(lambda request: attrs.evolve(api.answer(request), delay_s=1.5))
    started = time.monotonic()
    with pytest.raises(RerankError) as info:
        api.build(server, timeout_ms=200, api_key=API_KEY).rerank(QUERY, hits())
    assert time.monotonic() - started < 1.2
    assert_nothing_leaks(info.value)


def test_a_dripping_answer_past_the_deadline_fails(serve, api):
    """A server that sends its body a byte at a time cannot stretch the deadline.

    If this fails, check the deadline check between body chunks in _HttpReranker._post.
    """
    server = serve(lambda request: attrs.evolve(api.answer(request), drip_s=0.02))
    started = time.monotonic()
    with pytest.raises(RerankError):
        api.build(server, timeout_ms=300).rerank(QUERY, hits())
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_past_the_byte_ceiling_fails(serve, api, chunked):
    """An answer longer than max_response_bytes is a RerankError, declared length or not.

    If this fails, check the Content-Length check and the byte count in _HttpReranker._post.
    """

    def padded(request: dict[str, Any]) -> Reply:
        items = [dict(item, padding="x" * 600) for item in api.items(request)]
        return Reply(body=json.dumps(api.wrap(items)).encode(), chunked=chunked)

    server = serve(padded)
    with pytest.raises(RerankError):
        api.build(server, max_response_bytes=1024).rerank(QUERY, hits())
    assert api.build(server, max_response_bytes=8192).rerank(QUERY, hits())


def test_a_refused_connection_is_a_rerank_error(api):
    """Nothing listening on the port is a RerankError naming the host, not the key.

    If this fails, check the httpx.HTTPError branch in _HttpReranker._post.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    class Closed:
        url = f"http://127.0.0.1:{port}"

    with pytest.raises(RerankError) as info:
        api.build(Closed(), api_key=API_KEY).rerank(QUERY, hits())
    assert_nothing_leaks(info.value)


# --- TEI batching -----------------------------------------------------------------------


def tei_with_batch_limit(request: dict[str, Any]) -> Reply:
    texts = request["json"]["texts"]
    if len(texts) > TEI_MAX_CLIENT_BATCH:
        error = {
            "error": f"batch size {len(texts)} > maximum allowed batch size 32",
            "error_type": "Validation",
        }
        return Reply(status=413, body=json.dumps(error).encode())
    return APIS["tei"].answer(request)


def test_tei_max_batch_splits_and_merges(serve):
    """With max_batch=32, 70 candidates are three requests (32, 32, 6) merged into one order.

    The requests may arrive in any order (they are concurrent, issue 27).

    If this fails, check TeiReranker._scores: batch offsets and the merge of scores.
    """
    server = serve(tei_with_batch_limit)
    given = hits(70)
    out = _tei(server, max_batch=32).rerank(QUERY, given)
    assert sorted(len(r["json"]["texts"]) for r in server.requests) == [6, 32, 32]
    assert [hit.id for hit, _ in out] == expected_order(given)
    assert sorted(map(id, (hit for hit, _ in out))) == sorted(map(id, given))


def test_tei_without_max_batch_sends_one_request_and_fails_past_the_server_batch(serve):
    """Without max_batch, 70 candidates are one request, which the server refuses (413).

    If this fails, check that TeiReranker splits only when max_batch is given.
    """
    server = serve(tei_with_batch_limit)
    with pytest.raises(RerankError):
        _tei(server).rerank(QUERY, hits(70))
    assert len(server.requests) == 1
    assert _tei(server, max_batch=32).rerank(QUERY, hits(20))
    assert len(server.requests) == 2


def test_tei_max_batch_shares_one_deadline(serve):
    """All batch requests of one rerank share timeout_ms: slow batches add up and fail
    (sent one at a time here, max_concurrency=1).

    If this fails, check that TeiReranker._scores passes one deadline to every request.
    """
    server = serve(lambda request: attrs.evolve(APIS["tei"].answer(request), delay_s=0.15))
    with pytest.raises(RerankError):
        _tei(server, max_batch=2, timeout_ms=400, max_concurrency=1).rerank(QUERY, hits(12))
    assert len(server.requests) < 6


# --- the transport seam -----------------------------------------------------------------


def test_an_injected_client_is_used_as_given_and_left_open(serve, api):
    """A caller's httpx.Client carries the request (its headers arrive) and is never closed.

    If this fails, check that _HttpReranker uses `client` as is and close() spares it.
    """
    server = serve(api.answer)
    client = httpx.Client(headers={"X-Caller": "host-app"})
    with api.build(server, client=client) as reranker:
        reranker.rerank(QUERY, hits())
    assert server.requests[0]["headers"]["X-Caller"] == "host-app"
    assert not client.is_closed
    client.close()


def test_an_injected_transport_carries_the_request(serve, api):
    """A caller's httpx transport sees exactly one request per rerank.

    If this fails, check that `transport=` reaches the client ragport builds.
    """

    class Counting(httpx.HTTPTransport):
        calls = 0

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            Counting.calls += 1
            return super().handle_request(request)

    server = serve(api.answer)
    api.build(server, transport=Counting()).rerank(QUERY, hits())
    assert Counting.calls == 1


# --- construction -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "allow_loopback"),
    [
        ("http://127.0.0.1:8080", False),
        ("http://rerank.example.com", True),
        ("http://10.0.0.7:8080", True),
        ("ftp://127.0.0.1", True),
        ("https://user:pw@rerank.example.com", False),
        ("https://rerank.example.com?key=1", False),
        ("https://rerank.example.com/#x", False),
        ("https://", False),
        ("", False),
        ("https://rerank.example.com/a b", False),
    ],
)
def test_base_url_must_be_https_or_allowed_loopback(api, url, allow_loopback):
    """Only https:// URLs, or http:// to a loopback host with allow_loopback=True, are accepted.

    If this fails, check _check_base_url in ragport/adapters/rerankers/http.py.
    """
    with pytest.raises(ValidationError) as info:
        if api.name == "voyage":
            VoyageReranker(API_KEY, base_url=url, http=HttpOptions(allow_loopback=allow_loopback))
        elif api.name == "openai":
            OpenAICompatibleReranker(url, "m", http=HttpOptions(allow_loopback=allow_loopback))
        else:
            TeiReranker(url, http=HttpOptions(allow_loopback=allow_loopback))
    assert info.value.field == "base_url"


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8080", "http://127.8.9.10", "http://localhost:1", "http://[::1]:8080"],
)
def test_loopback_hosts_are_accepted_with_allow_loopback(url):
    """127.0.0.0/8, ::1 and localhost are loopback; https:// needs no permission.

    If this fails, check is_loopback in ragport/adapters/_http.py.
    """
    TeiReranker(url, http=HttpOptions(allow_loopback=True)).close()
    TeiReranker("https://rerank.example.com/v1").close()


@pytest.mark.parametrize("key", [None, "", "two words", "tab\tkey", 12345])
def test_voyage_requires_an_api_key(key):
    """VoyageReranker without a usable API key is ValidationError(field="api_key").

    If this fails, check _check_api_key(required=True) in VoyageReranker.
    """
    with pytest.raises(ValidationError) as info:
        VoyageReranker(key)  # type: ignore[arg-type]
    assert info.value.field == "api_key"


def test_only_voyage_has_a_default_url():
    """Voyage defaults to its own https API; TEI and OpenAI-compatible need a base_url.

    If this fails, check the constructors' signatures.
    """
    assert "https://api.voyageai.com/v1" in repr(VoyageReranker(API_KEY))
    with pytest.raises(TypeError):
        TeiReranker()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        OpenAICompatibleReranker("https://rerank.example.com")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"timeout_ms": 0}, "timeout_ms"),
        ({"timeout_ms": 300_001}, "timeout_ms"),
        ({"timeout_ms": 1.5}, "timeout_ms"),
        ({"timeout_ms": True}, "timeout_ms"),
        ({"max_response_bytes": 10}, "max_response_bytes"),
        ({"max_response_bytes": 1 << 30}, "max_response_bytes"),
        ({"max_batch": 0}, "max_batch"),
        ({"max_batch": "32"}, "max_batch"),
        ({"model": ""}, "model"),
        ({"model": "a\nb"}, "model"),
        ({"api_key": ""}, "api_key"),
        ({"client": object()}, "client"),
        ({"transport": object()}, "transport"),
        ({"client": "x", "transport": "y"}, "client"),
    ],
)
def test_bad_arguments_are_validation_errors(kwargs, field):
    """Out-of-range or mistyped arguments are ValidationError naming the argument.

    If this fails, check the constructor checks in ragport/adapters/rerankers/http.py.
    """
    with pytest.raises(ValidationError) as info:
        TeiReranker("https://rerank.example.com", **http_parts(**kwargs))
    assert info.value.field == field


def test_both_client_and_transport_is_refused():
    """client= and transport= together are ambiguous: ValidationError(field="transport").

    If this fails, check the client/transport check in _HttpReranker.__init__.
    """
    with httpx.Client() as client, pytest.raises(ValidationError) as info:
        TeiReranker(
            "https://r.example.com",
            http=HttpOptions(client=client, transport=httpx.HTTPTransport()),
        )
    assert info.value.field == "transport"


def test_the_api_key_never_shows_in_repr_or_vars(api):
    """repr() and vars() of a reranker never contain the API key.

    If this fails, check __repr__ and that the key is kept in _Secret.
    """

    class At:
        url = "https://rerank.example.com"

    reranker = api.build(At(), api_key=API_KEY)
    assert API_KEY not in repr(reranker)
    assert API_KEY not in str(vars(reranker))
    assert "api_key=<set>" in repr(reranker)


# --- live probes --------------------------------------------------------------------------

LIVE_DOCS = [
    "The cafeteria serves lunch from noon until two.",
    "Parental leave lasts up to sixteen weeks at full pay.",
    "Forklift drivers need a safety certificate.",
]


def _live_check(reranker: Any) -> None:
    given = contract_hits(LIVE_DOCS)
    out = rerank_hits("How long is parental leave?", given, reranker=reranker, max_ms=10_000)
    assert out[0] is given[1]


@pytest.mark.skipif(
    not os.environ.get("RAGPORT_TEST_TEI_RERANKER_URL"),
    reason="set RAGPORT_TEST_TEI_RERANKER_URL to run the live probe",
)
def test_live_tei_reranker():
    """A real TEI reranker ranks the on-topic passage first.

    If this fails, check that RAGPORT_TEST_TEI_RERANKER_URL serves a reranker model.
    """
    url = os.environ["RAGPORT_TEST_TEI_RERANKER_URL"]
    with TeiReranker(
        url, http=HttpOptions(allow_loopback=True), timeout_ms=10_000, max_batch=32
    ) as reranker:
        _live_check(reranker)


@pytest.mark.skipif(
    not os.environ.get("RAGPORT_TEST_HOSTED_RERANK_URL"),
    reason=(
        "set RAGPORT_TEST_HOSTED_RERANK_URL (and RAGPORT_TEST_HOSTED_RERANK_KEY, "
        "RAGPORT_TEST_HOSTED_RERANK_MODEL as needed) to run the live probe"
    ),
)
def test_live_openai_compatible_reranker():
    """A real OpenAI-compatible /rerank endpoint ranks the on-topic passage first.

    If this fails, check RAGPORT_TEST_HOSTED_RERANK_URL, _KEY and _MODEL.
    """
    with OpenAICompatibleReranker(
        os.environ["RAGPORT_TEST_HOSTED_RERANK_URL"],
        os.environ.get("RAGPORT_TEST_HOSTED_RERANK_MODEL", "BAAI/bge-reranker-v2-m3"),
        api_key=os.environ.get("RAGPORT_TEST_HOSTED_RERANK_KEY") or None,
        http=HttpOptions(allow_loopback=True),
        timeout_ms=10_000,
    ) as reranker:
        _live_check(reranker)


@pytest.mark.skipif(
    not os.environ.get("RAGPORT_TEST_VOYAGE_KEY"),
    reason="set RAGPORT_TEST_VOYAGE_KEY to run the live probe",
)
def test_live_voyage_reranker():
    """Voyage AI's rerank-2 ranks the on-topic passage first.

    If this fails, check RAGPORT_TEST_VOYAGE_KEY and Voyage's service status.
    """
    with VoyageReranker(os.environ["RAGPORT_TEST_VOYAGE_KEY"], timeout_ms=10_000) as reranker:
        _live_check(reranker)
