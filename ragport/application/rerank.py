"""The reranking seam: caps, deadline, concurrency, and a permutation check that fails closed.

rerank_hits:
1. Validate the caps against their hard ceilings; an empty input returns at once.
2. Refuse an input over ``max_bytes`` (UTF-8 of the query plus every candidate text).
3. Take one of ``concurrency`` slots of this reranker object, waiting at most the time
   budget; then run the reranker in a worker thread and wait until the deadline, checking
   abort while waiting. When the wait ends without an answer, set the call's stop signal: a
   ``SupportsInterruptibleRerank`` reranker (the built-in local ones) ends at its next batch.
   The worker is not a daemon thread, so the interpreter waits for it at exit: a daemon
   thread still inside a native library (onnxruntime loading or running a model) when the
   interpreter finalizes is ended by ``pthread_exit`` as it takes the GIL back, and that
   unwinding through C++ frames calls ``std::terminate`` (the process aborts, exit 134).
4. The reranker works on copies (own metadata, provenance and trust objects), so even one
   that writes to a frozen ``Hit`` with ``object.__setattr__`` changes nothing the caller
   sees. Accept only a permutation of those copies (optionally with finite scores) and
   return the caller's own ``Hit`` objects in the new order: text, metadata, provenance and
   trust cannot be rewritten. Everything else is a ``RerankError``; the original order is
   never used instead.
5. A reranker's own exception is reported by its type only and chained to nothing: its
   message or arguments may quote the query or a hit's text. Every ``RerankError`` raised
   here carries a ``reason``: ``timeout``, ``aborted``, ``too_large``, ``malformed``,
   ``failed``.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import attrs

from ragport.application._support import Redaction
from ragport.application.deprecation import folds_keywords
from ragport.application.runtime import DEFAULT_RUNTIME, Runtime, check_runtime
from ragport.domain.errors import AbortedError, RerankError, ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.domain.model import Hit, Trust, validate_text
from ragport.ports.rerank import Reranker, SupportsInterruptibleRerank
from ragport.ports.runtime import Abort

__all__ = ["rerank_hits"]

_POLL_S = 0.005


class _Slots:
    """Active-call accounting for one reranker object."""

    def __init__(self) -> None:
        self.active = 0
        self.cond = threading.Condition()


_slots: weakref.WeakKeyDictionary[object, _Slots] = weakref.WeakKeyDictionary()
_slots_by_id: dict[int, _Slots] = {}
_registry_lock = threading.Lock()


def _slots_for(reranker: object) -> _Slots:
    with _registry_lock:
        try:
            found = _slots.get(reranker)
            if found is None:
                found = _slots[reranker] = _Slots()
        except TypeError:  # not weak-referenceable: key by identity for the process lifetime
            found = _slots_by_id.setdefault(id(reranker), _Slots())
        return found


def _acquire(slots: _Slots, limit: int, deadline: float, abort: Abort | None) -> None:
    with slots.cond:
        while slots.active >= limit:
            if abort is not None and abort.is_set():
                raise RerankError("rerank aborted while waiting for a slot", reason="aborted")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RerankError(
                    f"no rerank slot became free within the time budget ({limit} active)",
                    reason="timeout",
                )
            slots.cond.wait(min(remaining, _POLL_S * 4))
        slots.active += 1


def _release(slots: _Slots) -> None:
    with slots.cond:
        slots.active -= 1
        slots.cond.notify()


def _order(answer: Any, hits: Sequence[Hit]) -> tuple[Hit, ...]:
    """The permutation the reranker answered, or ``RerankError``."""
    if isinstance(answer, (str, bytes)) or not isinstance(answer, Sequence):
        raise RerankError("the reranker must return a sequence of hits", reason="malformed")
    by_identity = {id(hit): hit for hit in hits}
    seen: set[int] = set()
    out: list[Hit] = []
    for item in answer:
        if isinstance(item, tuple):
            if len(item) != 2:
                raise RerankError(
                    "the reranker returned a malformed (hit, score) pair", reason="malformed"
                )
            hit, score = item
            if (
                isinstance(score, bool)
                or not isinstance(score, (int, float))
                or not math.isfinite(score)
            ):
                raise RerankError(
                    "the reranker returned a non-finite or non-numeric score", reason="malformed"
                )
        else:
            hit = item
        key = id(hit)
        if key not in by_identity or by_identity[key] is not hit:
            raise RerankError("the reranker returned a hit it was not given", reason="malformed")
        if key in seen:
            raise RerankError("the reranker returned a hit twice", reason="malformed")
        seen.add(key)
        out.append(hit)
    if len(out) != len(hits):
        raise RerankError(
            f"the reranker returned {len(out)} of {len(hits)} hits", reason="malformed"
        )
    return tuple(out)


def _copy_for_reranker(hit: Hit, redact: Redaction) -> Hit:
    """A hit the reranker may scribble on: nothing in it is shared with ``hit``; its text is
    redacted when a redactor or secrets were given."""
    return attrs.evolve(
        hit,
        text=redact(hit.text) if redact.active else hit.text,
        provenance=attrs.evolve(hit.provenance),
        trust=Trust(),
    )


@folds_keywords(runtime=("abort", "redactor", "secrets"))
def rerank_hits(
    query: str,
    hits: Sequence[Hit],
    *,
    reranker: Reranker,
    max_bytes: int = DEFAULT_LIMITS.rerank_bytes,
    max_ms: int = DEFAULT_LIMITS.rerank_ms,
    concurrency: int = DEFAULT_LIMITS.rerank_concurrency,
    runtime: Runtime | None = None,
) -> tuple[Hit, ...]:
    """Reorder ``hits`` with ``reranker`` under byte, time and concurrency caps (fail closed).

    With ``runtime``'s ``redactor`` / ``secrets``, the query and every text the reranker sees
    are redacted first (the byte cap counts what is sent); the hits handed back are the
    caller's own. ``runtime.abort`` stops the wait. (``abort=``, ``redactor=`` and
    ``secrets=`` still work for one release, with a ``DeprecationWarning``.)
    """
    rt = DEFAULT_RUNTIME if runtime is None else check_runtime(runtime)
    abort = rt.abort
    check_limit("rerank_bytes", max_bytes)
    check_limit("rerank_ms", max_ms)
    check_limit("rerank_concurrency", concurrency)
    validate_text(query, field="query")
    if not isinstance(reranker, Reranker):
        raise ValidationError("reranker must have a rerank(query, hits) method", field="reranker")
    hits = tuple(hits)
    if not hits:
        return ()
    if any(not isinstance(h, Hit) for h in hits):
        raise ValidationError("hits must be Hit objects", field="hits")
    redact = rt.redaction
    given = tuple(_copy_for_reranker(hit, redact) for hit in hits)
    query = redact(query) if redact.active else query
    size = len(query.encode("utf-8")) + sum(len(h.text.encode("utf-8")) for h in given)
    if size > max_bytes:
        raise RerankError(
            f"rerank input is {size} bytes, over max_bytes={max_bytes}", reason="too_large"
        )
    if abort is not None and abort.is_set():
        raise RerankError("rerank aborted before it started", reason="aborted")
    deadline = time.monotonic() + max_ms / 1000
    slots = _slots_for(reranker)
    _acquire(slots, concurrency, deadline, abort)
    outcome = _Outcome()
    stop = threading.Event()
    # Not a daemon: see step 3 of the module docstring (the interpreter waits for it at exit).
    worker = threading.Thread(
        target=_call,
        args=(reranker, query, given, stop, outcome, slots),
        name="ragport-rerank",
        daemon=False,
    )
    try:
        worker.start()
    except BaseException:  # no thread (RuntimeError when the interpreter is out of them)
        _release(slots)
        raise
    try:
        _wait(worker, deadline, max_ms, abort)
    finally:
        if worker.is_alive():
            stop.set()  # an interruptible reranker ends at its next batch
    return _answer(outcome, given, hits)


@attrs.define
class _Outcome:
    """What the worker thread left: the reranker's answer or its exception."""

    answer: Any = None
    error: BaseException | None = None


