"""ragport.aio.run_abortable: a result or an exception comes back as from the call; a
cancelled call sets its abort and returns only after its thread finished; one cancelled
while queued for a token never starts."""

from __future__ import annotations

import asyncio
import threading
import time

import anyio
import pytest

from ragport.aio import run_abortable


def test_result_and_exception_pass_through():
    async def main() -> None:
        assert await run_abortable(lambda abort: 7) == 7
        with pytest.raises(ZeroDivisionError):
            await run_abortable(lambda abort: 1 / 0)

    asyncio.run(main())


def test_cancelling_a_running_call_sets_abort_and_waits_for_its_thread():
    seen: list[str] = []
    started = threading.Event()

    def work(abort) -> str:
        started.set()
        for _ in range(500):
            if abort.is_set():
                time.sleep(0.05)  # the thread is still busy when abort is seen
                seen.append("stopped")
                return "stopped"
            time.sleep(0.01)
        seen.append("finished")
        return "finished"

    async def main() -> None:
        limiter = anyio.CapacityLimiter(1)
        task = asyncio.create_task(run_abortable(work, limiter=limiter))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == ["stopped"], "returned before the thread finished"
        assert limiter.borrowed_tokens == 0

    asyncio.run(main())


@pytest.mark.parametrize("how", ["task.cancel", "move_on_after"])
def test_a_call_cancelled_while_queued_for_a_token_never_starts(how):
    release = threading.Event()
    ran: list[int] = []

    async def main() -> None:
        limiter = anyio.CapacityLimiter(1)
        first = asyncio.create_task(run_abortable(lambda abort: release.wait(5), limiter=limiter))
        await asyncio.sleep(0.05)
        start = time.perf_counter()
        if how == "task.cancel":
            queued = asyncio.create_task(
                run_abortable(lambda abort: ran.append(1), limiter=limiter)
            )
            await asyncio.sleep(0.05)
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
        else:
            with anyio.move_on_after(0.05):
                await run_abortable(lambda abort: ran.append(1), limiter=limiter)
        assert time.perf_counter() - start < 1.0
        release.set()
        assert await first is True
        assert ran == [] and limiter.borrowed_tokens == 0

    asyncio.run(main())
