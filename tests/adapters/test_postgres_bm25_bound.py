"""The lexical leg's per-row bound (``queries._bound``), read before a row is scored: the
rare rows (``queries._rare_rows``: only the best ``k`` by bound and those able to reach
their k-th score are scored) and round two's rows (``queries._reach``).

The bound counts a lexeme at its exact share for its tf, read from ``ts_rank``
(``queries._tf_classes``), and at its ``ub`` when it is held more than ``queries.TF_EXACT``
times. A bound that took every held lexeme for one held once would skip a long row holding
the query's words often, the best row here: the broken classification must fail these tests.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text

from ragport.adapters.postgres import PostgresStore, queries
from tests.adapters.test_postgres_bm25 import _index, _scope
from tests.adapters.test_postgres_impact import _assert_top_k, _budget, _doc

_ONCE = "'{0.03,0.9}'::real[]"
"""Broken ``_tf_classes``: every held lexeme counts as held once."""


@pytest.fixture
def store(pg_engine: Engine, pg_schema: str) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")


def test_ts_rank_tells_a_lexemes_tf_up_to_tf_exact(pg_engine: Engine) -> None:
    """``width_bucket(ts_rank(v, 'w'), _tf_classes(TF_EXACT))``: 0 absent, tf for 1 to
    ``TF_EXACT`` positions, ``TF_EXACT + 1`` above (up to 300: a tsvector keeps 256); a
    weighted position only raises it (a class above the tf: a higher bound)."""
    classes = queries._tf_classes(queries.TF_EXACT)
    sql = (
        f"SELECT n, width_bucket(ts_rank(to_tsvector('simple', repeat('w ', n) || 'z'), "
        f"'w'::tsquery), {classes}) FROM generate_series(0, 300) n"
    )
    weighted = f"SELECT width_bucket(ts_rank(CAST('w:1@ z:2' AS tsvector), 'w'), {classes})"
    two = f"SELECT width_bucket(ts_rank(CAST('w:1,3@ z:2' AS tsvector), 'w'), {classes})"
    with pg_engine.connect() as conn:
        found: dict[int, int] = {n: b for n, b in conn.execute(text(sql)).all()}
        labels = [
            conn.execute(text(q.replace("@", label))).scalar_one()
            for q in (weighted, two)
            for label in "ABCD"
        ]
    top = queries.TF_EXACT + 1
    assert found == {n: min(n, top) for n in range(301)}
    assert labels[3] == 1 and labels[7] == 2  # D is no weight
    assert all(b >= 1 for b in labels[:3]) and all(b >= 2 for b in labels[4:7])


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
    ``_bound`` and ``_tf_classes``."""
    if case != "rare rows":
        _budget(monkeypatch, case)
    scope = _scope()
    docs = _docs()
    _index(store, scope, docs)
    for k in (1, 2, 3):
        _assert_top_k(store, scope, docs, ["apple", "brook"], k)
    monkeypatch.setattr(queries, "_tf_classes", lambda n: _ONCE)
    with pytest.raises(AssertionError):
        _assert_top_k(store, scope, docs, ["apple", "brook"], 1)
