"""examples/policy_service: a host service that embeds ragport, tested as its team would.

Unit tests run the service's use cases on its in-memory fakes (no database). The PostgreSQL
tests migrate a fresh database with the service's Alembic environment (its table and
ragport's schema in one migration; autogenerate then proposes nothing, and would drop
ragport's tables without ragport's filter) and show, on the joined unit of work: a write
rolled back with the host and committed with it, a host killed between ragport's write and
its commit leaving neither, an unshare that is immediate, a retraction that erases the text
from every table (by SQL), and a revision that retires the summaries of the old text.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from policy_service import services
from policy_service.adapters import FakeUnitOfWork, SqlUnitOfWork
from policy_service.domain import PolicyError
from sqlalchemy import Engine, create_engine, text

from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.adapters.postgres import PostgresStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "policy_service"
EMB = HashEmbedder(dimensions=64)
MARK = "zqxsecret"  # one token, kept whole by every analyzer
BODY = f"Staff may work remotely two days a week. {MARK} allowance applies."


def _create(uow: Any, policy_id: str = "remote", groups: tuple[str, ...] = ("staff",)) -> None:
    services.create(
        uow, policy_id=policy_id, title="Remote work", body=BODY, groups=groups, embedder=EMB
    )


def _ask(store: Any, group: str = "staff") -> list[str]:
    return services.ask(store, "remote work days", user="u1", groups=[group], embedder=EMB)


# -- unit tests: the service's use cases on fakes ----------------------------------------------
def test_the_service_on_fakes():
    """create, share, summarise, revise, unshare and retract on the in-memory fakes.

    If this fails, check the use case named by the failing step in policy_service/services.py.
    """
    corpus = InMemoryStore()

    def uow() -> FakeUnitOfWork:
        fake = FakeUnitOfWork(corpus)
        fake.policies.rows = rows
        return fake

    rows: dict[str, Any] = {}
    first = uow()
    _create(first)
    assert first.committed and _ask(corpus) == ["remote"] and _ask(corpus, "guests") == []
    services.share(uow(), policy_id="remote", group="guests")
    assert _ask(corpus, "guests") == ["remote"]
    services.summarise(
        uow(), policy_id="remote", summarizer=lambda b: "Summary: remote work", embedder=EMB
    )
    assert _ask(corpus) == ["remote", "remote-summary"] or set(_ask(corpus)) == {
        "remote",
        "remote-summary",
    }
    services.revise(
        uow(), policy_id="remote", body="Staff may work remotely three days.", embedder=EMB
    )
    assert _ask(corpus) == ["remote"]  # the summary of the old text is retired
    services.unshare(uow(), policy_id="remote", group="guests")
    assert _ask(corpus, "guests") == []
    services.retract(uow(), policy_id="remote")
    assert _ask(corpus) == [] and rows["remote"].retracted
    with pytest.raises(PolicyError):
        services.revise(uow(), policy_id="remote", body="again", embedder=EMB)


# -- PostgreSQL: the migrated database and the joined unit of work ------------------------------
@pytest.fixture
def database(pg_url: str) -> Iterator[str]:
    from pg_databases import fresh_database

    with fresh_database(pg_url) as url:
        yield url.replace("postgresql://", "postgresql+psycopg://", 1)


def _alembic(engine: Engine, **attributes: Any) -> Any:
    from alembic.config import Config

    config = Config(str(EXAMPLE / "alembic.ini"))
    config.set_main_option("script_location", str(EXAMPLE / "policy_service" / "migrations"))
    config.attributes.update(attributes)
    return config


@pytest.fixture
def engine(database: str) -> Iterator[Engine]:
    from alembic import command

    engine = create_engine(database, pool_size=2, max_overflow=0, pool_timeout=5)
    with engine.begin() as conn:
        command.upgrade(_alembic(engine, connection=conn), "head")
    yield engine
    from ragport.adapters.postgres.background import finish_all

    finish_all(timeout=30)  # the store's maintenance, before its database goes
    engine.dispose()


@pytest.fixture
def store(engine: Engine) -> PostgresStore:
    return PostgresStore(engine, schema="policies_corpus")


def _uow(engine: Engine, store: PostgresStore) -> SqlUnitOfWork:
    return SqlUnitOfWork(engine, schema="policies", corpus=store)


def test_autogenerate_leaves_ragports_schema_alone(engine):
    """After the migration, autogenerate finds nothing to change; without ragport's filter it
    would drop ragport's tables (so the filter is what keeps them).

    If this fails, check the include_name of migrations/env.py and alembic_include_name.
    """
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from policy_service.adapters import policies_table

    from ragport.adapters.postgres import alembic_include_name

    def diff(include_name: Any) -> list[Any]:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"include_schemas": True, "include_name": include_name}
            )
            return compare_metadata(context, policies_table("policies").metadata)

    ours = alembic_include_name("policies_corpus")

    def service_filter(name: str | None, type_: str, parents: Any) -> bool:
        if not ours(name, type_, parents):
            return False
        return name == "policies" if type_ == "schema" else parents.get("schema_name") == "policies"

    def without_ragports(name: str | None, type_: str, parents: Any) -> bool:
        wanted = {"policies", "policies_corpus"}
        return name in wanted if type_ == "schema" else parents.get("schema_name") in wanted

    assert [
        d for d in diff(service_filter) if d[0] != "remove_table" or d[1].name != "alembic_version"
    ] == []
    dropped = {d[1].name for d in diff(without_ragports) if d[0] == "remove_table"}
    assert {"records", "scopes", "grants"} <= dropped


def test_committed_with_the_host_and_rolled_back_with_it(engine, store):
    """A created policy is served after the host's commit; a revision whose unit of work is
    left without commit leaves neither the row nor the corpus changed.

    If this fails, check SqlUnitOfWork (one connection, one transaction) and
    PostgresStore.joined.
    """
    _create(_uow(engine, store))
    assert _ask(store) == ["remote"]
    with _uow(engine, store) as uow:
        policy = uow.policies.get("remote")
        policy.revise("Nobody may work remotely.")
        uow.policies.save(policy)
        services._write_text(uow, policy, EMB)
        assert services.ask(uow.corpus, "nobody remotely", user="u", groups=["staff"], embedder=EMB)
        # leaving without commit: the host's rollback
    with _uow(engine, store) as uow:
        assert uow.policies.get("remote").revision == 1
    [chunk] = store.get_by_source(services.ragport.Scope("acme", "policies", "handbook"), "remote")
    assert "two days" in chunk.text


def test_a_host_killed_between_ragports_write_and_its_commit_leaves_neither(
    engine, store, database
):
    """SIGKILL after the corpus write and before the commit: no row, no chunks.

    If this fails, something of a joined call committed on its own.
    """
    child = textwrap.dedent(
        f"""
        import time
        from sqlalchemy import create_engine
        from policy_service import services
        from policy_service.adapters import SqlUnitOfWork
        from policy_service.domain import Policy
        from ragport.adapters.embedders import HashEmbedder
        from ragport.adapters.postgres import PostgresStore
        engine = create_engine({database!r})
        uow = SqlUnitOfWork(engine, schema="policies", corpus=PostgresStore(engine, schema="policies_corpus"))
        with uow:
            policy = Policy("killed", "Killed", "text of a policy that never was")
            uow.policies.save(policy)
            services._write_text(uow, policy, HashEmbedder(dimensions=64))
            print("written", flush=True)
            time.sleep(60)
        """
    )
    paths = [str(EXAMPLE), *sys.path]
    proc = subprocess.Popen(
        [sys.executable, "-c", child],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"written"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    with _uow(engine, store) as uow:
        assert uow.policies.get("killed") is None
    scope = services.ragport.Scope("acme", "policies", "handbook")
    assert store.get_by_source(scope, "killed") == []


def test_unshare_is_immediate(engine, store):
    """Once the unshare commits, the group's next query finds nothing of the policy.

    If this fails, check services.unshare (the grant, set in the host's transaction).
    """
    _create(_uow(engine, store), groups=("staff", "guests"))
    assert _ask(store, "guests") == ["remote"]
    services.unshare(_uow(engine, store), policy_id="remote", group="guests")
    assert _ask(store, "guests") == [] and _ask(store, "staff") == ["remote"]


def test_a_revision_retires_the_summaries_of_the_old_text(engine, store):
    """A summary pinned to revision 1 is not served beside revision 2.

    If this fails, check index_derived(pinned=True) and the retirement in replace_source.
    """
    _create(_uow(engine, store))
    services.summarise(
        _uow(engine, store),
        policy_id="remote",
        summarizer=lambda b: "Summary: remote days",
        embedder=EMB,
    )
    assert set(_ask(store)) == {"remote", "remote-summary"}
    services.revise(
        _uow(engine, store), policy_id="remote", body="Remote work is over.", embedder=EMB
    )
    assert _ask(store) == ["remote"]


def test_a_retraction_erases_the_text_from_every_table(engine, store):
    """After a retraction the marker word is in no row of any table of either schema.

    If this fails, check services.retract (DerivedErasureHandler) and the table named.
    """
    _create(_uow(engine, store))
    services.summarise(
        _uow(engine, store),
        policy_id="remote",
        summarizer=lambda b: f"Summary: {MARK}",
        embedder=EMB,
    )

    def marks() -> dict[str, int]:
        found = {}
        with engine.connect() as conn:
            tables = conn.execute(
                text(
                    "SELECT table_schema, table_name FROM information_schema.tables "
                    "WHERE table_schema IN ('policies', 'policies_corpus')"
                )
            ).all()
            for schema, table in tables:
                n = conn.execute(
                    text(f'SELECT count(*) FROM "{schema}"."{table}" t WHERE t::text LIKE :m'),
                    {"m": f"%{MARK}%"},
                ).scalar_one()
                if n:
                    found[f"{schema}.{table}"] = int(n)
        return found

    assert marks(), "the marker should be stored before the retraction"
    services.retract(_uow(engine, store), policy_id="remote")
    assert marks() == {}
    assert _ask(store) == []


def test_the_outbox_relay_survives_both_crash_windows(engine, store):
    """The mirror (an in-memory corpus the host cannot join) follows the policies through the
    outbox: after a relay that never ran (window 1) and one that died after writing a row to
    the mirror but before marking it (window 2), the next relay leaves the mirror equal to
    the policies, and the replayed row was skipped by its content hash.

    If this fails, check policy_service/outbox.py (idempotent application, order, the mark
    after the write).
    """
    from policy_service.outbox import MIRROR, relay

    mirror = InMemoryStore()
    _create(_uow(engine, store))  # window 1: committed; the relay has not run yet
    _create(_uow(engine, store), policy_id="travel")
    assert mirror.list_source_ids(MIRROR) == []

    class Died(Exception):
        pass

    def die(seq: int) -> None:
        raise Died

    with pytest.raises(Died):  # window 2: "remote" written to the mirror, not marked
        relay(engine, schema="policies", mirror=mirror, embedder=EMB, after_write=die)
    assert mirror.list_source_ids(MIRROR) == ["remote"]
    [written] = mirror.get_by_source(MIRROR, "remote")
    services.retract(_uow(engine, store), policy_id="travel")
    applied = relay(engine, schema="policies", mirror=mirror, embedder=EMB)
    assert applied == 3  # remote again (skipped: unchanged), travel, travel's retraction
    assert mirror.list_source_ids(MIRROR) == ["remote"]
    assert relay(engine, schema="policies", mirror=mirror, embedder=EMB) == 0
    [replayed] = mirror.get_by_source(MIRROR, "remote")
    assert replayed.generation == written.generation  # the replay was skipped, not rewritten


def test_the_fake_repository_records_the_outbox():
    """The fakes keep the outbox too, so unit tests can assert what a use case published.

    If this fails, check FakePolicyRepository.save.
    """
    fake = FakeUnitOfWork()
    _create(fake)
    services.share(fake, policy_id="remote", group="guests")
    assert fake.policies.outbox == ["remote", "remote"]
