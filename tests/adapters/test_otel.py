"""The OpenTelemetry adapter: fixed span names, rag.* attributes, no document text."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragport import Authorization, Chunk, Grant, RetrievalRequest, Runtime, Scope, WriteOptions
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.adapters.rerankers import FakeReranker
from ragport.adapters.telemetry import SPAN_NAMES, OpenTelemetryTelemetry
from ragport.application import replace_source, retrieve_context

SECRET_TEXT = "confidential walrus migration plan"


def _telemetry():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OpenTelemetryTelemetry(provider.get_tracer("test")), exporter


def test_retrieve_emits_the_fixed_span_tree_without_document_text():
    """A hybrid, authorized, reranked retrieve emits only fixed rag.* spans and attributes.

    If this fails, check the span names in ragport/application/retrieval.py and SPAN_NAMES.
    """
    telemetry, exporter = _telemetry()
    store, embedder, scope = InMemoryStore(), HashEmbedder(64), Scope("t", "r", "c")
    replace_source(
        source_id="doc",
        chunks=[Chunk.of("doc", 0, SECRET_TEXT)],
        embedder=embedder,
        store=store,
        scope=scope,
        runtime=Runtime(telemetry=telemetry),
    )
    store.set_source_access(scope, [Grant("doc", principal_ids=("alice",))])
    result = retrieve_context(
        "walrus",
        embedder=embedder,
        store=store,
        scope=scope,
        reranker=FakeReranker(),
        authorization=Authorization("alice", "t"),
        request=RetrievalRequest(lexical="bm25"),
        runtime=Runtime(telemetry=telemetry),
    )
    assert result.hits
    spans = exporter.get_finished_spans()
    names = {span.name for span in spans}
    assert {
        "rag.retrieve",
        "rag.embed",
        "rag.hybrid",
        "rag.fuse",
        "rag.acl_recheck",
        "rag.rerank",
        "rag.render",
        "rag.replace",
    } <= names
    assert names <= SPAN_NAMES
    root = next(s for s in spans if s.name == "rag.retrieve")
    children = [
        s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id
    ]
    assert {s.name for s in children} >= {"rag.hybrid", "rag.render"}
    for span in spans:
        for key, value in (span.attributes or {}).items():
            assert key.startswith("rag.")
            assert "walrus" not in str(value)


def test_unknown_span_names_and_foreign_attributes_are_dropped():
    """Spans outside the fixed set and attributes not shaped rag.* never reach the tracer.

    If this fails, check `_allowed` and `span` in ragport/adapters/telemetry/otel.py.
    """
    telemetry, exporter = _telemetry()
    with telemetry.span("rag.render") as span:
        span.set_attribute("rag.count", 3)
        span.set_attribute("text", SECRET_TEXT)
        span.set_attribute("rag.text", SECRET_TEXT * 3)
    with telemetry.span("custom.work") as span:
        span.set_attribute("rag.count", 1)
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["rag.render"]
    assert dict(spans[0].attributes) == {"rag.count": 3}


class _QuotingEmbedder:
    """Embeds until told to fail; then its error quotes its input, as many clients do."""

    def __init__(self) -> None:
        self._inner = HashEmbedder(8)
        self.id = self._inner.id
        self.dimensions = 8
        self.fail = False

    def embed(self, texts):  # type: ignore[no-untyped-def]
        if self.fail:
            raise RuntimeError(f"cannot embed {texts!r}")
        return self._inner.embed(texts)


def _everything_recorded(spans) -> str:  # type: ignore[no-untyped-def]
    parts = []
    for span in spans:
        parts.append(repr(dict(span.attributes or {})))
        parts.append(f"{span.status.status_code} {span.status.description!r}")
        for event in span.events:
            parts.append(f"{event.name} {dict(event.attributes or {})!r}")
        for link in span.links:
            parts.append(repr(dict(link.attributes or {})))
    return "\n".join(parts)


@pytest.fixture(params=["memory", "postgres"])
def any_store(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    if request.param == "memory":
        return InMemoryStore()
    from ragport.adapters.postgres import PostgresStore

    engine = request.getfixturevalue("pg_engine")
    return PostgresStore(engine, schema=request.getfixturevalue("pg_schema"), create=True)


def test_an_exception_in_a_span_is_recorded_by_type_only(any_store):
    """A failure quoting document text leaves only its type name in the trace (both stores).

    No `exception` event, no message or stack trace, no status description: the span has
    `rag.error.type` and status ERROR. If this fails, check `span` in
    ragport/adapters/telemetry/otel.py (record_exception / set_status_on_exception).
    """
    from opentelemetry.trace import StatusCode

    telemetry, exporter = _telemetry()
    store, scope, embedder = any_store, Scope("t", "r", "c"), _QuotingEmbedder()
    chunks = [Chunk.of("doc", 0, SECRET_TEXT)]
    replace_source(source_id="doc", chunks=chunks, embedder=embedder, store=store, scope=scope)
    embedder.fail = True
    with pytest.raises(RuntimeError, match="walrus"):  # the error itself quotes the text
        replace_source(
            source_id="doc",
            chunks=chunks,
            embedder=embedder,
            store=store,
            scope=scope,
            runtime=Runtime(telemetry=telemetry),
            write_options=WriteOptions(skip_if_unchanged=False),
        )
    with pytest.raises(RuntimeError, match="walrus"):
        retrieve_context(
            SECRET_TEXT,
            embedder=embedder,
            store=store,
            scope=scope,
            runtime=Runtime(telemetry=telemetry),
        )
    spans = exporter.get_finished_spans()
    failed = [s for s in spans if s.status.status_code == StatusCode.ERROR]
    assert sorted(s.name for s in failed) == ["rag.embed", "rag.embed", "rag.retrieve"]
    for span in failed:
        assert dict(span.attributes or {})["rag.error.type"] == "RuntimeError"
        assert span.status.description is None
        assert not span.events
    recorded = _everything_recorded(spans)
    assert "walrus" not in recorded
    assert "Traceback" not in recorded
