"""sync_knowledge(workers > 1), issue 27: a page's items load and parse on worker threads and
their chunks embed while later items parse, with the same result as workers=1 on both stores
(rows, statuses, counts, progress order), and a page error or an abort stops every thread and
commits nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from doubles import CountingEmbedder
from flat_options import flat
from sync_support import DictConnector, Stores, sync_stores

import ragport
from ragport.adapters.parsers import parser_for
from ragport.application import WriteOptions
from ragport.application.sync import SyncOptions
from ragport.domain.errors import AbortedError, EmbedderError, ValidationError
from ragport.ports.sync import Upsert


def _doc(i: int, version: int = 1) -> bytes:
    sections = "".join(
        f"## Part {k}\n\nDocument {i} version {version} part {k}: "
        + " ".join(f"w{(i * 13 + k * 7 + j) % 89}" for j in range(60))
        + ".\n\n"
        for k in range(3)
    )
    return f"# Doc {i}\n\n{sections}".encode()


ITEMS = {f"doc-{i:02d}.md": _doc(i) for i in range(30)}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def stores(request: Any) -> Iterator[Stores]:
    yield sync_stores(request)


def _connector() -> DictConnector:
    connector = DictConnector(ITEMS, page_size=10)
    connector.access["doc-04.md"] = None  # withheld
    connector.fail_load.add("doc-17.md")
    return connector


def _sync(stores: Stores, connector: Any, scope: ragport.Scope, **kwargs: Any) -> Any:
    kwargs.setdefault("embedder", CountingEmbedder())
    write = {k: kwargs.pop(k) for k in ("batch_size",) if k in kwargs}
    run = {k: kwargs.pop(k) for k in ("workers", "on_progress") if k in kwargs}
    options = SyncOptions(write=WriteOptions(**write), **run)
    return ragport.bootstrap.sync_knowledge(
        connector=connector, checkpoints=stores.checkpoints, store=stores.store, scope=scope,
        status_store=stores.status, parser=parser_for, options=options, **flat(**kwargs),
    )  # fmt: skip


def _state(stores: Stores, scope: ragport.Scope) -> tuple[Any, ...]:
    rows = []
    statuses = []
    for sid in sorted(ITEMS):
        for r in sorted(stores.store.get_by_source(scope, sid), key=lambda r: r.id):
            rows.append((r.id, r.text, r.metadata, r.content_hash, r.generation))
        status = stores.status.get(scope, sid)
        if status is not None:
            statuses.append(
                (sid, status.state, status.freshness, status.chunks_total, status.error)
            )
    return tuple(rows), tuple(statuses)


def _counts(result: Any) -> tuple[Any, ...]:
    return (result.pages, result.upserted, result.skipped, result.withheld, result.failed,
            result.deleted, result.exhausted, [f.source_id for f in result.failures])  # fmt: skip


def test_workers_give_the_same_result_as_one(stores: Stores) -> None:
    """Three pages (a withheld item, a failed load) then an edit, a deletion and a fixed load:
    workers=4 writes the same rows, statuses and counts as workers=1, and reports progress
    in the same order. If this fails, check prepare_page in ragport/application/_sync_page.py and run_pipeline in
    ragport/application/pipeline.py."""
    serial, piped = ragport.Scope("t", "r", "serial"), ragport.Scope("t", "r", "piped")
    connectors = {1: _connector(), 4: _connector()}
    progress: dict[int, list[str | None]] = {1: [], 4: []}
    results: dict[int, list[tuple[Any, ...]]] = {1: [], 4: []}
    for round_ in range(2):
        for workers, scope in ((1, serial), (4, piped)):
            connector = connectors[workers]
            if round_ == 1:
                connector.edit("doc-07.md", _doc(7, version=2))
                connector.remove("doc-21.md")
                connector.fail_load.clear()
            result = _sync(
                stores, connector, scope, workers=workers,
                on_progress=lambda p, w=workers: progress[w].append(p.source_id),
            )  # fmt: skip
            results[workers].append(_counts(result))
    assert results[4] == results[1]
    assert results[1][0][1] == 28 and results[1][0][4] == 1  # upserted, failed: non-trivial
    assert progress[4] == progress[1]
    assert _state(stores, piped) == _state(stores, serial)
    assert _state(stores, piped)[0]  # something was compared
    texts = [r[1] for r in _state(stores, piped)[0] if r[0].startswith("doc-07.md")]
    assert texts and all("version 2" in t for t in texts if "part" in t)


class _Watch:
    """Loads that sleep, counting how many run at once; an embedder noting loads in flight."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loading = 0
        self.most = 0
        self.embeds_during_loads = 0
        self.calls: list[int] = []

    def wrap(self, connector: DictConnector) -> DictConnector:
        real = connector._upsert

        def upsert(source_id: str) -> Any:
            item = real(source_id)

            def load() -> Any:
                with self.lock:
                    self.loading += 1
                    self.most = max(self.most, self.loading)
                try:
                    time.sleep(0.03)
                    return item.load()
                finally:
                    with self.lock:
                        self.loading -= 1

            return Upsert(
                item.source_id, load, media_type=item.media_type, revision=item.revision,
                access=item.access,
            )  # fmt: skip

        connector._upsert = upsert  # type: ignore[method-assign]
        return connector

    def embedder(self) -> Any:
        watch = self
        inner = CountingEmbedder()

        class Embedder:
            id = inner.id
            dimensions = inner.dimensions

            def embed(self, texts: Any) -> Any:
                with watch.lock:
                    watch.embeds_during_loads += watch.loading > 0
                    watch.calls.append(len(texts))
                time.sleep(0.02)
                return inner.embed(texts)

        return Embedder()


