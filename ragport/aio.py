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
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import anyio
import anyio.to_thread
import attrs

from ragport.application._support import EitherAbort
from ragport.application.deprecation import RUNTIME_KEYWORDS, fold_runtime, fold_write_options
from ragport.application.facade import Rag
from ragport.application.results import RollbackResult
from ragport.application.runtime import Runtime, check_runtime
from ragport.application.sync import SyncResult, sync_knowledge
from ragport.domain.deprecation import warn_deprecated, warn_removal
from ragport.domain.errors import ValidationError
from ragport.domain.status import StatusPage
from ragport.ports.runtime import Abort
from ragport.ports.sync import CheckpointStore, Connector

__all__ = ["MAX_THREADS", "AsyncRag", "run_abortable"]

T = TypeVar("T")
P = ParamSpec("P")


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


def _deprecated(method: Callable[..., Any]) -> tuple[str, ...]:
    """The keywords of old ``method`` (a ``Rag`` method) still folds, deprecated."""
    return cast("tuple[str, ...]", getattr(method, "__deprecated_keywords__", ()))


def _fold_old(name: str, old: dict[str, Any], runtime: object, kwargs: dict[str, Any]) -> Any:
    """Warn that ``AsyncRag.name(old...)`` is deprecated (docs/deprecations.md) and fold them
    as ``Rag``'s methods do: the runtime ones into ``runtime`` (returned), the write ones into
    ``kwargs["write_options"]``; a keyword of old wins over the field it replaces."""
    on_runtime = {k: v for k, v in old.items() if k in RUNTIME_KEYWORDS}
    on_write = {k: v for k, v in old.items() if k not in on_runtime}
    hints = ["runtime=Runtime(...)"] if on_runtime else []
    hints += ["write_options=WriteOptions(...)"] if on_write else []
    warn_deprecated(f"AsyncRag.{name}", old, " and ".join(hints), stacklevel=3)
    if on_write:
        kwargs["write_options"] = fold_write_options(kwargs.get("write_options"), on_write)
    return fold_runtime(runtime, on_runtime)


def _mirror(
    method: Callable[Concatenate[Rag, P], T],
) -> Callable[Concatenate[AsyncRag, P], Coroutine[Any, Any, T]]:
    """``method`` of ``Rag`` as a coroutine method of ``AsyncRag``, with the same typed
    keywords: it runs on a worker thread with an ``abort`` that cancelling sets (either that
    or the abort of the call's ``runtime=`` stops it)."""

    async def call(self: AsyncRag, /, *args: P.args, **kwargs: P.kwargs) -> T:
        rag = self.rag
        given = cast("Runtime | None", kwargs.pop("runtime", None))
        old = {k: kwargs.pop(k) for k in _deprecated(method) if k in kwargs}
        if old:  # folded here, so the warning names the awaiting line, not a worker thread
            given = _fold_old(method.__name__, old, rag.runtime if given is None else given, kwargs)
        base = rag.runtime if given is None else check_runtime(given)
        bound = getattr(rag, method.__name__)  # the Rag's own (a subclass may override)

        def run(abort: Abort) -> T:
            mine = abort if base.abort is None else EitherAbort(abort, base.abort)
            return cast(T, bound(*args, runtime=attrs.evolve(base, abort=mine), **kwargs))

        return await run_abortable(run, limiter=self.limiter)

    call.__wrapped__ = method  # type: ignore[attr-defined]  # inspect.signature: Rag's
    call.__name__ = method.__name__
    call.__qualname__ = f"AsyncRag.{method.__name__}"
    call.__doc__ = f"``Rag.{method.__name__}`` as a coroutine (the same keywords)."
    return call


MAX_THREADS = 64
"""The ceiling of ``AsyncRag(max_threads=...)``: each running call holds a thread and, on a
database store, a pooled connection while it reads or writes."""


