"""Concurrent batches of the HTTP embedders (issue 27) against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from fake_http import FakeServer, Reply
from flat_options import http_parts

from ragport import WriteOptions
from ragport.adapters.embedders import (
    HashEmbedder,
    HttpOptions,
    OpenAICompatibleEmbedder,
    TeiEmbedder,
)
from ragport.adapters.memory import InMemoryStore
from ragport.application.indexing import replace_source
from ragport.domain.errors import EmbedderError, ValidationError
from ragport.domain.model import Chunk, Scope

DIMS = 16
BATCH = 4
_HASH = HashEmbedder(dimensions=DIMS)


def texts_for(count: int) -> list[str]:
    return [f"text number {i}" for i in range(count)]


def number(text: str) -> int:
    return int(text.rsplit(" ", 1)[1])


def batch_texts(request: dict[str, Any]) -> list[str]:
    body = request["json"]
    return list(body["inputs"] if "inputs" in body else body["input"])


def answer(request: dict[str, Any]) -> Reply:
    """A right answer in the request's dialect (TEI: a bare array; OpenAI: data, reversed)."""
    texts = batch_texts(request)
    rows = _HASH.embed(texts).astype(np.float64).tolist()
    if "inputs" in request["json"]:
        return Reply(body=json.dumps(rows).encode())
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(rows)]
    data.reverse()
    return Reply(body=json.dumps({"object": "list", "data": data}).encode())


def make(kind: str, server: FakeServer, **kwargs: Any) -> TeiEmbedder | OpenAICompatibleEmbedder:
    kwargs.setdefault("dimensions", DIMS)
    kwargs.setdefault("allow_loopback", True)
    kwargs.setdefault("batch_size", BATCH)
    if kind == "tei":
        return TeiEmbedder(server.url, **http_parts(**kwargs))
    return OpenAICompatibleEmbedder(server.url + "/v1", "test-model", **http_parts(**kwargs))


