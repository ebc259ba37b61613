"""LlamaIndex in ``bench_peers.py``: ``llama-index-vector-stores-postgres``'s ``PGVectorStore``
(``hybrid_search=True``, ``use_jsonb=True``, HNSW m 24 / ef_construction 128 / ef_search 200,
btree indexes on the metadata keys filtered on), written through an ``IngestionPipeline``
(a paragraph splitter, the embedder) with an in-memory docstore and ``UPSERTS``: one
``Document`` per source, ``id_`` the source id."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import psycopg
from common import DIMS, EF_SEARCH, HNSW_EF_CONSTRUCTION, HNSW_M, TOP_K, VectorTable
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.schema import (
    BaseNode,
    Document,
    NodeRelationship,
    TextNode,
    TransformComponent,
)
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from llama_index.vector_stores.postgres import PGVectorStore
from pydantic import PrivateAttr

SEPARATOR = "\n\n"
META = ("cid", "source", "version", "chunk", "tag", "owner_group")


class LookupEmbedding(BaseEmbedding):
    _table: Any = PrivateAttr()

    def __init__(self, table: VectorTable, **kwargs: Any):
        super().__init__(model_name="bench-lookup", embed_batch_size=1000, **kwargs)
        self._table = table

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._table.one(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._table.one(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._table.one(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self._table(texts)]


class ParagraphSplitter(TransformComponent):
    """A source's Document -> one node per paragraph (the benchmark's chunks), the node's
    metadata from the Document's per-chunk list, its id the chunk's key. Metadata is left
    out of the embedded text, so every system embeds the same text."""

    def __call__(self, nodes: list[BaseNode], **kwargs: Any) -> list[BaseNode]:
        out: list[BaseNode] = []
        for doc in nodes:
            parts = doc.get_content().split(SEPARATOR)
            for text, meta in zip(parts, doc.metadata["chunks"], strict=True):
                node = TextNode(
                    id_=meta["cid"],
                    text=text,
                    metadata=dict(meta),
                    excluded_embed_metadata_keys=list(META),
                    excluded_llm_metadata_keys=list(META),
                )
                node.relationships[NodeRelationship.SOURCE] = doc.as_related_node_info()
                out.append(node)
        return out


def _document(source: str, chunks: list[dict[str, Any]]) -> Document:
    return Document(
        id_=source,
        text=SEPARATOR.join(c["text"] for c in chunks),
        metadata={"chunks": [{"cid": c["key"], **{k: c[k] for k in META[1:]}} for c in chunks]},
        excluded_embed_metadata_keys=["chunks"],
        excluded_llm_metadata_keys=["chunks"],
    )


def _store(url: str, table: str, dims: int, create: bool = True) -> PGVectorStore:
    # its own drivers: psycopg2 and asyncpg (under psycopg 3 its ``SET hnsw.ef_search = :n``
    # is sent with a bind parameter, which PostgreSQL refuses)
    return PGVectorStore.from_params(
        connection_string=url.replace("postgresql://", "postgresql+psycopg2://", 1),
        async_connection_string=url.replace("postgresql://", "postgresql+asyncpg://", 1),
        table_name=table,
        hybrid_search=True,
        use_jsonb=True,
        embed_dim=dims,
        perform_setup=create,
        hnsw_kwargs={
            "hnsw_m": HNSW_M,
            "hnsw_ef_construction": HNSW_EF_CONSTRUCTION,
            "hnsw_ef_search": EF_SEARCH,
            "hnsw_dist_method": "vector_cosine_ops",
        },
        indexed_metadata_keys={
            ("tag", "text"),
            ("owner_group", "text"),
            ("source", "text"),
            ("ref_doc_id", "text"),
        },
    )


class System:
    def __init__(self, url: str, table: VectorTable):
        self.url = url
        self.embed = LookupEmbedding(table)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS public.data_llamaindex")
        self.store = _store(url, "llamaindex", DIMS)
        self.docstore = SimpleDocumentStore()
        self.pipeline = IngestionPipeline(
            transformations=[ParagraphSplitter(), self.embed],
            docstore=self.docstore,
            vector_store=self.store,
            docstore_strategy=DocstoreStrategy.UPSERTS,
        )
        self.index = VectorStoreIndex.from_vector_store(self.store, embed_model=self.embed)
        self.retrievers = {
            "vector": self.index.as_retriever(similarity_top_k=TOP_K),
            "hybrid": self.index.as_retriever(
                vector_store_query_mode="hybrid", similarity_top_k=TOP_K, sparse_top_k=TOP_K
            ),
        }
        self.reader_store = _store(url, "llamaindex", DIMS)
        self.reader_index = VectorStoreIndex.from_vector_store(
            self.reader_store, embed_model=self.embed
        )

    def versions(self) -> dict[str, str]:
        return {p: version(p) for p in ("llama-index-core", "llama-index-vector-stores-postgres")}

    def ingest(self, sources: list[str], chunks: list[dict[str, Any]]) -> None:
        by_source: dict[str, list[dict[str, Any]]] = {}
        for c in chunks:
            by_source.setdefault(c["source"], []).append(c)
        self.pipeline.run(documents=[_document(s, by_source[s]) for s in sources])

    def grants(self, groups: dict[str, str]) -> None:
        pass

    def update(self, source: str, chunks: list[dict[str, Any]]) -> None:
        self.pipeline.run(documents=[_document(source, chunks)])

    def delete(self, source: str) -> None:
        self.store.delete(source)
        self.docstore.delete_ref_doc(source, raise_error=False)
        self.docstore.delete_document(source, raise_error=False)

    def query(self, kind: str, q: dict[str, Any]) -> list[str]:
        if kind in self.retrievers:
            nodes = self.retrievers[kind].retrieve(q["text"])
        else:
            if kind == "filter":
                f = MetadataFilter(key="tag", value=q["tag"])
            else:
                f = MetadataFilter(
                    key="owner_group", value=list(q["groups"]), operator=FilterOperator.IN
                )
            retriever = self.index.as_retriever(
                similarity_top_k=TOP_K, filters=MetadataFilters(filters=[f])
            )
            nodes = retriever.retrieve(q["text"])
        return [n.node.metadata["cid"] for n in nodes]

    def read_source(self, source: str, marker: str) -> list[tuple[str, int]]:
        retriever = self.reader_index.as_retriever(
            similarity_top_k=TOP_K,
            filters=MetadataFilters(filters=[MetadataFilter(key="source", value=source)]),
        )
        return [
            (n.node.metadata["cid"], int(n.node.metadata["version"]))
            for n in retriever.retrieve(marker)
        ]

    def stored_vectors(self, keys: list[str]) -> dict[str, list[float]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT metadata_->>'cid', embedding::text FROM public.data_llamaindex "
                "WHERE metadata_->>'cid' = ANY(%s)",
                (keys,),
            ).fetchall()
        return {k: [float(x) for x in text.strip("[]").split(",")] for k, text in rows}

    def cranfield_index(self, docs: list[dict[str, str]], table: VectorTable) -> None:
        embed = LookupEmbedding(table)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS public.data_llamaindex_cranfield")
        store = _store(self.url, "llamaindex_cranfield", table.vectors.shape[1])
        pipeline = IngestionPipeline(
            transformations=[ParagraphSplitter(), embed],
            docstore=SimpleDocumentStore(),
            vector_store=store,
            docstore_strategy=DocstoreStrategy.UPSERTS,
        )
        pipeline.run(
            documents=[
                Document(
                    id_=d["id"],
                    text=d["text"],
                    metadata={"chunks": [{"cid": d["id"]}]},
                    excluded_embed_metadata_keys=["chunks"],
                    excluded_llm_metadata_keys=["chunks"],
                )
                for d in docs
            ]
        )
        index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
        self.cran = index.as_retriever(
            vector_store_query_mode="hybrid", similarity_top_k=TOP_K, sparse_top_k=TOP_K
        )

    def cranfield_query(self, text: str) -> list[str]:
        return [n.node.metadata["cid"] for n in self.cran.retrieve(text)]

    def close(self) -> None:
        pass
