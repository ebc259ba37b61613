"""Haystack in ``bench_peers.py``: ``pgvector-haystack``'s ``PgvectorDocumentStore``
(``search_strategy="hnsw"``, m 24 / ef_construction 128, ``hnsw_ef_search`` 200, cosine),
written by a ``Pipeline`` (document embedder -> ``DocumentWriter(policy=OVERWRITE)``); an
update is ``delete_by_filter(meta.source == id)`` then the pipeline (document ids are content
hashes, so OVERWRITE alone would keep the old chunks). Hybrid: embedding retriever (top 20)
and ``PgvectorKeywordRetriever`` (top 20) joined by ``DocumentJoiner`` (RRF, top 10)."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import psycopg
from common import CANDIDATES, DIMS, EF_SEARCH, HNSW_EF_CONSTRUCTION, HNSW_M, TOP_K, VectorTable
from haystack import Document, Pipeline, component
from haystack.components.joiners import DocumentJoiner
from haystack.components.writers import DocumentWriter
from haystack.document_stores.types import DuplicatePolicy
from haystack.utils import Secret
from haystack_integrations.components.retrievers.pgvector import (
    PgvectorEmbeddingRetriever,
    PgvectorKeywordRetriever,
)
from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

META = ("cid", "source", "version", "chunk", "tag", "owner_group")


@component
class LookupDocumentEmbedder:
    def __init__(self, table: VectorTable):
        self.table = table

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        vectors = self.table([d.content or "" for d in documents])
        for d, v in zip(documents, vectors, strict=True):
            d.embedding = [float(x) for x in v]
        return {"documents": documents}


@component
class LookupTextEmbedder:
    def __init__(self, table: VectorTable):
        self.table = table

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        return {"embedding": self.table.one(text)}


def _store(url: str, table: str, dims: int, create: bool) -> PgvectorDocumentStore:
    return PgvectorDocumentStore(
        connection_string=Secret.from_token(url),
        table_name=table,
        embedding_dimension=dims,
        vector_function="cosine_similarity",
        recreate_table=create,
        search_strategy="hnsw",
        hnsw_recreate_index_if_exists=create,
        hnsw_index_creation_kwargs={"m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION},
        hnsw_ef_search=EF_SEARCH,
        hnsw_index_name=f"{table}_hnsw_index",
        keyword_index_name=f"{table}_keyword_index",
    )


def _docs(chunks: list[dict[str, Any]]) -> list[Document]:
    return [
        Document(content=c["text"], meta={"cid": c["key"], **{k: c[k] for k in META[1:]}})
        for c in chunks
    ]


class Pipes:
    """The write, vector and hybrid pipelines of one document store."""

    def __init__(self, store: PgvectorDocumentStore, table: VectorTable):
        self.write = Pipeline()
        self.write.add_component("embedder", LookupDocumentEmbedder(table))
        self.write.add_component(
            "writer", DocumentWriter(document_store=store, policy=DuplicatePolicy.OVERWRITE)
        )
        self.write.connect("embedder.documents", "writer.documents")
        self.vector = Pipeline()
        self.vector.add_component("text_embedder", LookupTextEmbedder(table))
        self.vector.add_component(
            "retriever", PgvectorEmbeddingRetriever(document_store=store, top_k=TOP_K)
        )
        self.vector.connect("text_embedder.embedding", "retriever.query_embedding")
        self.hybrid = Pipeline()
        self.hybrid.add_component("text_embedder", LookupTextEmbedder(table))
        self.hybrid.add_component(
            "embedding_retriever",
            PgvectorEmbeddingRetriever(document_store=store, top_k=CANDIDATES),
        )
        self.hybrid.add_component(
            "keyword_retriever", PgvectorKeywordRetriever(document_store=store, top_k=CANDIDATES)
        )
        self.hybrid.add_component(
            "joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=TOP_K)
        )
        self.hybrid.connect("text_embedder.embedding", "embedding_retriever.query_embedding")
        self.hybrid.connect("embedding_retriever.documents", "joiner.documents")
        self.hybrid.connect("keyword_retriever.documents", "joiner.documents")

    def run_vector(self, text: str, filters: dict[str, Any] | None = None) -> list[Document]:
        inputs: dict[str, Any] = {"text_embedder": {"text": text}}
        if filters is not None:
            inputs["retriever"] = {"filters": filters}
        return list(self.vector.run(inputs)["retriever"]["documents"])

    def run_hybrid(self, text: str) -> list[Document]:
        out = self.hybrid.run(
            {"text_embedder": {"text": text}, "keyword_retriever": {"query": text}}
        )
        return list(out["joiner"]["documents"])


class System:
    def __init__(self, url: str, table: VectorTable):
        self.url = url
        self.store = _store(url, "haystack", DIMS, create=True)
        self.store.count_documents()  # creates the table and its indexes before the first row
        self.pipes = Pipes(self.store, table)
        self.reader_store = _store(url, "haystack", DIMS, create=False)
        self.reader = Pipes(self.reader_store, table)

    def versions(self) -> dict[str, str]:
        return {p: version(p) for p in ("haystack-ai", "pgvector-haystack")}

    def ingest(self, sources: list[str], chunks: list[dict[str, Any]]) -> None:
        self.pipes.write.run({"embedder": {"documents": _docs(chunks)}})

    def grants(self, groups: dict[str, str]) -> None:
        pass

    def update(self, source: str, chunks: list[dict[str, Any]]) -> None:
        self.delete(source)
        self.pipes.write.run({"embedder": {"documents": _docs(chunks)}})

    def delete(self, source: str) -> None:
        self.store.delete_by_filter({"field": "meta.source", "operator": "==", "value": source})

    def query(self, kind: str, q: dict[str, Any]) -> list[str]:
        text = q["text"]
        if kind == "hybrid":
            docs = self.pipes.run_hybrid(text)
        elif kind == "filter":
            docs = self.pipes.run_vector(
                text, {"field": "meta.tag", "operator": "==", "value": q["tag"]}
            )
        elif kind == "access":
            docs = self.pipes.run_vector(
                text, {"field": "meta.owner_group", "operator": "in", "value": list(q["groups"])}
            )
        else:
            docs = self.pipes.run_vector(text)
        return [d.meta["cid"] for d in docs]

    def read_source(self, source: str, marker: str) -> list[tuple[str, int]]:
        docs = self.reader.run_vector(
            marker, {"field": "meta.source", "operator": "==", "value": source}
        )
        return [(d.meta["cid"], int(d.meta["version"])) for d in docs]

    def stored_vectors(self, keys: list[str]) -> dict[str, list[float]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT meta->>'cid', embedding::text FROM public.haystack "
                "WHERE meta->>'cid' = ANY(%s)",
                (keys,),
            ).fetchall()
        return {k: [float(x) for x in text.strip("[]").split(",")] for k, text in rows}

    def cranfield_index(self, docs: list[dict[str, str]], table: VectorTable) -> None:
        store = _store(self.url, "haystack_cranfield", table.vectors.shape[1], create=True)
        self.cran = Pipes(store, table)
        self.cran.write.run(
            {
                "embedder": {
                    "documents": [Document(content=d["text"], meta={"cid": d["id"]}) for d in docs]
                }
            }
        )

    def cranfield_query(self, text: str) -> list[str]:
        return [d.meta["cid"] for d in self.cran.run_hybrid(text)]

    def close(self) -> None:
        pass
