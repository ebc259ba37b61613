"""The PostgreSQL store's SQL builders (predicate.py, queries.py, statements.py): their text and
binds, and what they select on the real server.

Like test_postgres_filters.py: the builders are pure functions, so their output is checked
directly (every bind supplied and used, the schema the only identifier spliced in), and then
run against PostgreSQL to check that the SQL selects what the domain's Python rule says.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import numpy as np
import pytest
from sqlalchemy import Connection, Engine, text

from ragport.adapters.postgres import predicate as pred
from ragport.adapters.postgres import queries, rows, statements
from ragport.adapters.postgres.extension import PgVector
from ragport.adapters.postgres.rows import RECORD_COLUMNS
from ragport.adapters.postgres.schema import quote_schema
from ragport.adapters.postgres.store import PostgresStore
from ragport.domain.filters import matches, parse_filter
from ragport.domain.model import (
    Authorization,
    Grant,
    Record,
    Scope,
    Tombstone,
    decide_access,
    is_forgotten,
    is_visible,
)

S = quote_schema("sql_builders")
VEC = PgVector('"public"')  # where the test server's vector extension lives
SCOPE = Scope("t1", "kb", "docs")
AUTH = Authorization("alice", "t1", group_ids=("eng",))
AUTH_V = Authorization("alice", "t1", group_ids=("eng",), access_version=2)
FILTER = {"lang": "en", "n": {"$gte": 2}}
_BIND = re.compile(r"(?<![:\w]):(\w+)")
_TABLE = re.compile(r"(\S+)\.(records|grants|tombstones|scopes)\b")


def binds(sql: str) -> set[str]:
    return set(_BIND.findall(sql))


# -- text and binds ----------------------------------------------------------------------------


@pytest.mark.parametrize("authorization", [None, AUTH, AUTH_V], ids=["none", "acl", "acl-v"])
@pytest.mark.parametrize("flt", [None, FILTER], ids=["all", "filter"])
@pytest.mark.parametrize("scalar", [False, True], ids=["join", "scalar"])
def test_the_predicate_binds_what_it_uses(
    authorization: Authorization | None, flt: dict[str, Any] | None, scalar: bool
) -> None:
    """The WHERE's binds are the scope's, the authorization's and the filter's, all supplied. If this fails, check predicate() and acl_predicate()."""
    params = pred.scope_params(SCOPE)
    where = pred.predicate(S, params, authorization, flt, scalar=scalar)
    assert binds(where) <= set(params)
    expected = {"t", "r", "c"}
    if authorization is not None:
        expected |= {"principal", "groups"} | ({"av"} if authorization.access_version else set())
    assert {b for b in binds(where) if not b.startswith("mf")} == expected
    assert any(b.startswith("mf") for b in binds(where)) is (flt is not None)
    # The scalar form reads the pointer as a subquery; the join form needs sc in FROM.
    assert ("sc.pointer" in where) is (not scalar)
    assert ("(SELECT pointer FROM sc)" in where) is scalar
    # Tombstones are probed per row in both forms, never read as a list.
    assert "tb.ids" not in where and f"FROM {S}.tombstones x" in where


@pytest.mark.parametrize("guarded", [False, True])
@pytest.mark.parametrize("authorization", [None, AUTH_V])
def test_the_vector_statement_binds_exactly_what_the_store_passes(
    guarded: bool, authorization: Authorization | None
) -> None:
    """The vector leg (and guard) use every bind the store fills and no other. If this fails, check vector_leg() and vector_sql()."""
    params = pred.scope_params(SCOPE, q=np.zeros(3, dtype=np.float32))
    where = pred.predicate(S, params, authorization, FILTER, scalar=True)
    leg, order = queries.vector_leg(S, 3, 7, where, vec=VEC)
    if guarded:
        params.update(e="hash-v1:3", ed=3)
    sql = queries.vector_sql(S, leg, guarded=guarded)
    assert binds(sql) == set(params)
    assert "vector(3)" in leg and "v.dimensions = 3" in leg and order.endswith("LIMIT 7")
    if authorization is not None:
        top = queries.vector_top(S, 3, order, vec=VEC)
        denied = queries.denied_sql(S, top(pred.predicate(S, dict(params), None, FILTER)))
        assert binds(denied) <= set(params)


def test_the_lexical_statement_binds_exactly_what_the_store_passes() -> None:
    """The BM25 leg uses the scope, :k, :query, the grants' and the filter's binds. If this fails, check bm25_ctes() and lexical_sql()."""
    params = pred.scope_params(SCOPE, k=5, query="alpha beta")
    where = pred.predicate(S, params, AUTH, FILTER)
    sql = queries.lexical_sql(S, "simple", where)
    # :av is passed as None (and unused) when the authorization carries no access version.
    assert binds(sql) == set(params) - {"av"}
    assert "'simple'::regconfig" in sql
    denied = queries.denied_sql(S, queries.bm25_top(S, "simple")(pred.predicate(S, {}, None, None)))
    assert binds(denied) == {"t", "r", "c", "k", "query"}


STATEMENTS: list[tuple[Callable[[str], str], set[str]]] = [
    (statements.lock_scope, set()),
    (statements.save_generations, {"n", "p", "f"}),
    (lambda s: statements.save_generations(s, claim=True), {"n", "p", "f", "claim"}),
    (lambda s: statements.retire(s, "source_id = :src"), {"src", "g", "p"}),
    (lambda s: statements.retire(s, "id = ANY(:ids)"), {"ids", "g", "p"}),
    (statements.dependents_sql, {"ids"}),
    (statements.rekey_update, {"old", "new", "to"}),
    (statements.lineage_rows_sql, {"f"}),
    (statements.lineage_update, {"lineage", "roots", "id", "g"}),
    (lambda s: statements.delete_records(s, statements.PURGE_SOURCE), {"src"}),
    (lambda s: statements.delete_records(s, statements.DISCARD_ABOVE), {"g"}),
    (statements.restore_above_sql, {"g"}),
    (lambda s: statements.delete_records(s, statements.PURGE_RETIRED), {"g"}),
    (statements.grants_upsert, {"src", "p", "g", "v"}),
    (statements.tombstones_insert, {"ids", "reasons"}),
    (statements.tombstones_sql, set()),
    (queries.embedders_sql, set()),
    (queries.forgotten_sql, set()),
    (queries.foreign_rows_sql, {"e", "ed"}),
]


@pytest.mark.parametrize(("build", "extra"), STATEMENTS)
def test_every_statement_names_the_full_scope(build: Callable[[str], str], extra: set[str]) -> None:
    """Each statement binds the scope (t, r, c) plus its own values, nothing else. If this fails, check that builder in statements.py or queries.py."""
    assert binds(build(S)) == {"t", "r", "c"} | extra


def _every_statement() -> list[str]:
    where = pred.predicate(S, pred.scope_params(SCOPE), AUTH_V, FILTER)
    leg, order = queries.vector_leg(S, 3, 7, where, vec=VEC)
    return [
        *(build(S) for build, _ in STATEMENTS),
        statements.copy_records(S),
        queries.vector_sql(S, leg, guarded=True),
        queries.lexical_sql(S, "english", where),
        queries.denied_sql(S, queries.vector_top(S, 3, order, vec=VEC)(where)),
        queries.denied_sql(S, queries.bm25_top(S, "english")(where)),
    ]


def test_the_schema_is_the_only_identifier_spliced_in() -> None:
    """Every table is named through the quoted schema passed in. If this fails, a builder names a table without its schema."""
    for sql in _every_statement():
        tables = _TABLE.findall(sql)
        assert tables, sql[:60]
        assert {schema.lstrip("(") for schema, _ in tables} == {S}, sql[:60]


# -- on the server -------------------------------------------------------------------------------


@pytest.fixture
def store(pg_engine: Engine, pg_schema: str) -> Iterator[PostgresStore]:
    yield PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")


def _record(
    rid: str, source: str, generation: int, *, scope: Scope = SCOPE, **changes: Any
) -> Record:
    fields: dict[str, Any] = {"text": "alpha", "embedder_id": "hash-v1:3", "dimensions": 3}
    fields.update(changes)
    return Record(
        id=rid, scope=scope, source_id=source, kind="chunk", generation=generation, **fields
    )


def _populate(store: PostgresStore) -> list[Record]:
    """Rows at every visibility state, with grants, tombstones and metadata."""
    with store.unit_of_work(SCOPE) as uow:
        g1 = uow.generations.stage()
        first = [
            _record("a#1", "a", g1, metadata={"lang": "en", "n": 3}),
            _record("b#1", "b", g1, metadata={"lang": "en", "n": 2}),
            _record("c#1", "c", g1, metadata={"lang": "de", "n": 5}),
            _record("d#1", "d", g1, metadata={"lang": "en", "n": 2}),  # no grant
            _record("gone#1", "gone", g1, metadata={"lang": "en", "n": 9}),
            _record("old#1", "old", g1, metadata={"lang": "en", "n": 9}),
        ]
        uow.records.add(first, np.ones((len(first), 3)))
        uow.generations.publish(g1)
        uow.grants.set(
            [
                Grant("a", principal_ids=("alice",)),
                Grant("b", principal_ids=("alice",), access_version=2),
            ]
        )
        uow.grants.set([Grant("c", group_ids=("eng",), access_version=2)])
        uow.tombstones.add([Tombstone("gone")])
        uow.commit()
    with store.unit_of_work(SCOPE) as uow:
        g2 = uow.generations.stage()
        uow.records.retire_source("old", generation=g2)
        derived = Record(
            id="sum",
            scope=SCOPE,
            source_id="sum",
            kind="derived",
            text="alpha",
            metadata={"lang": "en", "n": 4},
            embedder_id="hash-v1:3",
            dimensions=3,
            generation=g2,
            lineage=("a#1", "c#1"),
            roots=("a", "c"),
        )
        withheld = attrs.evolve(derived, id="sum2", source_id="sum2", lineage=("sum",))
        withheld = attrs.evolve(withheld, roots=("a", "gone"))  # forgotten by a root only
        uow.records.add([derived, withheld], np.ones((2, 3)))
        uow.generations.publish(g2)
        uow.commit()
    with store.unit_of_work(SCOPE) as uow:
        staged = uow.generations.stage()
        uow.records.add([_record("new#1", "new", staged)], np.ones((1, 3)))
        uow.commit()  # staged, never published
    s = quote_schema(store.schema)
    with store.engine.connect() as conn:
        stored = conn.execute(
            text(f"SELECT {RECORD_COLUMNS} FROM {s}.records WHERE {pred.SCOPE}"),
            pred.scope_params(SCOPE),
        ).all()
    return [rows.record(SCOPE, row) for row in stored]


def test_record_sets_every_field_of_record() -> None:
    """``rows.record`` skips the constructor, so it must name every field ``Record`` has."""
    assert tuple(f.name for f in attrs.fields(Record)) == rows.RECORD_FIELDS


def test_a_stored_row_reads_back_as_the_constructor_would_build_it(store: PostgresStore) -> None:
    """The unchecked ``record`` and the constructor's ``checked_record`` agree on every row:
    chunks, retired rows, derived rows two lineage levels deep, nested metadata; each the
    record written, equal and with the same hash, its metadata a dict of its own."""
    _populate(store)
    nested = _record("n#1", "n", 0, metadata={"a": [1, {"b": None, "c": [2.5, "x"]}], "é": True})
    with store.unit_of_work(SCOPE) as uow:
        g = uow.generations.stage()
        nested = attrs.evolve(nested, generation=g, chunk_index=4, start=3, end=9)
        nested = attrs.evolve(nested, content_hash="ab" * 32)
        uow.records.add([nested], np.ones((1, 3)))
        uow.generations.publish(g)
        uow.commit()
    s = quote_schema(store.schema)
    with store.engine.connect() as conn:
        stored = conn.execute(
            text(f"SELECT {RECORD_COLUMNS} FROM {s}.records WHERE {pred.SCOPE} ORDER BY id"),
            pred.scope_params(SCOPE),
        ).all()
    fast = [rows.record(SCOPE, row) for row in stored]
    checked = [rows.checked_record(SCOPE, row) for row in stored]
    assert fast == checked
    assert [hash(r) for r in fast] == [hash(r) for r in checked]
    assert [attrs.astuple(r, recurse=False) for r in fast] == [
        attrs.astuple(r, recurse=False) for r in checked
    ]
    by_id = {r.id: r for r in fast}
    assert by_id["n#1"] == nested
    assert by_id["sum2"].lineage == ("sum",) and by_id["sum2"].roots == ("a", "gone")
    assert by_id["old#1"].retired_generation is not None
    assert len({id(r.metadata) for r in fast}) == len(fast)  # nothing shared between rows
    assert all(type(r.lineage) is tuple and type(r.roots) is tuple for r in fast)


def _grants(store: PostgresStore) -> dict[str, Grant]:
    with store.unit_of_work(SCOPE) as uow:
        return dict(uow.grants.get(["a", "b", "c", "d", "gone", "old", "new"]))


def _selected(
    conn: Connection, store: PostgresStore, authorization: Any, flt: Any, scalar: bool
) -> set[str]:
    s = quote_schema(store.schema)
    params = pred.scope_params(SCOPE)
    where = pred.predicate(s, params, authorization, flt, scalar=scalar)
    source = "records r" if scalar else "records r, sc"
    sql = pred.predicate_ctes(s) + f"SELECT r.id FROM {s}.{source} WHERE {where}"
    return {row.id for row in conn.execute(text(sql), params)}


@pytest.mark.parametrize("authorization", [None, AUTH, AUTH_V], ids=["none", "acl", "acl-v"])
@pytest.mark.parametrize("flt", [None, FILTER], ids=["all", "filter"])
def test_the_predicate_selects_what_the_domain_rules_allow(
    store: PostgresStore, pg_engine: Engine, authorization: Any, flt: Any
) -> None:
    """Visibility, forgotten ids, the grant rule and the filter, in SQL and in Python, agree. If this fails, check predicate() against is_visible, is_forgotten, decide_access and matches."""
    stored = _populate(store)
    assert len(stored) == 9
    grants = _grants(store)
    pointer = store.current_generation(SCOPE)
    parsed = parse_filter(flt)

    def allowed(r: Record) -> bool:
        if authorization is None:
            return True
        sources = r.access_sources
        return bool(sources) and all(
            decide_access(src, grants.get(src), authorization).allowed for src in sources
        )

    expected = {
        r.id
        for r in stored
        if is_visible(r.generation, r.retired_generation, pointer)
        and not is_forgotten(r, {"gone"})
        and allowed(r)
        and matches(parsed, r.metadata)
    }
    with pg_engine.connect() as conn:
        for scalar in (False, True):
            assert _selected(conn, store, authorization, flt, scalar) == expected
    assert expected  # the fixture rows leave something to select in every case


def test_the_tsquery_ors_plain_terms_and_keeps_exclusions(pg_engine: Engine) -> None:
    """'a b' becomes a | b; with '-b' websearch's AND stays. If this fails, check tsquery()."""
    sql = f"SELECT CAST({queries.tsquery('simple')} AS text) AS q"
    with pg_engine.connect() as conn:
        plain = conn.execute(text(sql), {"query": "alpha beta"}).scalar_one()
        excluded = conn.execute(text(sql), {"query": "alpha -beta"}).scalar_one()
    assert plain == "'alpha' | 'beta'"
    assert excluded == "'alpha' & !'beta'"
