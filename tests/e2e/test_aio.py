"""ragport.aio.AsyncRag on both stores: the same answers as Rag, a cancelled replace writes
nothing and frees its thread and connection, and the event loop is never blocked."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from loop_watch import blocked_in_every_attempt

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.aio import AsyncRag
from ragport.domain.errors import ValidationError

SCOPE = ragport.Scope("tenant-1", "kb", "aio")


class BlockingEmbedder:
    """HashEmbedder that blocks in embed until released (to cancel a call mid-embed)."""

    def __init__(self) -> None:
        self.inner = HashEmbedder()
        self.entered, self.release, self.block = threading.Event(), threading.Event(), False

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    def embed(self, texts):
        if self.block:
            self.entered.set()
            self.release.wait(10)
        return self.inner.embed(texts)


@pytest.fixture(params=["memory", "postgres"])
def rag(request) -> Iterator[tuple[ragport.Rag, object]]:
    embedder = BlockingEmbedder()
    if request.param == "memory":
        yield ragport.Rag(
            store=InMemoryStore(), embedder=embedder, scope=SCOPE,
            status_store=InMemoryStatusStore(),
        ), None  # fmt: skip
        return
    from ragport.adapters.postgres import PostgresStatusStore, PostgresStore

    engine = request.getfixturevalue("pg_engine")
    schema = request.getfixturevalue("pg_schema")
    store = PostgresStore(engine, schema=schema, create=True)
    yield ragport.Rag(
        store=store, embedder=embedder, scope=SCOPE,
        status_store=PostgresStatusStore(engine, schema=schema),
    ), engine  # fmt: skip


def _chunks(source: str, text: str) -> list[ragport.Chunk]:
    return ragport.domain.chunk_markdown(text, source_id=source)


def test_async_rag_answers_as_rag_does(rag):
    sync, _ = rag
    arag = AsyncRag(sync)

    async def main() -> None:
        first = await arag.replace_source(
            source_id="a.md", chunks=_chunks("a.md", "# A\n\nalpha leave\n")
        )
        assert first.indexed == 1
        await arag.replace_source(source_id="b.md", chunks=_chunks("b.md", "# B\n\nbeta travel\n"))
        found = await arag.retrieve("alpha leave", top_k=2)
        assert [h.id for h in found.hits] == [
            h.id for h in sync.retrieve("alpha leave", top_k=2).hits
        ]
        await arag.index_derived(record_id="sum", text="summary of alpha", lineage=["a.md"])
        gone = await arag.delete_source(source_id="b.md")
        assert gone.deleted == 1
        page = await arag.status()
        assert {s.source_id for s in page.items} == {"a.md"}
        back = await arag.rollback(to=2)
        assert back.generation == 2
        assert "b.md" in {h.source_id for h in (await arag.retrieve("beta travel")).hits}

    asyncio.run(main())
    with pytest.raises(ValidationError):
        AsyncRag(sync, max_threads=0)


def test_a_cancelled_replace_writes_nothing_and_frees_its_connection(rag):
    sync, engine = rag
    arag = AsyncRag(sync, max_threads=2)
    embedder = sync.embedder
    sync.replace_source(source_id="a.md", chunks=_chunks("a.md", "# A\n\nold version\n"))

    async def main() -> None:
        embedder.block = True
        task = asyncio.create_task(
            arag.replace_source(source_id="a.md", chunks=_chunks("a.md", "# A\n\nnew version\n"))
        )
        while not embedder.entered.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        threading.Timer(0.2, embedder.release.set).start()  # the embed returns; abort is seen
        with pytest.raises(asyncio.CancelledError):
            await task
        embedder.block = False

    asyncio.run(main())
    assert [r.text for r in sync.store.get_by_source(SCOPE, "a.md")] == ["# A\n\nold version"]
    assert arag.limiter.borrowed_tokens == 0
    if engine is not None:
        assert engine.pool.checkedout() == 0


def test_the_event_loop_is_never_blocked(rag):
    sync, _ = rag
    sync.replace_source(source_id="a.md", chunks=_chunks("a.md", "# A\n\nalpha\n"))
    big = _chunks("b.md", "# B\n\n" + "b " * 2000)  # chunked here, not on the loop

    async def scenario(arm) -> None:
        arag = AsyncRag(sync)
        await asyncio.gather(*(arag.retrieve("alpha") for _ in range(40)))
        await arag.replace_source(source_id="b.md", chunks=big)

    assert blocked_in_every_attempt(scenario) == []


def test_the_loop_check_catches_a_call_that_blocks(rag):
    """The check above can fail: the same retrieve run on the loop thread with an embed that
    takes 80 ms is reported in every attempt."""
    sync, _ = rag
    sync.replace_source(source_id="a.md", chunks=_chunks("a.md", "# A\n\nalpha\n"))
    embedder = sync.embedder
    real = embedder.inner.embed

    def slow_embed(texts):
        time.sleep(0.08)
        return real(texts)

    embedder.inner.embed = slow_embed

    async def scenario(arm) -> None:
        for _ in range(3):
            sync.retrieve("alpha")  # a blocking call on the loop: what AsyncRag must not do
            await asyncio.sleep(0)

    blocked = blocked_in_every_attempt(scenario)
    assert len(blocked) == 3 and all(blocked), blocked
