"""SyncOptions and IngestOptions (issue 42): the run options of sync_knowledge, sync_connector
and ingest_files as values checked when built, and the keywords they replace kept for one
release with a DeprecationWarning that still does what the keyword did."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from doubles import CountingEmbedder
from sync_support import DictConnector

from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore
from ragport.adapters.parsers import parser_for
from ragport.application import WriteOptions
from ragport.application.ingest import IngestOptions
from ragport.application.sync import SyncOptions, sync_knowledge
from ragport.bootstrap import Stores, collect_documents, ingest_files, sync_connector
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope

SCOPE = Scope("t", "r", "c")
TEXT = "# Doc\n\n" + " ".join(f"word{i}" for i in range(400)) + "\n"


def _sync(**kwargs: Any) -> tuple[Any, InMemoryStore]:
    store = InMemoryStore()
    result = sync_knowledge(
        connector=DictConnector({"a.md": TEXT.encode(), "b.md": TEXT.encode()}),
        checkpoints=InMemoryCheckpointStore(), store=store, embedder=CountingEmbedder(),
        scope=SCOPE, status_store=InMemoryStatusStore(), parser=parser_for, **kwargs,
    )  # fmt: skip
    return result, store


def _chunks(store: InMemoryStore) -> int:
    return len(store.get_by_source(SCOPE, "a.md"))


def test_sync_options_set_what_the_old_keywords_set() -> None:
    """options=SyncOptions(write=WriteOptions(size=, overlap=), workers=) chunks as the
    deprecated size=/overlap=/workers= keywords do, and only the keywords warn.
    If this fails, check _old_sync_keywords in ragport/application/sync.py."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new, new_store = _sync(
            options=SyncOptions(write=WriteOptions(size=200, overlap=20), workers=2)
        )
    with pytest.warns(DeprecationWarning, match="overlap=, size=, workers="):
        old, old_store = _sync(size=200, overlap=20, workers=2)
    _, default_store = _sync()
    assert (new.upserted, new.pages) == (old.upserted, old.pages) == (2, 1)
    assert _chunks(new_store) == _chunks(old_store) > _chunks(default_store)


def test_sync_options_are_checked_when_built() -> None:
    """A bad field is a ValidationError naming it, before any sync runs.
    If this fails, check the converters of SyncOptions."""
    cases: list[tuple[dict[str, Any], str]] = [
        ({"workers": 0}, "workers"),
        ({"adopt": "yes"}, "adopt"),
        ({"restart": 1}, "restart"),
        ({"on_cursor_error": "ignore"}, "on_cursor_error"),
        ({"write": WriteOptions(advance_generation=False)}, "write"),
        ({"write": WriteOptions(skip_if_unchanged=False)}, "write"),
        ({"write": {"size": 10}}, "write"),
    ]
    for fields, field in cases:
        with pytest.raises(ValidationError) as info:
            SyncOptions(**fields)
        assert info.value.field == field, fields
    with pytest.raises(ValidationError) as info:
        _sync(options="fast")
    assert info.value.field == "options"


def test_sync_restart_reads_everything_again() -> None:
    """restart=True drops the checkpoint: a second run lists every item again (skipped as
    unchanged by their skip key) where a plain second run lists nothing new.
    If this fails, check the restart step of sync_knowledge."""
    connector = DictConnector({"a.md": TEXT.encode()})
    store, checkpoints = InMemoryStore(), InMemoryCheckpointStore()

    def run(options: SyncOptions) -> Any:
        return sync_knowledge(
            connector=connector, checkpoints=checkpoints, store=store,
            embedder=CountingEmbedder(), scope=SCOPE, parser=parser_for, options=options,
        )  # fmt: skip

    assert run(SyncOptions()).upserted == 1
    assert run(SyncOptions()).skipped == 0
    again = run(SyncOptions(restart=True))
    assert (again.bootstrapped, again.skipped, again.upserted) == (True, 1, 0)


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text(TEXT, encoding="utf-8")
    return root


def test_ingest_options_set_what_the_old_keywords_set(tmp_path: Path) -> None:
    """options=IngestOptions(write=WriteOptions(size=, overlap=), workers=) and the
    deprecated keywords index the same chunks; only the keywords warn.
    If this fails, check _old_ingest_keywords in ragport/bootstrap/ingest.py."""
    root = _folder(tmp_path)

    def run(**kwargs: Any) -> tuple[list[Any], InMemoryStore]:
        store = InMemoryStore()
        outcomes = list(
            ingest_files(
                collect_documents([root], root=root.resolve()), root=root.resolve(),
                store=store, status_store=None, embedder=CountingEmbedder(), scope=SCOPE,
                **kwargs,
            )
        )  # fmt: skip
        return outcomes, store

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new, new_store = run(
            options=IngestOptions(write=WriteOptions(size=200, overlap=20), workers=2)
        )
    with pytest.warns(DeprecationWarning, match="max_bytes=, overlap=, size=, workers="):
        old, old_store = run(size=200, overlap=20, workers=2, max_bytes=10)
    assert [o.state for o in new] == ["indexed"]
    assert [o.reason for o in old] == ["too_large"]  # max_bytes still caps the file
    _, small = run(options=IngestOptions(write=WriteOptions(size=200, overlap=20), workers=1))
    _, default = run(options=IngestOptions(workers=1))
    assert len(new_store.get_by_source(SCOPE, "a.md")) == len(small.get_by_source(SCOPE, "a.md"))
    assert len(small.get_by_source(SCOPE, "a.md")) > len(default.get_by_source(SCOPE, "a.md"))
    assert not old_store.get_by_source(SCOPE, "a.md")


