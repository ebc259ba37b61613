"""What the faces' async paths share: the limiter that bounds their worker threads.

Imported only by the face modules (never by ``ragport.integrations``), so the ``aio`` extra's
``anyio`` is needed only where a face is used.
"""

from __future__ import annotations

import anyio

from ragport.domain.errors import ValidationError

__all__ = ["DEFAULT_MAX_THREADS", "MAX_THREADS_CEILING", "thread_limiter"]

DEFAULT_MAX_THREADS = 8
"""Worker threads a face's async calls may use at once, unless told otherwise."""

MAX_THREADS_CEILING = 64
"""The most ``max_threads`` may be (each running call holds a thread and, on a database
store, a connection while it reads: two for a hybrid query whose legs run at once)."""


def thread_limiter(max_threads: object = None, limiter: object = None) -> anyio.CapacityLimiter:
    """``limiter`` if given (an ``anyio.CapacityLimiter`` shared with other faces or an
    ``AsyncRag``), else a new limiter of ``max_threads`` tokens (default 8, at most 64).

    Raises ``ValidationError`` naming ``max_threads`` or ``limiter``; passing both is an error.
    """
    if limiter is not None:
        if max_threads is not None:
            raise ValidationError("pass max_threads or limiter, not both", field="limiter")
        if not isinstance(limiter, anyio.CapacityLimiter):
            raise ValidationError("limiter must be an anyio.CapacityLimiter", field="limiter")
        return limiter
    count = DEFAULT_MAX_THREADS if max_threads is None else max_threads
    if (
        isinstance(count, bool)
        or not isinstance(count, int)
        or not 1 <= count <= MAX_THREADS_CEILING
    ):
        raise ValidationError(
            f"max_threads must be an integer in 1..{MAX_THREADS_CEILING}", field="max_threads"
        )
    return anyio.CapacityLimiter(count)
