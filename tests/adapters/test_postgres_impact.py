"""The PostgreSQL lexical leg's impact buckets (``records.tsv_impact``, migration 7) and the
two-round pruning that reads them (``queries.bm25_ctes``).

With the default budgets a small corpus holds only rare lexemes, so these tests shrink them
(``pruned``): every lexeme becomes common, or only the rarest stay rare, and the first round
reads few or no rows. Whatever the budgets, the top-k must equal the Python reference of
``test_postgres_bm25`` (scores to 1e-6); a pruning rule that skips a row able to reach the
top-k fails them (``test_a_pruning_that_skips_a_reachable_row_is_caught``).
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore, queries
from ragport.adapters.postgres.predicate import scope_params
from ragport.domain.model import Authorization, Grant
from tests.adapters.test_postgres_bm25 import EMB, TOLERANCE, _index, _reference, _scope
from tests.adapters.test_postgres_lexical_stats import _apply, _check_scores, _check_statistics
from tests.adapters.test_postgres_lexical_stats import _op as _lineage_op

WORDS = ["apple", "brook", "cedar", "delta", "ember"]
BUDGETS = {
    "all common, no first round": (0, 0, 0, 0),
    "all common, k rows first": (0, 0, 0, 1),
    "rarest rare, two rows first": (3, 0, 2, 0),
}
"""(RARE_ROWS, RARE_PER_K, PROBE_ROWS, PROBE_PER_K) per case."""


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")


def _budget(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    rare, rare_k, probe, probe_k = BUDGETS[case]
    monkeypatch.setattr(queries, "RARE_ROWS", rare)
    monkeypatch.setattr(queries, "RARE_PER_K", rare_k)
    monkeypatch.setattr(queries, "PROBE_ROWS", probe)
    monkeypatch.setattr(queries, "PROBE_PER_K", probe_k)
    monkeypatch.setattr(queries, "PROBE_SHARE", 0.0)


def _doc(counts: dict[str, int], filler: int, name: str) -> list[str]:
    """``counts`` repetitions of each word, then ``filler`` distinct words of this document
    (they lengthen it: dl is the number of distinct lexemes)."""
    tokens = [w for w, n in counts.items() for _ in range(n)]
    return tokens + [f"{name}x{i}" for i in range(filler)]


def _assert_top_k(
    store: PostgresStore,
    scope: ragport.Scope,
    docs: dict[str, list[str]],
    query: list[str],
    k: int,
    **kw: object,
) -> None:
    """The store's top ``k`` scores equal the reference's best ``k``, each row's its own."""
    expected = _reference(docs, set(query))
    best = sorted(expected.values(), reverse=True)[:k]
    found = store.lexical_query(scope, " ".join(query), limit=k, **kw)  # type: ignore[arg-type]
    assert [round(f.score, 6) for f in found] == [round(b, 6) for b in best], (query, k)
    for item in found:
        assert abs(item.score - expected[item.record.source_id]) <= TOLERANCE


@st.composite
def _corpora(draw: st.DrawFn) -> dict[str, list[str]]:
    n = draw(st.integers(1, 14))
    docs = {}
    for i in range(n):
        counts = draw(st.dictionaries(st.sampled_from(WORDS), st.integers(1, 40), min_size=1))
        docs[f"d{i:02d}"] = _doc(counts, draw(st.integers(0, 120)), f"d{i:02d}")
    return docs


# Hypothesis over a PostgreSQL fixture: each example reuses the test's store (a new scope each).
_RANDOM_CORPORA = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_RANDOM_CORPORA
@given(
    docs=_corpora(),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    k=st.integers(1, 6),
)
@pytest.mark.parametrize("case", sorted(BUDGETS))
def test_pruned_top_k_equals_the_reference_on_random_corpora(
    store: PostgresStore,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    docs: dict[str, list[str]],
    query: list[str],
    k: int,
) -> None:
    """tf 1-40 and lengths 1-125 cover many buckets; every budget gives the reference's
    top-k. If this fails, check the bucket bounds (``bk``), theta and the shares (``es``)."""
    _budget(monkeypatch, case)
    scope = _scope()
    _index(store, scope, docs)
    _assert_top_k(store, scope, docs, query, k)


