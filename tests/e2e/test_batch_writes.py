"""Batched writes (issue 45): ``Rag.replace_sources`` and the pipelined ``ingest_files`` write
many sources in one unit of work at one generation, their rows in one ``records.add``; each
source stays all-or-nothing for readers; a bad source fails alone; a failed batch write falls
back to one write per source and loses nothing. On the in-memory store and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from doubles import Delegating
from sync_support import Stores, sync_stores

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.application import Rag, ReplaceBatchResult, Runtime, SourceWrite
from ragport.application.ingest import IngestOptions
from ragport.bootstrap.ingest import collect_documents, ingest_files
from ragport.domain import Chunk
from ragport.domain.errors import EmbedderError, StoreError

SCOPE = ragport.Scope("acme", "kb", "batch")
EMB = HashEmbedder(dimensions=32)


@pytest.fixture(params=["memory", "postgres"])
def stores(request: Any) -> Stores:
    return sync_stores(request)


class PoisonedAdds(Delegating):
    """A store whose ``records.add`` fails (``StoreError``) when it carries a row of a
    ``poison`` source; ``adds`` records the sources of every add call that reached it."""

    def __init__(self, inner: Any, poison: set[str]) -> None:
        super().__init__(inner)
        self.poison = poison
        self.adds: list[list[str]] = []
        self.on_add: Any = None  # called before each add

    @contextmanager
    def unit_of_work(self, scope: ragport.Scope) -> Iterator[Any]:
        with self._inner.unit_of_work(scope) as uow:
            yield _Uow(uow, self)


class _Uow(Delegating):
    def __init__(self, inner: Any, store: PoisonedAdds) -> None:
        super().__init__(inner)
        self._records = _Records(inner.records, store)

    @property
    def records(self) -> Any:
        return self._records


class _Records(Delegating):
    def __init__(self, inner: Any, store: PoisonedAdds) -> None:
        super().__init__(inner)
        self._store = store

    def add(self, records: Any, vectors: Any) -> None:
        sources = list(dict.fromkeys(r.source_id for r in records))
        self._store.adds.append(sources)
        if self._store.on_add is not None:
            self._store.on_add()
        if self._store.poison & set(sources):
            raise StoreError("the add failed")
        self._inner.add(records, vectors)


def _chunks(source_id: str, version: str, n: int) -> tuple[Chunk, ...]:
    return tuple(
        Chunk.of(source_id, i, f"{source_id} {version} part {i} words words") for i in range(n)
    )


def _batch(ids: list[str], version: str, n: int) -> list[SourceWrite]:
    return [SourceWrite(source_id=s, chunks=_chunks(s, version, n)) for s in ids]


def _versions(store: Any, source_id: str) -> tuple[set[str], int]:
    rows = store.get_by_source(SCOPE, source_id)
    return {r.text.split()[1] for r in rows}, len(rows)


def test_a_batch_is_one_generation_and_one_add(stores: Stores) -> None:
    """Twelve sources through ``Rag.replace_sources``: one generation for all, the pointer
    moves once, every row is stored, one ``records.add`` carries them all, status indexed.
    If this fails, check write_batch in ragport/application/batch.py."""
    store = PoisonedAdds(stores.store, set())
    rag = Rag(store=store, embedder=EMB, scope=SCOPE, status_store=stores.status)
    ids = [f"doc-{i:02d}" for i in range(12)]
    before = store.current_generation(SCOPE)
    result = rag.replace_sources(_batch(ids, "v1", 3))
    assert isinstance(result, ReplaceBatchResult)
    assert result.failures == ()
    assert [r.source_id for r in result.results] == ids
    generations = {r.generation for r in result.results}
    assert generations == {before + 1} and result.generations == (before + 1,)
    assert store.current_generation(SCOPE) == before + 1
    assert store.adds == [ids]
    for sid in ids:
        assert _versions(store, sid) == ({"v1"}, 3)
    assert {s: stores.status.get(SCOPE, s).state for s in ids} == dict.fromkeys(ids, "indexed")
    again = rag.replace_sources(_batch(ids, "v2", 2))
    assert [r.deleted for r in again.results] == [3] * 12
    assert {r.generation for r in again.results} == {before + 2}


def test_batches_are_bounded_by_the_limits(stores: Stores) -> None:
    """``Limits(write_batch=4)``: ten sources go in three batches (4, 4, 2), a generation
    each; ``write_batch_chunks=5`` puts sources of 3 chunks one per batch.
    If this fails, check _groups in ragport/application/batch.py."""
    store = PoisonedAdds(stores.store, set())
    ids = [f"doc-{i}" for i in range(10)]
    rag = Rag(
        store=store,
        embedder=EMB,
        scope=SCOPE,
        runtime=Runtime(limits=ragport.Limits(write_batch=4)),
    )
    result = rag.replace_sources(_batch(ids, "v1", 3))
    assert [len(a) for a in store.adds] == [4, 4, 2]
    assert len(result.generations) == 3
    store.adds.clear()
    small = Runtime(limits=ragport.Limits(write_batch_chunks=5))
    rag.replace_sources(_batch(ids[:3], "v2", 3), runtime=small)
    assert store.adds == [[ids[0]], [ids[1]], [ids[2]]]
    with pytest.raises(ragport.ValidationError):
        ragport.Limits(write_batch=1_001)


def test_a_bad_source_fails_alone(stores: Stores) -> None:
    """A forgotten id, a chunk of another source and a text the embedder refuses each fail
    alone (in ``failures``, keeping their previous version); the rest are written at one
    generation. If this fails, check replace_sources' step 2 and _write_group's step 4."""

    class Picky:
        id, dimensions = EMB.id, EMB.dimensions

        def embed(self, texts: list[str]) -> Any:
            if any("poison" in t for t in texts):
                raise EmbedderError("refused")
            return EMB.embed(texts)

    rag = Rag(store=stores.store, embedder=Picky(), scope=SCOPE, status_store=stores.status)
    ids = ["a", "forgotten", "b", "refused", "wrong", "c"]
    rag.replace_sources(_batch(ids, "v1", 2))
    rag.forget("forgotten", as_owner=True)
    batch = _batch(ids, "v2", 2)
    batch[3] = SourceWrite(source_id="refused", chunks=(Chunk.of("refused", 0, "poison v2"),))
    batch[4] = SourceWrite(source_id="wrong", chunks=_chunks("other", "v2", 1))
    result = rag.replace_sources(batch)
    assert [f.source_id for f in result.failures] == ["forgotten", "refused", "wrong"]
    assert result.failures[0].reason == "ForgottenError"
    assert [r.source_id for r in result.results] == ["a", "b", "c"]
    assert len({r.generation for r in result.results}) == 1
    for sid in ("a", "b", "c"):
        assert _versions(stores.store, sid) == ({"v2"}, 2)
    for sid in ("refused", "wrong"):
        assert _versions(stores.store, sid) == ({"v1"}, 2)
    assert stores.status.get(SCOPE, "refused").state == "failed"


def test_a_failed_batch_write_falls_back_and_loses_nothing(stores: Stores) -> None:
    """The store fails every add carrying ``bad``: the batch rolls back whole, then each
    source is written alone: all but ``bad`` are written (v2), ``bad`` keeps v1 fully and is
    the only failure; nothing is embedded twice. If this fails, check write_batched."""
    store = PoisonedAdds(stores.store, set())
    rag = Rag(store=store, embedder=EMB, scope=SCOPE, status_store=stores.status)
    ids = ["a", "b", "bad", "c"]
    rag.replace_sources(_batch(ids, "v1", 3))
    store.poison.add("bad")
    store.adds.clear()
    result = rag.replace_sources(_batch(ids, "v2", 2))
    assert store.adds[0] == ids  # the batch, rolled back
    assert store.adds[1:] == [["a"], ["b"], ["bad"], ["c"]]  # then one by one
    assert [f.source_id for f in result.failures] == ["bad"]
    assert [r.source_id for r in result.results] == ["a", "b", "c"]
    for sid in ("a", "b", "c"):
        assert _versions(store, sid) == ({"v2"}, 2)
    assert _versions(store, "bad") == ({"v1"}, 3)
    assert stores.status.get(SCOPE, "bad").state == "failed"
    assert stores.status.get(SCOPE, "a").state == "indexed"


def test_skip_if_unchanged_and_grants(stores: Stores) -> None:
    """A source whose content hash is stored is skipped (no write), its grant still set; a
    grant given with new content is set in the batch's unit of work. A repeated id is refused
    before anything is written. If this fails, check _Call.skipped."""
    store = PoisonedAdds(stores.store, set())
    rag = Rag(store=store, embedder=EMB, scope=SCOPE)
    digest = "a" * 64
    first = [SourceWrite(source_id="s", chunks=_chunks("s", "v1", 2), content_hash=digest)]
    rag.replace_sources(first)
    grant = ragport.Grant("s", group_ids=("staff",))
    t_grant = ragport.Grant("t", group_ids=("staff",))
    store.adds.clear()
    result = rag.replace_sources(
        [
            SourceWrite(
                source_id="s", chunks=_chunks("s", "v1", 2), content_hash=digest, grant=grant
            ),
            SourceWrite(source_id="t", chunks=_chunks("t", "v1", 2), grant=t_grant),
        ]
    )
    assert [r.skipped for r in result.results] == [True, False]
    assert store.adds == [["t"]]
    assert rag.grants(["s", "t"]) == {"s": grant, "t": t_grant}
    with pytest.raises(ragport.ValidationError):
        rag.replace_sources(_batch(["x", "x"], "v1", 1))
    assert "x" not in set(rag.sources())


def _reader(store: Any, ids: list[str], counts: dict[str, int], stop: threading.Event,
            seen: list[str]) -> None:  # fmt: skip
    """Read every source until ``stop``: each answer must be one whole version."""
    while not stop.is_set():
        for sid in ids:
            rows = store.get_by_source(SCOPE, sid)
            versions = {r.text.split()[1] for r in rows}
            if len(versions) != 1:
                seen.append(f"{sid}: {sorted(versions) or 'missing'}")
                continue
            (version,) = versions
            if len(rows) != counts[version]:
                seen.append(f"{sid}: {version} with {len(rows)} rows")
        seen.append("read")


def test_a_reader_never_sees_a_source_half_written_or_missing(stores: Stores) -> None:
    """A reader thread reads every source while ``replace_sources`` rewrites them in batches
    of 7 (10 chunks -> 8): each answer is all v1 (10 rows) or all v2 (8 rows), never both,
    never a partial count, never empty. If this fails, a batch is not one transaction."""
    ids = [f"doc-{i:02d}" for i in range(40)]
    runtime = Runtime(limits=ragport.Limits(write_batch=7))
    rag = Rag(store=stores.store, embedder=EMB, scope=SCOPE, runtime=runtime)
    rag.replace_sources(_batch(ids, "v1", 10))
    stop, seen = threading.Event(), []  # type: ignore[var-annotated]
    thread = threading.Thread(
        target=_reader, args=(stores.store, ids, {"v1": 10, "v2": 8, "v3": 10}, stop, seen)
    )
    thread.start()
    try:
        rag.replace_sources(_batch(ids, "v2", 8))
        rag.replace_sources(_batch(ids, "v3", 10))
    finally:
        stop.set()
        thread.join()
    assert [s for s in seen if s != "read"] == []
    assert seen.count("read") >= 1
    assert all(_versions(stores.store, s) == ({"v3"}, 10) for s in ids)


def _folder(root: Path, ids: list[str], version: str, sections: int) -> None:
    root.mkdir(exist_ok=True)
    for sid in ids:
        body = "".join(
            f"## Part {k}\n\n{sid.split('.')[0]} {version} " + "filler " * 150 + "\n\n"
            for k in range(sections)
        )
        (root / sid).write_text(f"# {sid}\n\n{body}", encoding="utf-8")


def _ingest(root: Path, store: Any, status: Any, **kwargs: Any) -> list[Any]:
    return list(
        ingest_files(
            collect_documents([root], root=root.resolve()), root=root.resolve(), store=store,
            status_store=status, embedder=EMB, scope=SCOPE,
            options=IngestOptions(workers=2), **kwargs,
        )
    )  # fmt: skip


def test_a_batched_ingest_keeps_each_document_whole(stores: Stores, tmp_path: Path) -> None:
    """The pipelined ingest of a folder writes it in batches (one add per batch, one
    generation each) while a reader thread never sees a document half-written or missing;
    a file whose add fails is written alone after the batch rolls back, and fails alone.
    If this fails, check _Batch in ragport/application/ingest.py."""
    ids = [f"f{i:02d}.md" for i in range(12)]
    root = tmp_path / "docs"
    _folder(root, ids, "v1", 4)
    store = PoisonedAdds(stores.store, set())
    runtime = Runtime(limits=ragport.Limits(write_batch=5))
    first = _ingest(root, store, stores.status, runtime=runtime)
    assert [o.source_id for o in first] == ids
    assert [len(a) for a in store.adds] == [5, 5, 2]
    assert len({o.generation for o in first}) == 3
    _folder(root, ids, "v2", 2)
    counts = {"v1": first[0].chunks, "v2": first[0].chunks // 2}
    store.adds.clear()
    store.poison.add("f03.md")
    stop, seen = threading.Event(), []  # type: ignore[var-annotated]

    def read() -> None:  # one version is one content hash (the file's skip key)
        while not stop.is_set():
            for sid in ids:
                rows = stores.store.get_by_source(SCOPE, sid)
                hashes = {r.content_hash for r in rows}
                if len(hashes) != 1 or len(rows) not in (counts["v1"], counts["v2"]):
                    seen.append(f"{sid}: {len(rows)} rows, {len(hashes)} versions")
            seen.append("read")

    thread = threading.Thread(target=read)
    thread.start()
    try:
        second = _ingest(root, store, stores.status, runtime=runtime)
    finally:
        stop.set()
        thread.join()
    assert [s for s in seen if s != "read"] == []
    assert [o.source_id for o in second] == ids  # input order, as before
    assert [o.source_id for o in second if o.state == "failed"] == ["f03.md"]
    assert store.adds[0] == ids[:5]  # the first batch, rolled back
    assert store.adds[1:6] == [[s] for s in ids[:5]]  # its files one by one
    assert store.adds[6:] == [ids[5:10], ids[10:]]
    assert len(stores.store.get_by_source(SCOPE, "f03.md")) == counts["v1"]  # v1 whole
    assert stores.status.get(SCOPE, "f03.md").state == "failed"
    assert all(stores.status.get(SCOPE, s).state == "indexed" for s in ids if s != "f03.md")


def test_a_sync_page_adds_its_rows_in_one_call(stores: Stores) -> None:
    """A sync page of four changed items: one ``records.add`` with the rows of all four, one
    generation; the next run, with two changed, one add of those two.
    If this fails, check commit_page in ragport/application/sync.py."""
    from sync_support import DictConnector

    from ragport.adapters.parsers import parser_for

    store = PoisonedAdds(stores.store, set())
    items = {f"n{i}.md": f"# Note {i}\n\nversion one of note {i}.".encode() for i in range(4)}
    connector = DictConnector(items, page_size=10)

    def sync() -> Any:
        return ragport.bootstrap.sync_knowledge(
            connector=connector, checkpoints=stores.checkpoints, store=store, embedder=EMB,
            scope=SCOPE, status_store=stores.status, parser=parser_for,
        )  # fmt: skip

    first = sync()
    assert first.upserted == 4
    assert store.adds == [sorted(items)]
    store.adds.clear()
    connector.items["n1.md"] = b"# Note 1\n\nversion two."
    connector.items["n3.md"] = b"# Note 3\n\nversion two."
    second = sync()
    assert second.upserted == 2
    assert store.adds == [["n1.md", "n3.md"]]


def test_an_abort_during_a_batch_write_writes_nothing_and_leaves_nothing_pending(
    stores: Stores,
) -> None:
    """The caller's abort set while a batch is being written: the batch rolls back whole
    (every source keeps v1), ``AbortedError`` raises out without the one-by-one fall-back, and
    each source of the batch is ``failed``, none left ``pending``.
    If this fails, check write_batched's ``abandoned``."""
    store = PoisonedAdds(stores.store, set())
    stop = threading.Event()
    rag = Rag(
        store=store, embedder=EMB, scope=SCOPE, status_store=stores.status,
        runtime=Runtime(abort=stop),
    )  # fmt: skip
    ids = ["a", "b", "c"]
    rag.replace_sources(_batch(ids, "v1", 2))
    store.adds.clear()
    store.on_add = stop.set
    with pytest.raises(ragport.AbortedError):
        rag.replace_sources(_batch(ids, "v2", 3))
    assert store.adds == [ids]  # no fall-back after an abort
    for sid in ids:
        assert _versions(store, sid) == ({"v1"}, 2)
        assert stores.status.get(SCOPE, sid).state == "failed"
