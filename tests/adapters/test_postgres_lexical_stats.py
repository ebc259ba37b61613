"""The write-time BM25 statistics of the PostgreSQL store stay equal to a recomputation.

Random sequences of replace, delete, retire, forget, re-admit, derive, repoint, rollback and
compaction;
after each step the deltas summed at every readable pointer equal N, total length and df
recomputed from the rows visible there that no ``forgotten`` tombstone names (forgotten rows
leave the statistics when the tombstone is written), and the lexical leg's scores (top-k
pruning included) equal the Python reference of ``test_postgres_bm25`` over those rows.
"""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

import ragport
from ragport.adapters.postgres import PostgresStore
from ragport.adapters.postgres.extension import pgvector
from ragport.adapters.postgres.queries import stats_at
from ragport.domain.errors import RagportError
from ragport.domain.model import Tombstone
from tests.adapters.test_postgres_bm25 import EMB, TOLERANCE, VOCABULARY, _reference

SOURCES = ["s0", "s1", "s2", "s3"]
DERIVED = ["d0", "d1"]
WITHHELD = (
    "EXISTS (SELECT 1 FROM {s}.tombstones t WHERE t.tenant_id = r.tenant_id "
    "AND t.resource_id = r.resource_id AND t.corpus_id = r.corpus_id AND t.reason = 'forgotten' "
    "AND (t.id = r.id OR t.id = r.source_id OR t.id = ANY(r.lineage) OR t.id = ANY(r.roots)))"
)
"""A ``records r`` row some ``forgotten`` tombstone names, written independently of the store."""
COUNTED = (
    "NOT EXISTS (SELECT 1 FROM {s}.lexical_batches b WHERE b.tenant_id = :t "
    "AND b.resource_id = :r AND b.corpus_id = :c AND b.batch = x.batch "
    "AND b.retired_generation <= :p)"
)
"""A statistics delta row not of a batch retired whole at or below ``:p`` (migration 8),
written independently of the store's reader (``queries.stats_at``)."""


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True, text_search_config="simple")


_words = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=6).map(" ".join)
_op = st.one_of(
    st.tuples(
        st.just("replace"),
        st.sampled_from(SOURCES),
        st.lists(_words, min_size=1, max_size=3),
    ),
    st.tuples(st.just("delete"), st.sampled_from(SOURCES)),
    st.tuples(st.just("retire"), st.sampled_from(SOURCES)),
    st.tuples(st.just("forget"), st.sampled_from(SOURCES)),
    st.tuples(st.just("forget"), st.sampled_from(DERIVED)),
    st.tuples(st.just("readmit"), st.sampled_from(SOURCES + DERIVED)),
    st.tuples(
        st.just("derive"),
        st.sampled_from(DERIVED),
        st.lists(st.sampled_from(SOURCES), min_size=1, max_size=2),
        _words,
    ),
    st.tuples(st.just("repoint"), st.sampled_from(SOURCES), st.sampled_from(SOURCES)),
    st.tuples(st.just("rollback"), st.integers(1, 3)),
    st.tuples(
        st.just("stage"),
        st.sampled_from(SOURCES),
        st.lists(_words, min_size=0, max_size=3),
    ),
    st.tuples(st.just("compact"), st.integers(0, 2)),
)