@_RANDOM_CORPORA
@given(
    docs=_corpora(),
    query=st.lists(st.sampled_from(WORDS), min_size=2, max_size=5),
    k=st.integers(1, 6),
)
@pytest.mark.parametrize("slots", [1, 2])
def test_a_presence_bound_over_fewer_slots_than_lexemes_stays_exact(
    store: PostgresStore,
    monkeypatch: pytest.MonkeyPatch,
    slots: int,
    docs: dict[str, list[str]],
    query: list[str],
    k: int,
) -> None:
    """Round two's presence bound looks up ``PRESENCE_SLOTS`` lexemes and counts the weaker
    ones as held; with fewer slots than common lexemes the top-k is still the reference's.
    If this fails, check ``pb`` and ``pq`` in ``queries.bm25_ctes``."""
    _budget(monkeypatch, "all common, k rows first")
    monkeypatch.setattr(queries, "PRESENCE_SLOTS", slots)
    scope = _scope()
    _index(store, scope, docs)
    _assert_top_k(store, scope, docs, query, k)


def _skewed() -> dict[str, list[str]]:
    """``cedar`` rare (2 rows, long ones), ``apple`` common (10 rows); ``peak`` is short and
    holds apple 40 times, which outscores both cedar rows but is found only by reading
    apple's best bucket."""
    docs = {f"a{i:02d}": _doc({"apple": 1}, 30, f"a{i:02d}") for i in range(8)}
    docs.update({f"b{i:02d}": _doc({}, 30, f"b{i:02d}") for i in range(22)})
    docs["c1"] = _doc({"cedar": 1, "apple": 1}, 120, "c1")
    docs["c2"] = _doc({"cedar": 1}, 120, "c2")
    docs["peak"] = _doc({"apple": 40}, 0, "peak")
    return docs


