"""ragport in ``bench_peers.py``: ``PostgresStore`` with its defaults (m 24, ef_construction
128, ef_search 200), ``Rag.replace_sources`` per ingest round (one batch of 100 sources: one
transaction, one generation), ``replace_source`` per update, ``delete_source``, ``retrieve_context``;
grants per source (``set_source_access``) and an ``Authorization`` for workload 7."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from common import (
    CANDIDATES,
    DIMS,
    EF_SEARCH,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    RRF_K,
    TOP_K,
    VectorTable,
)

import ragport
from ragport import Authorization, Chunk, Grant, RetrievalRequest, Scope
from ragport.adapters.postgres import PostgresStore
from ragport.application import (
    Rag,
    SourceWrite,
    delete_source,
    index_chunks,
    replace_source,
    retrieve_context,
)
from ragport.domain.limits import HARD_LIMITS

SCOPE = Scope("bench", "peers", "corpus")
CRANFIELD = Scope("bench", "peers", "cranfield")


class LookupEmbedder:
    """ragport's ``Embedder``: each text's precomputed vector."""

    def __init__(self, table: VectorTable, dims: int = DIMS):
        self.table = table
        self.dimensions = dims
        self.id = f"bench-peers-lookup:{dims}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.table(texts)


def _request(**kw: Any) -> RetrievalRequest:
    """A request for the top ``TOP_K`` hits, with the context and result caps at their hard
    limits (as ``ragport.application.evaluation`` ranks): under the defaults (2,000 tokens,
    64 KiB) the rendered context dropped the hits past the budget, so 121 of Cranfield's 150
    queries got fewer than 10 abstracts from ragport (nDCG@10 of the vector leg 0.342, not
    its 0.365) while every peer returned 10."""
    return RetrievalRequest(
        top_k=TOP_K,
        max_context_tokens=HARD_LIMITS.context_tokens,
        max_result_bytes=HARD_LIMITS.result_bytes,
        **kw,
    )


def _chunks(source: str, chunks: list[dict[str, Any]]) -> list[Chunk]:
    meta = ("source", "version", "chunk", "tag", "owner_group", "team")
    return [
        Chunk.of(
            source, int(c["key"].split("#")[1]) - 1, c["text"], metadata={k: c[k] for k in meta}
        )
        for c in chunks
    ]


def _hash(chunks: list[dict[str, Any]]) -> str:
    return hashlib.sha256("\n".join(c["text"] for c in chunks).encode()).hexdigest()


class System:
    def __init__(self, url: str, table: VectorTable):
        self.url = url
        self.embedder = LookupEmbedder(table)
        kwargs = dict(hnsw_m=HNSW_M, hnsw_ef_construction=HNSW_EF_CONSTRUCTION, ef_search=EF_SEARCH)
        self.store = PostgresStore(url, schema="ragport", create=True, **kwargs)  # type: ignore[arg-type]
        # workload 3's reader: a second store object on the same schema
        self.reader = PostgresStore(url, schema="ragport", **kwargs)  # type: ignore[arg-type]
        self.rag = Rag(store=self.store, embedder=self.embedder, scope=SCOPE)
        self.requests = {
            "vector": _request(),
            "hybrid": _request(query_candidates=CANDIDATES, lexical="auto", rrf_k=RRF_K),
        }

    def versions(self) -> dict[str, str]:
        return {"ragport": ragport.__version__ if hasattr(ragport, "__version__") else "?"}

    def ingest(self, sources: list[str], chunks: list[dict[str, Any]]) -> None:
        by_source: dict[str, list[dict[str, Any]]] = {}
        for c in chunks:
            by_source.setdefault(c["source"], []).append(c)
        # the batch path (issue 45): one unit of work, one generation, one COPY per batch
        result = self.rag.replace_sources(
            [
                SourceWrite(
                    source_id=s, chunks=_chunks(s, by_source[s]), content_hash=_hash(by_source[s])
                )
                for s in sources
            ]
        )
        assert not result.failures, result.failures
        # inside the timed span: its GIN merges never land in a peer's turn
        self.store.finish_maintenance()

    def _replace(self, source: str, chunks: list[dict[str, Any]], store: Any = None) -> None:
        replace_source(
            source_id=source,
            chunks=_chunks(source, chunks),
            embedder=self.embedder,
            store=store or self.store,
            scope=SCOPE,
            content_hash=_hash(chunks),
        )

    def grants(self, groups: dict[str, str]) -> None:
        self.store.set_source_access(SCOPE, [Grant(s, group_ids=(g,)) for s, g in groups.items()])

    def update(self, source: str, chunks: list[dict[str, Any]]) -> None:
        self._replace(source, chunks)
        self.store.finish_maintenance()

    def delete(self, source: str) -> None:
        delete_source(source_id=source, store=self.store, scope=SCOPE)

    def query(self, kind: str, q: dict[str, Any]) -> list[str]:
        authorization = None
        if kind == "filter":
            request = _request(metadata_filter={"tag": q["tag"]})
        elif kind == "team_filter":  # workload 7's rows by an equality filter, not grants
            request = _request(metadata_filter={"team": q["team"]})
        elif kind == "group_filter":  # the same rows by an $in filter
            groups = {"owner_group": {"$in": list(q["groups"])}}
            request = _request(metadata_filter=groups)
        elif kind == "access":
            request = self.requests["vector"]
            authorization = Authorization("user", "bench", group_ids=tuple(q["groups"]))
        else:
            request = self.requests[kind]
        result = retrieve_context(
            q["text"],
            embedder=self.embedder,
            store=self.store,
            scope=SCOPE,
            request=request,
            authorization=authorization,
        )
        return [h.id for h in result.hits]

    def read_source(self, source: str, marker: str) -> list[tuple[str, int]]:
        result = retrieve_context(
            marker,
            embedder=self.embedder,
            store=self.reader,
            scope=SCOPE,
            request=_request(metadata_filter={"source": source}),
        )
        return [(h.id, int(h.metadata["version"])) for h in result.hits]

    def stored_vectors(self, keys: list[str]) -> dict[str, list[float]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT r.id, v.embedding::text FROM ragport.records r "
                "JOIN ragport.record_vectors v USING (tenant_id, resource_id, corpus_id, row_key) "
                "WHERE r.id = ANY(%s) AND r.retired_generation IS NULL",
                (keys,),
            ).fetchall()
        return {k: [float(x) for x in text.strip("[]").split(",")] for k, text in rows}

    def cranfield_index(self, docs: list[dict[str, str]], table: VectorTable) -> None:
        self.cran_embedder = LookupEmbedder(table, table.vectors.shape[1])
        self.cran = PostgresStore(self.url, schema="ragport_cranfield", create=True)
        chunks = [Chunk.of(d["id"], 0, d["text"]) for d in docs]
        index_chunks(chunks=chunks, embedder=self.cran_embedder, store=self.cran, scope=CRANFIELD)
        self.cran.finish_maintenance()

    def cranfield_query(self, text: str) -> list[str]:
        result = retrieve_context(
            text,
            embedder=self.cran_embedder,
            store=self.cran,
            scope=CRANFIELD,
            request=self.requests["hybrid"],
        )
        return [h.source_id for h in result.hits]

    def close(self) -> None:
        for store in (self.store, self.reader, getattr(self, "cran", None)):
            if store is not None:
                store.engine.dispose()
