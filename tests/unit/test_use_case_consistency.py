"""Use cases take what the API promises every one of them takes (issue 11, item 8)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from ragport import (
    AbortedError,
    Authorization,
    Chunk,
    Grant,
    Hit,
    Limits,
    Rename,
    RetrievalRequest,
    Runtime,
    Scope,
    ValidationError,
)
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.application import (
    apply_source_renames,
    create_deletion_propagator,
    replace_source,
    repoint_source,
    rerank_hits,
    retrieve_context,
)
from ragport.domain.errors import PropagationError

SCOPE = Scope("t", "r", "c")
EMB = HashEmbedder(64)
ADMIN = Authorization("admin", "t")


@pytest.fixture
def store() -> InMemoryStore:
    store = InMemoryStore()
    for source in ("a", "b"):
        replace_source(
            source_id=source,
            chunks=[
                Chunk.of(source, i, f"{source} text number {i} secret-token") for i in range(4)
            ],
            embedder=EMB,
            store=store,
            scope=SCOPE,
        )
    store.set_source_access(SCOPE, [Grant(s, principal_ids=("admin",)) for s in ("a", "b")])
    return store


class Spans:
    """A Telemetry that records span names and attributes."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, dict[str, Any]]] = []

    @contextmanager
    def span(self, name: str) -> Iterator[Any]:
        attributes: dict[str, Any] = {}
        self.spans.append((name, attributes))

        class _Span:
            def set_attribute(self, key: str, value: Any) -> None:
                attributes[key] = value

        yield _Span()

    def count(self, name: str, value: int = 1) -> None:
        return None


def test_retrieve_context_takes_its_defaults_from_limits(store: InMemoryStore) -> None:
    """limits= sets the defaults of the per-call numbers; an explicit value still wins. If
    this fails, check _request in retrieval.py."""
    default = retrieve_context("text", embedder=EMB, store=store, scope=SCOPE)
    assert len(default.hits) == 5
    narrow = retrieve_context(
        "text", embedder=EMB, store=store, scope=SCOPE, runtime=Runtime(limits=Limits(top_k=2))
    )
    assert len(narrow.hits) == 2
    explicit = retrieve_context(
        "text",
        embedder=EMB,
        store=store,
        scope=SCOPE,
        request=RetrievalRequest(top_k=7),
        runtime=Runtime(limits=Limits(top_k=2)),
    )
    assert len(explicit.hits) == 7
    with pytest.raises(ValidationError) as caught:
        retrieve_context(
            "text", embedder=EMB, store=store, scope=SCOPE, runtime=Runtime(limits="tight")
        )  # type: ignore[arg-type]
    assert caught.value.field == "limits"


def test_repoint_source_checks_abort_and_reports_a_span(store: InMemoryStore) -> None:
    """An abort set before the call moves nothing; a move emits rag.repoint with counts. If
    this fails, check repoint_source's abort checks and span."""
    aborted = threading.Event()
    aborted.set()
    with pytest.raises(AbortedError):
        repoint_source(
            scope=SCOPE, store=store, from_id="a", to_id="x", runtime=Runtime(abort=aborted)
        )
    assert len(store.get_by_source(SCOPE, "a")) == 4
    telemetry = Spans()
    result = repoint_source(
        scope=SCOPE, store=store, from_id="a", to_id="x", runtime=Runtime(telemetry=telemetry)
    )
    assert result.moved_chunks == 4
    assert ("rag.repoint", {"rag.repoint.moved": 4, "rag.repoint.edges": 0}) in telemetry.spans


def test_an_abort_stops_a_rename_batch_even_when_it_continues_on_errors(
    store: InMemoryStore,
) -> None:
    """continue_on_error collects failures, never an abort. If this fails, check
    apply_source_renames' except clause."""
    aborted = threading.Event()
    aborted.set()
    events: list[Any] = []
    with pytest.raises(AbortedError):
        apply_source_renames(
            scope=SCOPE,
            store=store,
            renames=[Rename("a", "x"), Rename("b", "y")],
            continue_on_error=True,
            on_renamed=events.append,
            runtime=Runtime(abort=aborted),
        )
    assert [(e.from_id, e.outcome) for e in events] == [("a", "failed")]
    assert len(store.get_by_source(SCOPE, "b")) == 4


class FailingHandler:
    kind = "search-index"

    def on_propagate(self, source_id: str, ids: Sequence[str], scope: Scope) -> int:
        raise PropagationError("index at https://user:hunter2@example.test is down")

    def on_repoint(self, from_id: str, to_id: str, scope: Scope) -> int:
        return 0


class Hunter2Redactor:
    def redact(self, text: str) -> str:
        return text.replace("hunter2", "[REDACTED]")


def test_the_propagator_redacts_what_a_failed_handler_leaves(store: InMemoryStore) -> None:
    """create_deletion_propagator forwards redactor: PropagationError.errors holds the
    handler's failure redacted. If this fails, check create_deletion_propagator."""
    propagator = create_deletion_propagator(
        scope=SCOPE,
        store=store,
        authorization=ADMIN,
        handlers=[FailingHandler()],
        runtime=Runtime(redactor=Hunter2Redactor()),
    )
    with pytest.raises(PropagationError) as caught:
        propagator.propagate("a")
    assert caught.value.failed_kinds == ("search-index",)
    (description,) = caught.value.errors.values()
    assert "hunter2" not in description and "PropagationError" in description


class Recorder:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        self.seen = [query, *(h.text for h in hits)]
        return list(reversed(hits))


def test_rerank_hits_redacts_what_the_reranker_sees(store: InMemoryStore) -> None:
    """rerank_hits(runtime=Runtime(secrets=)) redacts the query and texts sent to the reranker and
    hands back the caller's own hits. If this fails, check _copy_for_reranker."""
    hits = retrieve_context("a text", embedder=EMB, store=store, scope=SCOPE).hits
    recorder = Recorder()
    ordered = rerank_hits(
        "a text secret-token", hits, reranker=recorder, runtime=Runtime(secrets=["secret-token"])
    )
    assert [id(h) for h in ordered] == [id(h) for h in reversed(hits)]
    assert recorder.seen and not any("secret-token" in text for text in recorder.seen)
    assert all("secret-token" in h.text for h in ordered)