@pytest.fixture(params=["tei", "openai"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def embed_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ragport-embed")]


class Gauge:
    """Counts the requests the server is answering at once; remembers the peak."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.now = 0
        self.peak = 0

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.lock.notify_all()

    def leave(self) -> None:
        with self.lock:
            self.now -= 1

    def wait_for_peak(self, peak: int, timeout_s: float) -> None:
        with self.lock:
            self.lock.wait_for(lambda: self.peak >= peak, timeout=timeout_s)


@pytest.fixture
def no_embed_threads() -> Iterator[None]:
    """No worker thread of the embedder is alive before or after the test."""
    assert embed_threads() == []
    yield
    assert embed_threads() == []


def test_rows_come_back_in_input_order_when_batches_finish_out_of_order(
    serve: Callable[..., FakeServer], kind: str, no_embed_threads: None
) -> None:
    """Earlier batches answer later, yet every row lands on its own text's row."""

    def slow_first(request: dict[str, Any]) -> Reply:
        first = number(batch_texts(request)[0])
        time.sleep(max(0.0, 0.12 - 0.01 * (first // BATCH)))  # batch 0 is the slowest
        return answer(request)

    server = serve(slow_first)
    texts = texts_for(10 * BATCH + 3)
    with make(kind, server, max_concurrency=4) as embedder:
        got = embedder.embed(texts)
    with make(kind, server, max_concurrency=1) as serial:
        one_by_one = serial.embed(texts)
    assert got.shape == (len(texts), DIMS)
    np.testing.assert_allclose(got, _HASH.embed(texts), atol=1e-6)
    assert np.array_equal(got, one_by_one)


@pytest.mark.parametrize("limit", [2, 4])
def test_peak_in_flight_requests_equal_max_concurrency(
    serve: Callable[..., FakeServer], kind: str, limit: int, no_embed_threads: None
) -> None:
    """The server sees exactly ``max_concurrency`` requests at once at the peak, never more."""
    gauge = Gauge()

    def held(request: dict[str, Any]) -> Reply:
        gauge.enter()
        try:
            gauge.wait_for_peak(limit, timeout_s=5.0)  # hold each request until the peak is seen
            time.sleep(0.01)
            return answer(request)
        finally:
            gauge.leave()

    server = serve(held)
    texts = texts_for(5 * limit * BATCH)
    with make(kind, server, max_concurrency=limit) as embedder:
        got = embedder.embed(texts)
    np.testing.assert_allclose(got, _HASH.embed(texts), atol=1e-6)
    assert gauge.peak == limit
    assert len(server.requests) == 5 * limit


def test_concurrency_one_sends_every_batch_from_the_calling_thread(
    serve: Callable[..., FakeServer], kind: str
) -> None:
    """``max_concurrency=1`` posts one batch at a time on the caller's thread, as before."""
    gauge = Gauge()
    senders: list[str] = []

    class Recording(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            senders.append(threading.current_thread().name)
            return super().handle_request(request)

    def counted(request: dict[str, Any]) -> Reply:
        gauge.enter()
        try:
            time.sleep(0.005)
            return answer(request)
        finally:
            gauge.leave()

    server = serve(counted)
    texts = texts_for(6 * BATCH)
    with httpx.Client(transport=Recording()) as client:
        embedder = make(kind, server, max_concurrency=1, client=client)
        np.testing.assert_allclose(embedder.embed(texts), _HASH.embed(texts), atol=1e-6)
    assert senders == [threading.current_thread().name] * 6
    assert gauge.peak == 1


def test_a_batch_failing_for_good_cancels_the_batches_not_yet_sent(
    serve: Callable[..., FakeServer], kind: str, no_embed_threads: None
) -> None:
    """A 400 on batch 1 raises its EmbedderError; queued batches are never sent."""
    batches = 80

    def fail_second(request: dict[str, Any]) -> Reply:
        if number(batch_texts(request)[0]) // BATCH == 1:
            return Reply(status=400, body=b'{"error": "bad"}')
        time.sleep(0.05)
        return answer(request)

    server = serve(fail_second)
    with make(kind, server, max_concurrency=2) as embedder, pytest.raises(EmbedderError) as caught:
        embedder.embed(texts_for(batches * BATCH))
    assert caught.value.status == 400
    assert caught.value.retryable is False
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert len(server.requests) < batches // 2


def test_two_failed_batches_raise_the_first_failure_in_input_order(
    serve: Callable[..., FakeServer], kind: str, no_embed_threads: None
) -> None:
    """Batches 1 (503) and 2 (429) both fail: the error is batch 1's, nothing partial."""

    def two_fail(request: dict[str, Any]) -> Reply:
        index = number(batch_texts(request)[0]) // BATCH
        if index == 1:
            time.sleep(0.05)  # batch 1 fails after batch 2 does
            return Reply(status=503)
        if index == 2:
            return Reply(status=429)
        return answer(request)

    server = serve(two_fail)
    with make(kind, server, max_concurrency=4) as embedder, pytest.raises(EmbedderError) as caught:
        embedder.embed(texts_for(4 * BATCH))
    assert caught.value.status == 503
    assert caught.value.retryable is True


class RetryAfterTransport(httpx.BaseTransport):
    """A host's retrying transport: a 429 is retried after its ``Retry-After`` seconds."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(3):
            response = self.inner.handle_request(request)
            if response.status_code != 429:
                return response
            response.close()
            time.sleep(float(response.headers.get("retry-after", "0")))
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def test_a_429_with_retry_after_is_retried_per_batch_and_the_result_is_whole(
    serve: Callable[..., FakeServer], kind: str, no_embed_threads: None
) -> None:
    """One batch's 429 is retried by the client's transport alone; rows stay whole, ordered."""
    refused: list[int] = []
    lock = threading.Lock()

    def once_429(request: dict[str, Any]) -> Reply:
        index = number(batch_texts(request)[0]) // BATCH
        with lock:
            first = index == 3 and not refused
            if first:
                refused.append(index)
        if first:
            return Reply(status=429, headers={"Retry-After": "0"})
        time.sleep(0.01)
        return answer(request)

    server = serve(once_429)
    texts = texts_for(8 * BATCH)
    with httpx.Client(transport=RetryAfterTransport()) as client:
        embedder = make(kind, server, max_concurrency=4, client=client)
        got = embedder.embed(texts)
    np.testing.assert_allclose(got, _HASH.embed(texts), atol=1e-6)
    assert refused == [3]
    assert len(server.requests) == 9
    assert sorted(number(batch_texts(r)[0]) // BATCH for r in server.requests) == [
        0, 1, 2, 3, 3, 4, 5, 6, 7
    ]  # fmt: skip


def test_replace_source_with_a_batch_failing_for_good_writes_nothing(
    serve: Callable[..., FakeServer], kind: str, no_embed_threads: None
) -> None:
    """A replace whose embed call loses one of its concurrent batches leaves the old source."""
    failing = threading.Event()

    def maybe_fail(request: dict[str, Any]) -> Reply:
        if failing.is_set() and number(batch_texts(request)[0]) // BATCH == 5:
            return Reply(status=400)
        return answer(request)

    server = serve(maybe_fail)
    store, scope = InMemoryStore(), Scope("t", "r", "c")
    with make(kind, server, max_concurrency=4) as embedder:
        old = [Chunk.of("doc", 0, "the old text")]
        replace_source(source_id="doc", chunks=old, embedder=embedder, store=store, scope=scope)
        before = list(store.get_by_source(scope, "doc"))
        generation = store.current_generation(scope)
        failing.set()
        new = [Chunk.of("doc", i, f"new text {i}") for i in range(10 * BATCH)]
        with pytest.raises(EmbedderError):
            replace_source(
                source_id="doc",
                chunks=new,
                embedder=embedder,
                store=store,
                scope=scope,
                write_options=WriteOptions(batch_size=128),
            )
    assert list(store.get_by_source(scope, "doc")) == before
    assert store.current_generation(scope) == generation


@pytest.mark.parametrize("value", [0, -1, 17, True, 2.0, "4"])
def test_max_concurrency_outside_1_to_16_is_a_validation_error(
    serve: Callable[..., FakeServer], kind: str, value: object
) -> None:
    """max_concurrency must be an int in 1..16 (the embed_concurrency ceiling); None is the
    default (HttpOptions' fields left at None take the adapter's default)."""
    server = serve(answer)
    with pytest.raises(ValidationError) as caught:
        make(kind, server, max_concurrency=value).close()
    assert caught.value.field == "max_concurrency"


def test_max_concurrency_defaults_to_the_embed_concurrency_limit(
    serve: Callable[..., FakeServer], kind: str
) -> None:
    """The default is 4 and the ceiling 16 is accepted."""
    from ragport.domain.limits import DEFAULT_LIMITS, HARD_LIMITS

    server = serve(answer)
    assert DEFAULT_LIMITS.embed_concurrency == 4
    assert HARD_LIMITS.embed_concurrency == 16
    with make(kind, server) as default, make(kind, server, max_concurrency=16) as widest:
        assert "max_concurrency=4" in repr(default)
        assert "max_concurrency=16" in repr(widest)


# --- TeiReranker(max_batch=...): the one HTTP reranker whose call holds several batches ---


def rerank_answer(request: dict[str, Any]) -> Reply:
    """TEI's rerank answer: a score per text (its number), best first."""
    texts = request["json"]["texts"]
    items = [{"index": i, "score": number(t) / 1000} for i, t in enumerate(texts)]
    return Reply(body=json.dumps(sorted(items, key=lambda it: -it["score"])).encode())


def rerank_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ragport-rerank")]


def test_tei_reranker_batches_run_concurrently_and_merge_in_input_order(
    serve: Callable[..., FakeServer],
) -> None:
    """max_batch=2, max_concurrency=3: three requests at once at the peak, scores merged right."""
    from ragport.adapters.rerankers import TeiReranker
    from ragport.contract_tests.reranker import contract_hits

    gauge = Gauge()

    def held(request: dict[str, Any]) -> Reply:
        gauge.enter()
        try:
            gauge.wait_for_peak(3, timeout_s=5.0)
            first = number(request["json"]["texts"][0])
            time.sleep(max(0.0, 0.05 - 0.005 * first))  # earlier batches answer later
            return rerank_answer(request)
        finally:
            gauge.leave()

    server = serve(held)
    given = contract_hits([f"candidate {i}" for i in range(12)])
    with TeiReranker(
        server.url,
        http=HttpOptions(allow_loopback=True, max_concurrency=3),
        max_batch=2,
        timeout_ms=5_000,
    ) as reranker:
        out = reranker.rerank("query", given)
    assert [hit.id for hit, _ in out] == [hit.id for hit in reversed(given)]
    assert [score for _, score in out] == [i / 1000 for i in reversed(range(12))]
    assert gauge.peak == 3
    assert len(server.requests) == 6
    assert rerank_threads() == []


def test_tei_reranker_failed_batch_cancels_the_rest_and_raises_rerank_error(
    serve: Callable[..., FakeServer],
) -> None:
    """A 500 on the second batch fails the call: no merged partial scores, queued ones unsent."""
    from ragport.adapters.rerankers import TeiReranker
    from ragport.contract_tests.reranker import contract_hits
    from ragport.domain.errors import RerankError

    def fail_second(request: dict[str, Any]) -> Reply:
        if number(request["json"]["texts"][0]) == 2:
            return Reply(status=500)
        time.sleep(0.05)
        return rerank_answer(request)

    server = serve(fail_second)
    given = contract_hits([f"candidate {i}" for i in range(160)])
    with (
        TeiReranker(
            server.url,
            http=HttpOptions(allow_loopback=True, max_concurrency=2),
            max_batch=2,
            timeout_ms=9_000,
        ) as reranker,
        pytest.raises(RerankError) as caught,
    ):
        reranker.rerank("query", given)
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert len(server.requests) < 40
    assert rerank_threads() == []


@pytest.mark.parametrize("value", [0, 17, True, 2.5])
def test_tei_reranker_max_concurrency_is_validated(value: object) -> None:
    """TeiReranker's max_concurrency must be an int in 1..16."""
    from ragport.adapters.rerankers import TeiReranker

    with pytest.raises(ValidationError) as caught:
        TeiReranker(
            "https://rerank.example", max_batch=8, **http_parts(max_concurrency=value)
        ).close()
    assert caught.value.field == "max_concurrency"


def test_a_malformed_answer_parsed_on_the_calling_thread_cancels_the_rest(
    serve: Callable[..., FakeServer], kind: str, no_embed_threads: None
) -> None:
    """Batch 0's answer is not JSON: EmbedderError, queued batches unsent, no thread left."""
    batches = 80

    def bad_first(request: dict[str, Any]) -> Reply:
        if number(batch_texts(request)[0]) == 0:
            return Reply(body=b"not json")
        time.sleep(0.05)
        return answer(request)

    server = serve(bad_first)
    with make(kind, server, max_concurrency=2) as embedder, pytest.raises(EmbedderError) as caught:
        embedder.embed(texts_for(batches * BATCH))
    assert caught.value.retryable is False and caught.value.status is None
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert len(server.requests) < batches // 2
