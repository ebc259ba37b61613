"""``ragport.aio``: ragport for asyncio (and trio) hosts, without blocking their event loop.

The synchronous core stays the one implementation. A coroutine here runs its call on a
worker thread, under an ``anyio.CapacityLimiter`` that bounds how many run at once, and hands
the call an ``abort`` signal: cancelling the coroutine sets it, so the call stops at its next
abort check, writes nothing partial (a replace is one unit of work) and gives its connection
back to the pool before the cancellation propagates. The coroutine never returns before the
thread has finished, so a cancelled call leaves no thread behind and holds its limiter token
until then.

``run_abortable`` is the primitive; ``AsyncRag`` (below) is the ``Rag`` facade on it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

from ragport.ports.runtime import Abort

__all__ = ["run_abortable"]

T = TypeVar("T")


async def run_abortable(
    fn: Callable[[Abort], T], *, limiter: anyio.CapacityLimiter | None = None
) -> T:
    """Run ``fn(abort)`` on a worker thread under ``limiter`` and return its result.

    ``limiter`` bounds the calls running at once (default: anyio's default thread limiter of
    the running event loop). Cancelling the awaiting task sets ``abort`` and then waits,
    shielded, for ``fn`` to return or raise; the cancellation propagates afterwards. A call
    still waiting for a limiter token when cancelled never starts. ``fn`` must check
    ``abort`` (every ragport use case does, between its steps).
    """
    abort = threading.Event()
    finished = anyio.Event()
    outcome: list[tuple[bool, object]] = []

    async def runner() -> None:
        try:
            # abandon_on_cancel=False: once the thread has started, a cancellation waits for it.
            value = await anyio.to_thread.run_sync(fn, abort, limiter=limiter)
        except BaseException as exc:  # re-raised below, in the awaiting task
            outcome.append((False, exc))
        else:
            outcome.append((True, value))
        finally:
            finished.set()

    async with anyio.create_task_group() as group:
        group.start_soon(runner)
        try:
            await finished.wait()
        except anyio.get_cancelled_exc_class():
            abort.set()
            # A native task.cancel() reaches only this task: cancel the runner too, so a call
            # still waiting for a limiter token never starts. Once its thread runs, run_sync
            # shields it and the runner waits for the thread, which stops at its next abort
            # check.
            group.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await finished.wait()
            raise
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]
