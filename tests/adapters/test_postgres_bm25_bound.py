"""The lexical leg's per-row bound (``queries._bound``), read before a row is scored: the
rare rows (``queries._rare_rows``: only the best ``k`` by bound and those able to reach
their k-th score are scored) and round two's rows (``queries._reach``).

The bound counts a lexeme held once at its exact share and one held more often at its
``ub``; it tells them apart by ``ts_rank`` (``queries._TF1``). A bound that took every held
lexeme for one held once would skip a long row holding the query's words often, the best
row here: the broken classification must fail these tests.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text

from ragport.adapters.postgres import PostgresStore, queries
from tests.adapters.test_postgres_bm25 import _index, _scope
from tests.adapters.test_postgres_impact import _assert_top_k, _budget, _doc

_ONCE = "'{0.03,0.9}'::real[]"
"""A broken ``_TF1``: every held lexeme counts as held once."""


@pytest.fixture
def store(pg_engine: Engine, pg_schema: str) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")


def test_ts_rank_tells_a_lexeme_held_once_from_one_held_more_often(pg_engine: Engine) -> None:
    """``width_bucket(ts_rank(v, 'w'), _TF1)``: 0 absent, 1 once, 2 for 2-300 positions
    (a tsvector keeps 256) and for a weighted position held once."""
    sql = (
        f"SELECT n, width_bucket(ts_rank(to_tsvector('simple', repeat('w ', n) || 'z'), "
        f"'w'::tsquery), {queries._TF1}) FROM generate_series(0, 300) n"
    )
    weighted = f"SELECT width_bucket(ts_rank(CAST('w:1L z:2' AS tsvector), 'w'), {queries._TF1})"
    with pg_engine.connect() as conn:
        found: dict[int, int] = {n: b for n, b in conn.execute(text(sql)).all()}
        labels = [
            conn.execute(text(weighted.replace("1L", "1" + label))).scalar_one() for label in "ABC"
        ]
    assert found[0] == 0 and found[1] == 1
    assert {found[n] for n in range(2, 301)} == {2}
    assert labels == [2, 2, 2]


def _docs() -> dict[str, list[str]]:
    """``long`` holds apple and brook five times each among 100 other words: the best row,
    but with the lowest bound of all if each of its words counted as held once; the short
    rows hold one of them once."""
    docs = {"long": _doc({"apple": 5, "brook": 5}, 100, "long")}
    for i, word in enumerate(["apple", "brook", "apple", "brook"]):
        docs[f"s{i}"] = [word]
    return docs


@pytest.mark.parametrize("case", ["rare rows", "all common, k rows first"])
def test_a_row_holding_the_words_often_is_scored(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """With the default budgets every lexeme is rare (``kr``: ``k1`` scores a short row
    first); with none rare round one probes a short row's bucket and round two reads
    ``long``. Either way the broken classification skips it. If this fails, check
    ``_bound`` and ``_TF1``."""
    if case != "rare rows":
        _budget(monkeypatch, case)
    scope = _scope()
    docs = _docs()
    _index(store, scope, docs)
    for k in (1, 2, 3):
        _assert_top_k(store, scope, docs, ["apple", "brook"], k)
    monkeypatch.setattr(queries, "_TF1", _ONCE)
    with pytest.raises(AssertionError):
        _assert_top_k(store, scope, docs, ["apple", "brook"], 1)