def test_a_row_reachable_only_through_a_high_bucket_is_found(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rare rows set theta; the common lexeme's best bucket still holds a better row. If this
    fails, check round two (``eq``, ``kb``)."""
    _budget(monkeypatch, "rarest rare, two rows first")
    monkeypatch.setattr(queries, "PROBE_ROWS", 0)
    scope = _scope()
    docs = _skewed()
    _index(store, scope, docs)
    for k in (1, 2, 3, 5):
        _assert_top_k(store, scope, docs, ["cedar", "apple"], k)
    assert store.lexical_query(scope, "cedar apple", limit=1)[0].record.source_id == "peak"


def test_a_pruning_that_skips_a_reachable_row_is_caught(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deliberately unsafe round two (it skips buckets that can still reach theta) misses
    ``peak``, and the reference comparison fails: the tests above can fail."""
    _budget(monkeypatch, "rarest rare, two rows first")
    monkeypatch.setattr(queries, "PROBE_ROWS", 0)
    monkeypatch.setattr(queries, "SHARE_SLACK", -1e6)
    scope = _scope()
    docs = _skewed()
    _index(store, scope, docs)
    with pytest.raises(AssertionError):
        _assert_top_k(store, scope, docs, ["cedar", "apple"], 1)


def _pair() -> dict[str, list[str]]:
    """``cedar`` rare (2 very long rows); ``apple`` and ``brook`` common (each in about 30 of
    46 rows, at tf 1 in long rows, so neither bound reaches the cedar rows' scores alone);
    ``both`` holds each 6 times in a short row and outscores the cedar rows, which only the
    two common lexemes together can do."""
    docs = {f"a{i:02d}": _doc({"apple": 1, "brook": i % 2}, 60, f"a{i:02d}") for i in range(28)}
    docs.update({f"b{i:02d}": _doc({"brook": 1}, 60, f"b{i:02d}") for i in range(14)})
    docs.update({f"z{i:02d}": _doc({}, 60, f"z{i:02d}") for i in range(1)})
    docs["c1"] = _doc({"cedar": 1, "apple": 1}, 300, "c1")
    docs["c2"] = _doc({"cedar": 1, "brook": 1}, 300, "c2")
    docs["both"] = _doc({"apple": 6, "brook": 6}, 0, "both")
    return docs


def test_a_row_reachable_only_through_two_common_lexemes_is_found(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round two's pairs of levels (two common lexemes that reach theta only together) find
    ``both``. If this fails, check ``tt`` and ``cj`` in ``queries.bm25_ctes``."""
    _budget(monkeypatch, "rarest rare, two rows first")
    monkeypatch.setattr(queries, "PROBE_ROWS", 0)
    scope = _scope()
    docs = _pair()
    _index(store, scope, docs)
    for k in (1, 2, 3, 6):
        _assert_top_k(store, scope, docs, ["cedar", "apple", "brook"], k)
    assert store.lexical_query(scope, "cedar apple brook", limit=1)[0].record.source_id == "both"
    monkeypatch.setattr(queries, "SHARE_SLACK", -1e6)
    with pytest.raises(AssertionError):
        _assert_top_k(store, scope, docs, ["cedar", "apple", "brook"], 1)


@pytest.mark.parametrize("slots", [1, 2, 6])
def test_the_pairs_read_only_rows_holding_a_set_able_to_reach_theta(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch, slots: int
) -> None:
    """Round two's pairs also need the presence bound (``_HELD``): ``both`` holds apple and
    brook, which reach the cedar rows' theta only together, and is found with any number of
    slots. A presence bound too low (``pb`` not counting the lexemes past the slots as held)
    asks a row, with one slot, for a set of it alone whose ``ub`` falls short of theta, finds
    none, and misses ``both``. If this fails, check ``tt.held`` and ``pq`` in ``queries``."""
    _budget(monkeypatch, "rarest rare, two rows first")
    monkeypatch.setattr(queries, "PROBE_ROWS", 0)
    monkeypatch.setattr(queries, "PRESENCE_SLOTS", slots)
    scope = _scope()
    docs = _pair()
    _index(store, scope, docs)
    for k in (1, 2, 3, 6):
        _assert_top_k(store, scope, docs, ["cedar", "apple", "brook"], k)
    presence = queries._presence
    low = f"c.rn > {slots} OR "
    assert low in presence()
    monkeypatch.setattr(queries, "_presence", lambda: presence().replace(low, ""))
    if slots == 1:
        with pytest.raises(AssertionError):
            _assert_top_k(store, scope, docs, ["cedar", "apple", "brook"], 1)


@_RANDOM_CORPORA
@given(
    docs=_corpora(),
    query=st.lists(st.sampled_from(WORDS), min_size=2, max_size=5),
    k=st.integers(1, 6),
)
@pytest.mark.parametrize("slots", [1, 2, 6])
def test_the_pairs_with_the_presence_bound_stay_exact_on_random_corpora(
    store: PostgresStore,
    monkeypatch: pytest.MonkeyPatch,
    slots: int,
    docs: dict[str, list[str]],
    query: list[str],
    k: int,
) -> None:
    """The rarest lexeme read in full and no probe: theta comes from the rare rows and round
    two, often its pairs (``tt.conj``) under the presence bound, reads the rest; the top-k
    is the reference's. If this fails, check ``tt``, ``cj`` and ``pq`` in ``queries``."""
    _budget(monkeypatch, "rarest rare, two rows first")
    monkeypatch.setattr(queries, "PROBE_ROWS", 0)
    monkeypatch.setattr(queries, "PRESENCE_SLOTS", slots)
    scope = _scope()
    _index(store, scope, docs)
    _assert_top_k(store, scope, docs, query, k)


def _pair_grid() -> dict[str, list[str]]:
    """``cedar`` rare in two long rows; ``apple`` and ``brook`` common, every (tf, length)
    pair of 1-7 repetitions and 0-90 fillers: rows whose two bounds fall on every side of
    every level boundary of round two."""
    docs = {
        f"g{a}{b}{f:02d}": _doc({"apple": a, "brook": b}, f, f"g{a}{b}{f:02d}")
        for a in range(1, 8)
        for b in range(1, 8)
        for f in (0, 3, 9, 27, 90)
    }
    docs.update({f"z{i:02d}": _doc({}, 40, f"z{i:02d}") for i in range(60)})
    docs["c1"] = _doc({"cedar": 1, "apple": 1}, 300, "c1")
    docs["c2"] = _doc({"cedar": 1, "brook": 1}, 300, "c2")
    return docs


@pytest.mark.parametrize("wide", [0, 10**9], ids=["presence by index", "presence per row"])
@pytest.mark.parametrize("levels", [1, 4, 8])
def test_round_two_levels_are_exact_on_a_grid_of_pairs(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch, levels: int, wide: int
) -> None:
    """Whatever the number of levels (each one GIN scan of e1's keys AND e2's), the top-k is
    the reference's at every k (a level that asked e2 for its bound at the level's bottom,
    not its top, missed rows here with one level); a round two that reads only the rows
    able to beat theta by a million misses some. ``wide``: the pair scans ``a`` and ``b``
    check the presence condition through the index (``WIDE_ROWS`` 0) or per row."""
    _budget(monkeypatch, "all common, k rows first")
    monkeypatch.setattr(queries, "LEVELS", levels)
    monkeypatch.setattr(queries, "WIDE_ROWS", wide)
    scope = _scope()
    docs = _pair_grid()
    _index(store, scope, docs)
    for k in (1, 2, 3, 5, 8, 13, 21, 40):
        _assert_top_k(store, scope, docs, ["apple", "brook"], k)
        _assert_top_k(store, scope, docs, ["cedar", "apple", "brook"], k)
    monkeypatch.setattr(queries, "SHARE_SLACK", -1e6)
    with pytest.raises(AssertionError):
        for k in (1, 2, 3, 5, 8, 13, 21, 40):
            _assert_top_k(store, scope, docs, ["apple", "brook"], k)


def test_impact_keys_name_each_lexeme_tf_and_row_length_bucket(
    store: PostgresStore, pg_schema: str
) -> None:
    """Each row's ``tsv_impact`` holds one key per lexeme: its tf bucket letter, the row's
    length bucket letter, the lexeme. If this fails, check ``queries.impact_function``."""
    scope = _scope()
    docs = {
        "one": _doc({"apple": 1}, 0, "one"),
        "mixed": _doc({"apple": 3, "brook": 9, "cedar": 31}, 20, "mixed"),
        "long": _doc({"apple": 2, "delta": 300}, 2100, "long"),
    }
    _index(store, scope, docs)

    def bucket(value: int, lows: tuple[int, ...]) -> int:
        return max(i for i, low in enumerate(lows) if low <= value)

    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                f'SELECT source_id, tsvector_to_array(tsv_impact) AS keys FROM "{pg_schema}".records '
                "WHERE tenant_id = :t AND resource_id = :r AND corpus_id = :c"
            ),
            scope_params(scope),
        ).all()
    assert len(rows) == len(docs)
    for row in rows:
        tokens = docs[row.source_id]
        tf = Counter(tokens)
        dl = chr(97 + bucket(len(tf), queries.IMPACT_DL))
        # PostgreSQL keeps at most 256 positions per lexeme (tf as the scoring sees it).
        expected = {
            chr(65 + bucket(min(n, 256), queries.IMPACT_TF)) + dl + lexeme
            for lexeme, n in tf.items()
        }
        assert set(row.keys) == expected, row.source_id


