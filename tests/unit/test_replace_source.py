"""replace_source, delete_source and index_chunks against the in-memory adapters."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from doubles import CountingEmbedder, NoTransactionsStore
from flat_options import flat_write

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore

SCOPE = ragport.Scope("tenant-1", "kb", "docs")
OTHER_CORPUS = ragport.Scope("tenant-1", "kb", "archive")
SECRET = "sk-SECRET"


# -- fakes ---------------------------------------------------------------------------------------


# -- helpers -------------------------------------------------------------------------------------


def make_chunks(source_id: str, texts: Sequence[str]) -> list[ragport.Chunk]:
    chunks: list[ragport.Chunk] = []
    start = 0
    for i, text in enumerate(texts):
        chunks.append(ragport.Chunk.of(source_id, i, text, start=start))
        start += len(text)
    return chunks


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stored(store: InMemoryStore, source_id: str, scope: ragport.Scope = SCOPE) -> set[Any]:
    return {(r.id, r.text) for r in store.get_by_source(scope, source_id)}


def retrieved(
    store: Any, query: str, *, scope: ragport.Scope = SCOPE, embedder: Any = None
) -> set[tuple[str, str]]:
    result = ragport.application.retrieve_context(
        query,
        embedder=embedder or HashEmbedder(),
        store=store,
        scope=scope,
        request=ragport.RetrievalRequest(
            top_k=32, query_candidates=128, max_result_bytes=524_288, max_context_tokens=8_000
        ),
    )
    return {(h.id, h.text) for h in result.hits}


V1 = [
    "alpha policy version one covers vacation days",
    "alpha policy version one covers sick leave",
    "alpha policy version one covers parental leave",
]
V2 = [
    "beta policy version two covers vacation days",
    "beta policy version two covers sick leave",
    "beta policy version two covers parental leave",
    "beta policy version two covers sabbaticals",
    "beta policy version two covers remote work",
]
QUERY = "policy version covers vacation sick parental leave"


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


def replace(
    store: Any, texts: Sequence[str], *, source_id: str = "policy", **kwargs: Any
) -> ragport.ReplaceResult:
    kwargs.setdefault("embedder", HashEmbedder())
    kwargs.setdefault("scope", SCOPE)
    return ragport.application.replace_source(
        source_id=source_id,
        chunks=make_chunks(source_id, texts),
        store=store,
        **flat_write(**kwargs),
    )


# -- replace_source: happy path -----------------------------------------------------------------


def test_replace_writes_and_returns_result(store: InMemoryStore) -> None:
    """First replace writes every chunk. If this fails, check replace_source's ReplaceResult."""
    result = replace(store, V1)
    assert result == ragport.ReplaceResult(
        source_id="policy", deleted=0, indexed=3, skipped=False, generation=1
    )
    assert store.current_generation(SCOPE) == 1
    assert stored(store, "policy") == {(f"policy#000{i + 1}", t) for i, t in enumerate(V1)}
    assert retrieved(store, QUERY) == stored(store, "policy")


def test_second_replace_retires_old_rows(store: InMemoryStore) -> None:
    """Replace swaps versions: only the new one is visible. If this fails, check retire_source."""
    replace(store, V1)
    result = replace(store, V2)
    assert result.deleted == len(V1)
    assert result.indexed == len(V2)
    assert result.generation == 2
    assert not result.skipped
    new = {(f"policy#000{i + 1}", t) for i, t in enumerate(V2)}
    assert stored(store, "policy") == new
    assert retrieved(store, QUERY) == new
    assert not any(text.startswith("alpha") for _, text in retrieved(store, "alpha version one"))


def test_replace_with_fewer_chunks_leaves_no_stale_tail(store: InMemoryStore) -> None:
    """Shrinking a source drops its old tail chunks. If this fails, check retire_source."""
    replace(store, V2)
    result = replace(store, V1)
    assert result.deleted == len(V2)
    assert {rid for rid, _ in retrieved(store, QUERY)} == {
        "policy#0001",
        "policy#0002",
        "policy#0003",
    }


