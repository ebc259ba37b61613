"""The LangChain and LlamaIndex retrievers and the MCP server on their async paths, through
``ragport.aio.run_abortable``: the same answers as the sync paths, an event loop that is never
blocked for 50 ms, concurrent calls that overlap, and a cancelled call that sets its abort,
waits for its worker thread and gives back its limiter token and its connection."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import anyio
import pytest
from handbook_corpus import SCOPE, build_handbook
from loop_watch import blocked_in_every_attempt
from mcp import Client

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.integrations import langchain as lc
from ragport.integrations import llama_index as li
from ragport.integrations.mcp import build_server

T = TypeVar("T")
QUERY = "How long is parental leave?"
SLOW_EMBED_S = 0.3
CONCURRENT = 4
# "mcp": the SDK's in-process Client (a direct dispatcher: the server's handler runs in the
# calling task, so cancelling the call cancels the handler); "mcp_stream": the same server over
# the JSON-RPC stream loop (mode="legacy"), where the client sends notifications/cancelled.
FACES = ["langchain", "llama_index", "mcp", "mcp_stream"]


class SlowEmbedder:
    """HashEmbedder vectors after a sleep, like a model or a remote embedder."""

    def __init__(self, seconds: float) -> None:
        self._inner = HashEmbedder()
        self._seconds = seconds
        self.id, self.dimensions = self._inner.id, self._inner.dimensions

    def embed(self, texts: Sequence[str]) -> Any:
        time.sleep(self._seconds)
        return self._inner.embed(texts)


class BlockingEmbedder:
    """HashEmbedder vectors once ``release`` is set; ``entered`` says a call is inside embed,
    ``returned`` that it left it."""

    def __init__(self) -> None:
        self._inner = HashEmbedder()
        self.id, self.dimensions = self._inner.id, self._inner.dimensions
        self.entered, self.release, self.returned = (threading.Event() for _ in range(3))
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(10), "the test never released the embedder"
        try:
            return self._inner.embed(texts)
        finally:
            self.returned.set()


class _Span:
    def set_attribute(self, key: str, value: object) -> None:
        pass


class ErrorTelemetry:
    """Records, per span name, the type of any exception that left the span."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[_Span]:
        try:
            yield _Span()
        except BaseException as exc:
            self.errors.append((name, type(exc).__name__))
            raise

    def count(self, name: str, value: int = 1) -> None:
        pass


class Face:
    """One integration, built over a store and an embedder, with a shared shape for tests."""

    def __init__(self, kind: str, parts: dict[str, Any], limiter: anyio.CapacityLimiter) -> None:
        self.kind = kind
        self.parts = parts
        if kind == "langchain":
            self.obj: Any = lc.RagportRetriever(**parts, top_k=3, limiter=limiter)
        elif kind == "llama_index":
            self.obj = li.RagportRetriever(**parts, top_k=3, limiter=limiter)
        else:
            self.obj = build_server(**parts, limiter=limiter)

    def sync_answer(self, query: str) -> list[str]:
        """Citation ids in rank order from the face's sync path (MCP has none: the use case)."""
        if self.kind == "langchain":
            return [d.id for d in self.obj.invoke(query, k=3)]
        if self.kind == "llama_index":
            return [n.node.node_id for n in self.obj.retrieve(query)]
        args = {k: v for k, v in self.parts.items() if k != "status_store"}
        hits = ragport.application.retrieve_context(
            query, **args, request=ragport.RetrievalRequest(top_k=3)
        ).hits
        return [h.provenance.citation_id for h in hits]

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Callable[[str], Awaitable[list[str]]]]:
        """An async ``call(query) -> citation ids`` (inside one MCP client for the server)."""
        if self.kind == "langchain":

            async def call(query: str) -> list[str]:
                return [d.id for d in await self.obj.ainvoke(query, k=3)]

            yield call
        elif self.kind == "llama_index":

            async def call(query: str) -> list[str]:
                return [n.node.node_id for n in await self.obj.aretrieve(query)]

            yield call
        else:
            mode = "legacy" if self.kind == "mcp_stream" else "auto"
            async with Client(self.obj, mode=mode) as client:

                async def call(query: str) -> list[str]:
                    result = await client.call_tool("search", {"query": query, "top_k": 3})
                    assert not result.is_error, result.content
                    return [c["citation_id"] for c in result.structured_content["citations"]]

                yield call


