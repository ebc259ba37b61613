"""The host's adapters: its table, repository and unit of work (PostgreSQL), and fakes.

``SqlUnitOfWork`` opens one connection and one transaction; the policy repository and the
ragport corpus (``PostgresStore.joined``) both write on it, so ``commit`` publishes the row
and its chunks, grant and summaries together, and leaving without it discards all of them.
``FakeUnitOfWork`` is the same shape over a dict and ragport's ``InMemoryStore``, for the
service's unit tests (no database).
"""

from __future__ import annotations

from types import TracebackType

from sqlalchemy import Column, Connection, Engine, Integer, MetaData, Table, Text, select
from sqlalchemy.dialects.postgresql import ARRAY, insert

from policy_service.domain import Policy
from ragport import Scope
from ragport.adapters.memory import InMemoryStore
from ragport.adapters.postgres import PostgresStore
from ragport.ports.store import ChunkStore

CORPUS = Scope("acme", "policies", "handbook")


def policies_table(schema: str) -> Table:
    """The host's policies table, in its own schema (ragport's objects live in another); its
    ``metadata`` also holds the outbox (``outbox_table``)."""
    metadata = MetaData(schema=schema)
    Table(
        "outbox",
        metadata,
        Column("seq", Integer, primary_key=True, autoincrement=True),
        Column("policy_id", Text, nullable=False),
        Column("done", Integer, nullable=False, server_default="0"),
    )
    return Table(
        "policies",
        metadata,
        Column("policy_id", Text, primary_key=True),
        Column("title", Text, nullable=False),
        Column("body", Text, nullable=False),
        Column("revision", Integer, nullable=False),
        Column("groups", ARRAY(Text), nullable=False),
        Column("retracted", Text, nullable=True),
    )


def outbox_table(schema: str) -> Table:
    """Rows a relay applies to a corpus the host cannot join (``outbox.py``)."""
    return policies_table(schema).metadata.tables[f"{schema}.outbox"]


class SqlPolicyRepository:
    def __init__(self, conn: Connection, table: Table) -> None:
        self._conn, self._table = conn, table

    def get(self, policy_id: str) -> Policy | None:
        t = self._table
        row = self._conn.execute(select(t).where(t.c.policy_id == policy_id)).one_or_none()
        if row is None:
            return None
        return Policy(
            row.policy_id, row.title, row.body, row.revision, set(row.groups), bool(row.retracted)
        )

    def save(self, policy: Policy) -> None:
        values = {
            "policy_id": policy.policy_id,
            "title": policy.title,
            "body": "" if policy.retracted else policy.body,  # a retraction keeps no text
            "revision": policy.revision,
            "groups": sorted(policy.groups),
            "retracted": "yes" if policy.retracted else None,
        }
        statement = insert(self._table).values(values)
        self._conn.execute(
            statement.on_conflict_do_update(index_elements=["policy_id"], set_=values)
        )
        # The outbox row, in the same transaction: a relay mirrors the change later.
        outbox = self._table.metadata.tables[f"{self._table.schema}.outbox"]
        self._conn.execute(outbox.insert().values(policy_id=policy.policy_id))


class SqlUnitOfWork:
    """One transaction of the host's, shared by its repository and ragport's corpus."""

    def __init__(self, engine: Engine, *, schema: str, corpus: PostgresStore) -> None:
        self._engine, self._table, self._store = engine, policies_table(schema), corpus
        self.scope = CORPUS

    def __enter__(self) -> SqlUnitOfWork:
        self._conn = self._engine.connect()
        self._tx = self._conn.begin()
        self.policies = SqlPolicyRepository(self._conn, self._table)
        self.corpus: ChunkStore = self._store.joined(self._conn)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._tx.is_active:
            self._tx.rollback()  # not committed: nothing of the host's nor ragport's stays
        self._conn.close()

    def commit(self) -> None:
        self._tx.commit()


class FakePolicyRepository:
    def __init__(self) -> None:
        self.rows: dict[str, Policy] = {}
        self.outbox: list[str] = []

    def get(self, policy_id: str) -> Policy | None:
        return self.rows.get(policy_id)

    def save(self, policy: Policy) -> None:
        self.rows[policy.policy_id] = policy
        self.outbox.append(policy.policy_id)


class FakeUnitOfWork:
    """The unit tests' unit of work: a dict and an in-memory corpus (writes land at once;
    ``committed`` says whether the service committed)."""

    def __init__(self, corpus: InMemoryStore | None = None) -> None:
        self.policies = FakePolicyRepository()
        self.corpus: ChunkStore = corpus if corpus is not None else InMemoryStore()
        self.scope = CORPUS
        self.committed = False

    def __enter__(self) -> FakeUnitOfWork:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def commit(self) -> None:
        self.committed = True
