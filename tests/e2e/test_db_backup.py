"""Backups and moving servers: `ragport db dump|restore|copy` over pg_dump / pg_restore.

A dump of one schema restored into a fresh server (started by the test on 127.0.0.1)
retrieves the same hits, decides the same grants, withholds the same tombstones and keeps
the same generation counters and pointers. Moving from the embedded default to a server
(`ragport db copy --to URL`) runs in tests/e2e/test_scaling_out_doc.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore, restore_schema
from ragport.cli import main
from ragport.domain.errors import StoreError, ValidationError
from ragport.domain.model import Authorization, Grant, Tombstone

SCOPE = ragport.Scope("acme", "kb", "docs")
EMB = HashEmbedder(dimensions=32)
ALICE = Authorization("alice", "acme")
QUERIES = ("leave weeks", "payment approval", "onboarding laptop", "expenses")


def _populate(store: PostgresStore) -> None:
    for sid, body in (
        ("leave", "Parental leave lasts 12 weeks."),
        ("pay", "A payment above 10k needs approval by two people."),
        ("laptop", "Onboarding gives every hire a laptop."),
        ("leave", "Parental leave lasts 16 weeks."),  # generation 4 retires generation 1
    ):
        ragport.application.replace_source(
            source_id=sid, chunks=[ragport.Chunk.of(sid, 0, body)], embedder=EMB, store=store,
            scope=SCOPE,
        )  # fmt: skip
    store.set_source_access(
        SCOPE, [Grant("leave", principal_ids=("alice",)), Grant("pay", principal_ids=("bob",))]
    )
    with store.unit_of_work(SCOPE) as uow:
        uow.tombstones.add([Tombstone("laptop", "forgotten")])
        uow.commit()


def _snapshot(store: PostgresStore, url: str, schema: str) -> dict[str, Any]:
    hits = {}
    for q in QUERIES:
        for auth in (None, ALICE):
            result = ragport.application.retrieve_context(
                q,
                embedder=EMB,
                store=store,
                scope=SCOPE,
                authorization=auth,
                request=ragport.RetrievalRequest(lexical="bm25"),
            )
            hits[(q, auth is None)] = [
                (h.provenance.chunk_id, round(h.score, 6)) for h in result.hits
            ]
    with psycopg.connect(url) as conn:
        scopes = conn.execute(
            f'SELECT tenant_id, resource_id, corpus_id, counter, pointer, floor FROM "{schema}".scopes'
        ).fetchall()
        rows = conn.execute(
            f'SELECT id, generation, retired_generation FROM "{schema}".records ORDER BY 1, 2'
        ).fetchall()
    decisions = store.check_source_access(SCOPE, ["leave", "pay", "laptop"], ALICE)
    return {
        "hits": hits,
        "scopes": scopes,
        "rows": rows,
        "grants": {s: d.allowed for s, d in decisions.items()},
        "tombstones": store.list_invalidated_ids(SCOPE),
        "generation": store.current_generation(SCOPE),
    }


def test_dump_restore_round_trip_into_a_fresh_server(
    pg_url: str, pg_schema: str, pg_cluster: Any, tmp_path: Path
) -> None:
    """Same hits, grants, tombstones and pointers after `db dump` + `db restore` elsewhere.

    If this fails, check ragport/adapters/postgres/backup.py (pg_dump/pg_restore flags)."""
    source = PostgresStore(pg_url, schema=pg_schema, create=True)
    _populate(source)
    before = _snapshot(source, pg_url, pg_schema)
    assert before["generation"] == 4 and before["tombstones"] == {"laptop"}
    assert before["grants"] == {"leave": True, "pay": False, "laptop": False}
    dump = tmp_path / "ragport.dump"
    assert main(["db", "dump", str(dump), "--store", pg_url, "--schema", pg_schema]) == 0
    assert dump.read_bytes()[:5] == b"PGDMP"  # pg_dump's custom format

    fresh = pg_cluster.primary()
    assert main(["db", "restore", str(dump), "--store", fresh.url, "--schema", pg_schema]) == 0
    target = PostgresStore(fresh.url, schema=pg_schema)  # already at the latest version
    assert _snapshot(target, fresh.url, pg_schema) == before
    with psycopg.connect(fresh.url) as conn:
        hnsw = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND indexdef LIKE '%%hnsw%%'",
            (pg_schema,),
        ).fetchone()
    assert hnsw == (1,)
    with psycopg.connect(fresh.url) as conn:
        public, definer = conn.execute(
            "SELECT has_function_privilege('public', p.oid, 'EXECUTE'), p.prosecdef "
            "FROM pg_proc p WHERE p.oid = to_regprocedure(%s)",
            (f'"{pg_schema}".merge_pending_lists(text)',),
        ).fetchone()
    assert (public, definer) == (False, True)  # migration 10's REVOKE survives the restore
    # a second restore over the existing schema is refused, not merged
    with pytest.raises(ValidationError) as caught:
        restore_schema(fresh.url, dump, schema=pg_schema)
    assert caught.value.field == "schema"
    source.engine.dispose()
    target.engine.dispose()


def test_a_failed_tool_names_no_password(pg_cluster: Any, tmp_path: Path) -> None:
    """A dump from an unreachable server is a StoreError whose text carries no password.

    If this fails, check ``backup._libpq`` (the password travels in PGPASSWORD)."""
    from ragport.adapters.postgres import dump_schema

    with pytest.raises(StoreError) as caught:
        dump_schema("postgresql://u:s3cret-pw@127.0.0.1:1/db", tmp_path / "x.dump")
    assert "s3cret-pw" not in str(caught.value)


@pytest.fixture
def fresh_database(pg_url: str, pg_engine: Any) -> Any:
    """The URL of a new, empty database on the session's server (a fresh store), dropped
    after the test."""
    import uuid

    from sqlalchemy import make_url, text

    name = f"ragport_fresh_{uuid.uuid4().hex[:10]}"
    admin = pg_engine.execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_the_corpus_root_and_settings_travel_with_a_dump(
    pg_url: str,
    pg_schema: str,
    fresh_database: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ingest `proj/docs` under `--root proj` with `--encoding latin-1`, dump, restore into a
    fresh store, ingest the same folder again without options: the same ids (no duplicate
    source), nothing re-embedded, nothing failed.

    If this fails, check that the corpus settings live in the schema (CorpusSettingsStore in
    ragport/bootstrap/corpus_settings.py: the sync_checkpoints table) and that
    ragport/adapters/postgres/backup.py dumps and restores that table's rows."""
    import json

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    docs = tmp_path / "proj" / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("# Leave\n\nParental leave lasts 16 weeks.\n")
    (docs / "sub" / "b.txt").write_bytes(
        "Caf\u00e9 expenses need a r\u00e9sum\u00e9.\n".encode("latin-1")
    )
    corpus = ["--corpus", "kb", "--embedder", "hash", "--schema", pg_schema]

    def ingest(url: str, *options: str) -> dict[str, str]:
        code = main(["ingest", str(docs), "--json", "--store", url, *corpus, *options])
        out = capsys.readouterr().out
        assert code == 0, out
        return {o["source_id"]: o["state"] for o in map(json.loads, out.splitlines())}

    assert main(["db", "upgrade", "--store", pg_url, "--schema", pg_schema]) == 0
    capsys.readouterr()
    first = ingest(pg_url, "--root", str(tmp_path / "proj"), "--encoding", "latin-1")
    assert first == {"docs/a.md": "indexed", "docs/sub/b.txt": "indexed"}
    dump = tmp_path / "kb.dump"
    assert main(["db", "dump", str(dump), "--store", pg_url, "--schema", pg_schema]) == 0
    assert main(["db", "restore", str(dump), "--store", fresh_database, "--schema", pg_schema]) == 0
    capsys.readouterr()

    assert ingest(fresh_database) == {"docs/a.md": "unchanged", "docs/sub/b.txt": "unchanged"}
    assert main(["sources", "--json", "--store", fresh_database, *corpus[:2], *corpus[4:]]) == 0
    listed = json.loads(capsys.readouterr().out)["items"]
    assert [s["source_id"] for s in listed] == ["docs/a.md", "docs/sub/b.txt"]