def _parts(embedder: Any, **options: Any) -> dict[str, Any]:
    store, status = InMemoryStore(), InMemoryStatusStore()
    build_handbook(store, HashEmbedder(), status_store=status)
    parts: dict[str, Any] = {"store": store, "embedder": embedder, "scope": SCOPE, **options}
    parts["status_store"] = status
    return parts


def _face(kind: str, parts: dict[str, Any], limiter: anyio.CapacityLimiter) -> Face:
    if not kind.startswith("mcp"):
        parts = {k: v for k, v in parts.items() if k != "status_store"}
    return Face(kind, parts, limiter)


@pytest.mark.parametrize("kind", FACES)
def test_async_answers_equal_sync_ones_and_never_block_the_loop(kind):
    """Concurrent async calls overlap (wall < sum), equal the sync answer, and asyncio's debug
    mode logs no callback that held the loop for more than 50 ms (in at least one of three
    attempts: see tests/support/loop_watch.py; a blocking call blocks every attempt).

    If this fails, check that the face's async path awaits ragport.aio.run_abortable instead
    of calling the store or the embedder on the event loop.
    """
    face = _face(kind, _parts(SlowEmbedder(SLOW_EMBED_S)), anyio.CapacityLimiter(8))
    expected = face.sync_answer(QUERY)
    assert expected
    runs: list[tuple[list[list[str]], float]] = []

    async def scenario(arm: Callable[[bool], None]) -> None:
        arm(False)
        async with face.session() as call:
            # Warm-up: the MCP client imports jsonschema and validates its first result on the
            # loop (~0.1-0.2 s in debug mode, once); that step ends at the sleep, before the count.
            await call(QUERY)
            await asyncio.sleep(0)
            arm(True)
            start = time.perf_counter()
            answers = await asyncio.gather(*(call(QUERY) for _ in range(CONCURRENT)))
            wall = time.perf_counter() - start
            # Only the calls: the MCP client's own start and teardown are not ragport's.
            arm(False)
            runs.append((list(answers), wall))

    assert blocked_in_every_attempt(scenario) == []
    for answers, _ in runs:
        assert answers == [expected] * CONCURRENT
    assert min(wall for _, wall in runs) < CONCURRENT * SLOW_EMBED_S * 0.6  # they overlapped


def _run_releasing(embedder: BlockingEmbedder, main: Awaitable[T]) -> T:
    """``asyncio.run(main)`` that releases the embedder however ``main`` ends, so a failed
    assertion never leaves a worker thread blocked (asyncio.run waits for its threads)."""

    async def guarded() -> T:
        try:
            return await main
        finally:
            embedder.release.set()

    return asyncio.run(guarded())


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("kind", FACES)
def test_cancelling_an_async_call_sets_its_abort_and_waits_for_the_thread(kind):
    """Cancelled while the embedder blocks: the retrieval stops with AbortedError at its next
    check once the embedder returns, and the limiter's token comes back.

    If this fails, check that the face passes run_abortable's abort to BoundRetrieval.run
    (an AbortedError missing from the telemetry means the retrieval ran to the end).
    """
    embedder, telemetry = BlockingEmbedder(), ErrorTelemetry()
    limiter = anyio.CapacityLimiter(8)
    face = _face(kind, _parts(embedder, telemetry=telemetry), limiter)

    async def main() -> bool:
        async with face.session() as call:
            task = asyncio.create_task(call(QUERY))
            await _until(embedder.entered.is_set, "the embedder to be called")
            assert limiter.borrowed_tokens == 1
            task.cancel()
            await asyncio.sleep(0.1)
            # The cancelled coroutine waits for the thread; over the stream loop the client
            # returns at once and the server's handler, cancelled by notifications/cancelled,
            # is the one that waits.
            waited = not task.done()
            embedder.release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            await _until(lambda: limiter.borrowed_tokens == 0, "the token to come back")
            return waited

    waited = _run_releasing(embedder, main())
    assert embedder.returned.is_set()
    assert ("rag.retrieve", "AbortedError") in telemetry.errors
    assert limiter.borrowed_tokens == 0
    assert waited == (kind != "mcp_stream")