def _call(
    reranker: Reranker,
    query: str,
    given: tuple[Hit, ...],
    stop: threading.Event,
    outcome: _Outcome,
    slots: _Slots,
) -> None:
    """The worker thread: one call of the reranker. It keeps its slot until it really returns
    (the cap counts calls that are still running, not calls the caller stopped waiting for)."""
    try:
        if isinstance(reranker, SupportsInterruptibleRerank):
            outcome.answer = reranker.rerank_interruptible(query, given, stop)
        else:
            outcome.answer = reranker.rerank(query, given)
    except BaseException as exc:  # every failure of the reranker fails the call closed
        outcome.error = exc
    finally:
        _release(slots)


def _wait(worker: threading.Thread, deadline: float, max_ms: int, abort: Abort | None) -> None:
    while worker.is_alive():
        if abort is not None and abort.is_set():
            raise RerankError("rerank aborted", reason="aborted")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RerankError(f"the reranker did not answer within {max_ms} ms", reason="timeout")
        worker.join(min(remaining, _POLL_S))


def _answer(outcome: _Outcome, given: Sequence[Hit], hits: Sequence[Hit]) -> tuple[Hit, ...]:
    """The caller's own hits in the order the reranker answered, or ``RerankError``."""
    error = outcome.error
    if error is not None:
        # Not inside an except block, so ``from None`` leaves no cause and no context.
        if isinstance(error, AbortedError):
            raise RerankError("rerank aborted", reason="aborted") from None
        raise RerankError(
            f"the reranker failed ({type(error).__name__})", reason="failed"
        ) from None
    ordered = _order(outcome.answer, given)
    caller_hit = {id(copied): hit for copied, hit in zip(given, hits, strict=True)}
    return tuple(caller_hit[id(copied)] for copied in ordered)
