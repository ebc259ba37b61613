"""A LlamaIndex retriever over ``retrieve_context`` (extra ``ragport[llama-index]``).

``RagportRetriever(store=, embedder=, scope= | scopes=, authorization=None, top_k=5,
**retrieve options)`` returns ``NodeWithScore``s: a ``TextNode`` with the hit's text and the
same metadata as the LangChain face (``citation_id, source_id, chunk_id, page, heading, score,
retrieval, trust, tenant_id, resource_id, corpus_id``), scored by the hit's score. The node id
is the citation id; when several scopes return the same citation id it is qualified as
``tenant/resource/corpus/citation-id``, because LlamaIndex drops repeated node ids.
Everything is fixed at construction; ``retrieve`` and ``aretrieve`` take only the query.

``aretrieve`` runs the retrieval on a worker thread through ``ragport.aio.run_abortable``,
never on the event loop. ``max_threads`` (default 8, at most 64) bounds this retriever's
concurrent async calls; ``limiter=`` (an ``anyio.CapacityLimiter``) shares one bound with other
faces instead. Cancelling ``aretrieve`` sets the call's abort; the cancellation reaches the
caller once the thread has stopped at the retrieval's next abort check (``AbortedError``
inside), so it leaves no thread, token or connection behind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Unpack

try:
    import anyio
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "ragport.integrations.llama_index needs the llama-index extra: pip install 'ragport[llama-index]'"
    ) from exc

from ragport.aio import run_abortable
from ragport.application.context import BoundRetrieveOptions
from ragport.domain.limits import DEFAULT_LIMITS
from ragport.domain.model import Authorization, Hit, Scope
from ragport.integrations._async import thread_limiter
from ragport.integrations._common import BoundRetrieval, hit_metadata
from ragport.ports.embedder import Embedder
from ragport.ports.runtime import Abort
from ragport.ports.store import ChunkStore

__all__ = ["RagportRetriever"]


def _node_id(hit: Hit, repeated: bool) -> str:
    p = hit.provenance
    if not repeated:
        return p.citation_id
    return f"{p.tenant_id}/{p.resource_id}/{p.corpus_id}/{p.citation_id}"


class RagportRetriever(BaseRetriever):
    """Cited, access-checked retrieval as a LlamaIndex retriever (see the module docstring)."""

    def __init__(
        self,
        *,
        store: ChunkStore,
        embedder: Embedder,
        scope: Scope | None = None,
        scopes: Sequence[Scope] | None = None,
        authorization: Authorization | None = None,
        top_k: int = DEFAULT_LIMITS.top_k,
        max_threads: int | None = None,
        limiter: anyio.CapacityLimiter | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **options: Unpack[BoundRetrieveOptions],
    ) -> None:
        self._bound = BoundRetrieval.bind(
            store=store,
            embedder=embedder,
            scope=scope,
            scopes=scopes,
            authorization=authorization,
            top_k=top_k,
            options=options,
        )
        self._limiter = thread_limiter(max_threads, limiter)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def top_k(self) -> int:
        return self._bound.top_k

    @property
    def authorization(self) -> Authorization | None:
        return self._bound.authorization

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        """The limiter that bounds this retriever's concurrent ``aretrieve`` calls."""
        return self._limiter

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(query_bundle, None)

    def _nodes(self, query_bundle: QueryBundle, abort: Abort | None) -> list[NodeWithScore]:
        result = self._bound.run(query_bundle.query_str, abort=abort)
        counts = Counter(h.provenance.citation_id for h in result.hits)
        return [
            NodeWithScore(
                node=TextNode(
                    id_=_node_id(hit, counts[hit.provenance.citation_id] > 1),
                    text=hit.text,
                    metadata=hit_metadata(hit),
                ),
                score=float(hit.score),
            )
            for hit in result.hits
        ]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # The store and embedder are synchronous: a worker thread runs them, and cancelling
        # this coroutine sets the abort the retrieval checks between its steps.
        return await run_abortable(
            lambda abort: self._nodes(query_bundle, abort), limiter=self._limiter
        )
