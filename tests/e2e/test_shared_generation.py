"""SharedGeneration: the writes of one command share one generation, so one rollback undoes
the whole command; each write stays its own transaction. Both stores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from doubles import CountingEmbedder
from flat_options import flat_write
from sync_support import DictConnector, Stores, sync_options, sync_stores

import ragport
from ragport import WriteOptions
from ragport.adapters.parsers import parser_for
from ragport.application import SharedGeneration
from ragport.domain.errors import EmbedderError, ValidationError

SCOPE = ragport.Scope("tenant-1", "kb", "shared")
EMB = CountingEmbedder()


@pytest.fixture(params=["memory", "postgres"])
def stores(request) -> Iterator[Stores]:
    yield sync_stores(request)


def put(stores: Stores, source_id: str, text: str, **kw) -> ragport.ReplaceResult:
    chunk = ragport.Chunk(
        id=f"{source_id}#0001", source_id=source_id, index=0, start=0, end=len(text), text=text
    )
    return ragport.application.replace_source(
        source_id=source_id, chunks=[chunk], embedder=kw.pop("embedder", EMB),
        store=stores.store, scope=SCOPE, **flat_write(**kw),
    )  # fmt: skip


def texts(stores: Stores) -> dict[str, str]:
    out: dict[str, str] = {}
    for sid in stores.store.list_source_ids(SCOPE, after=None, limit=100):
        out[sid] = " ".join(r.text for r in stores.store.get_by_source(SCOPE, sid))
    return out


def test_one_rollback_undoes_every_write_of_the_command(stores):
    put(stores, "a", "alpha one")
    put(stores, "b", "bravo one")
    before = stores.store.current_generation(SCOPE)
    shared = SharedGeneration()
    results = [
        put(stores, "a", "alpha two", shared_generation=shared),
        put(stores, "c", "charlie one", shared_generation=shared),
        ragport.application.delete_source(
            source_id="b",
            store=stores.store,
            scope=SCOPE,
            write_options=WriteOptions(shared_generation=shared),
        ),
    ]
    assert {r.generation for r in results} == {before + 1}
    assert shared.generations == (before + 1,)
    assert stores.store.current_generation(SCOPE) == before + 1
    assert texts(stores) == {"a": "alpha two", "c": "charlie one"}

    ragport.application.rollback_generation(store=stores.store, scope=SCOPE, to=before)
    assert texts(stores) == {"a": "alpha one", "b": "bravo one"}


def test_without_it_every_write_is_its_own_generation(stores):
    put(stores, "a", "alpha one")
    before = stores.store.current_generation(SCOPE)
    gens = [put(stores, s, f"{s} text").generation for s in ("b", "c")]
    assert gens == [before + 1, before + 2]


def test_another_writer_in_between_starts_a_new_shared_generation(stores):
    put(stores, "a", "alpha one")
    shared = SharedGeneration()
    g1 = put(stores, "b", "bravo", shared_generation=shared).generation
    g_other = put(stores, "x", "another command's write").generation  # not shared
    g2 = put(stores, "c", "charlie", shared_generation=shared).generation
    g3 = put(stores, "d", "delta", shared_generation=shared).generation
    assert g_other == g1 + 1 and g2 == g_other + 1 and g3 == g2
    assert shared.generations == (g1, g2)
    ragport.application.rollback_generation(store=stores.store, scope=SCOPE, to=g_other)
    assert set(texts(stores)) == {"a", "b", "x"}  # the other writer's work is kept


def test_a_source_written_twice_gets_a_second_generation(stores):
    shared = SharedGeneration()
    g1 = put(stores, "a", "first", shared_generation=shared).generation
    g2 = put(stores, "a", "second", shared_generation=shared).generation
    assert g2 == g1 + 1 and shared.generations == (g1, g2)
    ragport.application.rollback_generation(store=stores.store, scope=SCOPE, to=g1)
    assert texts(stores) == {"a": "first"}


class _Failing(CountingEmbedder):
    def embed(self, texts):
        raise EmbedderError("embedder down")


def test_a_failed_write_loses_only_itself_and_the_next_still_shares(stores):
    put(stores, "a", "alpha one")
    before = stores.store.current_generation(SCOPE)
    shared = SharedGeneration()
    put(stores, "a", "alpha two", shared_generation=shared)
    with pytest.raises(EmbedderError):
        put(stores, "b", "bravo", shared_generation=shared, embedder=_Failing())
    assert put(stores, "c", "charlie", shared_generation=shared).generation == before + 1
    assert texts(stores) == {"a": "alpha two", "c": "charlie"}
    ragport.application.rollback_generation(store=stores.store, scope=SCOPE, to=before)
    assert texts(stores) == {"a": "alpha one"}


def test_after_a_rollback_the_next_write_stages_a_fresh_generation(stores):
    put(stores, "a", "alpha one")
    shared = SharedGeneration()
    g = put(stores, "b", "bravo", shared_generation=shared).generation
    ragport.application.rollback_generation(store=stores.store, scope=SCOPE, to=g - 1)
    g2 = put(stores, "c", "charlie", shared_generation=shared).generation
    assert g2 == g  # the rolled-back number is handed out again, as a new generation
    assert texts(stores) == {"a": "alpha one", "c": "charlie"}


def test_a_sync_run_of_several_pages_is_one_generation(stores):
    connector = DictConnector(
        {f"doc-{i}.md": f"# Doc {i}\n\ntext {i}\n".encode() for i in range(7)}
    )
    connector.page_size = 2

    def sync(**kw):
        return ragport.bootstrap.sync_knowledge(
            connector=connector, checkpoints=stores.checkpoints, store=stores.store,
            embedder=EMB, scope=SCOPE, status_store=stores.status, parser=parser_for,
            **sync_options(**kw),
        )  # fmt: skip

    shared = SharedGeneration()
    result = sync(shared_generation=shared)
    assert result.upserted == 7 and result.pages >= 4
    assert shared.generations == (stores.store.current_generation(SCOPE),)
    first = shared.generations[0]

    connector.edit("doc-1.md", b"# Doc 1\n\nedited\n")
    connector.remove("doc-5.md")
    connector.add("doc-9.md", b"# Doc 9\n\nnew\n")
    again = SharedGeneration()
    sync(shared_generation=again)
    assert again.generations == (first + 1,)
    ragport.application.rollback_generation(store=stores.store, scope=SCOPE, to=first)
    got = texts(stores)
    assert "doc-9.md" not in got and "doc-5.md" in got and "edited" not in got["doc-1.md"]

    # Without a shared generation, each page with a write is its own generation.
    other = ragport.Scope("tenant-1", "kb", "pages")
    ragport.bootstrap.sync_knowledge(
        connector=DictConnector({f"p{i}.md": b"# P\n\nx\n" for i in range(5)}, page_size=2,
                                id="pages"),
        checkpoints=stores.checkpoints, store=stores.store, embedder=EMB, scope=other,
        status_store=stores.status, parser=parser_for,
    )  # fmt: skip
    assert stores.store.current_generation(other) == 3


def test_it_refuses_a_staged_write_and_a_second_scope(stores):
    shared = SharedGeneration()
    with pytest.raises(ValidationError) as caught:
        put(stores, "a", "alpha", shared_generation=shared, advance_generation=False)
    assert caught.value.field == "shared_generation"
    put(stores, "a", "alpha", shared_generation=shared)
    chunk = ragport.Chunk(id="z#0001", source_id="z", index=0, start=0, end=4, text="zulu")
    with pytest.raises(ragport.domain.errors.ScopeError):
        ragport.application.replace_source(
            source_id="z", chunks=[chunk], embedder=EMB, store=stores.store,
            scope=ragport.Scope("tenant-2", "kb", "shared"),
            write_options=WriteOptions(shared_generation=shared),
        )  # fmt: skip