# -- replace_source: failures keep the previous version -----------------------------------------


def test_embedder_failure_keeps_previous_version(store: InMemoryStore) -> None:
    """A failed embed leaves v1 visible and status failed. If this fails, check replace_source."""
    statuses = InMemoryStatusStore()
    replace(store, V1, status_store=statuses)
    before_records = list(store.get_by_source(SCOPE, "policy"))
    before_hits = retrieved(store, QUERY)
    before_generation = store.current_generation(SCOPE)
    failing = CountingEmbedder(fail_on_call=2)

    with pytest.raises(RuntimeError):
        replace(store, V2, embedder=failing, batch_size=1, status_store=statuses)  # calls of 4

    assert len(failing.calls) == 2
    assert list(store.get_by_source(SCOPE, "policy")) == before_records
    assert retrieved(store, QUERY) == before_hits
    assert store.current_generation(SCOPE) == before_generation
    with store.unit_of_work(SCOPE) as uow:
        assert uow.generations.counter() == before_generation
    status = statuses.get(SCOPE, "policy")
    assert status is not None
    assert status.state == "failed"
    assert status.error
    for text in V1 + V2:
        assert text not in status.error
    assert "beta" not in status.error


def test_abort_during_embedding_keeps_previous_version(store: InMemoryStore) -> None:
    """Abort between batches raises and writes nothing. If this fails, check check_abort calls."""
    replace(store, V1)
    before_records = list(store.get_by_source(SCOPE, "policy"))
    before_hits = retrieved(store, QUERY)
    abort = threading.Event()
    embedder = CountingEmbedder(set_after_call=1, event=abort)

    with pytest.raises(ragport.AbortedError):
        replace(store, V2, embedder=embedder, batch_size=2, abort=abort)

    assert len(embedder.calls) == 1
    assert list(store.get_by_source(SCOPE, "policy")) == before_records
    assert retrieved(store, QUERY) == before_hits
    assert store.current_generation(SCOPE) == 1


def test_abort_already_set_embeds_nothing(store: InMemoryStore) -> None:
    """A set abort stops before any embed. If this fails, check replace_source's abort checks."""
    abort = threading.Event()
    abort.set()
    embedder = CountingEmbedder()
    with pytest.raises(ragport.AbortedError):
        replace(store, V1, embedder=embedder, abort=abort)
    assert embedder.calls == []
    assert store.get_by_source(SCOPE, "policy") == []


# -- replace_source: skipping and reuse ---------------------------------------------------------


def test_same_content_hash_skips_without_embedding(store: InMemoryStore) -> None:
    """An unchanged content_hash skips with zero embeds. If this fails, check the skip branch."""
    digest = sha("\n".join(V1))
    replace(store, V1, content_hash=digest)
    before = list(store.get_by_source(SCOPE, "policy"))
    embedder = CountingEmbedder()

    result = replace(store, V1, content_hash=digest.upper(), embedder=embedder)

    assert result.skipped is True
    assert (result.deleted, result.indexed) == (0, 0)
    assert result.generation == store.current_generation(SCOPE) == 1
    assert embedder.calls == []
    assert list(store.get_by_source(SCOPE, "policy")) == before


def test_different_content_hash_reindexes(store: InMemoryStore) -> None:
    """A changed hash is not skipped. If this fails, check the skip comparison in replace_source."""
    replace(store, V1, content_hash=sha("v1"))
    embedder = CountingEmbedder()
    result = replace(store, V2, content_hash=sha("v2"), embedder=embedder)
    assert result.skipped is False
    assert embedder.texts == V2
    assert {r.content_hash for r in store.get_by_source(SCOPE, "policy")} == {sha("v2")}


def test_skip_if_unchanged_false_reembeds(store: InMemoryStore) -> None:
    """skip_if_unchanged=False forces a re-embed. If this fails, check the skip flag."""
    digest = sha("\n".join(V1))
    replace(store, V1, content_hash=digest)
    embedder = CountingEmbedder()

    result = replace(store, V1, content_hash=digest, skip_if_unchanged=False, embedder=embedder)

    assert result.skipped is False
    assert result.deleted == 3 and result.indexed == 3
    assert result.generation == 2
    assert embedder.texts == V1