def test_ingest_files_old_runtime_and_timer_keywords_still_apply(tmp_path: Path) -> None:
    """ingest_files' deprecated abort=, limits=, clock= and progress= still do what they did
    (folded into runtime= and options=), with a DeprecationWarning.
    If this fails, check _old_ingest_keywords in ragport/bootstrap/ingest.py."""
    import threading

    from ragport.domain.errors import AbortedError
    from ragport.domain.limits import Limits

    root = _folder(tmp_path)
    stop = threading.Event()
    stop.set()
    seen: list[str] = []

    class Progress:
        def working(self, name: str, stage: str) -> None:
            seen.append(stage)

        def embedded(self, chunks: int) -> None:
            return None

    def run(**kwargs: Any) -> list[Any]:
        return list(
            ingest_files(
                collect_documents([root], root=root.resolve()), root=root.resolve(),
                store=InMemoryStore(), status_store=None, embedder=CountingEmbedder(),
                scope=SCOPE, options=IngestOptions(workers=1), **kwargs,
            )
        )  # fmt: skip

    with pytest.warns(DeprecationWarning, match="abort="), pytest.raises(AbortedError):
        run(abort=stop)
    with pytest.warns(DeprecationWarning, match="limits="):
        capped = run(limits=Limits(parse_bytes=1_024))
    assert [o.reason for o in capped] == ["too_large"]  # the folded limits cap the file
    ticks = iter(range(100))
    with pytest.warns(DeprecationWarning, match="clock=, progress="):
        timed = run(clock=lambda: float(next(ticks)), progress=Progress())
    assert [o.seconds for o in timed] == [1.0] and "reading" in seen


def test_ingest_options_are_checked_when_built() -> None:
    """workers outside 1..32 and write options the pipeline cannot honour are refused.
    If this fails, check IngestOptions in ragport/application/ingest.py."""
    for fields, field in [
        ({"workers": 33}, "workers"),
        ({"workers": True}, "workers"),
        ({"write": WriteOptions(advance_generation=False)}, "write"),
    ]:
        with pytest.raises(ValidationError) as info:
            IngestOptions(**fields)  # type: ignore[arg-type]
        assert info.value.field == field


def test_sync_connector_old_keywords_warn_and_work(tmp_path: Path) -> None:
    """sync_connector's deprecated size=/adopt= still apply, with a DeprecationWarning.
    If this fails, check _old_keywords in ragport/bootstrap/syncing.py."""
    from ragport.adapters.connectors import FolderConnector

    root = _folder(tmp_path)
    stores = Stores(InMemoryStore(), InMemoryStatusStore(), "memory", InMemoryCheckpointStore())
    assert stores.checkpoints is not None
    with pytest.warns(DeprecationWarning, match="adopt=, size="):
        result = sync_connector(
            FolderConnector(root), stores=stores, checkpoints=stores.checkpoints,
            embedder=CountingEmbedder(), scope=SCOPE, size=200, adopt=True,
        )  # fmt: skip
    assert result.upserted == 1
    small = len(stores.chunks.get_by_source(SCOPE, "a.md"))
    stores2 = Stores(InMemoryStore(), InMemoryStatusStore(), "memory", InMemoryCheckpointStore())
    assert stores2.checkpoints is not None
    sync_connector(
        FolderConnector(root), stores=stores2, checkpoints=stores2.checkpoints,
        embedder=CountingEmbedder(), scope=SCOPE,
    )  # fmt: skip
    assert small > len(stores2.chunks.get_by_source(SCOPE, "a.md"))


def test_the_pipeline_warnings_name_the_callers_line_and_the_release(tmp_path: Path) -> None:
    """sync_knowledge (also through ragport.bootstrap's wired one), sync_connector and
    ingest_files warn as every deprecation does: naming the caller's file, the release that
    removes the keywords and docs/deprecations.md. If this fails, check warn_deprecated in
    ragport/domain/deprecation.py and its callers."""
    from ragport.adapters.connectors import FolderConnector
    from ragport.bootstrap import sync_knowledge as wired

    root = _folder(tmp_path)
    stores = Stores(InMemoryStore(), InMemoryStatusStore(), "memory", InMemoryCheckpointStore())
    assert stores.checkpoints is not None
    kwargs: dict[str, Any] = {"embedder": CountingEmbedder(), "scope": SCOPE, "size": 200}
    calls = [
        lambda: _sync(size=200),
        lambda: wired(connector=FolderConnector(root), checkpoints=InMemoryCheckpointStore(),
                      store=InMemoryStore(), **kwargs),
        lambda: sync_connector(FolderConnector(root), stores=stores,
                               checkpoints=stores.checkpoints, **kwargs),
        lambda: list(ingest_files(collect_documents([root], root=root.resolve()),
                                  root=root.resolve(), store=InMemoryStore(),
                                  status_store=None, **kwargs)),
    ]  # fmt: skip
    for call in calls:
        with pytest.warns(DeprecationWarning, match=r"size=.*ragport 0\.2") as caught:
            call()
        assert [w.filename for w in caught] == [__file__]
        assert "docs/deprecations.md" in str(caught[0].message)


def test_demo_documents_moved_to_the_demo_package() -> None:
    """ragport.bootstrap.demo_documents still answers, warning, with what
    ragport.demo.demo_markdown gives. If this fails, check ragport/bootstrap/ingest.py."""
    from ragport.bootstrap import demo_documents
    from ragport.demo import demo_markdown

    with pytest.warns(DeprecationWarning, match="ragport.demo.demo_markdown"):
        old = demo_documents()
    assert old == demo_markdown() and "leave-policy.md" in old
