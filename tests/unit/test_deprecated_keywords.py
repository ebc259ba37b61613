"""One runtime argument (issue 42): every use case takes ``runtime=`` and nothing ``Runtime``
holds as its own keyword; the write side's options travel in ``write_options=``. The keywords
of old keep working for one release: each warns ``DeprecationWarning`` and still has its
effect (folded into the call's ``Runtime`` / ``WriteOptions``)."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

import ragport.application as application
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStatusStore, InMemoryStore
from ragport.adapters.parsers import TextParser
from ragport.adapters.rerankers import FakeReranker
from ragport.aio import AsyncRag
from ragport.application import (
    Rag,
    Runtime,
    SharedGeneration,
    WriteOptions,
    apply_source_renames,
    create_deletion_propagator,
    delete_source,
    index_chunks,
    index_derived,
    replace_document,
    replace_source,
    repoint_source,
    rerank_hits,
    retrieve_context,
    rollback_generation,
)
from ragport.application.deprecation import RUNTIME_KEYWORDS, folds_keywords
from ragport.application.documents import prepare_document, replace_prepared
from ragport.application.propagation import DeletionPropagator
from ragport.domain.errors import AbortedError, PropagationError, RerankError, ValidationError
from ragport.domain.limits import Limits
from ragport.domain.model import Chunk, Rename, Scope
from ragport.ports.documents import LoadedDocument

SCOPE = Scope("t", "r", "deprecated")
EMB = HashEmbedder(32)
NOON = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
TEXT = "Parental leave lasts sixteen weeks. " * 8


class _Clock:
    def now(self) -> datetime:
        return NOON


class _Spans:
    """A Telemetry that records span names."""

    def __init__(self) -> None:
        self.names: list[str] = []

    @contextmanager
    def span(self, name: str) -> Iterator[Any]:
        self.names.append(name)

        class _Span:
            def set_attribute(self, key: str, value: Any) -> None:
                return None

        yield _Span()

    def count(self, name: str, value: int = 1) -> None:
        return None


class _Loader:
    def load(self, uri: str) -> LoadedDocument:
        return LoadedDocument(TEXT.encode(), "text/plain")


def _Parser() -> TextParser:  # reads like the class it stands for
    return TextParser()


class _Fails:
    kind = "fails"

    def on_propagate(self, source_id: str, ids: Any, scope: Scope) -> int:
        raise RuntimeError("token sk-live-123 leaked")

    def on_repoint(self, from_id: str, to_id: str, scope: Scope) -> int:
        return 0


def _aborted() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


def _store(*sources: str) -> InMemoryStore:
    store = InMemoryStore()
    for source in sources:
        replace_source(
            source_id=source,
            chunks=[Chunk.of(source, 0, f"{source} says hello")],
            embedder=EMB,
            store=store,
            scope=SCOPE,
        )
    return store


def _chunks(source: str = "a", n: int = 3) -> list[Chunk]:
    return [Chunk.of(source, i, f"{source} text {i}") for i in range(n)]


# -- each case: the call with old keywords, and a check that they still had their effect ----


def _replace_source_status() -> None:
    status, store = InMemoryStatusStore(), InMemoryStore()
    replace_source(source_id="a", chunks=_chunks(), embedder=EMB, store=store, scope=SCOPE,
                   status_store=status, batch_size=2)  # type: ignore[call-arg]  # fmt: skip
    assert status.get(SCOPE, "a") is not None


def _replace_source_staged() -> None:
    store = InMemoryStore()
    result = replace_source(source_id="a", chunks=_chunks(), embedder=EMB, store=store,
                            scope=SCOPE, advance_generation=False)  # type: ignore[call-arg]  # fmt: skip
    assert store.current_generation(SCOPE) < result.generation


def _replace_source_no_skip() -> None:
    store = InMemoryStore()
    kw: dict[str, Any] = {"source_id": "a", "chunks": _chunks(), "embedder": EMB,
                          "store": store, "scope": SCOPE, "content_hash": "ab" * 32}  # fmt: skip
    replace_source(**kw)
    assert not replace_source(**kw, skip_if_unchanged=False).skipped


def _replace_source_shared() -> None:
    store, shared = InMemoryStore(), SharedGeneration()
    for source in ("a", "b"):
        replace_source(source_id=source, chunks=_chunks(source), embedder=EMB, store=store,
                       scope=SCOPE, shared_generation=shared)  # type: ignore[call-arg]  # fmt: skip
    assert shared.generations == (1,)


def _replace_document_size() -> None:
    store, status = InMemoryStore(), InMemoryStatusStore()
    result = replace_document(uri="doc", loader=_Loader(), parser=_Parser(), embedder=EMB,
                              store=store, scope=SCOPE, size=60, overlap=0, batch_size=4,
                              status_store=status)  # type: ignore[call-arg]  # fmt: skip
    assert result.indexed > 3
    assert max(len(r.text) for r in store.get_by_source(SCOPE, "doc")) <= 60
    assert status.get(SCOPE, "doc") is not None


def _replace_document_bad_overlap() -> None:
    with pytest.raises(ValidationError) as caught:
        replace_document(uri="doc", loader=_Loader(), parser=_Parser(), embedder=EMB,
                         store=InMemoryStore(), scope=SCOPE, size=50, overlap=50)  # type: ignore[call-arg]  # fmt: skip
    assert caught.value.field == "overlap"


def _index_chunks_status() -> None:
    status = InMemoryStatusStore()
    index_chunks(chunks=_chunks(), embedder=EMB, store=InMemoryStore(), scope=SCOPE,
                 status_store=status, batch_size=1)  # type: ignore[call-arg]  # fmt: skip
    assert status.get(SCOPE, "a") is not None


def _delete_source_abort() -> None:
    store = _store("a")
    with pytest.raises(AbortedError):
        delete_source(source_id="a", store=store, scope=SCOPE, abort=_aborted())  # type: ignore[call-arg]
    assert store.get_by_source(SCOPE, "a")


def _delete_source_telemetry_and_status() -> None:
    store, spans, status = _store("a"), _Spans(), InMemoryStatusStore()
    delete_source(source_id="a", store=store, scope=SCOPE, telemetry=spans, status_store=status,
                  shared_generation=SharedGeneration())  # type: ignore[call-arg]  # fmt: skip
    assert "rag.delete" in spans.names and not store.get_by_source(SCOPE, "a")


def _repoint_abort() -> None:
    store = _store("a")
    with pytest.raises(AbortedError):
        repoint_source(scope=SCOPE, store=store, from_id="a", to_id="b", abort=_aborted())  # type: ignore[call-arg]


def _repoint_telemetry() -> None:
    spans = _Spans()
    repoint_source(scope=SCOPE, store=_store("a"), from_id="a", to_id="b", telemetry=spans)  # type: ignore[call-arg]
    assert "rag.repoint" in spans.names


def _renames_abort() -> None:
    with pytest.raises(AbortedError):
        apply_source_renames(scope=SCOPE, store=_store("a"), renames=[Rename("a", "b")],
                             abort=_aborted())  # type: ignore[call-arg]  # fmt: skip


def _renames_telemetry_redactor() -> None:
    spans = _Spans()
    result = apply_source_renames(scope=SCOPE, store=_store("a"), renames=[Rename("a", "b")],
                                  telemetry=spans, redactor=None)  # type: ignore[call-arg]  # fmt: skip
    assert result.results and "rag.repoint" in spans.names


def _hits() -> list[Any]:
    store = _store("a", "b")
    return list(retrieve_context("hello", embedder=EMB, store=store, scope=SCOPE).hits)


def _rerank_abort() -> None:
    with pytest.raises(RerankError) as caught:
        rerank_hits("hello", _hits(), reranker=FakeReranker(), abort=_aborted())  # type: ignore[call-arg]
    assert caught.value.reason == "aborted"


def _rerank_secrets() -> None:
    seen: list[str] = []

    class Spy:
        def rerank(self, query: str, hits: Any) -> Any:
            seen.append(query)
            return list(hits)

    rerank_hits("hello sk-1", _hits(), reranker=Spy(), secrets=["sk-1"], redactor=None)  # type: ignore[call-arg]
    assert seen and "sk-1" not in seen[0]


def _propagator_limits() -> None:
    store = _store("a")
    for record_id, rests_on in (("d1", "a"), ("d2", "d1")):
        index_derived(record_id=record_id, text=f"{record_id} sums up", lineage=[rests_on],
                      embedder=EMB, store=store, scope=SCOPE)  # fmt: skip
    propagator = create_deletion_propagator(scope=SCOPE, store=store, authorization=None,
                                            as_owner=True, limits=Limits(lineage_depth=1))  # type: ignore[call-arg]  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        propagator.propagate("a")
    assert caught.value.limit == "lineage_depth"


def _propagator_redactor() -> None:
    class Redact:
        def redact(self, text: str) -> str:
            return text.replace("sk-live-123", "[x]")

    propagator = create_deletion_propagator(scope=SCOPE, store=_store("a"), authorization=None,
                                            handlers=[_Fails()], as_owner=True,
                                            redactor=Redact())  # type: ignore[call-arg]  # fmt: skip
    with pytest.raises(PropagationError) as caught:
        propagator.propagate("a")
    assert "sk-live-123" not in caught.value.errors["fails"]


def _propagator_class() -> None:
    store = _store("a")
    for record_id, rests_on in (("d1", "a"), ("d2", "d1")):
        index_derived(record_id=record_id, text=f"{record_id} sums up", lineage=[rests_on],
                      embedder=EMB, store=store, scope=SCOPE)  # fmt: skip
    propagator = DeletionPropagator(scope=SCOPE, store=store, authorization=None,
                                    as_owner=True, limits=Limits(lineage_depth=1))  # type: ignore[call-arg]  # fmt: skip
    with pytest.raises(ValidationError) as caught:  # the folded limits hold
        propagator.propagate("a")
    assert caught.value.limit == "lineage_depth"


def _rollback_clock() -> None:
    store, status = InMemoryStore(), InMemoryStatusStore()
    for text in ("one", "two"):
        replace_source(source_id="a", chunks=[Chunk.of("a", 0, text)], embedder=EMB,
                       store=store, scope=SCOPE, write_options=WriteOptions(status_store=status))  # fmt: skip
    rollback_generation(store=store, scope=SCOPE, to=1, status_store=status, clock=_Clock())  # type: ignore[call-arg]
    row = status.get(SCOPE, "a")
    assert row is not None and row.updated_at == NOON


def _prepare_document_limits() -> None:
    loaded = LoadedDocument(TEXT.encode(), "text/plain")
    prepared = prepare_document(loaded, source_id="doc", uri="doc", parser=_Parser(),
                                embedder=EMB, store=InMemoryStore(), scope=SCOPE, size=80,
                                overlap=0, limits=Limits(), abort=None)  # type: ignore[call-arg]  # fmt: skip
    assert max(len(c.text) for c in prepared.chunks) <= 80
    with pytest.raises(AbortedError):  # the folded abort is checked
        prepare_document(loaded, source_id="doc", uri="doc", parser=_Parser(), embedder=EMB,
                         store=InMemoryStore(), scope=SCOPE, abort=_aborted())  # type: ignore[call-arg]  # fmt: skip


def _replace_prepared_status() -> None:
    store, status = InMemoryStore(), InMemoryStatusStore()
    loaded = LoadedDocument(TEXT.encode(), "text/plain")
    prepared = prepare_document(loaded, source_id="doc", uri="doc", parser=_Parser(),
                                embedder=EMB, store=store, scope=SCOPE)  # fmt: skip
    replace_prepared(prepared, size_bytes=len(TEXT), embedder=EMB, store=store, scope=SCOPE,
                     status_store=status, batch_size=8)  # type: ignore[call-arg]  # fmt: skip
    row = status.get(SCOPE, "doc")
    assert row is not None and row.state == "indexed" and row.bytes == len(TEXT)


def _rag_constructor() -> None:
    spans = _Spans()
    rag = Rag(store=_store("a"), embedder=EMB, scope=SCOPE, telemetry=spans,
              limits=Limits(top_k=1), redactor=None)  # type: ignore[call-arg]  # fmt: skip
    assert rag.runtime.telemetry is spans and rag.runtime.limits.top_k == 1
    rag.retrieve("hello")
    assert "rag.retrieve" in spans.names


def _rag_method_abort_keeps_the_bound_runtime() -> None:
    spans = _Spans()
    rag = Rag(store=_store("a"), embedder=EMB, scope=SCOPE, runtime=Runtime(telemetry=spans))
    with pytest.raises(AbortedError):
        rag.retrieve("hello", abort=_aborted())  # type: ignore[call-arg]
    rag.retrieve("hello", abort=threading.Event())  # type: ignore[call-arg]
    assert "rag.retrieve" in spans.names  # the bound telemetry served the deprecated call


def _rag_write_keywords() -> None:
    status = InMemoryStatusStore()
    rag = Rag(store=InMemoryStore(), embedder=EMB, scope=SCOPE, status_store=status)
    result = rag.replace_text(source_id="t", text=TEXT, size=50, overlap=0)  # type: ignore[call-arg]
    assert result.indexed >= len(TEXT) // 50
    shared = SharedGeneration()
    rag.replace_source(source_id="a", chunks=_chunks(), batch_size=1, shared_generation=shared,
                       secrets=["text"], clock=_Clock())  # type: ignore[call-arg]  # fmt: skip
    assert shared.generations and all(
        "text" not in r.text for r in rag.store.get_by_source(SCOPE, "a")
    )
    row = status.get(SCOPE, "a")
    assert row is not None and row.updated_at == NOON
    rag.replace_document(uri="doc", loader=_Loader(), parser=_Parser(), size=70, overlap=0)  # type: ignore[call-arg]
    assert max(len(r.text) for r in rag.store.get_by_source(SCOPE, "doc")) <= 70
    rag.delete_source(source_id="doc", shared_generation=SharedGeneration())  # type: ignore[call-arg]
    assert not rag.store.get_by_source(SCOPE, "doc")


def _rag_sync_write_keywords() -> None:
    import tempfile
    from pathlib import Path

    from ragport.adapters.connectors import FolderConnector
    from ragport.adapters.memory import InMemoryCheckpointStore

    rag = Rag(store=InMemoryStore(), embedder=EMB, scope=SCOPE)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "doc.txt").write_text(TEXT, encoding="utf-8")
        result = rag.sync(connector=FolderConnector(Path(folder)), parser=_Parser(),
                          checkpoints=InMemoryCheckpointStore(), size=60, overlap=0)  # type: ignore[call-arg]  # fmt: skip
    assert result.upserted == 1
    assert max(len(r.text) for r in rag.store.get_by_source(SCOPE, "doc.txt")) <= 60


def _ingest_text_size() -> None:
    from ragport.bootstrap import ingest_text

    store, status = InMemoryStore(), InMemoryStatusStore()
    result = ingest_text(name="leave.txt", text=TEXT, store=store, status_store=status,
                         embedder=EMB, scope=SCOPE, size=60, overlap=0)  # type: ignore[call-arg]  # fmt: skip
    assert result.indexed >= len(TEXT) // 60
    assert max(len(r.text) for r in store.get_by_source(SCOPE, "leave.txt")) <= 60
    assert status.get(SCOPE, "leave.txt") is not None


def _widen_corpus_root_abort() -> None:
    import tempfile
    from pathlib import Path

    from ragport.bootstrap.roots import widen_corpus_root

    store = _store("a.md")
    with tempfile.TemporaryDirectory() as folder:
        new = Path(folder)
        (new / "docs").mkdir()
        (new / "docs" / "a.md").write_text("a", encoding="utf-8")
        with pytest.raises(AbortedError):
            widen_corpus_root(store=store, status_store=None, scope=SCOPE, old=new / "docs",
                              new=new, abort=_aborted())  # type: ignore[call-arg]  # fmt: skip
    assert store.get_by_source(SCOPE, "a.md")  # nothing moved


def _async_rag_abort() -> None:
    rag = Rag(store=_store("a"), embedder=EMB, scope=SCOPE)

    async def main() -> None:
        with pytest.raises(AbortedError):
            await AsyncRag(rag).retrieve("hello", abort=_aborted())  # type: ignore[call-arg]

    anyio.run(main)


def _async_rag_write_and_runtime_keywords() -> None:
    status = InMemoryStatusStore()
    rag = Rag(store=InMemoryStore(), embedder=EMB, scope=SCOPE, status_store=status)

    async def main() -> None:
        await AsyncRag(rag).replace_text(source_id="t", text=TEXT, size=50, overlap=0,
                                         clock=_Clock())  # type: ignore[call-arg]  # fmt: skip

    anyio.run(main)
    assert max(len(r.text) for r in rag.store.get_by_source(SCOPE, "t")) <= 50
    row = status.get(SCOPE, "t")  # the bound status store still served the deprecated call
    assert row is not None and row.updated_at == NOON


CASES: dict[str, Callable[[], None]] = {
    f.__name__.lstrip("_"): f
    for f in (
        _replace_source_status,
        _replace_source_staged,
        _replace_source_no_skip,
        _replace_source_shared,
        _replace_document_size,
        _replace_document_bad_overlap,
        _index_chunks_status,
        _delete_source_abort,
        _delete_source_telemetry_and_status,
        _repoint_abort,
        _repoint_telemetry,
        _renames_abort,
        _renames_telemetry_redactor,
        _rerank_abort,
        _rerank_secrets,
        _propagator_limits,
        _propagator_redactor,
        _propagator_class,
        _rollback_clock,
        _prepare_document_limits,
        _replace_prepared_status,
        _rag_constructor,
        _rag_method_abort_keeps_the_bound_runtime,
        _rag_write_keywords,
        _rag_sync_write_keywords,
        _ingest_text_size,
        _widen_corpus_root_abort,
        _async_rag_abort,
        _async_rag_write_and_runtime_keywords,
    )
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_old_keyword_warns_and_still_works(case: str) -> None:
    """Each keyword of old warns DeprecationWarning (naming docs/deprecations.md) and keeps its
    effect for one release.

    If this fails, check folds_keywords on the use case (application/deprecation.py)."""
    with pytest.warns(DeprecationWarning, match="deprecations.md"):
        CASES[case]()


def test_the_new_forms_do_not_warn() -> None:
    """runtime= and write_options= are the quiet way. If this fails, check that no call
    inside a use case passes a deprecated keyword on."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        store, status = InMemoryStore(), InMemoryStatusStore()
        options = WriteOptions(status_store=status, batch_size=2, size=60, overlap=0)
        rt = Runtime(telemetry=_Spans(), clock=_Clock())
        replace_source(source_id="a", chunks=_chunks(), embedder=EMB, store=store, scope=SCOPE,
                       runtime=rt, write_options=options)  # fmt: skip
        replace_document(uri="doc", loader=_Loader(), parser=_Parser(), embedder=EMB,
                         store=store, scope=SCOPE, runtime=rt, write_options=options)  # fmt: skip
        rag = Rag(store=store, embedder=EMB, scope=SCOPE, runtime=rt, status_store=status)
        rag.replace_text(source_id="t", text=TEXT, write_options=options)
        rag.retrieve("hello")
        rag.repoint(from_id="t", to_id="u")
        rag.forget("u", as_owner=True)
        rag.delete_source(source_id="a")
        rag.rollback(to=1)


