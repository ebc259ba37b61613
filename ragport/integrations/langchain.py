"""A LangChain retriever over ``retrieve_context`` (extra ``ragport[langchain]``).

``RagportRetriever(store=, embedder=, scope= | scopes=, authorization=None, top_k=5,
**retrieve options)`` returns ``Document``s whose ``page_content`` is the hit's text and whose
metadata carries ``citation_id, source_id, chunk_id, page, heading, score, retrieval, trust``
(and the scope's ``tenant_id, resource_id, corpus_id``). ``k`` is an alias of ``top_k`` in the
constructor and in ``invoke``. Store, embedder, scope(s), authorization and options are fixed
at construction; ``invoke`` takes only a result count, anything else is a ``ValidationError``.

``ainvoke`` runs the retrieval on a worker thread through ``ragport.aio.run_abortable``, never
on the event loop. ``max_threads`` (default 8, at most 64) bounds this retriever's concurrent
async calls; ``limiter=`` (an ``anyio.CapacityLimiter``) shares one bound with other faces
instead. Cancelling ``ainvoke`` sets the call's abort; the cancellation reaches the caller
once the thread has stopped at the retrieval's next abort check (``AbortedError`` inside),
so it leaves no thread, token or connection behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

try:
    import anyio
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "ragport.integrations.langchain needs the langchain extra: pip install 'ragport[langchain]'"
    ) from exc

from ragport.aio import run_abortable
from ragport.application.context import BoundRetrieveOptions
from ragport.domain.errors import ValidationError
from ragport.domain.limits import DEFAULT_LIMITS
from ragport.domain.model import Authorization, Scope
from ragport.integrations._async import thread_limiter
from ragport.integrations._common import BoundRetrieval, hit_metadata, pick_top_k
from ragport.ports.embedder import Embedder
from ragport.ports.runtime import Abort
from ragport.ports.store import ChunkStore

__all__ = ["RagportRetriever"]

# LangChain's own run options that may reach _get_relevant_documents; they select nothing.
_IGNORED_CALL_KWARGS = frozenset({"verbose"})


class RetrieverOptions(BoundRetrieveOptions, total=False):
    """``BoundRetrieveOptions`` and LangChain's own retriever fields: ``tags`` and
    ``metadata`` (``BaseRetriever``'s, handed to LangChain's callbacks, never to ragport)."""

    tags: list[str] | None
    metadata: dict[str, Any] | None


class RagportRetriever(BaseRetriever):
    """Cited, access-checked retrieval as a LangChain retriever (see the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    bound: BoundRetrieval
    limiter: anyio.CapacityLimiter

    def __init__(
        self,
        *,
        store: ChunkStore,
        embedder: Embedder,
        scope: Scope | None = None,
        scopes: Sequence[Scope] | None = None,
        authorization: Authorization | None = None,
        top_k: int | None = None,
        k: int | None = None,
        max_threads: int | None = None,
        limiter: anyio.CapacityLimiter | None = None,
        **options: Unpack[RetrieverOptions],
    ) -> None:
        tags = options.pop("tags", None)
        metadata = options.pop("metadata", None)
        bound = BoundRetrieval.bind(
            store=store,
            embedder=embedder,
            scope=scope,
            scopes=scopes,
            authorization=authorization,
            top_k=pick_top_k(k, top_k, DEFAULT_LIMITS.top_k),
            options=options,
        )
        threads = thread_limiter(max_threads, limiter)
        # Pydantic fields: mypy runs without the pydantic plugin, so it cannot see them.
        super().__init__(
            bound=bound,
            limiter=threads,  # type: ignore[call-arg]
            tags=tags,
            metadata=metadata,
        )

    @property
    def top_k(self) -> int:
        return self.bound.top_k

    @property
    def authorization(self) -> Authorization | None:
        return self.bound.authorization

    def _documents(self, query: str, top_k: int, abort: Abort | None = None) -> list[Document]:
        result = self.bound.run(query, top_k=top_k, abort=abort)
        return [
            Document(
                page_content=hit.text, metadata=hit_metadata(hit), id=hit.provenance.citation_id
            )
            for hit in result.hits
        ]

    def _count(self, k: int | None, top_k: int | None, extra: dict[str, Any]) -> int:
        unknown = sorted(set(extra) - _IGNORED_CALL_KWARGS)
        if unknown:
            # Scope, authorization and options are fixed at construction, never per call.
            raise ValidationError(f"invoke does not take {unknown[0]!r}", field=unknown[0])
        return pick_top_k(k, top_k, self.bound.top_k)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        top_k: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        return self._documents(query, self._count(k, top_k, kwargs))

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        top_k: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        count = self._count(k, top_k, kwargs)
        # The store and embedder are synchronous: a worker thread runs them, and cancelling
        # this coroutine sets the abort the retrieval checks between its steps.
        return await run_abortable(
            lambda abort: self._documents(query, count, abort), limiter=self.limiter
        )
