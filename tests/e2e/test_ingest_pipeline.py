"""The pipelined ingest (bootstrap.ingest.ingest_files with workers > 1, issue 27): the same
outcomes and stored rows as the serial path, a bad file failing alone, bounded files and
chunks in flight, a clean abort, embed calls spanning several files, generations in input
order."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from doubles import CountingEmbedder
from sync_support import Stores, sync_stores

import ragport
from ragport.application import Runtime
from ragport.application import ingest as ingest_module
from ragport.application import pipeline as pipeline_module
from ragport.application.ingest import IngestOptions
from ragport.bootstrap.ingest import collect_documents, ingest_files

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(params=["memory", "postgres"])
def stores(request: Any) -> Stores:
    return sync_stores(request)


def _section(n: int, words: int) -> str:
    body = " ".join(f"word{(n * 7 + i) % 97} topic{n}" for i in range(words))
    return f"## Section {n}\n\n{body}.\n\n"


def mixed_folder(root: Path, *, small: int = 12, bad_at: int | None = 5) -> Path:
    """tests/data's Markdown, HTML, PDF and DOCX plus ``small`` generated Markdown files of
    a few chunks each, and (``bad_at``) one malformed PDF in the middle of the order."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA / "handbook.md", root / "a-handbook.md")
    shutil.copy(DATA / "travel-policy.pdf", root / "c-travel-policy.pdf")
    shutil.copy(DATA / "security-handbook.docx", root / "e-security.docx")
    shutil.copy(DATA / "site" / "leave.html", root / "g-leave.html")
    for n in range(small):
        text = f"# Note {n}\n\n" + "".join(_section(n * 10 + k, 40 + n) for k in range(3))
        (root / f"m-note-{n:02d}.md").write_text(text, encoding="utf-8")
    if bad_at is not None:
        (root / f"m-note-{bad_at:02d}-bad.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    return root


def run(root: Path, stores: Stores, scope: ragport.Scope, **kwargs: Any) -> list[Any]:
    kwargs.setdefault("embedder", CountingEmbedder())
    if "workers" in kwargs:
        kwargs["options"] = IngestOptions(workers=kwargs.pop("workers"))
    return list(
        ingest_files(
            collect_documents([root], root=root.resolve()),
            root=root.resolve(),
            store=stores.store,
            status_store=stores.status,
            scope=scope,
            **kwargs,
        )
    )


def rows(stores: Stores, scope: ragport.Scope, source_ids: list[str]) -> list[tuple[Any, ...]]:
    out = []
    for sid in source_ids:
        for r in sorted(stores.store.get_by_source(scope, sid), key=lambda r: r.id):
            out.append((r.id, r.text, r.metadata, r.content_hash, r.generation, r.start, r.end))
    return out


def shape(outcomes: list[Any]) -> list[tuple[Any, ...]]:
    return [(o.path, o.source_id, o.state, o.chunks, o.replaced, o.generation, o.reason)
            for o in outcomes]  # fmt: skip


def _no_generation(rows: list[tuple[Any, ...]], at: int) -> list[tuple[Any, ...]]:
    return [r[:at] + r[at + 1 :] for r in rows]


def test_pipeline_matches_the_serial_path(tmp_path: Path, stores: Stores) -> None:
    """Over a mixed folder (md, html, pdf, docx, a bad PDF in the middle) workers=1 and
    workers=3 give the same outcomes in the same order and the same stored rows; the serial
    path writes a generation per file, the pipelined one a batch (every file here) at ONE
    generation; the bad file fails alone and the files after it are indexed.
    If this fails, check run_pipeline in ragport/application/pipeline.py and _Batch in
    ragport/application/ingest.py."""
    root = mixed_folder(tmp_path / "docs")
    serial_scope = ragport.Scope("t", "r", "serial")
    piped_scope = ragport.Scope("t", "r", "piped")
    serial = run(root, stores, serial_scope, workers=1)
    piped = run(root, stores, piped_scope, workers=3)
    assert _no_generation(shape(piped), 5) == _no_generation(shape(serial), 5)
    serial_generations = [o.generation for o in serial if o.state == "indexed"]
    assert serial_generations == sorted(set(serial_generations))  # one each, in input order
    assert len({o.generation for o in piped if o.state == "indexed"}) == 1  # one batch
    failed = [o for o in piped if o.state == "failed"]
    assert [o.source_id for o in failed] == ["m-note-05-bad.pdf"]
    position = [o.source_id for o in piped].index("m-note-05-bad.pdf")
    assert piped[position + 1].state == "indexed" and piped[position - 1].state == "indexed"
    indexed = [o for o in piped if o.state == "indexed"]
    assert len(indexed) == len(piped) - 1
    ids = [o.source_id for o in indexed]
    assert _no_generation(rows(stores, piped_scope, ids), 4) == _no_generation(
        rows(stores, serial_scope, ids), 4
    )
    assert rows(stores, piped_scope, ids)  # something was compared
    again = run(root, stores, piped_scope, workers=3)
    assert [o.state for o in again if o.source_id in ids] == ["unchanged"] * len(ids)


def test_one_embed_call_carries_the_chunks_of_several_files(tmp_path: Path) -> None:
    """Twenty small files (3 chunks each) go to the embedder in calls of more than 32 texts,
    at most embed_batch x EMBED_CALL_BATCHES, and the grouping does not depend on timing:
    a slow parse changes no call. If this fails, check _next_group in ragport/application/pipeline.py."""
    root = tmp_path / "docs"
    root.mkdir()
    for n in range(20):
        text = f"# Small {n}\n\n" + "".join(_section(n * 10 + k, 120) for k in range(3))
        (root / f"s{n:02d}.md").write_text(text, encoding="utf-8")
    embedder = CountingEmbedder()
    outcomes = run(
        root, sync_stores_memory(), ragport.Scope("t", "r", "c"), embedder=embedder, workers=2
    )
    assert all(o.state == "indexed" for o in outcomes)
    chunks = sum(o.chunks for o in outcomes)
    assert chunks >= 60
    sizes = [len(c) for c in embedder.calls]
    assert sum(sizes) == chunks
    assert max(sizes) > 32
    assert max(sizes) <= pipeline_module.PIPELINE_CALL
    assert len(sizes) < len(outcomes)
    # the same folder with every parse slowed down and the first file slowest: same calls
    slowed = CountingEmbedder()
    real = ingest_module.prepare_document

    def slow_prepare(loaded: Any, **kwargs: Any) -> Any:
        import time

        time.sleep(0.2 if kwargs["source_id"] == "s00.md" else 0.01)
        return real(loaded, **kwargs)

    ingest_module.prepare_document = slow_prepare  # type: ignore[assignment]
    try:
        run(root, sync_stores_memory(), ragport.Scope("t", "r", "c"), embedder=slowed, workers=2)
    finally:
        ingest_module.prepare_document = real  # type: ignore[assignment]
    assert [len(c) for c in slowed.calls] == sizes


def test_a_file_name_with_a_control_character_fails_alone(tmp_path: Path) -> None:
    """A file whose name has a control character (an id the domain refuses) is that file's
    failure in the pipeline, as in the serial path: the other files are indexed, and no
    status is recorded under the refused id. If this fails, check _Ingest.settle's record_failed."""
    root = mixed_folder(tmp_path / "docs", small=4, bad_at=None)
    (root / "b-red\x1b[31mzebra.md").write_text("# Red\n\nA red zebra.\n", encoding="utf-8")
    outcomes = {}
    for workers in (1, 3):
        stores = sync_stores_memory()
        got = run(root, stores, ragport.Scope("t", "r", f"w{workers}"), workers=workers)
        outcomes[workers] = _no_generation(shape(got), 5)  # pipelined: one batch, one generation
        failed = [o for o in got if o.state == "failed"]
        assert len(failed) == 1 and "zebra" in failed[0].path, shape(got)
        assert [o.state for o in got if o is not failed[0]] == ["indexed"] * (len(got) - 1)
    assert outcomes[3] == outcomes[1]


def sync_stores_memory() -> Stores:
    from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore

    return Stores(InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore())  # type: ignore[call-arg]


def test_files_and_chunks_in_flight_are_bounded(tmp_path: Path, monkeypatch) -> None:
    """Sixty one-chunk files, workers=2, calls of at most 8 texts: never more than 2 parses
    at once, at most 2 x workers + 3 x the call size files between their parse and their
    outcome, and no embed call past the call size.
    If this fails, check the admission bounds in ragport/application/pipeline.py."""
    import ragport.adapters.parsers as parsers

    monkeypatch.setattr(pipeline_module, "PIPELINE_CALL", 8)
    real = parsers.parser_for
    lock = threading.Lock()
    state = {"now": 0, "most": 0, "started": 0, "yielded": 0, "ahead": 0}

    class Counting:
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.id = inner.id
            self.max_bytes = inner.max_bytes

        def parse(self, data: bytes, **kwargs: Any) -> Any:
            with lock:
                state["now"] += 1
                state["started"] += 1
                state["most"] = max(state["most"], state["now"])
                state["ahead"] = max(state["ahead"], state["started"] - state["yielded"])
            try:
                threading.Event().wait(0.002)
                return self.inner.parse(data, **kwargs)
            finally:
                with lock:
                    state["now"] -= 1

    monkeypatch.setattr(parsers, "parser_for", lambda *a, **k: Counting(real(*a, **k)))
    root = tmp_path / "docs"
    root.mkdir()
    for n in range(60):
        (root / f"f{n:02d}.md").write_text(f"# File {n}\n\nshort text {n}.\n", encoding="utf-8")
    embedder = CountingEmbedder()
    for outcome in ingest_files(
        collect_documents([root], root=root.resolve()),
        root=root.resolve(),
        store=_memory(),
        status_store=None,
        embedder=embedder,
        scope=ragport.Scope("t", "r", "c"),
        options=IngestOptions(workers=2),
        runtime=Runtime(limits=ragport.Limits(write_batch=4)),
    ):
        assert outcome.state == "indexed"
        with lock:
            state["yielded"] += 1
    assert state["yielded"] == 60
    assert 1 <= state["most"] <= 2
    assert state["ahead"] <= 2 * 2 + 3 * 8 + 4  # + the documents held for one write batch
    assert max(len(c) for c in embedder.calls) <= 8


def _memory() -> Any:
    from ragport.adapters.memory import InMemoryStore

    return InMemoryStore()


def test_abort_mid_run_leaves_each_source_old_or_new(tmp_path: Path) -> None:
    """An abort set after the second embed call stops the run with AbortedError, leaves no
    pipeline thread, and every source holds either its old rows or its new ones, whole.
    If this fails, check the finally of ragport.application.pipeline._Run.items and
    _Ingest.settle."""
    root = tmp_path / "docs"
    root.mkdir()
    for n in range(30):
        (root / f"d{n:02d}.md").write_text(
            f"# Doc {n}\n\n" + "".join(_section(n * 10 + k, 120) for k in range(3)),
            encoding="utf-8",
        )
    stores = sync_stores_memory()
    scope = ragport.Scope("t", "r", "c")
    first = run(root, stores, scope, workers=1)
    ids = [o.source_id for o in first]
    old = {sid: {r.text for r in stores.store.get_by_source(scope, sid)} for sid in ids}
    for n in range(30):
        path = root / f"d{n:02d}.md"
        path.write_text(path.read_text().replace("word", "term"), encoding="utf-8")
    abort = threading.Event()
    embedder = CountingEmbedder(set_after_call=2, event=abort)
    seen: list[Any] = []
    before = set(threading.enumerate())  # a PostgreSQL store's maintenance thread, say
    with pytest.raises(ragport.AbortedError):
        for outcome in ingest_files(
            collect_documents([root], root=root.resolve()),
            root=root.resolve(),
            store=stores.store,
            status_store=stores.status,
            embedder=embedder,
            scope=scope,
            options=IngestOptions(workers=2),
            runtime=Runtime(abort=abort),
        ):
            seen.append(outcome)
    started = set(threading.enumerate()) - before
    assert not [t for t in started if t.name.startswith("ragport-")]
    assert len(seen) < 30
    new_count = 0
    for sid in ids:
        texts = {r.text for r in stores.store.get_by_source(scope, sid)}
        assert texts, sid
        if texts != old[sid]:
            assert all("term" in t and "word" not in t for t in texts if "## Section" in t)
            new_count += 1
    assert new_count == sum(o.state == "indexed" for o in seen)


def test_closing_the_generator_stops_every_thread(tmp_path: Path) -> None:
    """Leaving the loop early (as Ctrl-C does) stops the parse and embed threads.
    If this fails, check the finally of ragport.application.pipeline._Run.items."""
    root = mixed_folder(tmp_path / "docs", small=10, bad_at=None)
    before = set(threading.enumerate())  # a PostgreSQL store's maintenance thread, say
    results = ingest_files(
        collect_documents([root], root=root.resolve()),
        root=root.resolve(),
        store=_memory(),
        status_store=None,
        embedder=CountingEmbedder(),
        scope=ragport.Scope("t", "r", "c"),
        options=IngestOptions(workers=3),
    )
    next(results)
    results.close()
    started = set(threading.enumerate()) - before
    assert not [t for t in started if t.name.startswith("ragport-")]


@pytest.mark.parametrize("bad", [0, 33, -1, True, "2"])
def test_workers_is_validated(tmp_path: Path, bad: Any) -> None:
    """workers outside 1..32 (or not an int) is a ValidationError before any file is read.
    If this fails, check check_workers."""
    with pytest.raises(ragport.ValidationError) as info:
        run(tmp_path, sync_stores_memory(), ragport.Scope("t", "r", "c"), workers=bad)
    assert info.value.field == "workers"


def test_the_cli_takes_workers(tmp_path: Path, capsys) -> None:
    """`ragport ingest --workers 1` and `--workers 2` index the same folder alike; 0 exits 2.
    If this fails, check _ingest in ragport/cli/ingest.py."""
    from ragport.cli import main

    root = mixed_folder(tmp_path / "docs", small=3, bad_at=None)
    base = ["ingest", str(root), "--store", "memory://", "--embedder", "hash", "--json"]
    assert main([*base, "--workers", "1"]) == 0
    one = capsys.readouterr().out
    assert main([*base, "--workers", "2"]) == 0
    two = capsys.readouterr().out
    strip = [line.split('"seconds"')[0] for line in one.splitlines()]
    assert strip == [line.split('"seconds"')[0] for line in two.splitlines()]
    assert main([*base, "--workers", "0"]) != 0


class PoisonEmbedder(CountingEmbedder):
    """Refuses any call holding a text with ``poison`` (an embedder's verdict on one input)."""

    def embed(self, texts: Any) -> Any:
        if any("poison" in t for t in texts):
            self.calls.append(list(texts))
            raise ragport.domain.errors.EmbedderError("refused an input")
        return super().embed(texts)


def test_a_file_the_embedder_refuses_fails_alone(tmp_path: Path) -> None:
    """Ten small files embedded in shared calls, one holding a text the embedder refuses:
    that file fails (EmbedderError), the nine others are indexed with their rows.
    If this fails, check the solo retry in _Run._ready (ragport/application/pipeline.py)."""
    root = tmp_path / "docs"
    root.mkdir()
    for n in range(10):
        word = "poison" if n == 4 else "fine"
        (root / f"p{n:02d}.md").write_text(
            f"# Doc {n}\n\n{word} " + _section(n, 60), encoding="utf-8"
        )
    stores = sync_stores_memory()
    scope = ragport.Scope("t", "r", "c")
    embedder = PoisonEmbedder()
    outcomes = run(root, stores, scope, embedder=embedder, workers=2)
    assert [o.state for o in outcomes] == ["indexed"] * 4 + ["failed"] + ["indexed"] * 5
    assert outcomes[4].reason == "EmbedderError"
    for o in outcomes:
        assert bool(stores.store.get_by_source(scope, o.source_id)) == (o.state == "indexed")
    assert stores.status.get(scope, "p04.md").state == "failed"


@pytest.mark.slow
def test_a_folder_of_thousands_with_a_file_near_the_cap(tmp_path: Path) -> None:
    """2,000 small files and one Markdown file of about 900 kB (the default cap is 1 MiB)
    through the pipeline: every file indexed once, in input order, the big one whole (its
    chunks cover its text), and the embed calls never above PIPELINE_CALL texts."""
    root = tmp_path / "docs"
    root.mkdir()
    for n in range(2_000):
        (root / f"f{n:04d}.md").write_text(f"# F{n}\n\nfile {n} about topic{n % 37}.\n")
    big = "# Big\n\n" + "".join(_section(k, 150) for k in range(390))
    assert 800_000 < len(big.encode()) < 1_048_576
    (root / "m-big.md").write_text(big, encoding="utf-8")
    embedder = CountingEmbedder()
    stores = sync_stores_memory()
    scope = ragport.Scope("t", "r", "big")
    outcomes = run(root, stores, scope, embedder=embedder, workers=3)
    assert [o.state for o in outcomes] == ["indexed"] * 2_001
    assert [o.source_id for o in outcomes] == sorted(o.source_id for o in outcomes)
    generations = [o.generation for o in outcomes]
    assert generations == sorted(generations)
    stored = stores.store.get_by_source(scope, "m-big.md")
    assert len(stored) == next(o.chunks for o in outcomes if o.source_id == "m-big.md") > 500
    assert "Section 389" in "".join(r.text for r in stored)
    assert max(len(c) for c in embedder.calls) <= pipeline_module.PIPELINE_CALL
    assert sum(len(c) for c in embedder.calls) == sum(o.chunks for o in outcomes)