def test_the_corpus_use_cases_take_runtime_and_write_options() -> None:
    """ingest_text and reindex_corpus (moved into ragport.application in issue 42) take
    runtime= like every use case: reindex stops between sources on its abort, publishing
    nothing; ingest_text chunks by write_options. If this fails, check
    ragport/application/corpus.py and ingest.py."""
    from ragport.application.corpus import reindex_corpus
    from ragport.application.ingest import ingest_text

    store = _store("a", "b")
    before = store.current_generation(SCOPE)
    with pytest.raises(AbortedError):
        reindex_corpus(store=store, scope=SCOPE, embedder=HashEmbedder(16), sources=["a", "b"],
                       runtime=Runtime(abort=_aborted()))  # fmt: skip
    assert store.current_generation(SCOPE) == before
    assert {r.dimensions for r in store.get_by_source(SCOPE, "a")} == {32}
    done = reindex_corpus(store=store, scope=SCOPE, embedder=HashEmbedder(16), sources=["a"],
                          runtime=Runtime(telemetry=_Spans()))  # fmt: skip
    assert done.generation > before
    result = ingest_text(name="t.txt", text=TEXT, store=store, status_store=None, embedder=EMB,
                         scope=SCOPE, write_options=WriteOptions(size=60, overlap=0))  # fmt: skip
    assert result.indexed >= len(TEXT) // 60
    for use_case in (reindex_corpus, ingest_text):
        assert not set(inspect.signature(use_case).parameters) & {*RUNTIME_KEYWORDS, "size"}