@pytest.mark.parametrize(
    ("make", "key"),
    [
        (lambda: CountingEmbedder(HashEmbedder(64)), ("hash-v1:64", 64)),
        (lambda: CountingEmbedder(HashEmbedder(256), id="other:256"), ("other:256", 256)),
    ],
    ids=["other-dimension", "same-dimension-other-id"],
)
def test_same_hash_different_embedder_does_not_skip(
    store: InMemoryStore, make: Any, key: tuple[str, int]
) -> None:
    """Same hash under another embedder re-indexes. If this fails, check the skip embedder check."""
    digest = sha("\n".join(V1))
    replace(store, V1, content_hash=digest, embedder=HashEmbedder(256))
    other = make()

    result = replace(store, V1, content_hash=digest, embedder=other)

    assert result.skipped is False
    assert result.deleted == 3 and result.indexed == 3
    assert other.texts == V1
    records = store.get_by_source(SCOPE, "policy")
    assert {(r.embedder_id, r.dimensions) for r in records} == {key}
    assert retrieved(store, QUERY, embedder=other) == stored(store, "policy")


def test_reuse_embeddings_skips_matching_texts(store: InMemoryStore) -> None:
    """Reused vectors with equal text skip embedding. If this fails, check _embed_with_reuse."""
    chunks = make_chunks("policy", V1)
    base = HashEmbedder()
    reuse = {c.id: (c.text, base.embed([c.text])[0]) for c in chunks[:2]}
    embedder = CountingEmbedder()

    result = ragport.application.replace_source(
        source_id="policy",
        chunks=chunks,
        embedder=embedder,
        store=store,
        scope=SCOPE,
        reuse_embeddings=reuse,
    )

    assert result.indexed == 3
    assert embedder.texts == [V1[2]]
    # The reused vectors were stored: each chunk is its own best match.
    for chunk in chunks:
        top = ragport.application.retrieve_context(
            chunk.text,
            embedder=base,
            store=store,
            scope=SCOPE,
            request=ragport.RetrievalRequest(top_k=1),
        )
        assert [h.id for h in top.hits] == [chunk.id]


def test_reuse_entry_with_different_text_is_reembedded(store: InMemoryStore) -> None:
    """A reuse entry whose text differs is re-embedded. If this fails, check _embed_with_reuse."""
    chunks = make_chunks("policy", V1)
    base = HashEmbedder()
    reuse = {
        chunks[0].id: (chunks[0].text, base.embed([chunks[0].text])[0]),
        chunks[1].id: ("an older wording", base.embed(["an older wording"])[0]),
    }
    embedder = CountingEmbedder()

    ragport.application.replace_source(
        source_id="policy",
        chunks=chunks,
        embedder=embedder,
        store=store,
        scope=SCOPE,
        reuse_embeddings=reuse,
    )

    assert sorted(embedder.texts) == sorted([V1[1], V1[2]])


def test_reuse_entry_numpy_cannot_read_is_reembedded(store: InMemoryStore) -> None:
    """A ragged or non-numeric reuse vector is not reusable: re-embedded, never numpy's error.

    If this fails, check the np.asarray guard in _embed_with_reuse.
    """
    chunks = make_chunks("policy", V1)
    reuse = {
        chunks[0].id: (chunks[0].text, [[0.1, 0.2], [0.3]]),
        chunks[1].id: (chunks[1].text, [object()] * 256),
    }
    embedder = CountingEmbedder()
    ragport.application.replace_source(
        source_id="policy",
        chunks=chunks,
        embedder=embedder,
        store=store,
        scope=SCOPE,
        reuse_embeddings=reuse,
    )
    assert sorted(embedder.texts) == sorted(V1)


# -- replace_source: fail-closed validation -----------------------------------------------------


