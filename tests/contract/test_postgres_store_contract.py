"""The PostgreSQL store and status store against the same shipped contract suites.

Every statement the adapter sends during the two suites is captured (SQLAlchemy's
``before_cursor_execute`` and ``reads.fetch``); the last test of this module checks that each
one that touches a ragport table filters on ``tenant_id`` with an equality: what Citus needs
to route a query to one shard (docs/operations.md, "Scaling out"). Statements of migrations
are not captured: like DDL, they run once per schema, before or across every shard (a
backfill reads every tenant's rows by design).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text

from ragport.adapters.postgres import PostgresStatusStore, PostgresStore, WriteSettings, reads
from ragport.adapters.postgres import checkpoints as checkpoints_module
from ragport.adapters.postgres import status as status_module
from ragport.adapters.postgres import store as store_module
from ragport.contract_tests import ChunkStoreContract, IngestionStatusStoreContract
from ragport.contract_tests.chunk_store.failures import BreakStore
from ragport.ports.store import ChunkStore

# One xdist worker runs the whole module (make test passes --dist loadgroup): the last test
# reads what the suites before it captured in this process.
pytestmark = pytest.mark.xdist_group("postgres_statement_capture")

CAPTURED: list[str] = []
_MIGRATING = [False]


@pytest.fixture(scope="module", autouse=True)
def _capture_statements(pg_engine: Any) -> Iterator[None]:
    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not _MIGRATING[0]:
            CAPTURED.append(statement)

    real_upgrade = store_module.upgrade

    def upgrade(*args: Any, **kw: Any) -> Any:
        _MIGRATING[0] = True
        try:
            return real_upgrade(*args, **kw)
        finally:
            _MIGRATING[0] = False

    real = reads.fetch

    def fetch(conn: Any, sql: str, params: Any, **kw: Any) -> Any:
        CAPTURED.append(sql)
        return real(conn, sql, params, **kw)

    event.listen(pg_engine, "before_cursor_execute", on_execute)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reads, "fetch", fetch)
        for module in (store_module, status_module, checkpoints_module):
            patch.setattr(module, "upgrade", upgrade)
        yield
    event.remove(pg_engine, "before_cursor_execute", on_execute)


class TestPostgresStore(ChunkStoreContract):
    # A hybrid read costs PostgreSQL several milliseconds (the BM25 statistics pass): race
    # longer than the 5 s default so the snapshot test sees thousands of reads here too.
    hybrid_snapshot_seconds = 12.0
    # Its bm25 leg tokenizes with the text-search configuration (english), not tokenize_lexical.
    bm25_tokens = "engine"

    @pytest.fixture
    def store(self, pg_engine, pg_schema) -> Iterator[PostgresStore]:
        yield PostgresStore(pg_engine, schema=pg_schema, create=True)

    @pytest.fixture
    def break_store(self, pg_engine: Any, pg_schema: str) -> BreakStore:
        """Dropping the store's schema makes every later statement fail on the server."""

        def drop_schema(store: ChunkStore) -> None:
            with pg_engine.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{pg_schema}" CASCADE'))

        return drop_schema


class TestPostgresStoreVectorsBeside(TestPostgresStore):
    """The same suite with every add of two rows or more writing its vectors on a second
    connection beside its records (``vector_writes.py``; the default threshold is 4 rows,
    which some of the suite's small batches do not reach), the merge inline."""

    @pytest.fixture
    def store(self, pg_engine, pg_schema) -> Iterator[PostgresStore]:
        yield PostgresStore(
            pg_engine, schema=pg_schema, create=True,
            writes=WriteSettings(parallel_vector_rows=2, maintenance_delay=None),
        )  # fmt: skip


class TestPostgresStatusStore(IngestionStatusStoreContract):
    @pytest.fixture
    def status_store(self, pg_engine, pg_schema) -> Iterator[PostgresStatusStore]:
        yield PostgresStatusStore(pg_engine, schema=pg_schema, create=True)


