"""RetrievalRequest and Runtime: retrieval's options and dependencies as two checked values,
so retrieve_context takes at most 12 parameters and Rag's methods are typed."""

from __future__ import annotations

import inspect
import threading
from typing import Any

import anyio
import attrs
import pytest
from doubles import CountingEmbedder

import ragport
from ragport import Chunk, Rag, RetrievalRequest, Runtime, Scope, ValidationError
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.aio import AsyncRag
from ragport.application import replace_source, retrieve_context
from ragport.integrations._common import BoundRetrieval

SCOPE = Scope("acme", "kb", "docs")
EMB = HashEmbedder(64)


@pytest.fixture
def store() -> InMemoryStore:
    s = InMemoryStore()
    for source, text in {
        "leave": "Parental leave lasts sixteen weeks.",
        "travel": "Travel is booked through the portal.",
        "forklift": "Forklift drivers need a licence.",
    }.items():
        replace_source(
            source_id=source, chunks=[Chunk.of(source, 0, text)], embedder=EMB, store=s, scope=SCOPE
        )
    return s


def test_retrieve_context_takes_at_most_twelve_parameters() -> None:
    """The issue's ceiling, counted. If this fails, a new option belongs in RetrievalRequest
    (how to retrieve) or Runtime (what to run with), not in the signature."""
    params = inspect.signature(retrieve_context).parameters
    assert len(params) <= 12, list(params)
    assert "request" in params and "runtime" in params


@pytest.mark.parametrize(
    ("field", "value", "limit"),
    [
        ("top_k", 0, "top_k"),
        ("top_k", 10_000, "top_k"),
        ("query_candidates", -1, "query_candidates"),
        ("rrf_k", True, "rrf_k"),
        ("max_result_bytes", 10**9, "result_bytes"),
        ("max_context_tokens", 0, "context_tokens"),
        ("max_rerank_bytes", 10**9, "rerank_bytes"),
        ("max_rerank_ms", 10**9, "rerank_ms"),
        ("rerank_concurrency", 0, "rerank_concurrency"),
    ],
)
def test_a_number_out_of_bounds_is_refused_when_the_request_is_built(
    field: str, value: Any, limit: str
) -> None:
    """Each number is checked once, by the Limits field of its name. If this fails, check
    RetrievalRequest.__attrs_post_init__."""
    with pytest.raises(ValidationError) as info:
        RetrievalRequest(**{field: value})
    assert info.value.limit == limit


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"fusion": "linear"}, "fusion"),
        ({"fusion_weights": {"vector": -1}}, "fusion_weights"),
        ({"fusion_weights": {"vector": 0, "lexical": 0}}, "fusion_weights"),
        ({"fusion_weights": {"title": 1}}, "fusion_weights"),
        ({"collapse_duplicates": "yes"}, "collapse_duplicates"),
        ({"metadata_filter": {"year": {"$regex": "x"}}}, None),
    ],
)
def test_malformed_options_are_refused_when_the_request_is_built(
    kwargs: dict[str, Any], field: str | None
) -> None:
    """If this fails, check the converters of RetrievalRequest (and parse_filter)."""
    with pytest.raises(ValidationError) as info:
        RetrievalRequest(**kwargs)
    if field is not None:
        assert info.value.field == field


def test_a_request_is_frozen_and_its_weights_are_its_own() -> None:
    """A built request cannot change under the caller: fields are frozen, the weights and the
    filter are copied. If this fails, check RetrievalRequest's converters."""
    weights = {"vector": 1.0, "lexical": 2.0}
    request = RetrievalRequest(lexical="bm25", fusion_weights=weights)
    weights["vector"] = 0.0
    assert request.fusion_weights == {"vector": 1.0, "lexical": 2.0}
    wanted = {"team": {"$in": ["hr", "ops"]}}
    filtered = RetrievalRequest(metadata_filter=wanted)
    wanted["team"]["$in"].append("sales")
    assert filtered.metadata_filter == {"team": {"$in": ["hr", "ops"]}}
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        request.top_k = 3  # type: ignore[misc]


def test_one_request_serves_many_queries_and_equals_the_defaults(store: InMemoryStore) -> None:
    """``request=None`` and ``RetrievalRequest()`` retrieve the same; a request's numbers left
    at None come from the runtime's limits. If this fails, check check_request's defaults."""
    plain = retrieve_context("parental leave", embedder=EMB, store=store, scope=SCOPE)
    same = retrieve_context(
        "parental leave", embedder=EMB, store=store, scope=SCOPE, request=RetrievalRequest()
    )
    assert [h.id for h in plain.hits] == [h.id for h in same.hits]
    one = retrieve_context(
        "parental leave",
        embedder=EMB,
        store=store,
        scope=SCOPE,
        runtime=Runtime(limits=attrs.evolve(ragport.domain.DEFAULT_LIMITS, top_k=1)),
    )
    assert len(one.hits) == 1 and len(plain.hits) == 3


def test_runtime_checks_its_fields_and_never_shows_its_secrets() -> None:
    """If this fails, check the converters and the repr of Runtime."""
    with pytest.raises(ValidationError) as info:
        Runtime(secrets="sk-live-123")
    assert info.value.field == "secrets"
    with pytest.raises(ValidationError) as info:
        Runtime(abort=object())  # type: ignore[arg-type]
    assert info.value.field == "abort"
    with pytest.raises(ValidationError):
        Runtime(limits={"top_k": 3})  # type: ignore[arg-type]
    assert "sk-live-123" not in repr(Runtime(secrets=["sk-live-123"]))