def test_a_keyword_wins_over_the_same_field_of_a_runtime_given_beside_it() -> None:
    """Both given: the keyword of old is this call's value. If this fails, check fold_runtime."""
    store = _store("a")
    with pytest.warns(DeprecationWarning), pytest.raises(AbortedError):
        delete_source(source_id="a", store=store, scope=SCOPE, runtime=Runtime(),
                      abort=_aborted())  # type: ignore[call-arg]  # fmt: skip


def test_a_folded_value_is_checked_like_one_built_by_hand() -> None:
    """A deprecated keyword of the wrong kind is the ValidationError the value gives. If this
    fails, check that folds go through attrs.evolve (which runs the converters)."""
    with pytest.warns(DeprecationWarning), pytest.raises(ValidationError) as caught:
        replace_source(source_id="a", chunks=_chunks(), embedder=EMB, store=InMemoryStore(),
                       scope=SCOPE, batch_size=0)  # type: ignore[call-arg]  # fmt: skip
    assert caught.value.field == "batch_size"
    with pytest.warns(DeprecationWarning), pytest.raises(ValidationError) as caught:
        delete_source(source_id="a", store=InMemoryStore(), scope=SCOPE, abort="stop")  # type: ignore[call-arg]
    assert caught.value.field == "abort"


def test_the_helper_refuses_a_keyword_it_does_not_know() -> None:
    """Only Runtime's and WriteOptions' fields fold. If this fails, check folds_keywords."""
    with pytest.raises(TypeError):
        folds_keywords(runtime=("tenant",))