def _apply(store: PostgresStore, scope: ragport.Scope, op: tuple) -> None:
    kind = op[0]
    if kind == "replace":
        chunks = [ragport.Chunk.of(op[1], i, words) for i, words in enumerate(op[2])]
        with contextlib.suppress(ragport.ForgottenError):  # a forgotten id is refused
            ragport.application.replace_source(
                source_id=op[1], chunks=chunks, embedder=EMB, store=store, scope=scope
            )
    elif kind == "delete":
        ragport.application.delete_source(source_id=op[1], store=store, scope=scope)
    elif kind == "retire":
        with store.unit_of_work(scope) as uow:
            g = uow.generations.stage()
            uow.records.retire_ids([f"{op[1]}#0001"], generation=g)
            uow.generations.publish(g)
            uow.commit()
    elif kind == "forget":
        with store.unit_of_work(scope) as uow:
            uow.tombstones.add([Tombstone(op[1])])
            uow.commit()
    elif kind == "readmit":  # the repository's own: the rows stay, and count again
        with store.unit_of_work(scope) as uow:
            uow.tombstones.readmit([op[1]])
            uow.commit()
    elif kind == "derive":
        with contextlib.suppress(RagportError):  # e.g. a lineage naming a forgotten source
            ragport.application.index_derived(
                record_id=op[1], text=op[3], lineage=op[2], embedder=EMB, store=store, scope=scope
            )
    elif kind == "repoint":
        with contextlib.suppress(RagportError):  # e.g. the same id, or a forgotten one
            ragport.application.repoint_source(scope=scope, store=store, from_id=op[1], to_id=op[2])
    elif kind == "stage":  # replace_source's steps, committed without publishing
        _stage(store, scope, op[1], op[2])
    elif kind == "rollback":
        to = max(store.current_generation(scope) - op[1], 0)
        with store.unit_of_work(scope) as uow:
            floor = uow.generations.floor()
        ragport.application.rollback_generation(store=store, scope=scope, to=max(to, floor))
    else:
        ragport.application.compact(store=store, scope=scope, keep=op[1])


def _stage(store: PostgresStore, scope: ragport.Scope, source: str, texts: list[str]) -> None:
    """Write ``source`` anew at the staged generation, retiring its rows there, and commit
    without publishing: readers at the pointer must not count it (the totals do)."""
    chunks = [ragport.Chunk.of(source, i, words) for i, words in enumerate(texts)]
    with contextlib.suppress(RagportError), store.unit_of_work(scope) as uow:
        g = uow.generations.stage()
        uow.records.retire_source(source, generation=g)
        if chunks:
            uow.records.add(
                [
                    ragport.domain.Record(
                        id=c.id,
                        scope=scope,
                        source_id=source,
                        kind="chunk",
                        text=c.text,
                        embedder_id=EMB.id,
                        dimensions=EMB.dimensions,
                        generation=g,
                    )
                    for c in chunks
                ],
                EMB.embed([c.text for c in chunks]),
            )
        uow.commit()


def _check_statistics(store: PostgresStore, scope: ragport.Scope, s: str) -> None:
    """The statistics at every readable pointer equal a recomputation from the rows; and
    ``live_ids`` (migration 9) holds exactly the ids of the scope's live rows."""
    params = {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id}
    where = "tenant_id = :t AND resource_id = :r AND corpus_id = :c"
    with store.engine.connect() as conn:
        live = conn.execute(
            text(f"SELECT id FROM {s}.records WHERE {where} AND retired_generation IS NULL"),
            params,
        ).scalars()
        held = conn.execute(text(f"SELECT id FROM {s}.live_ids WHERE {where}"), params).scalars()
        assert sorted(held) == sorted(live), "live_ids holds the live rows' ids"
        row = conn.execute(
            text(f"SELECT pointer, floor FROM {s}.scopes WHERE {where}"), params
        ).one_or_none()
        if row is None:
            return
        for p in range(row.floor, row.pointer + 1):
            bind = {**params, "p": p}
            visible = (
                f"{where} AND generation <= :p AND (retired_generation IS NULL "
                f"OR retired_generation > :p) AND NOT {WITHHELD.format(s=s)}"
            )
            expected = conn.execute(
                text(
                    f"SELECT count(*), coalesce(sum(length(tsv)), 0) FROM {s}.records r "
                    f"WHERE {visible}"
                ),
                bind,
            ).one()
            kept = conn.execute(
                text(
                    f"SELECT coalesce(sum(docs), 0), coalesce(sum(length), 0) FROM {s}.lexical_stats x "
                    f"WHERE {where} AND generation <= :p AND {COUNTED.format(s=s)}"
                ),
                bind,
            ).one()
            assert tuple(kept) == tuple(expected), p
            expected_df = dict(
                conn.execute(
                    text(
                        f"SELECT l, count(*) FROM {s}.records r, unnest(tsvector_to_array(tsv)) l "
                        f"WHERE {visible} GROUP BY l"
                    ),
                    bind,
                ).all()
            )
            kept_df = {
                lexeme: docs
                for lexeme, docs in conn.execute(
                    text(
                        f"SELECT lexeme, sum(docs) FROM {s}.lexical_terms x "
                        f"WHERE {where} AND generation <= :p AND {COUNTED.format(s=s)} "
                        "GROUP BY lexeme"
                    ),
                    bind,
                ).all()
                if docs
            }
            assert kept_df == expected_df, p
            _check_totals(conn, s, bind, tuple(expected), expected_df)


