"""Does a coroutine hold the event loop for longer than a limit?

asyncio's debug mode logs every callback that ran longer than ``slow_callback_duration``. It
measures wall time, so on a shared, loaded machine the operating system descheduling the test
process for a third of a second is logged like a blocking call. A call that really blocks the
loop (a store query or an embed run on the loop thread) blocks it on every run, so
the garbage collector is paused while a scenario runs (a full collection in a test process
that has run three thousand tests takes a few hundred milliseconds, whoever triggers it) and
:func:`blocked_in_every_attempt` runs the scenario up to ``attempts`` times, each on a fresh
loop, and reports the slow callbacks only when every attempt had one. The tests that use it
also run a deliberately blocking scenario through it, to show the check fails when it should.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable
from typing import Any

LIMIT_S = 0.05


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.slow: list[str] = []
        self.armed = False

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self.armed and "took" in message:
            self.slow.append(message)


def slow_callbacks(
    scenario: Callable[[Callable[[bool], None]], Awaitable[Any]], *, limit: float = LIMIT_S
) -> list[str]:
    """Run ``scenario(arm)`` on a fresh debug loop; return the slow-callback warnings logged
    while armed. ``scenario`` calls ``arm(True)`` once its warm-up (not ragport's) is done."""
    handler = _Collect()
    log = logging.getLogger("asyncio")
    previous = log.level
    log.addHandler(handler)
    log.setLevel(logging.WARNING)

    def arm(on: bool) -> None:
        handler.armed = on

    async def main() -> None:
        asyncio.get_running_loop().slow_callback_duration = limit
        await scenario(arm)
        arm(False)

    gc.collect()
    gc.disable()
    try:
        handler.armed = True
        asyncio.run(main(), debug=True)
    finally:
        gc.enable()
        log.removeHandler(handler)
        log.setLevel(previous)
    return handler.slow


def blocked_in_every_attempt(
    scenario: Callable[[Callable[[bool], None]], Awaitable[Any]],
    *,
    attempts: int = 3,
    limit: float = LIMIT_S,
) -> list[list[str]]:
    """``[]`` when some attempt logged no slow callback; else every attempt's warnings."""
    seen: list[list[str]] = []
    for _ in range(attempts):
        slow = slow_callbacks(scenario, limit=limit)
        if not slow:
            return []
        seen.append(slow)
    return seen