def test_store_without_transactions_is_refused_before_embedding(store: InMemoryStore) -> None:
    """No transactions is a CapabilityError, no embed. If this fails, check require_transactions."""
    embedder = CountingEmbedder()
    with pytest.raises(ragport.CapabilityError) as info:
        replace(NoTransactionsStore(store), V1, embedder=embedder)
    assert info.value.capability == "transactions"
    assert embedder.calls == []
    assert store.get_by_source(SCOPE, "policy") == []


def test_chunks_of_another_source_are_refused(store: InMemoryStore) -> None:
    """Chunks must belong to source_id. If this fails, check _check_chunks."""
    embedder = CountingEmbedder()
    chunks = [*make_chunks("policy", V1[:2]), ragport.Chunk.of("other", 2, "stray text")]
    with pytest.raises(ragport.ValidationError):
        ragport.application.replace_source(
            source_id="policy", chunks=chunks, embedder=embedder, store=store, scope=SCOPE
        )
    assert embedder.calls == []
    assert store.get_by_source(SCOPE, "policy") == []


def test_duplicate_chunk_ids_are_refused(store: InMemoryStore) -> None:
    """Two chunks with one id are refused. If this fails, check _check_chunks duplicate ids."""
    embedder = CountingEmbedder()
    chunks = [ragport.Chunk.of("policy", 0, "first"), ragport.Chunk.of("policy", 0, "again")]
    with pytest.raises(ragport.ValidationError):
        ragport.application.replace_source(
            source_id="policy", chunks=chunks, embedder=embedder, store=store, scope=SCOPE
        )
    assert embedder.calls == []


def test_too_many_chunks_names_the_limit(store: InMemoryStore) -> None:
    """More chunks than chunks_per_source is refused. If this fails, check _check_chunks caps."""
    limits = ragport.Limits(chunks_per_source=3)
    embedder = CountingEmbedder()
    with pytest.raises(ragport.ValidationError) as info:
        replace(store, V2[:4], embedder=embedder, limits=limits)
    assert info.value.limit == "chunks_per_source"
    assert embedder.calls == []
    assert replace(store, V2[:3], limits=limits).indexed == 3


@pytest.mark.parametrize("bad", ["abc", "z" * 64, sha("x")[:-1], sha("x") + "0"])
def test_invalid_content_hash_is_refused(store: InMemoryStore, bad: str) -> None:
    """A content_hash that is not SHA-256 hex fails. If this fails, check validate_content_hash."""
    with pytest.raises(ragport.ValidationError) as info:
        replace(store, V1, content_hash=bad)
    assert info.value.field == "content_hash"


@pytest.mark.parametrize("bad", [0, 129])
def test_batch_size_past_ceiling_is_refused(store: InMemoryStore, bad: int) -> None:
    """batch_size outside 1..128 fails by limit. If this fails, check check_limit('embed_batch')."""
    with pytest.raises(ragport.ValidationError) as info:
        replace(store, V1, batch_size=bad)
    assert info.value.limit == "embed_batch"
    with pytest.raises(ragport.ValidationError) as info:
        ragport.application.index_chunks(
            chunks=make_chunks("policy", V1),
            embedder=HashEmbedder(),
            store=store,
            scope=SCOPE,
            write_options=ragport.WriteOptions(batch_size=bad),
        )
    assert info.value.limit == "embed_batch"


def test_embeds_in_bounded_batches(store: InMemoryStore) -> None:
    """300 chunks at batch 32 embed in calls of 32 x EMBED_CALL_BATCHES (4): 128, 128, 44.
    If this fails, check embed_batches."""
    texts = [f"paragraph number {i} about topic {i % 7}" for i in range(300)]
    embedder = CountingEmbedder()
    result = replace(store, texts, embedder=embedder, batch_size=32)
    assert [len(c) for c in embedder.calls] == [128, 128, 44]
    assert embedder.texts == texts
    assert result.indexed == 300
    assert len(store.get_by_source(SCOPE, "policy")) == 300