def _check_totals(conn, s: str, bind: dict, expected: tuple, expected_df: dict) -> None:
    """What the lexical leg reads at pointer ``:p`` (``queries.stats_at``: the running totals
    with the deltas past ``:p`` corrected) equals the recomputation too."""
    sized = stats_at(s, "lexical_stats", ("docs", "length"), ":p")
    read = conn.execute(
        text(f"SELECT coalesce(sum(docs), 0), coalesce(sum(length), 0) FROM ({sized}) x"), bind
    ).one()
    assert tuple(read) == expected, ("totals", bind["p"])
    df_sql = stats_at(s, "lexical_terms", ("docs",), ":p", "CAST(:l AS text)")
    lexemes = conn.execute(
        text(f"SELECT lexeme FROM {s}.lexical_term_totals WHERE tenant_id = :t "
             "AND resource_id = :r AND corpus_id = :c UNION SELECT lexeme FROM "
             f"{s}.lexical_terms WHERE tenant_id = :t AND resource_id = :r AND corpus_id = :c"),
        bind,
    ).scalars()  # fmt: skip
    read_df = {}
    for lexeme in lexemes:
        docs = conn.execute(
            text(f"SELECT coalesce(sum(docs), 0) FROM ({df_sql}) x"), {**bind, "l": lexeme}
        ).scalar_one()
        if docs:
            read_df[lexeme] = docs
    assert read_df == expected_df, ("totals", bind["p"])


def _check_scores(
    store: PostgresStore, scope: ragport.Scope, s: str, query: list[str], k: int
) -> None:
    params = {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id}
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                f"SELECT r.id, r.text FROM {s}.records r "
                "LEFT JOIN " + s + ".scopes sc ON sc.tenant_id = r.tenant_id "
                "AND sc.resource_id = r.resource_id AND sc.corpus_id = r.corpus_id "
                "WHERE r.tenant_id = :t AND r.resource_id = :r AND r.corpus_id = :c "
                "AND r.generation <= sc.pointer "
                "AND (r.retired_generation IS NULL OR r.retired_generation > sc.pointer) "
                f"AND NOT {WITHHELD.format(s=s)}"
            ),
            params,
        ).all()
    docs = {row.id: row.text.split() for row in rows}
    found = store.lexical_query(scope, " ".join(query), limit=k)
    if not docs:
        assert not found
        return
    expected = _reference(docs, set(query))
    best = sorted(expected.values(), reverse=True)[:k]
    assert len(found) == len(best)
    for item, score in zip(found, best, strict=True):
        assert abs(item.score - expected[item.record.id]) <= TOLERANCE
        assert abs(item.score - score) <= TOLERANCE


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=st.lists(_op, min_size=1, max_size=10),
    query=st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=3),
    k=st.integers(1, 4),
)
def test_statistics_equal_a_recomputation_at_every_pointer(
    store: PostgresStore, pg_schema: str, ops: list[tuple], query: list[str], k: int
) -> None:
    """Deltas summed at each readable pointer equal the visible rows' N, length and df, and
    scores (pruned top-k) equal the reference. If this fails, check statements.with_stats and
    its callers in backend.py (the writer and the write pushdowns), and queries.bm25_ctes."""
    scope = ragport.Scope("tenant-1", "kb", "c" + uuid.uuid4().hex[:12])
    s = f'"{pg_schema}"'
    for op in ops:
        _apply(store, scope, op)
        _check_statistics(store, scope, s)
    _check_scores(store, scope, s, query, k)