def test_runtime_redacts_the_query_and_its_abort_stops_the_call(store: InMemoryStore) -> None:
    """The runtime's secrets reach the embedder redacted; a set abort stops before the embed.
    If this fails, check how retrieve_context reads its Runtime."""
    embedder = CountingEmbedder(EMB)
    retrieve_context(
        "parental leave sk-live-123",
        embedder=embedder,
        store=store,
        scope=SCOPE,
        runtime=Runtime(secrets=["sk-live-123"]),
    )
    assert embedder.calls and all("sk-live-123" not in t for batch in embedder.calls for t in batch)
    stop = threading.Event()
    stop.set()
    counting = CountingEmbedder(EMB)
    with pytest.raises(ragport.AbortedError):
        retrieve_context(
            "leave", embedder=counting, store=store, scope=SCOPE, runtime=Runtime(abort=stop)
        )
    assert counting.calls == []


class _AbortsAtTheGate(InMemoryStore):
    """Signals the abort while the first access gate reads the grants."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__()
        self._stop = stop

    def check_source_access(self, *args: Any, **kwargs: Any) -> Any:
        self._stop.set()
        return super().check_source_access(*args, **kwargs)


def test_an_abort_signalled_during_the_access_gate_stops_before_the_answer() -> None:
    """The gate reads grants after the legs: an abort set then is an AbortedError, not hits.
    If this fails, check the check_abort at the start of retrieval._answered."""
    stop = threading.Event()
    store = _AbortsAtTheGate(stop)
    text = "parental leave policy"
    chunk = Chunk(id="s1#0001", source_id="s1", index=0, start=0, end=len(text), text=text, metadata={})  # fmt: skip
    replace_source(
        source_id="s1", chunks=[chunk], embedder=EMB, store=store, scope=SCOPE,
        grant=ragport.Grant("s1", principal_ids=("bob",)),
    )  # fmt: skip
    who = ragport.Authorization("bob", "acme")
    answered = retrieve_context("leave", embedder=EMB, store=store, scope=SCOPE, authorization=who)
    assert [h.source_id for h in answered.hits] == ["s1"]  # no abort watched: the hit is served
    stop.clear()
    with pytest.raises(ragport.AbortedError):
        retrieve_context(
            "leave", embedder=EMB, store=store, scope=SCOPE, authorization=who,
            runtime=Runtime(abort=stop),
        )  # fmt: skip
    assert stop.is_set()


def test_a_misspelt_rag_keyword_is_a_type_error_at_run_time_too(store: InMemoryStore) -> None:
    """``rag.retrieve("q", top_kk=3)`` fails (tests/typing/typed_api.py has mypy's side).
    If this fails, check that Rag's methods take no **options."""
    rag = Rag(store=store, embedder=EMB, scope=SCOPE)
    with pytest.raises(TypeError):
        rag.retrieve("q", top_kk=3)  # type: ignore[call-arg]
    assert len(rag.retrieve("parental leave", top_k=2).hits) == 2
    assert len(rag.retrieve("leave", request=RetrievalRequest(top_k=1)).hits) == 1
    shortcut = rag.retrieve("leave", request=RetrievalRequest(top_k=1), top_k=3)
    assert len(shortcut.hits) == 3  # a shortcut overrides the request's field of its name


def test_async_rag_mirrors_the_typed_methods(store: InMemoryStore) -> None:
    """AsyncRag's coroutines take Rag's keywords. If this fails, check ragport.aio._mirror."""
    rag = AsyncRag(Rag(store=store, embedder=EMB, scope=SCOPE))

    async def main() -> None:
        assert len((await rag.retrieve("parental leave", top_k=2)).hits) == 2
        with pytest.raises(TypeError):
            await rag.retrieve("q", top_kk=3)  # type: ignore[call-arg]
        assert rag.retrieve.__qualname__ == "AsyncRag.retrieve"

    anyio.run(main)


def test_a_face_takes_a_request_or_its_fields_but_not_both(store: InMemoryStore) -> None:
    """Faces keep their flat options (``lexical="bm25"``) or take ``request=``; both forms of
    one value is a ValidationError naming it. If this fails, check retrieve_arguments."""
    flat = BoundRetrieval.bind(store=store, embedder=EMB, scope=SCOPE, options={"lexical": "bm25"})
    whole = BoundRetrieval.bind(
        store=store,
        embedder=EMB,
        scope=SCOPE,
        options={"request": RetrievalRequest(lexical="bm25")},
    )
    assert [h.id for h in flat.run("licence").hits] == [h.id for h in whole.run("licence").hits]
    with pytest.raises(ValidationError) as info:
        BoundRetrieval.bind(
            store=store,
            embedder=EMB,
            scope=SCOPE,
            options={"request": RetrievalRequest(), "lexical": "bm25"},
        )
    assert info.value.field == "request"
    with pytest.raises(ValidationError) as info:
        BoundRetrieval.bind(store=store, embedder=EMB, scope=SCOPE, options={"lexical": "BM25"})
    assert info.value.field == "lexical"
    with pytest.raises(ValidationError) as info:  # the face's top_k would override it
        BoundRetrieval.bind(
            store=store, embedder=EMB, scope=SCOPE, options={"request": RetrievalRequest(top_k=8)}
        )
    assert info.value.field == "top_k"
    for name in ("request", "runtime"):
        with pytest.raises(ValidationError) as info:
            BoundRetrieval.bind(store=store, embedder=EMB, scope=SCOPE, options={name: 5})
        assert info.value.field == name
