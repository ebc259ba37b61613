"""LangChain in ``bench_peers.py``: ``langchain-postgres``'s ``PGVectorStore`` (v2, the class its
README recommends) on a ``PGEngine``, metadata as typed columns, a ``content_tsv`` column from
``HybridSearchConfig``, HNSW (m 24, ef_construction 128) applied to the empty table, ef_search
200; written through ``index()`` with a ``SQLRecordManager`` (langchain-classic) in the same
database, ``cleanup="incremental"``."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import psycopg
from common import CANDIDATES, DIMS, EF_SEARCH, HNSW_EF_CONSTRUCTION, HNSW_M, TOP_K, VectorTable
from langchain_classic.indexes import SQLRecordManager
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.indexing import index
from langchain_postgres import Column, PGEngine, PGVectorStore
from langchain_postgres.v2.hybrid_search_config import HybridSearchConfig, reciprocal_rank_fusion
from langchain_postgres.v2.indexes import HNSWIndex, HNSWQueryOptions

META = ("cid", "source", "version", "chunk", "tag", "owner_group")
TYPES = {"cid": "TEXT", "source": "TEXT", "version": "INTEGER", "chunk": "INTEGER",
         "tag": "TEXT", "owner_group": "TEXT"}  # fmt: skip


class LookupEmbeddings(Embeddings):
    def __init__(self, table: VectorTable):
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self.table(texts)]

    def embed_query(self, text: str) -> list[float]:
        return self.table.one(text)


def sqlalchemy_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def _docs(chunks: list[dict[str, Any]]) -> list[Document]:
    return [
        Document(page_content=c["text"], metadata={"cid": c["key"], **{k: c[k] for k in META[1:]}})
        for c in chunks
    ]


class System:
    def __init__(self, url: str, table: VectorTable):
        self.url = url
        self.embeddings = LookupEmbeddings(table)
        self.engine = PGEngine.from_connection_string(sqlalchemy_url(url))
        self.store, self.dense = self._table("langchain", META, self.embeddings, DIMS)
        self.reader_engine = PGEngine.from_connection_string(sqlalchemy_url(url))
        self.reader = PGVectorStore.create_sync(
            self.reader_engine,
            embedding_service=self.embeddings,
            table_name="langchain",
            metadata_columns=list(META),
            id_column="langchain_id",
            index_query_options=HNSWQueryOptions(ef_search=EF_SEARCH),
        )
        self.records = SQLRecordManager("langchain/bench", db_url=sqlalchemy_url(url))
        self.records.create_schema()

    def _table(
        self, name: str, meta: tuple[str, ...], embeddings: Embeddings, dims: int
    ) -> tuple[PGVectorStore, PGVectorStore]:
        """(the store written through, with the hybrid config that fills ``content_tsv``; the
        same table without a store-level hybrid config, for queries: a store-level config
        keeps the first query's words for every later query, see the notes)."""
        config = HybridSearchConfig(tsv_column="content_tsv", index_name=f"{name}_tsv_index")
        self.engine.init_vectorstore_table(
            table_name=name,
            vector_size=dims,
            metadata_columns=[Column(k, TYPES[k]) for k in meta],
            id_column=Column("langchain_id", "TEXT"),
            overwrite_existing=True,
            hybrid_search_config=config,
        )
        common: dict[str, Any] = dict(
            embedding_service=embeddings,
            table_name=name,
            metadata_columns=list(meta),
            id_column="langchain_id",
            index_query_options=HNSWQueryOptions(ef_search=EF_SEARCH),
        )
        store = PGVectorStore.create_sync(self.engine, hybrid_search_config=config, **common)
        store.apply_vector_index(HNSWIndex(m=HNSW_M, ef_construction=HNSW_EF_CONSTRUCTION))
        store.apply_hybrid_search_index()
        return store, PGVectorStore.create_sync(self.engine, **common)

    def versions(self) -> dict[str, str]:
        return {
            p: version(p) for p in ("langchain-postgres", "langchain-core", "langchain-classic")
        }

    def _index(self, chunks: list[dict[str, Any]]) -> None:
        index(
            _docs(chunks),
            self.records,
            self.store,
            cleanup="incremental",
            source_id_key="source",
            key_encoder="sha256",
            batch_size=100,
        )

    def ingest(self, sources: list[str], chunks: list[dict[str, Any]]) -> None:
        self._index(chunks)

    def grants(self, groups: dict[str, str]) -> None:
        pass

    def update(self, source: str, chunks: list[dict[str, Any]]) -> None:
        self._index(chunks)

    def delete(self, source: str) -> None:
        # what index() runs in its cleanup (it has no call that deletes one source)
        keys = self.records.list_keys(group_ids=[source])
        self.store.delete(keys)
        self.records.delete_keys(keys)

    def _hybrid(self, text: str) -> HybridSearchConfig:
        return HybridSearchConfig(
            tsv_column="content_tsv",
            fusion_function=reciprocal_rank_fusion,
            primary_top_k=CANDIDATES,
            secondary_top_k=CANDIDATES,
            fts_query=text,
        )

    def query(self, kind: str, q: dict[str, Any]) -> list[str]:
        text = q["text"]
        if kind == "vector":
            docs = self.dense.similarity_search(text, k=TOP_K)
        elif kind == "filter":
            docs = self.dense.similarity_search(text, k=TOP_K, filter={"tag": {"$eq": q["tag"]}})
        elif kind == "access":
            docs = self.dense.similarity_search(
                text, k=TOP_K, filter={"owner_group": {"$in": list(q["groups"])}}
            )
        else:
            docs = self.dense.similarity_search(
                text, k=TOP_K, hybrid_search_config=self._hybrid(text)
            )
        return [d.metadata["cid"] for d in docs]

    def read_source(self, source: str, marker: str) -> list[tuple[str, int]]:
        docs = self.reader.similarity_search(marker, k=TOP_K, filter={"source": {"$eq": source}})
        return [(d.metadata["cid"], int(d.metadata["version"])) for d in docs]

    def stored_vectors(self, keys: list[str]) -> dict[str, list[float]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT cid, embedding::text FROM public.langchain WHERE cid = ANY(%s)", (keys,)
            ).fetchall()
        return {k: [float(x) for x in text.strip("[]").split(",")] for k, text in rows}

    def cranfield_index(self, docs: list[dict[str, str]], table: VectorTable) -> None:
        embeddings = LookupEmbeddings(table)
        store, self.cran = self._table(
            "langchain_cranfield", ("cid",), embeddings, table.vectors.shape[1]
        )
        store.add_documents(
            [Document(page_content=d["text"], metadata={"cid": d["id"]}) for d in docs],
            ids=[d["id"] for d in docs],
        )

    def cranfield_query(self, text: str) -> list[str]:
        docs = self.cran.similarity_search(text, k=TOP_K, hybrid_search_config=self._hybrid(text))
        return [d.metadata["cid"] for d in docs]

    def close(self) -> None:
        pass