USE_CASES = [
    name
    for name in application.__all__
    if inspect.isfunction(getattr(application, name))
    and name not in {"estimate_tokens", "document_skip_key", "evidence_from_citation"}
]


@pytest.mark.parametrize("name", USE_CASES)
def test_every_use_case_takes_runtime_and_none_of_its_fields(name: str) -> None:
    """runtime= everywhere, none of telemetry/redactor/secrets/limits/clock/abort beside it.
    (evidence_from_citation is a pure function of its arguments: nothing to abort, time,
    redact or record.)

    If this fails, give the use case runtime= and fold the old keyword with folds_keywords."""
    parameters = inspect.signature(getattr(application, name)).parameters
    assert "runtime" in parameters
    assert not set(parameters) & set(RUNTIME_KEYWORDS)


@pytest.mark.parametrize(
    "method",
    sorted(
        name
        for name, member in vars(Rag).items()
        if not name.startswith("_") and inspect.isfunction(member)
    ),
)
def test_every_rag_method_takes_runtime_and_none_of_its_fields(method: str) -> None:
    """Rag re-adds no abort/secrets/clock per method: each takes runtime=.

    If this fails, replace the method's runtime keywords with runtime= (deprecated fold)."""
    parameters = inspect.signature(getattr(Rag, method)).parameters
    assert "runtime" in parameters
    assert not set(parameters) & set(RUNTIME_KEYWORDS)