def test_secrets_are_redacted_everywhere(store: InMemoryStore) -> None:
    """Secrets never reach embedder, store or rendering. If this fails, check Redaction use."""
    texts = [f"the deploy key is {SECRET} keep it safe", f"rotate {SECRET} monthly per policy"]
    embedder = CountingEmbedder()
    replace(store, texts, embedder=embedder, secrets=[SECRET])

    assert len(embedder.texts) == 2
    assert all(SECRET not in t for t in embedder.texts)
    assert all("deploy key" in t or "rotate" in t for t in embedder.texts)
    records = store.get_by_source(SCOPE, "policy")
    assert len(records) == 2
    assert all(SECRET not in r.text for r in records)
    result = ragport.application.retrieve_context(
        "deploy key rotate policy", embedder=HashEmbedder(), store=store, scope=SCOPE
    )
    assert len(result.hits) == 2
    assert SECRET not in result.text
    assert all(SECRET not in h.text for h in result.hits)


# -- advance_generation, delete_source ----------------------------------------------------------


def test_staged_replace_is_invisible_until_published(store: InMemoryStore) -> None:
    """advance_generation=False stages rows. If this fails, check publish_generation."""
    replace(store, V1)
    old = stored(store, "policy")
    result = replace(store, V2, advance_generation=False)

    assert result.generation == 2
    assert store.current_generation(SCOPE) == 1
    assert stored(store, "policy") == old
    assert retrieved(store, QUERY) == old

    assert ragport.application.publish_generation(store=store, scope=SCOPE) == 2
    new = {(f"policy#000{i + 1}", t) for i, t in enumerate(V2)}
    assert store.current_generation(SCOPE) == 2
    assert stored(store, "policy") == new
    assert retrieved(store, QUERY) == new


def test_two_staged_replaces_publish_together(store: InMemoryStore) -> None:
    """Staged writes of two sources appear at once. If this fails, check generations.stage."""
    replace(store, V1, source_id="a")
    replace(store, V2, source_id="b", advance_generation=False)
    replace(store, V2[:2], source_id="c", advance_generation=False)
    assert stored(store, "b") == set() and stored(store, "c") == set()
    assert ragport.application.publish_generation(store=store, scope=SCOPE) == 2
    assert len(stored(store, "b")) == 5 and len(stored(store, "c")) == 2
    assert len(stored(store, "a")) == 3


def test_delete_source_touches_one_scope_and_rolls_back(store: InMemoryStore) -> None:
    """delete_source hits one scope; rollback undoes it. If this fails, check delete_source."""
    replace(store, V1, scope=SCOPE)
    replace(store, V1, scope=OTHER_CORPUS)
    before = stored(store, "policy")
    generation_before = store.current_generation(SCOPE)

    result = ragport.application.delete_source(source_id="policy", store=store, scope=SCOPE)

    assert result.deleted == 3 and result.indexed == 0
    assert result.generation == generation_before + 1
    assert stored(store, "policy") == set()
    assert retrieved(store, QUERY) == set()
    assert stored(store, "policy", OTHER_CORPUS) == before
    assert len(retrieved(store, QUERY, scope=OTHER_CORPUS)) == 3

    ragport.application.rollback_generation(store=store, scope=SCOPE, to=generation_before)
    assert stored(store, "policy") == before
    assert retrieved(store, QUERY) == before
    assert stored(store, "policy", OTHER_CORPUS) == before


def test_delete_source_clears_its_status(store: InMemoryStore) -> None:
    """delete_source removes the source's ingestion status. If this fails, check delete_source."""
    statuses = InMemoryStatusStore()
    replace(store, V1, status_store=statuses)
    assert statuses.get(SCOPE, "policy") is not None
    ragport.application.delete_source(
        source_id="policy",
        store=store,
        scope=SCOPE,
        write_options=ragport.WriteOptions(status_store=statuses),
    )
    assert statuses.get(SCOPE, "policy") is None