class BlockingStatuses:
    """A status store whose first ``list_page`` blocks until ``release``; counts the reads."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.entered, self.release = threading.Event(), threading.Event()
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def list_page(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        self.entered.set()
        assert self.release.wait(10), "the test never released the status store"
        return self._inner.list_page(*args, **kwargs)


@pytest.mark.parametrize("kind", ["mcp", "mcp_stream"])
def test_a_cancelled_list_sources_stops_before_its_next_status_read(kind):
    """list_sources(limit=1) reads a page, then a cut page; cancelled during the first read, it
    stops at the abort check before the second, and the token comes back.

    If this fails, check that list_sources passes run_abortable's abort to _Sources._visible_page.
    """
    parts = _parts(HashEmbedder())
    statuses = BlockingStatuses(parts["status_store"])
    limiter = anyio.CapacityLimiter(8)
    face = _face(kind, {**parts, "status_store": statuses}, limiter)

    async def main() -> None:
        mode = "legacy" if kind == "mcp_stream" else "auto"
        async with Client(face.obj, mode=mode) as client:
            task = asyncio.create_task(client.call_tool("list_sources", {"limit": 1}))
            await _until(statuses.entered.is_set, "the status read")
            task.cancel()
            await asyncio.sleep(0.05)
            statuses.release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            await _until(lambda: limiter.borrowed_tokens == 0, "the token to come back")
            assert statuses.reads == 1
            statuses.reads = 0
            page = await client.call_tool("list_sources", {"limit": 1})
            assert not page.is_error and len(page.structured_content["sources"]) == 1
            assert statuses.reads == 2  # uncancelled, the same call reads twice

    try:
        asyncio.run(main())
    finally:
        statuses.release.set()
    assert limiter.borrowed_tokens == 0


@pytest.mark.parametrize("kind", ["langchain", "llama_index", "mcp", "mcp_stream"])
def test_a_cancelled_call_waiting_for_a_token_never_runs(kind):
    """With the only token held by a blocked call, a second call queues; cancelled, it ends at
    once and never embeds, and the first call still answers.

    If this fails, check that the face passes its limiter to run_abortable, and how
    run_abortable treats a call cancelled before its thread started.
    """
    embedder = BlockingEmbedder()
    limiter = anyio.CapacityLimiter(1)
    face = _face(kind, _parts(embedder), limiter)
    expected = [
        h.provenance.citation_id
        for h in ragport.application.retrieve_context(
            QUERY,
            store=face.parts["store"],
            embedder=HashEmbedder(),
            scope=SCOPE,
            request=ragport.RetrievalRequest(top_k=3),
        ).hits
    ]

    async def main() -> tuple[list[str], float]:
        async with face.session() as call:
            first = asyncio.create_task(call(QUERY))
            await _until(embedder.entered.is_set, "the first call to embed")
            second = asyncio.create_task(call(QUERY))
            await asyncio.sleep(0.1)
            assert limiter.borrowed_tokens == 1 and not second.done()
            # A safety net: release the first call later, so a cancellation that waits for
            # the token shows up as a slow one, not a hang.
            timer = threading.Timer(1.5, embedder.release.set)
            timer.start()
            try:
                second.cancel()
                start = time.perf_counter()
                with pytest.raises(asyncio.CancelledError):
                    await second
                took = time.perf_counter() - start
                embedder.release.set()
                answer = await first
            finally:
                timer.cancel()
            await _until(lambda: limiter.borrowed_tokens == 0, "the token to come back")
            return answer, took

    answer, took = _run_releasing(embedder, main())
    assert answer == expected
    assert embedder.calls == 1
    assert took < 0.5
    assert limiter.borrowed_tokens == 0


@pytest.mark.parametrize("kind", ["langchain", "llama_index"])
@pytest.mark.parametrize("max_threads", [0, 65, True, 2.0, "8"])
def test_max_threads_is_validated(kind, max_threads):
    """max_threads is an integer in 1..64; a limiter and max_threads together are refused.

    If this fails, check thread_limiter in ragport/integrations/_common.py.
    """
    parts = {k: v for k, v in _parts(HashEmbedder()).items() if k != "status_store"}
    cls = lc.RagportRetriever if kind == "langchain" else li.RagportRetriever
    with pytest.raises(ragport.ValidationError) as info:
        cls(**parts, max_threads=max_threads)
    assert info.value.field == "max_threads"
    with pytest.raises(ragport.ValidationError) as info:
        cls(**parts, max_threads=2, limiter=anyio.CapacityLimiter(2))
    assert info.value.field == "limiter"


def test_mcp_max_threads_is_validated():
    """build_server validates max_threads and limiter like the retrievers.

    If this fails, check thread_limiter in ragport/integrations/_common.py.
    """
    parts = _parts(HashEmbedder())
    with pytest.raises(ragport.ValidationError) as info:
        build_server(**parts, max_threads=0)
    assert info.value.field == "max_threads"
    with pytest.raises(ragport.ValidationError) as info:
        build_server(**parts, limiter="many")
    assert info.value.field == "limiter"


def test_default_limiter_has_eight_tokens_per_retriever():
    """Each retriever gets its own limiter of 8 tokens unless one is passed.

    If this fails, check the max_threads default of the retrievers.
    """
    parts = {k: v for k, v in _parts(HashEmbedder()).items() if k != "status_store"}
    a, b = lc.RagportRetriever(**parts), lc.RagportRetriever(**parts)
    assert a.limiter.total_tokens == 8 and a.limiter is not b.limiter
    c = li.RagportRetriever(**parts, max_threads=3)
    assert c.limiter.total_tokens == 3
    shared = anyio.CapacityLimiter(5)
    assert li.RagportRetriever(**parts, limiter=shared).limiter is shared


@pytest.fixture
def pg_parts(pg_engine, pg_schema) -> dict[str, Any]:
    from ragport.adapters.postgres import PostgresStore

    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    build_handbook(store, HashEmbedder())
    return {"store": store, "scope": SCOPE}


def test_cancelled_aretrieve_on_postgres_returns_every_connection(pg_engine, pg_parts):
    """Cancelled at many points of a PostgreSQL retrieval, aretrieve has given its connection
    back by the time the cancellation reaches the caller.

    If this fails, check that run_abortable waits for the thread before the cancellation
    propagates, and that the store returns its connection on AbortedError.
    """
    pool = pg_engine.pool
    retriever = li.RagportRetriever(**pg_parts, embedder=HashEmbedder(), top_k=3)
    expected = [n.node.node_id for n in retriever.retrieve(QUERY)]
    assert expected and pool.checkedout() == 0

    async def main() -> tuple[list[int], int]:
        held_after_cancel: list[int] = []
        finished = 0
        for step in range(30):
            task = asyncio.create_task(retriever.aretrieve(QUERY))
            await asyncio.sleep(step * 0.0005)
            task.cancel()
            try:
                nodes = await task
            except asyncio.CancelledError:
                held_after_cancel.append(pool.checkedout())
            else:
                finished += 1
                assert [n.node.node_id for n in nodes] == expected
        return held_after_cancel, finished

    held, _finished = asyncio.run(main())
    assert held and set(held) == {0}
    assert retriever.limiter.borrowed_tokens == 0
    assert pool.checkedout() == 0

    blocking, telemetry = BlockingEmbedder(), ErrorTelemetry()
    blocked = li.RagportRetriever(**pg_parts, embedder=blocking, telemetry=telemetry)

    async def cancel_blocked() -> None:
        task = asyncio.create_task(blocked.aretrieve(QUERY))
        await _until(blocking.entered.is_set, "the embedder to be called")
        task.cancel()
        await asyncio.sleep(0.05)
        blocking.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    _run_releasing(blocking, cancel_blocked())
    assert ("rag.retrieve", "AbortedError") in telemetry.errors
    assert pool.checkedout() == 0