def test_write_options_carry_the_grant_free_write_keywords() -> None:
    """A write use case takes no write option as its own keyword. If this fails, move it
    into WriteOptions (and fold the old keyword)."""
    for use_case in (replace_source, replace_document, index_chunks, delete_source):
        parameters = inspect.signature(use_case).parameters
        assert "write_options" in parameters
        assert not {"size", "overlap", "batch_size", "shared_generation", "status_store"} & set(
            parameters
        )


def test_the_warning_points_at_the_callers_line() -> None:
    """The warning names the caller's file, so -W error finds the call to change. If this
    fails, check the stacklevel in ragport/domain/deprecation.py."""
    with pytest.warns(DeprecationWarning) as caught:
        delete_source(source_id="a", store=_store("a"), scope=SCOPE, abort=None)  # type: ignore[call-arg]
    assert caught[0].filename == __file__


def test_async_rag_warns_at_the_awaiting_line() -> None:
    """AsyncRag folds the keywords of old before its worker thread runs, so the warning names
    the caller's file (from the thread, it named anyio's). If this fails, check _fold_old in
    ragport/aio.py."""
    rag = Rag(store=_store("a"), embedder=EMB, scope=SCOPE)

    async def main() -> None:
        await AsyncRag(rag).retrieve("hello", secrets=["sk-1"])  # type: ignore[call-arg]

    with pytest.warns(DeprecationWarning, match="ragport 0.2") as caught:
        anyio.run(main)
    assert [w.filename for w in caught] == [__file__]


def test_a_wired_wrapper_does_not_hide_the_callers_line() -> None:
    """ragport.bootstrap.replace_document wraps the use case: the warning still names the
    caller's file. If this fails, check _outside_ragport in ragport/domain/deprecation.py."""
    from ragport.bootstrap import replace_document as wired

    with pytest.warns(DeprecationWarning) as caught:
        wired(uri="doc", loader=_Loader(), embedder=EMB, store=InMemoryStore(), scope=SCOPE,
              size=80, overlap=0)  # type: ignore[call-arg]  # fmt: skip
    assert caught[0].filename == __file__