def test_replace_records_indexed_status(store: InMemoryStore) -> None:
    """A successful replace marks status indexed. If this fails, check put_status calls."""
    statuses = InMemoryStatusStore()
    replace(store, V1, status_store=statuses)
    status = statuses.get(SCOPE, "policy")
    assert status is not None
    assert status.state == "indexed"
    assert (status.chunks_total, status.chunks_indexed) == (3, 3)
    assert status.error is None


# -- index_chunks --------------------------------------------------------------------------------


def test_index_chunks_returns_result_and_is_idempotent(store: InMemoryStore) -> None:
    """index_chunks upserts by id, no duplicates. If this fails, check retire_ids."""
    chunks = make_chunks("a", V1) + make_chunks("b", V2[:2])
    result = ragport.application.index_chunks(
        chunks=chunks, embedder=HashEmbedder(), store=store, scope=SCOPE
    )
    assert result == ragport.application.IndexResult(indexed=5, source_ids=("a", "b"))
    first = retrieved(store, QUERY)
    assert len(first) == 5

    again = ragport.application.index_chunks(
        chunks=chunks,
        embedder=HashEmbedder(),
        store=store,
        scope=SCOPE,
        write_options=ragport.WriteOptions(batch_size=2),
    )
    assert again == ragport.application.IndexResult(indexed=5, source_ids=("a", "b"))
    result_hits = ragport.application.retrieve_context(
        QUERY,
        embedder=HashEmbedder(),
        store=store,
        scope=SCOPE,
        request=ragport.RetrievalRequest(top_k=32),
    ).hits
    ids = [h.id for h in result_hits]
    assert len(ids) == len(set(ids)) == 5
    assert retrieved(store, QUERY) == first
    assert len(store.get_by_source(SCOPE, "a")) == 3
    assert len(store.get_by_source(SCOPE, "b")) == 2


def test_index_chunks_failure_midway_marks_partial(store: InMemoryStore) -> None:
    """A failure after some batches leaves status partial. If this fails, check index_chunks."""
    statuses = InMemoryStatusStore()
    chunks = make_chunks("policy", V2)
    embedder = CountingEmbedder(fail_on_call=2)

    with pytest.raises(RuntimeError):
        ragport.application.index_chunks(
            chunks=chunks,
            embedder=embedder,
            store=store,
            scope=SCOPE,
            write_options=ragport.WriteOptions(batch_size=2, status_store=statuses),
        )

    status = statuses.get(SCOPE, "policy")
    assert status is not None
    assert status.state == "partial"
    assert (status.chunks_total, status.chunks_indexed) == (5, 2)
    assert status.error
    assert all(text not in status.error for text in V2)
    assert stored(store, "policy") == {("policy#0001", V2[0]), ("policy#0002", V2[1])}


def test_index_chunks_failure_on_first_batch_marks_failed(store: InMemoryStore) -> None:
    """Failing before any commit is failed, not partial. If this fails, check index_chunks."""
    statuses = InMemoryStatusStore()
    with pytest.raises(RuntimeError):
        ragport.application.index_chunks(
            chunks=make_chunks("policy", V2),
            embedder=CountingEmbedder(fail_on_call=1),
            store=store,
            scope=SCOPE,
            write_options=ragport.WriteOptions(batch_size=2, status_store=statuses),
        )
    status = statuses.get(SCOPE, "policy")
    assert status is not None
    assert status.state == "failed"
    assert stored(store, "policy") == set()


def test_index_chunks_redacts_secrets(store: InMemoryStore) -> None:
    """index_chunks redacts before embedding and storing. If this fails, check index_chunks."""
    embedder = CountingEmbedder()
    chunks = make_chunks("keys", [f"api token {SECRET} for the billing service"])
    ragport.application.index_chunks(
        chunks=chunks,
        embedder=embedder,
        store=store,
        scope=SCOPE,
        runtime=ragport.Runtime(secrets=[SECRET]),
    )
    assert embedder.texts and all(SECRET not in t for t in embedder.texts)
    assert all(SECRET not in r.text for r in store.get_by_source(SCOPE, "keys"))