def test_a_lexeme_too_long_for_a_key_is_read_in_full(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch, pg_schema: str
) -> None:
    """A 2,040-byte word gets no impact key (a key would pass the lexeme limit), yet a
    query for it finds its row even when every other lexeme is common. If this fails, check
    ``IMPACT_MAX_LEXEME`` in ``impact_function`` and ``cw``."""
    _budget(monkeypatch, "all common, no first round")
    scope = _scope()
    word = "q" * 2040
    docs = {"huge": ["apple", word], "plain": ["apple", "brook"]}
    _index(store, scope, docs)
    with store.engine.connect() as conn:
        keys = conn.execute(
            text(
                f'SELECT tsvector_to_array(tsv_impact) FROM "{pg_schema}".records '
                "WHERE tenant_id = :t AND corpus_id = :c AND source_id = 'huge'"
            ),
            {"t": scope.tenant_id, "c": scope.corpus_id},
        ).scalar_one()
    assert keys == ["Abapple"]
    _assert_top_k(store, scope, docs, [word], 2)
    _assert_top_k(store, scope, docs, [word, "apple"], 2)


def test_grants_and_filters_stay_inside_the_pruned_leg(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every lexeme common, a caller granted half the sources, or filtering on metadata,
    gets the reference's top-k of exactly those rows. If this fails, check that ``rows``
    keeps ``where`` in every round."""
    _budget(monkeypatch, "all common, k rows first")
    scope = _scope()
    docs = {
        f"s{i:02d}": _doc({"apple": 1 + i, "brook": 1 + i % 3}, i, f"s{i:02d}") for i in range(20)
    }
    ragport.application.index_chunks(
        chunks=[
            ragport.Chunk.of(name, 0, " ".join(tokens), metadata={"half": int(name[1:]) % 2})
            for name, tokens in docs.items()
        ],
        embedder=EMB,
        store=store,
        scope=scope,
    )
    even = [name for name in docs if int(name[1:]) % 2 == 0]
    store.set_source_access(scope, [Grant(name, principal_ids=("ann",)) for name in even])
    allowed = {name: docs[name] for name in even}
    full = _reference(docs, {"apple", "brook"})
    for k in (1, 4, 12):
        found = store.lexical_query(
            scope, "apple brook", limit=k, authorization=Authorization("ann", scope.tenant_id)
        )
        expected = sorted((-full[n], n) for n in allowed)[:k]
        assert [f.record.source_id for f in found] == [n for _, n in expected]
        filtered = store.lexical_query(scope, "apple brook", limit=k, metadata_filter={"half": 1})
        odd = sorted((-full[n], n) for n in docs if n not in allowed)[:k]
        assert [f.record.source_id for f in filtered] == [n for _, n in odd]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=st.lists(_lineage_op, min_size=1, max_size=8),
    query=st.lists(st.sampled_from(["apple", "brook", "cedar", "delta"]), min_size=1, max_size=3),
    k=st.integers(1, 4),
)
def test_pruned_scores_hold_through_replace_forget_rollback_and_compaction(
    store: PostgresStore,
    monkeypatch: pytest.MonkeyPatch,
    pg_schema: str,
    ops: list[tuple],
    query: list[str],
    k: int,
) -> None:
    """The lineage property test of ``test_postgres_lexical_stats`` with every lexeme
    common: retired, rolled-back and forgotten rows never enter a round. If this fails,
    check visibility and tombstones in ``rows``."""
    _budget(monkeypatch, "all common, k rows first")
    scope = _scope()
    s = f'"{pg_schema}"'
    for op in ops:
        _apply(store, scope, op)
    _check_statistics(store, scope, s)
    _check_scores(store, scope, s, query, k)


def test_upgrade_from_version_6_fills_the_impact_column(
    store: PostgresStore, pg_engine, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema as migration 6 left it (no ``tsv_impact``, no function, no index) upgrades in
    place: every existing row gets its keys, and the pruned leg ranks them as the reference.
    If this fails, check ``schema._v7`` and ``_tsv_expression``."""
    from ragport.adapters.postgres import schema as migrations

    scope = _scope()
    docs = {f"d{i}": _doc({"apple": 1 + i, "cedar": i % 2}, 3 * i, f"d{i}") for i in range(8)}
    _index(store, scope, docs)
    s = f'"{pg_schema}"'
    with pg_engine.begin() as conn:
        conn.execute(text(f"DROP INDEX {s}.records_tsv_impact"))
        conn.execute(text(f"ALTER TABLE {s}.records DROP COLUMN tsv_impact"))
        conn.execute(text(f"DROP FUNCTION {s}.bm25_impact(tsvector)"))
        conn.execute(text(f"DELETE FROM {s}.schema_migrations WHERE version = 7"))
        assert migrations.current_version(conn, pg_schema) == 6
    old = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    assert old.upgrade() == [7]
    with pg_engine.connect() as conn:
        mismatched = conn.execute(
            text(
                f"SELECT count(*) FROM {s}.records "
                f"WHERE tsv_impact IS DISTINCT FROM {s}.bm25_impact(tsv)"
            )
        ).scalar_one()
        indexed = conn.execute(
            text("SELECT to_regclass(:i)"), {"i": f"{s}.records_tsv_impact"}
        ).scalar_one()
    assert mismatched == 0
    assert indexed is not None
    _budget(monkeypatch, "all common, no first round")
    for k in (1, 3, 8):
        _assert_top_k(old, scope, docs, ["apple", "cedar"], k)


def test_the_generic_plan_setting_does_not_outlive_its_statement(store: PostgresStore) -> None:
    """``reads.fetch_generic`` runs its statement with ``force_generic_plan`` and leaves the
    connection's ``plan_cache_mode`` as it was, in autocommit and inside a transaction, also
    when the statement fails. If this fails, check ``reads.fetch_generic``."""
    import psycopg

    from ragport.adapters.postgres import reads

    with store.engine.connect() as conn:
        raw = reads.RawRead(conn.connection)
        dbapi = conn.connection.dbapi_connection
        dbapi.autocommit = True
        assert (
            reads.fetch_generic(raw, "SELECT current_setting('plan_cache_mode') AS m", {})[0].m
            == "force_generic_plan"
        )
        assert dbapi.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        with pytest.raises(psycopg.errors.DivisionByZero):
            reads.fetch_generic(raw, "SELECT 1 / (:z - :z) AS x", {"z": 1})
        assert dbapi.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        dbapi.execute("BEGIN")  # inside a transaction: SET LOCAL, undone at its end
        reads.fetch_generic(raw, "SELECT 1 AS x", {})
        assert dbapi.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        dbapi.execute("COMMIT")
        dbapi.execute("BEGIN")
        with pytest.raises(psycopg.errors.DivisionByZero):
            reads.fetch_generic(raw, "SELECT 1 / (:z - :z) AS x", {"z": 1})
        dbapi.execute("ROLLBACK")
        assert dbapi.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        dbapi.autocommit = False
