"""The differential contract on PostgreSQL: ``PostgresStore`` (its SQL) against the engine's
generic path over ``PostgresBackend`` on the same schema (``pushdown=False``), plain and
partitioned by tenant.

Both stores share one schema: each sequence writes a scope of its own per store. The lexical
leg is compared by what it admits, not by rank (``differential_lexical_sets``): PostgreSQL's
``bm25`` tokenizes with its text-search configuration (``english``: stemmed, stop words
dropped) and scores with k1 = 1.2 and Lucene's idf, the engine's generic ``bm25`` with
``tokenize_lexical``, k1 = 1.5 and rank_bm25's idf, so scores (and some rankings) differ by
design. On the contract's corpus every word is one lexeme to both
(``test_the_corpus_reads_alike_to_both_analyzers``), so the rows each leg admits (scope,
visibility, forgotten, grants, filter) and the number it returns at a limit must agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres.backend import PostgresBackend
from ragport.contract_tests import DifferentialContract
from ragport.contract_tests.differential import WORDS
from ragport.domain.lexical import tokenize_lexical
from ragport.engine import BackendStore
from ragport.ports.store import ChunkStore

Pair = Iterator[tuple[ChunkStore, ChunkStore]]

CORPUS_WORDS = (*WORDS, "summary", "d0", "d1")
"""Every word the differential writes (the derived texts add ``summary`` and their ids)."""


class TestPostgresAgainstTheEngine(DifferentialContract):
    """PostgresStore's SQL against BackendStore(PostgresBackend, pushdown=False)."""

    differential_examples = 12
    differential_steps = 10
    differential_lexical_sets = ("bm25",)  # english analyzer, k1 = 1.2: see the docstring

    @pytest.fixture
    def store_pair(self, pg_engine: Any, pg_schema: str) -> Pair:
        store = PostgresStore(pg_engine, schema=pg_schema, create=True)
        yield store, BackendStore(PostgresBackend.of(store), pushdown=False)


class TestPartitionedPostgresAgainstTheEngine(TestPostgresAgainstTheEngine):
    """The same on a schema partitioned by tenant."""

    @pytest.fixture
    def store_pair(self, pg_engine: Any, pg_schema: str) -> Pair:
        store = PostgresStore(pg_engine, schema=pg_schema, create=True, partitions=4)
        yield store, BackendStore(PostgresBackend.of(store), pushdown=False)


def test_the_corpus_reads_alike_to_both_analyzers(pg_engine: Any) -> None:
    """Each word the differential writes is one lexeme under ``english`` (no stop word) and
    one ``tokenize_lexical`` token, and no two words share a lexeme: so PostgreSQL's bm25 and
    the engine's match the same rows for every query the differential draws. If this fails,
    a word added to ``differential.WORDS`` stems like another or is a stop word: pick
    another."""
    with pg_engine.connect() as conn:
        lexemes = {
            w: conn.execute(
                text("SELECT tsvector_to_array(to_tsvector('english', :w))"), {"w": w}
            ).scalar_one()
            for w in CORPUS_WORDS
        }
    assert all(len(found) == 1 for found in lexemes.values()), lexemes
    assert len({found[0] for found in lexemes.values()}) == len(CORPUS_WORDS), lexemes
    assert all(tokenize_lexical(w) == [w] for w in CORPUS_WORDS)
