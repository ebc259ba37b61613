"""The bulk-load mode: ``PostgresStore(vector_index=VectorIndexSettings(deferred=True))`` writes without an HNSW
index, answers vector queries exactly meanwhile, and ``build_vector_indexes`` builds the
index once after the load; the answers before and after are the same."""

from __future__ import annotations

import attrs
import pytest
from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore, VectorIndexSettings
from ragport.contract_tests._support import ContractEmbedder, publish_sources
from ragport.domain.errors import ValidationError

EMB = ContractEmbedder()
SCOPE = ragport.Scope("bulk", "r", "c")

DEFERRED = VectorIndexSettings(deferred=True)


def _indexes(store: PostgresStore, schema: str) -> list[str]:
    with store.engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = :s "
                    "AND indexname LIKE 'records_hnsw_%' ORDER BY 1"
                ),
                {"s": schema},
            ).scalars()
        )


def _top(store: PostgresStore, query: str) -> list[tuple[str, float]]:
    vector = EMB.embed([query])[0]
    return [(h.record.id, round(h.score, 5)) for h in store.query(SCOPE, vector, limit=5)]


def test_a_deferred_store_loads_without_hnsw_then_builds_it_once(pg_url, pg_schema):
    store = PostgresStore(pg_url, schema=pg_schema, create=True, vector_index=DEFERRED)
    sources = {f"s{i:03d}": [f"walrus {i} part {j}" for j in range(5)] for i in range(60)}
    publish_sources(store, SCOPE, sources)
    store.prepare(SCOPE, dimensions=EMB.dimensions)  # what a use case calls first: no index
    assert _indexes(store, pg_schema) == []
    before = _top(store, "walrus 7 part 3")
    assert before and before[0][0].startswith("s007#")

    assert store.build_vector_indexes(build_memory="64MB") == [EMB.dimensions]
    assert _indexes(store, pg_schema) == [f"records_hnsw_{EMB.dimensions}"]
    assert _top(store, "walrus 7 part 3") == before
    assert store.build_vector_indexes() == []  # nothing left to build
    store.engine.dispose()


def test_a_store_that_does_not_defer_has_its_index_from_the_first_write(pg_url, pg_schema):
    store = PostgresStore(pg_url, schema=pg_schema, create=True)
    publish_sources(store, SCOPE, {"a": ["one walrus"]})
    assert _indexes(store, pg_schema) == [f"records_hnsw_{EMB.dimensions}"]
    assert store.build_vector_indexes() == []
    store.engine.dispose()


@pytest.mark.parametrize("bad", ["1 GB", "1TB", "0GB", "'; DROP", ""])
def test_build_memory_is_a_size_or_refused(pg_url, pg_schema, bad):
    store = PostgresStore(pg_url, schema=pg_schema, create=True, vector_index=DEFERRED)
    publish_sources(store, SCOPE, {"a": ["one walrus"]})
    with pytest.raises(ValidationError) as caught:
        store.build_vector_indexes(build_memory=bad)
    assert caught.value.field == "build_memory"
    assert _indexes(store, pg_schema) == []
    store.engine.dispose()


def test_a_deferred_store_refuses_what_no_index_could_hold(pg_url, pg_schema):
    """2,001 dimensions are refused at the write, deferred or not, so a later build can never
    fail on rows already stored."""
    import numpy as np

    from ragport.domain.model import Record

    store = PostgresStore(pg_url, schema=pg_schema, create=True, vector_index=DEFERRED)
    wide = Record(id="w#0001", scope=SCOPE, source_id="w", kind="chunk", text="wide",
                  embedder_id="wide", dimensions=2001)  # fmt: skip
    with store.unit_of_work(SCOPE) as uow, pytest.raises(ValidationError) as caught:
        uow.records.add([attrs.evolve(wide, generation=uow.generations.stage())],
                        np.ones((1, 2001), dtype=np.float32))  # fmt: skip
    assert caught.value.field == "dimensions"
    assert store.build_vector_indexes() == []
    store.engine.dispose()


def _reloptions(store: PostgresStore, schema: str) -> list[str]:
    with store.engine.connect() as conn:
        return sorted(
            conn.execute(
                text(
                    "SELECT unnest(c.reloptions) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = :s AND c.relname = :i"
                ),
                {"s": schema, "i": f"records_hnsw_{EMB.dimensions}"},
            ).scalars()
        )


@pytest.mark.parametrize("deferred", [False, True])
def test_the_hnsw_build_parameters_are_the_stores(pg_url, pg_schema, deferred):
    """``hnsw_m`` / ``hnsw_ef_construction`` reach the index, whether the first write creates
    it or ``build_vector_indexes`` does; the default is m 24, ef_construction 128."""
    default = PostgresStore(pg_url, schema=pg_schema, create=True)
    publish_sources(default, SCOPE, {"a": ["one walrus"]})
    assert _reloptions(default, pg_schema) == ["ef_construction=128", "m=24"]
    with default.engine.begin() as conn:
        conn.execute(text(f'DROP INDEX "{pg_schema}".records_hnsw_{EMB.dimensions}'))
    default.engine.dispose()

    store = PostgresStore(
        pg_url,
        schema=pg_schema,
        vector_index=VectorIndexSettings(deferred=deferred, m=32, ef_construction=200),
    )
    publish_sources(store, SCOPE, {"b": ["two walruses"]})
    if deferred:
        assert _indexes(store, pg_schema) == []
        assert store.build_vector_indexes(build_memory="64MB") == [EMB.dimensions]
    assert _reloptions(store, pg_schema) == ["ef_construction=200", "m=32"]
    hits = store.query(SCOPE, EMB.embed(["two walruses"])[0], limit=1)
    assert [h.record.source_id for h in hits] == ["b"]
    store.engine.dispose()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"m": 1}, "hnsw_m"),
        ({"m": 101}, "hnsw_m"),
        ({"m": True}, "hnsw_m"),
        ({"m": 16.0}, "hnsw_m"),
        ({"ef_construction": 3}, "hnsw_ef_construction"),
        ({"ef_construction": 1001}, "hnsw_ef_construction"),
        ({"ef_construction": "200"}, "hnsw_ef_construction"),
        ({"m": 64, "ef_construction": 100}, "hnsw_ef_construction"),
    ],
)
def test_hnsw_build_parameters_outside_pgvectors_ranges_are_refused(options, field):
    with pytest.raises(ValidationError) as caught:
        VectorIndexSettings(**options)
    assert caught.value.field == field
