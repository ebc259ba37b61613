"""The scope's length buckets (migration 17, ``lexical_stat_totals.dl_buckets``).

The lexical leg looks up the impact keys (``tsv_impact``) of the length buckets the scope's
rows hold, read from ``dl_buckets``, which every write ORs its rows' buckets into. A bucket
missing from it would hide rows from the pruned rounds: with every lexeme common (so only
impact keys are read) the scores must equal the reference, and a ``dl_buckets`` of 0 must
not (``test_a_missing_bucket_is_caught``). An upgrade from 16 backfills it from ``records``.
"""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import Engine, text

import ragport
from ragport.adapters.postgres import PostgresStore, queries
from ragport.adapters.postgres import schema as migrations
from tests.adapters.test_postgres_lexical_stats import _check_scores
from tests.adapters.test_postgres_stat_batches import _write

# Rows of 2, 5, 20 and 60 distinct lexemes: length letters b, d, h and k of ``tsv_impact``
# (``queries.IMPACT_DL``: from 2, 4, 16 and 45), bits 1, 3, 7 and 10.
TEXTS = {
    "short": "apple brook",
    "five": "apple brook cedar delta ember",
    "twenty": "apple cedar " + " ".join(f"tw{i}" for i in range(18)),
    "sixty": "apple apple apple brook " + " ".join(f"sx{i}" for i in range(58)),
}
BITS = (1 << 1) | (1 << 3) | (1 << 7) | (1 << 10)
QUERIES = (["apple"], ["apple", "brook"], ["cedar", "delta", "apple"], ["ember", "brook"])


@pytest.fixture
def all_common(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every lexeme common and no first-round probe: only the impact keys find rows."""
    monkeypatch.setattr(queries, "RARE_ROWS", 0)
    monkeypatch.setattr(queries, "RARE_PER_K", 0)
    monkeypatch.setattr(queries, "PROBE_ROWS", 0)
    monkeypatch.setattr(queries, "PROBE_PER_K", 0)
    monkeypatch.setattr(queries, "PROBE_SHARE", 0.0)


def _store(pg_engine: Engine, pg_schema: str, partitions: int | None = None) -> PostgresStore:
    return PostgresStore(
        pg_engine,
        schema=pg_schema,
        create=True,
        text_search_config="simple",
        partitions=partitions,
    )


def _scope() -> ragport.Scope:
    return ragport.Scope("tenant-1", "kb", "c" + uuid.uuid4().hex[:12])


def _buckets(store: PostgresStore, s: str, scope: ragport.Scope) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    f"SELECT dl_buckets FROM {s}.lexical_stat_totals "
                    "WHERE tenant_id = :t AND resource_id = :r AND corpus_id = :c"
                ),
                {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
            ).scalar_one()
        )


def _set_buckets(store: PostgresStore, s: str, scope: ragport.Scope, bits: int) -> None:
    with store.engine.begin() as conn:
        conn.execute(
            text(
                f"UPDATE {s}.lexical_stat_totals SET dl_buckets = :b "
                "WHERE tenant_id = :t AND resource_id = :r AND corpus_id = :c"
            ),
            {"b": bits, "t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
        )


def _check(store: PostgresStore, scope: ragport.Scope, s: str) -> None:
    for query in QUERIES:
        for k in (1, 2, 4):
            _check_scores(store, scope, s, query, k)


@pytest.mark.usefixtures("all_common")
def test_writes_record_their_rows_buckets_and_the_scores_equal_the_reference(
    pg_engine: Engine, pg_schema: str
) -> None:
    """Each write ORs in its rows' buckets; a replacement that drops a row keeps its bucket
    (a superset is still exact). If this fails, check ``statements._totals``."""
    store, s, scope = _store(pg_engine, pg_schema), f'"{pg_schema}"', _scope()
    _write(store, scope, "a", TEXTS["short"], TEXTS["five"])
    assert _buckets(store, s, scope) == (1 << 1) | (1 << 3)
    _write(store, scope, "b", TEXTS["twenty"], TEXTS["sixty"])
    assert _buckets(store, s, scope) == BITS
    _check(store, scope, s)
    _write(store, scope, "a", TEXTS["five"])
    assert _buckets(store, s, scope) == BITS
    _check(store, scope, s)


@pytest.mark.usefixtures("all_common")
def test_a_missing_bucket_is_caught(pg_engine: Engine, pg_schema: str) -> None:
    """With no bucket recorded the impact keys find no row: the reference check fails, so
    the tests above can fail."""
    store, s, scope = _store(pg_engine, pg_schema), f'"{pg_schema}"', _scope()
    _write(store, scope, "a", TEXTS["short"], TEXTS["five"], TEXTS["twenty"])
    _set_buckets(store, s, scope, 0)
    with pytest.raises(AssertionError):
        _check(store, scope, s)


@pytest.mark.usefixtures("all_common")
@pytest.mark.parametrize("partitions", [None, 3], ids=["plain", "partitioned"])
def test_upgrade_from_version_16_backfills_the_buckets(
    pg_engine: Engine, pg_schema: str, partitions: int | None
) -> None:
    """A schema at 16 has no ``dl_buckets``: 17 adds it (all buckets by default) and sets it
    from the scope's rows; writes after it OR theirs in. If this fails, check ``_v17``."""
    store, s, scope = _store(pg_engine, pg_schema, partitions), f'"{pg_schema}"', _scope()
    _write(store, scope, "a", TEXTS["short"], TEXTS["twenty"])
    with pg_engine.begin() as conn:
        conn.execute(text(f"ALTER TABLE {s}.lexical_stat_totals DROP COLUMN dl_buckets"))
        conn.execute(text(f"DELETE FROM {s}.schema_migrations WHERE version = 17"))
        assert migrations.current_version(conn, pg_schema) == 16
    old = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    assert old.upgrade() == [17]
    assert _buckets(old, s, scope) == (1 << 1) | (1 << 7)
    _check(old, scope, s)
    _write(old, scope, "b", TEXTS["five"], TEXTS["sixty"])
    assert _buckets(old, s, scope) == BITS
    _check(old, scope, s)


def test_the_bits_are_the_impact_keys_length_letters(pg_engine: Engine, pg_schema: str) -> None:
    """Bit j of ``dl_buckets`` is the length letter ``chr(97 + j)`` of the rows' impact keys
    (``impact_function``), read here from the keys themselves."""
    store, s, scope = _store(pg_engine, pg_schema), f'"{pg_schema}"', _scope()
    _write(store, scope, "a", *TEXTS.values())
    with store.engine.connect() as conn:
        letters = conn.execute(
            text(
                "SELECT DISTINCT substr(k.key, 2, 1) FROM "
                f"{s}.records r, unnest(tsvector_to_array(r.tsv_impact)) AS k(key) "
                "WHERE r.tenant_id = :t AND r.resource_id = :r AND r.corpus_id = :c"
            ),
            {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
        ).scalars()
        assert sum(1 << (ord(x) - 97) for x in letters) == BITS == _buckets(store, s, scope)