def test_items_parse_at_once_and_embedding_overlaps_parsing() -> None:
    """With workers=3 up to three loads run at once and embed calls run while items still
    load; with workers=1 neither happens. Embed calls stay at batch_size x 4 texts."""
    from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore

    seen = {}
    for workers in (1, 3):
        watch = _Watch()
        stores = Stores(InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore())
        connector = watch.wrap(DictConnector(ITEMS, page_size=30))
        result = _sync(
            stores, connector, ragport.Scope("t", "r", "w"), workers=workers,
            embedder=watch.embedder(), batch_size=2,
        )  # fmt: skip
        assert result.upserted == 30
        seen[workers] = (watch.most, watch.embeds_during_loads, max(watch.calls))
    assert seen[1][:2] == (1, 0)
    assert seen[3][0] == 3 and seen[3][1] > 0, seen
    assert seen[3][2] <= 8 and seen[1][2] <= 8


def _threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("ragport-sync")]


def test_an_embed_failure_stops_every_thread_and_commits_nothing(stores: Stores) -> None:
    scope = ragport.Scope("t", "r", "fail")

    class Refusing:
        id = CountingEmbedder().id
        dimensions = CountingEmbedder().dimensions

        def embed(self, texts: Any) -> Any:
            raise EmbedderError("the embedder is down", retryable=False)

    with pytest.raises(EmbedderError):
        _sync(stores, _connector(), scope, workers=3, embedder=Refusing(), batch_size=2)
    assert _threads() == []
    assert all(not stores.store.get_by_source(scope, sid) for sid in ITEMS)
    assert stores.checkpoints.get("dict", scope).version == 0


def test_an_abort_mid_page_stops_every_thread_and_commits_nothing(stores: Stores) -> None:
    scope = ragport.Scope("t", "r", "abort")
    abort = threading.Event()
    connector = _connector()
    real = connector._upsert

    def upsert(source_id: str) -> Any:
        item = real(source_id)

        def load() -> Any:
            if source_id == "doc-05.md":
                abort.set()
            return item.load()

        return Upsert(
            item.source_id, load, media_type=item.media_type, revision=item.revision,
            access=item.access,
        )  # fmt: skip

    connector._upsert = upsert  # type: ignore[method-assign]
    with pytest.raises(AbortedError):
        _sync(stores, connector, scope, workers=3, abort=abort)
    assert _threads() == []
    assert all(not stores.store.get_by_source(scope, sid) for sid in ITEMS)


@pytest.mark.parametrize("bad", [0, 33, True, 2.0, "2"])
def test_workers_is_validated(bad: Any) -> None:
    from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore

    stores = Stores(InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore())
    with pytest.raises(ValidationError) as err:
        _sync(stores, _connector(), ragport.Scope("t", "r", "v"), workers=bad)
    assert err.value.field == "workers"


def test_the_cli_syncs_a_folder_with_workers(
    tmp_path: Any, capsys: Any, pg_url: str, pg_schema: str
) -> None:
    """`ragport sync folder --workers N`: N=1 and N=3 give the same per-file results; a bad
    value is a usage error before any store opens."""
    import json

    from ragport.cli import main

    root = tmp_path / "notes"
    root.mkdir()
    for sid, data in list(ITEMS.items())[:12]:
        (root / sid).write_bytes(data)
    (root / "bad.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    store = ["--store", pg_url, "--schema", pg_schema]
    assert main(["db", "upgrade", *store]) == 0
    capsys.readouterr()
    summaries = {}
    for workers in ("1", "3"):
        code = main(["sync", "folder", str(root), "--corpus", f"w{workers}", "--workers", workers,
                     *store, "--embedder", "hash", "--json"])  # fmt: skip
        out = capsys.readouterr().out
        assert code == 1, out  # one file failed
        summary = json.loads(out)
        summaries[workers] = (summary["upserted"], summary["failed"])
    assert summaries["3"] == summaries["1"] == (12, 1)
    assert main(["sync", "folder", str(root), "--workers", "0", "--embedder", "hash"]) == 2
    assert "workers" in capsys.readouterr().err


@pytest.mark.slow
def test_a_page_of_a_thousand_items_with_one_near_the_cap() -> None:
    """1,200 items (two pages) and one Markdown item of about 900 kB: workers=3 stores the
    same rows as workers=1, the big item whole."""
    from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore

    items = {
        f"s{n:04d}.md": f"# S{n}\n\nitem {n} about topic{n % 41}.\n".encode() for n in range(1_200)
    }
    items["big.md"] = b"# Big\n\n" + b"".join(
        f"## Part {k}\n\n{' '.join(f'w{(k * 11 + j) % 97}' for j in range(300))}.\n\n".encode()
        for k in range(750)
    )
    assert 800_000 < len(items["big.md"]) < 1_048_576
    state = {}
    for workers in (1, 3):
        stores = Stores(InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore())
        scope = ragport.Scope("t", "r", "big")
        result = _sync(stores, DictConnector(items, page_size=700), scope, workers=workers)
        assert (result.pages, result.upserted, result.failed) == (2, 1_201, 0), _counts(result)
        big = stores.store.get_by_source(scope, "big.md")
        assert len(big) > 500 and "Part 749" in "".join(r.text for r in big)
        state[workers] = sorted(
            (r.source_id, r.id, r.text)
            for sid in items
            for r in stores.store.get_by_source(scope, sid)
        )
    assert state[3] == state[1]