class AsyncRag:
    """The ``Rag`` facade's methods as coroutines, over the same synchronous core.

    Each call runs on a worker thread under ``limiter`` (``max_threads`` tokens, default 8,
    at most 64; keep it at or under the store's connection pool size). Cancelling a call sets
    its abort: a retrieve or a replace stops at its next abort check, writes nothing partial
    (a replace is one unit of work) and has given its connection back before the cancellation
    propagates. ``rollback`` and ``status`` are short single statements: cancelled, they
    finish first. The abort of a call's own ``runtime=`` still works beside it (the per-call
    ``abort=`` of before too, deprecated until 0.2).
    """

    def __init__(self, rag: Rag, *, max_threads: int = 8) -> None:
        if not isinstance(rag, Rag):
            raise ValidationError("AsyncRag wraps a ragport Rag", field="rag")
        if (
            isinstance(max_threads, bool)
            or not isinstance(max_threads, int)
            or not 1 <= max_threads <= MAX_THREADS
        ):
            raise ValidationError(
                f"max_threads must be an integer in 1..{MAX_THREADS}", field="max_threads"
            )
        self._rag = rag
        self._limiter = anyio.CapacityLimiter(max_threads)

    @property
    def rag(self) -> Rag:
        return self._rag

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        return self._limiter

    retrieve = _mirror(Rag.retrieve)
    replace_source = _mirror(Rag.replace_source)
    replace_text = _mirror(Rag.replace_text)
    replace_sources = _mirror(Rag.replace_sources)
    replace_document = _mirror(Rag.replace_document)
    delete_source = _mirror(Rag.delete_source)
    index_derived = _mirror(Rag.index_derived)
    forget = _mirror(Rag.forget)
    readmit = _mirror(Rag.readmit)
    repoint = _mirror(Rag.repoint)
    rename = _mirror(Rag.rename)
    set_grants = _mirror(Rag.set_grants)
    grants = _mirror(Rag.grants)
    check_access = _mirror(Rag.check_access)
    compact = _mirror(Rag.compact)
    generation = _mirror(Rag.generation)
    generations = _mirror(Rag.generations)
    sources = _mirror(Rag.sources)
    sync = _mirror(Rag.sync)

    async def rollback(self, *, to: int, runtime: Runtime | None = None) -> RollbackResult:
        return await run_abortable(
            lambda abort: self._rag.rollback(to=to, runtime=runtime), limiter=self._limiter
        )

    async def status(
        self, *, limit: int | None = None, cursor: str | None = None, runtime: Runtime | None = None
    ) -> StatusPage:
        return await run_abortable(
            lambda abort: self._rag.status(limit=limit, cursor=cursor, runtime=runtime),
            limiter=self._limiter,
        )

    async def sync_knowledge(
        self, *, connector: Connector, checkpoints: CheckpointStore, **options: Any
    ) -> SyncResult:
        """``sync_knowledge`` over the Rag's store, embedder, scope and status store, parsing
        with ``parser=`` or the Rag's ``default_parser``.

        Deprecated (it takes untyped ``**options``): use ``sync``, which mirrors ``Rag.sync``
        with typed keywords. Kept for one release; warns ``DeprecationWarning``."""
        warn_removal("AsyncRag.sync_knowledge", "use AsyncRag.sync (typed keywords)")
        rag = self._rag
        if rag.scope is None:
            raise ValidationError("bind one scope= to sync", field="scope")
        options.setdefault("parser", rag.default_parser)
        options.setdefault("status_store", rag.status_store)  # the bound status store
        given = options.pop("runtime", None)
        base = Runtime() if given is None else check_runtime(given)
        scope = rag.scope

        def run(abort: Abort) -> SyncResult:
            mine = abort if base.abort is None else EitherAbort(abort, base.abort)
            return sync_knowledge(
                connector=connector,
                checkpoints=checkpoints,
                store=rag.store,
                embedder=rag.embedder,
                scope=scope,
                runtime=attrs.evolve(base, abort=mine),
                **options,
            )

        return await run_abortable(run, limiter=self._limiter)