_TABLES = (
    r"(?:scopes|records|record_vectors|grants|tombstones|ingestion_status"
    r"|lexical_stats|lexical_terms|lexical_batches|lexical_term_totals|lexical_stat_totals"
    r"|live_ids)"
)
_REFERENCE = re.compile(r'"?t_[0-9a-f]{16}"?\.' + _TABLES + r"\b")
_DDL = re.compile(r"^\s*(CREATE|ALTER|DROP|ANALYZE|COMMENT|SET|SHOW|SELECT set_config)\b", re.I)
_BIND = r"(?::\w+|%\(\w+\)s|\$\d+)"
_EQUALITY = re.compile(r"\btenant_id\s*=\s*" + _BIND)
_JOIN_EQUALITY = re.compile(r"\b\w+\.tenant_id\s*=\s*\w+\.tenant_id\b")
_INSERT = re.compile(r"^\s*INSERT INTO [^(]+\(\s*tenant_id\b", re.I)
_INSERT_INTO = re.compile(r"\bINSERT INTO [^(]+\(\s*tenant_id\b", re.I)


def _routable(sql: str) -> bool:
    """Whether Citus can route ``sql`` to one tenant's shard (see the test below)."""
    joins = len(_JOIN_EQUALITY.findall(sql))
    # an INSERT INTO ... (tenant_id, ...) routes each row by the tenant value it writes
    references = len(_REFERENCE.findall(sql)) - len(_INSERT_INTO.findall(sql))
    # an INSERT ... VALUES, or an INSERT ... SELECT over one table or over tables joined on
    # tenant_id (co-located, a migration's backfill), runs on each shard for its tenants
    if _INSERT.match(sql) and joins >= references - 1:
        return True
    binds = len(_EQUALITY.findall(sql))
    return binds > 0 and binds + joins >= references


def test_the_routing_check_refuses_cross_tenant_statements() -> None:
    """The checker itself: a statement without a tenant equality, or with a second table
    reference left unfiltered, is refused.

    If this fails, check ``_routable``."""
    s = '"t_0123456789abcdef"'
    assert _routable(f"SELECT id FROM {s}.records WHERE tenant_id = :t AND resource_id = :r")
    assert not _routable(f"SELECT id FROM {s}.records WHERE resource_id = :r")
    assert not _routable(f"SELECT id FROM {s}.records WHERE tenant_id IN (:a, :b)")
    assert not _routable(
        f"SELECT 1 FROM {s}.records r WHERE r.tenant_id = :t AND r.source_id IN "
        f"(SELECT source_id FROM {s}.grants)"
    )
    assert _routable(
        f"SELECT 1 FROM {s}.records r JOIN {s}.grants g ON g.tenant_id = r.tenant_id "
        "WHERE r.tenant_id = :t"
    )
    backfill = f"INSERT INTO {s}.lexical_stats (tenant_id, docs) SELECT r.tenant_id, 1 FROM "
    assert _routable(
        backfill + f"{s}.records r WHERE EXISTS (SELECT 1 FROM {s}.tombstones z "
        "WHERE z.tenant_id = r.tenant_id)"
    )
    assert not _routable(
        backfill + f"{s}.records r WHERE EXISTS (SELECT 1 FROM {s}.tombstones z WHERE z.id = r.id)"
    )


def test_every_statement_filters_on_tenant_with_an_equality() -> None:
    """Each captured statement on a ragport table names one tenant by equality, per table reference.

    DDL is exempt (Citus propagates it to every shard); an INSERT routes by its tenant_id value;
    every other table reference needs ``tenant_id = <bind>`` or a join on ``tenant_id``.
    Run the whole module: the statements come from the two contract suites above.
    If this fails, check the SQL builders in ragport/adapters/postgres/ (predicate.py,
    queries.py, statements.py, backend.py, unit_of_work.py, status.py) for the statement printed."""
    statements = {s for s in CAPTURED if _REFERENCE.search(s) and not _DDL.match(s)}
    assert len(statements) > 20, "run the whole module: the contract suites supply the statements"
    bad = [sql for sql in statements if not _routable(sql)]
    assert not bad, "statements without a tenant equality per table:\n\n" + "\n\n".join(bad[:3])
