"""langchain-tests' standard retriever suite against RagportRetriever on both stores."""

from __future__ import annotations

from typing import Any

import pytest
from handbook_corpus import ALICE, SCOPE, build_handbook
from langchain_tests.integration_tests import RetrieversIntegrationTests

from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.integrations.langchain import RagportRetriever

QUERY = "vacation days and payment approval"


class _Suite(RetrieversIntegrationTests):
    """The suite asks for k=1 and k=3 results: the corpus holds six chunks ALICE may read."""

    params: dict[str, Any]

    @property
    def retriever_constructor(self) -> type[RagportRetriever]:
        return RagportRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return self.params

    @property
    def retriever_query_example(self) -> str:
        return QUERY


class TestLangChainRetrieverOnMemoryStore(_Suite):
    @pytest.fixture(autouse=True)
    def _corpus(self) -> None:
        store, embedder = InMemoryStore(), HashEmbedder()
        build_handbook(store, embedder)
        self.params = {"store": store, "embedder": embedder, "scope": SCOPE, "authorization": ALICE}


class TestLangChainRetrieverOnPostgresStore(_Suite):
    @pytest.fixture(autouse=True)
    def _corpus(self, pg_engine, pg_schema) -> None:
        from ragport.adapters.postgres import PostgresStore

        store, embedder = PostgresStore(pg_engine, schema=pg_schema, create=True), HashEmbedder()
        build_handbook(store, embedder)
        self.params = {"store": store, "embedder": embedder, "scope": SCOPE, "authorization": ALICE}


class TestLangChainRetrieverTopKName(TestLangChainRetrieverOnMemoryStore):
    """The same suite with the result count named ``top_k`` (the ragport name) instead of ``k``."""

    @property
    def num_results_arg_name(self) -> str:
        return "top_k"
