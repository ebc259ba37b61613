"""Test doubles the project's own tests share: delegating store wrappers and a counting embedder.

Clocks, deterministic vectors and the contract embedder are not here: they ship with the
package (``ragport.contract_tests.plugin``, enabled in tests/conftest.py).

Optional store capabilities count only when the store's *class* defines their methods
(``ragport.ports.store.supports``), so a wrapper that delegates through ``__getattr__`` is a
plain store; one that must take the lexical or guarded path defines those methods (see
:class:`CallLog` and :class:`GuardedCallLog`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import ragport
from ragport.adapters.embedders import HashEmbedder

__all__ = [
    "CallLog",
    "CountingEmbedder",
    "CountingStore",
    "Delegating",
    "GuardedCallLog",
    "NoTransactionsStore",
]


class Delegating:
    """Delegates every attribute to ``inner`` (a store or a status store); subclasses override
    one behaviour."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class NoTransactionsStore(Delegating):
    """A chunk store that honestly reports no transactions (everything else delegated)."""

    @property
    def capabilities(self) -> ragport.domain.Capabilities:
        return ragport.domain.Capabilities(
            lexical_modes=(), authorization="acl", generations=True, transactions=False
        )


class CallLog(Delegating):
    """Logs, in order, the name of every store method called through it.

    It offers the lexical leg (its class defines ``lexical_query`` and ``hybrid_query``) but
    not the guarded query: use :class:`GuardedCallLog` for that.
    """

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = super().__getattr__(name)
        if not callable(attr):
            return attr

        def logged(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return attr(*args, **kwargs)

        return logged

    # Optional capabilities count only when the class defines them (ports.store.supports).
    def lexical_query(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("lexical_query")
        return self._inner.lexical_query(*args, **kwargs)

    def hybrid_query(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("hybrid_query")
        return self._inner.hybrid_query(*args, **kwargs)


class GuardedCallLog(CallLog):
    """A :class:`CallLog` that also takes the guarded path (``SupportsGuardedQuery``)."""

    def guarded_query(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("guarded_query")
        return self._inner.guarded_query(*args, **kwargs)


class CountingStore(Delegating):
    """Counts the read calls retrieval makes, by method and scope (a plain, unguarded store)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.calls: Counter[tuple[str, ragport.Scope]] = Counter()

    def query(self, scope: ragport.Scope, vector: Any, **kwargs: Any) -> Any:
        self.calls[("query", scope)] += 1
        return self._inner.query(scope, vector, **kwargs)

    def list_embedders(self, scope: ragport.Scope) -> Any:
        self.calls[("list_embedders", scope)] += 1
        return self._inner.list_embedders(scope)

    def list_invalidated_ids(self, scope: ragport.Scope) -> Any:
        self.calls[("list_invalidated_ids", scope)] += 1
        return self._inner.list_invalidated_ids(scope)

    def check_source_access(self, scope: ragport.Scope, source_ids: Any, auth: Any) -> Any:
        self.calls[("check_source_access", scope)] += 1
        return self._inner.check_source_access(scope, source_ids, auth)

    def count(self, method: str) -> int:
        return sum(n for (m, _), n in self.calls.items() if m == method)


class CountingEmbedder:
    """Wraps a HashEmbedder and records every batch; can fake another model id, fail on a
    given call (quoting the text, as careless clients do) or set an event after one."""

    def __init__(
        self,
        inner: HashEmbedder | None = None,
        *,
        id: str | None = None,
        fail_on_call: int | None = None,
        set_after_call: int | None = None,
        event: threading.Event | None = None,
    ) -> None:
        self._inner = inner or HashEmbedder()
        self._id = id
        self._fail_on_call = fail_on_call
        self._set_after_call = set_after_call
        self._event = event
        self.calls: list[list[str]] = []

    @property
    def id(self) -> str:
        return self._id or self._inner.id

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    @property
    def texts(self) -> list[str]:
        return [t for call in self.calls for t in call]

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls.append(list(texts))
        if self._fail_on_call is not None and len(self.calls) == self._fail_on_call:
            # A foreign error that quotes document text: it must never reach status or logs.
            raise RuntimeError(f"embedding service choked on {texts[0]!r}")
        out = self._inner.embed(texts)
        if self._set_after_call is not None and len(self.calls) == self._set_after_call:
            assert self._event is not None
            self._event.set()
        return out