def test_upgrade_from_version_1_keeps_data_and_backfills_statistics(pg_engine, pg_schema) -> None:
    """A schema written by the previous migration (2) upgrades in place: rows stay, statistics match them.
    If this fails, check schema.py _v3."""
    from ragport.adapters.postgres import schema as migrations

    scope = ragport.Scope("tenant-1", "kb", "old")
    with pg_engine.begin() as conn:
        previous = [
            *migrations._v1(f'"{pg_schema}"', "simple", pgvector(conn)),
            *migrations._v2(f'"{pg_schema}"', "simple"),
        ]
        for statement in previous:
            conn.execute(text(statement))
        conn.execute(
            text(
                f'CREATE TABLE "{pg_schema}".schema_migrations (version integer PRIMARY KEY, '
                "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
        )
        conn.execute(
            text(f"INSERT INTO \"{pg_schema}\".schema_migrations VALUES (1, 'v1'), (2, 'v2')")
        )
        conn.execute(
            text(f'INSERT INTO "{pg_schema}".scopes VALUES (:t, :r, :c, 2, 2, 0)'),
            {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id},
        )
        for i, (words, gen, retired) in enumerate(
            [("apple brook", 1, None), ("brook cedar cedar", 1, 2), ("cedar delta", 2, None)]
        ):
            conn.execute(
                text(
                    f'INSERT INTO "{pg_schema}".records (tenant_id, resource_id, corpus_id, id, '
                    "generation, source_id, kind, text, embedding, embedder_id, dimensions, "
                    "retired_generation) VALUES (:t, :r, :c, :id, :g, :src, 'chunk', :x, "
                    "CAST(:v AS vector), :e, 16, :rg)"
                ),
                {
                    "t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id,
                    "id": f"s{i}#0001", "g": gen, "src": f"s{i}", "x": words,
                    "v": str(EMB.embed([words])[0].tolist()), "e": EMB.id, "rg": retired,
                },
            )  # fmt: skip
    store = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    assert store.upgrade() == [v for v in sorted(migrations.MIGRATIONS) if v > 2]
    assert [r.source_id for r in store.get_by_source(scope, "s2")] == ["s2"]
    _check_statistics(store, scope, f'"{pg_schema}"')
    _check_scores(store, scope, f'"{pg_schema}"', ["cedar", "brook"], 2)


def test_pruned_top_k_equals_the_reference(store: PostgresStore, pg_schema: str) -> None:
    """A common term in every row, rarer ones in a few: each top-k (first tier full, short,
    or empty) equals the reference's. If this fails, check the tiers of queries.bm25_ctes."""
    scope = ragport.Scope("tenant-1", "kb", "c" + uuid.uuid4().hex[:12])
    texts = {}
    for i in range(40):
        words = ["apple"] * (1 + i % 3) + ["delta"] * (i % 5)
        words += ["brook"] * (i % 4 == 0) + ["cedar"] * (1 + i % 2) * (i % 8 == 0)
        texts[f"d{i:02d}"] = " ".join(words + ["ember"] * (i % 7))
    ragport.application.index_chunks(
        chunks=[ragport.Chunk.of(src, 0, words) for src, words in texts.items()],
        embedder=EMB,
        store=store,
        scope=scope,
    )
    s = f'"{pg_schema}"'
    for query in (["apple", "cedar"], ["apple", "delta", "brook"], ["apple"], ["cedar", "fjord"]):
        for k in (1, 3, 8, 30, 50):
            _check_scores(store, scope, s, query, k)


def test_renaming_rows_past_a_tombstone_moves_their_statistics(
    store: PostgresStore, pg_schema: str
) -> None:
    """Re-keying rows off or onto a forgotten id, and rewriting a lineage off or onto one
    (the unit of work's own ``rekey``/``rewrite_lineage``, which ``repoint_source`` never
    calls that way), keeps the statistics equal to a recomputation. If this fails, check
    statements.rekey_stats and lineage_stats and their calls in backend.py (move, rename_lineage)."""
    scope = ragport.Scope("tenant-1", "kb", "c" + uuid.uuid4().hex[:12])
    s = f'"{pg_schema}"'
    for src, words in (("s0", "apple brook"), ("s1", "cedar delta delta"), ("s2", "ember")):
        ragport.application.replace_source(
            source_id=src, chunks=[ragport.Chunk.of(src, 0, words)], embedder=EMB,
            store=store, scope=scope,
        )  # fmt: skip
    ragport.application.index_derived(
        record_id="d0", text="fjord apple", lineage=["s0"], embedder=EMB, store=store, scope=scope
    )
    with store.unit_of_work(scope) as uow:
        uow.tombstones.add([Tombstone("s0"), Tombstone("gone")])
        uow.commit()
    _check_statistics(store, scope, s)
    steps = [
        lambda uow: uow.records.rekey({"s0#0001": "s3#0001"}, to_source_id="s3"),  # off
        lambda uow: uow.records.rekey({"s1#0001": "gone#0001"}, to_source_id="gone"),  # onto
        lambda uow: uow.records.rewrite_lineage("s0", "s2"),  # off
        lambda uow: uow.records.rewrite_lineage("s2", "gone"),  # onto
    ]
    for step in steps:
        with store.unit_of_work(scope) as uow:
            step(uow)
            uow.commit()
        _check_statistics(store, scope, s)
    _check_scores(store, scope, s, ["apple", "cedar", "fjord"], 3)


def test_readmit_puts_back_what_forgetting_took_from_the_statistics(
    store: PostgresStore, pg_schema: str
) -> None:
    """Re-admitting an id (``TombstoneRepository.readmit``) counts again exactly the rows no
    other ``forgotten`` tombstone names: s0's rows and d0 (resting on s0 only), not d1 (also
    resting on a root still forgotten); then ``readmit_source`` purges a forgotten source.
    The statistics stay equal to a recomputation and the scores to the reference. If this
    fails, check adapters/postgres/tombstones.py tombstones_readmit."""
    scope = ragport.Scope("tenant-1", "kb", "c" + uuid.uuid4().hex[:12])
    s = f'"{pg_schema}"'
    for src, words in (("s0", "apple brook"), ("s1", "cedar delta delta"), ("s2", "ember")):
        ragport.application.replace_source(
            source_id=src, chunks=[ragport.Chunk.of(src, 0, words)], embedder=EMB,
            store=store, scope=scope,
        )  # fmt: skip
    for record_id, lineage in (("d0", ["s0"]), ("d1", ["s0", "s1"])):
        ragport.application.index_derived(
            record_id=record_id, text=f"fjord apple {record_id}", lineage=lineage, embedder=EMB,
            store=store, scope=scope,
        )  # fmt: skip
    with store.unit_of_work(scope) as uow:
        uow.tombstones.add([Tombstone("s0"), Tombstone("s1")])
        uow.commit()
    _check_statistics(store, scope, s)
    with store.unit_of_work(scope) as uow:
        assert uow.tombstones.readmit(["s0", "s2"]) == 1
        uow.commit()
    _check_statistics(store, scope, s)
    _check_scores(store, scope, s, ["apple", "cedar", "fjord"], 4)
    result = ragport.application.readmit_source(source_id="s1", store=store, scope=scope)
    assert (result.readmitted, result.purged) == (True, 1)
    _check_statistics(store, scope, s)
    _check_scores(store, scope, s, ["apple", "cedar", "fjord"], 4)


def test_upgrade_from_version_3_takes_forgotten_rows_out_of_the_statistics(
    pg_engine, pg_schema
) -> None:
    """A schema at migration 3 with forgotten rows in its statistics upgrades in place: rows
    and tombstones stay, the statistics lose the forgotten rows, and writes append deltas.
    If this fails, check schema.py _v5."""
    from ragport.adapters.postgres import schema as migrations

    s = f'"{pg_schema}"'
    scope = ragport.Scope("tenant-1", "kb", "old")
    params = {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id}
    with pg_engine.begin() as conn:
        previous = [
            *migrations._v1(s, "simple", pgvector(conn)),
            *migrations._v2(s, "simple"),
            *migrations._v3(s),
        ]
        for statement in previous:
            conn.execute(text(statement))
        conn.execute(
            text(
                f"CREATE TABLE {s}.schema_migrations (version integer PRIMARY KEY, "
                "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
        )
        conn.execute(
            text(f"INSERT INTO {s}.schema_migrations VALUES (1, 'v1'), (2, 'v2'), (3, 'v3')")
        )
        conn.execute(text(f"INSERT INTO {s}.scopes VALUES (:t, :r, :c, 2, 2, 0)"), params)
        rows = [
            ("s0#0001", "s0", "chunk", "apple brook", 1, None, []),
            ("s1#0001", "s1", "chunk", "brook cedar cedar", 1, 2, []),
            ("s1#0001", "s1", "chunk", "cedar delta", 2, None, []),
            ("s2#0001", "s2", "chunk", "delta ember", 2, None, []),
            ("d0", "d0", "derived", "ember fjord", 2, None, ["s1"]),
        ]
        for rid, src, kind, words, gen, retired, lineage in rows:
            conn.execute(
                text(
                    f"INSERT INTO {s}.records (tenant_id, resource_id, corpus_id, id, "
                    "generation, source_id, kind, text, embedding, embedder_id, dimensions, "
                    "retired_generation, lineage, roots) VALUES (:t, :r, :c, :id, :g, :src, "
                    ":kind, :x, CAST(:v AS vector), :e, 16, :rg, :lin, :lin)"
                ),
                {
                    **params, "id": rid, "g": gen, "src": src, "kind": kind, "x": words,
                    "v": str(EMB.embed([words])[0].tolist()), "e": EMB.id, "rg": retired,
                    "lin": lineage,
                },
            )  # fmt: skip
        # migration 3's statements keep statistics over every stored row, forgotten or not
        for statement in migrations._v3(s)[-2:]:
            conn.execute(text(statement))
        conn.execute(
            text(
                f"INSERT INTO {s}.tombstones (tenant_id, resource_id, corpus_id, id, reason) "
                "VALUES (:t, :r, :c, 's1', 'forgotten'), (:t, :r, :c, 's2', 'corrected')"
            ),
            params,
        )
    store = PostgresStore(pg_engine, schema=pg_schema, text_search_config="simple")
    assert store.upgrade() == [v for v in sorted(migrations.MIGRATIONS) if v > 3]
    assert [r.source_id for r in store.get_by_source(scope, "s2")] == ["s2"]
    _check_statistics(store, scope, s)
    _check_scores(store, scope, s, ["cedar", "ember", "apple"], 3)
    ragport.application.replace_source(
        source_id="s3", chunks=[ragport.Chunk.of("s3", 0, "apple apple")], embedder=EMB,
        store=store, scope=scope,
    )  # fmt: skip
    ragport.application.replace_source(
        source_id="s0", chunks=[ragport.Chunk.of("s0", 0, "apple cedar")], embedder=EMB,
        store=store, scope=scope,
    )  # fmt: skip
    _check_statistics(store, scope, s)
    _check_scores(store, scope, s, ["cedar", "ember", "apple"], 3)
