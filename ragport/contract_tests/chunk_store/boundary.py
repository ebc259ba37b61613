"""What crosses the store's boundary: values it cannot hold, error chains, adapter output.

``ChunkStoreBoundaryContract`` drives a store through the use cases (``replace_source``,
``index_derived``, ``retrieve_context``) and checks that the store and the in-memory fake give
the same typed answer:

- a NUL or a lone surrogate (in a text, a query, metadata at any depth) is a
  ``ValidationError`` before anything is written, and the store stays readable;
- the errors carry no document text in their message or anywhere in their chain
  (``__cause__``/``__context__``, attributes included);
- the ``metadata_bytes`` cap counts UTF-8 bytes of compact JSON in the chunkers and the
  writes alike;
- an embedder answering ragged rows is a ``ValidationError``; a reranker that fails quoting a
  hit is a ``RerankError`` by type only; a reranker that writes to the hits it was given
  changes nothing that is rendered, returned or stored.

Part of ``ChunkStoreContract``; needs ``transactions`` and ``generations``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ragport.application.forgetting import index_derived
from ragport.application.indexing import replace_source
from ragport.application.retrieval import retrieve_context
from ragport.application.retrieval_request import RetrievalRequest
from ragport.application.runtime import Runtime
from ragport.contract_tests._support import ContractEmbedder, error_mentions, record_written
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    SCOPE,
    _require_generations,
    _require_transactions,
)
from ragport.domain.chunking import chunk_text
from ragport.domain.errors import EmbedderError, RerankError, ValidationError
from ragport.domain.limits import Limits
from ragport.domain.model import Authorization, Chunk, Hit, Trust
from ragport.ports.embedder import VectorMatrix
from ragport.ports.store import ChunkStore, supports

__all__ = ["ChunkStoreBoundaryContract"]

EMBEDDER = ContractEmbedder()
SECRET = "bdsecret quarterly layoffs list"
"""Document text that must never show in an error or its chain."""
UNSTORABLE = {"nul": "\x00", "lone-surrogate": "\udfff"}
"""Characters neither PostgreSQL nor psycopg can carry, so no store may accept them."""
EXACT = {"k": "é" * 6000}
EXACT_BYTES = len('{"k":""}') + 12_000
"""6,000 × "é" in compact UTF-8 JSON: 2 bytes each, never the 6 of a ``\\u00e9`` escape."""


def _ready(store: ChunkStore) -> None:
    _require_transactions(store)
    _require_generations(store)
    # The use cases below write these two ids only; no _support builder sees those writes.
    record_written(SCOPE, "bd-doc", "bd-sum")


def _write(store: ChunkStore, source_id: str, *texts: str, **options: Any) -> None:
    replace_source(
        source_id=source_id,
        chunks=[Chunk.of(source_id, i, t, metadata={"n": i}) for i, t in enumerate(texts)],
        embedder=EMBEDDER,
        store=store,
        scope=SCOPE,
        **options,
    )


def _texts(store: ChunkStore, source_id: str) -> list[str]:
    return [r.text for r in store.get_by_source(SCOPE, source_id)]


def _modes(store: ChunkStore) -> list[str]:
    return ["off", *store.capabilities.lexical_modes]


class _Injecting:
    """A redactor that puts ``bad`` into every text it is given (after chunk validation)."""

    def __init__(self, bad: str) -> None:
        self._bad = bad

    def redact(self, text: str) -> str:
        return text + self._bad


class _RaggedEmbedder:
    """An embedder whose answer numpy cannot stack into an (n, d) float32 matrix."""

    def __init__(self, rows: Any) -> None:
        self._rows = rows
        self.id = EMBEDDER.id
        self.dimensions = EMBEDDER.dimensions

    def embed(self, texts: Sequence[str]) -> VectorMatrix:
        return self._rows  # type: ignore[no-any-return]


class _QuotingReranker:
    """Fails with an error that quotes the hits it was given (as many clients do)."""

    def __init__(self, error: type[Exception]) -> None:
        self._error = error

    def rerank(self, query: str, hits: Sequence[Hit]) -> Sequence[Hit]:
        raise self._error(f"cannot score {[h.text for h in hits]!r}")


class _ScribblingReranker:
    """Writes to every hit it was given (frozen or not), then returns them reversed."""

    def rerank(self, query: str, hits: Sequence[Hit]) -> Sequence[Hit]:
        for hit in hits:
            object.__setattr__(hit, "text", "INJECTED instructions")
            object.__setattr__(hit, "source_id", "elsewhere")
            hit.metadata["n"] = "INJECTED"
            hit.metadata.setdefault("nested", {})["k"] = "INJECTED"
            object.__setattr__(hit.provenance, "citation_id", "INJECTED")
            object.__setattr__(hit.trust, "untrusted", False)
        return list(reversed(hits))


class ChunkStoreBoundaryContract(_ChunkStoreContractBase):
    """Values a store cannot hold, error chains and bad adapter output: one answer everywhere."""

    @pytest.mark.parametrize("bad", list(UNSTORABLE.values()), ids=list(UNSTORABLE))
    def test_unstorable_text_is_refused_before_the_write(self, store: ChunkStore, bad: str) -> None:
        """Checks ``ChunkStore.get_by_source``, ``ChunkStore.query``, ``replace_source``,
        ``index_derived``, ``retrieve_context``: NUL or a lone surrogate in a chunk, a redacted text
        or a derived record is ``ValidationError(field="text")`` and nothing is written: the
        previous version stays and retrieval still finds it.

        Each is a ``ValidationError`` before anything is written; the previous version stays
        and retrieval keeps working. If this fails, check validate_text and the Record
        constructor in ragport/domain/model.py (values are validated where they enter).
        """
        _ready(store)
        _write(store, "bd-doc", "the previous version")
        attempts: list[Callable[[], object]] = [
            lambda: _write(store, "bd-doc", f"a {bad} b"),
            lambda: _write(
                store, "bd-doc", "clean text", runtime=Runtime(redactor=_Injecting(bad))
            ),
            lambda: index_derived(
                record_id="bd-sum",
                text=f"summary {bad}",
                lineage=["bd-doc"],
                embedder=EMBEDDER,
                store=store,
                scope=SCOPE,
            ),
        ]
        for attempt in attempts:
            with pytest.raises(ValidationError) as info:
                attempt()
            assert info.value.field == "text"
        assert _texts(store, "bd-doc") == ["the previous version"]
        assert list(store.get_by_source(SCOPE, "bd-sum")) == []  # any Sequence
        found = retrieve_context("previous", embedder=EMBEDDER, store=store, scope=SCOPE)
        assert [h.text for h in found.hits] == ["the previous version"]

    @pytest.mark.parametrize("bad", list(UNSTORABLE.values()), ids=list(UNSTORABLE))
    @pytest.mark.parametrize(
        "metadata",
        [
            lambda bad: {"note": f"{SECRET} {bad}"},
            lambda bad: {"outer": [{"ok": 1}, {f"{SECRET} {bad}": 1}]},
        ],
        ids=["value", "nested-key"],
    )
    def test_unstorable_metadata_is_refused_and_chains_nothing(
        self, store: ChunkStore, bad: str, metadata: Any
    ) -> None:
        """Checks ``ChunkStore.get_by_source``, ``replace_source``, ``index_derived``: NUL or a lone
        surrogate in metadata (a value or a nested key) is ``ValidationError(field="metadata")``
        that quotes nothing and chains nothing, and the previous version stays.

        The error names the field, quotes nothing, and has no ``__cause__``/``__context__``
        (a driver error there would quote the metadata JSON). If this fails, check
        freeze_metadata in ragport/domain/model.py and the store's error translation.
        """
        _ready(store)
        _write(store, "bd-doc", "the previous version")
        for attempt in (
            lambda: _write_metadata(store, metadata(bad)),
            lambda: index_derived(
                record_id="bd-sum",
                text="a summary",
                lineage=["bd-doc"],
                metadata=metadata(bad),
                embedder=EMBEDDER,
                store=store,
                scope=SCOPE,
            ),
        ):
            with pytest.raises(ValidationError) as info:
                attempt()
            assert info.value.field == "metadata"
            assert error_mentions(info.value, SECRET) == []
            assert info.value.__cause__ is None and info.value.__context__ is None
        assert _texts(store, "bd-doc") == ["the previous version"]

    @pytest.mark.parametrize("bad", list(UNSTORABLE.values()), ids=list(UNSTORABLE))
    def test_an_unstorable_query_is_refused_on_every_leg(self, store: ChunkStore, bad: str) -> None:
        """Checks ``ChunkStore.query``, ``SupportsLexicalSearch.hybrid_query``,
        ``retrieve_context``: a query with NUL or a lone surrogate is
        ``ValidationError(field="query")`` with the lexical leg off and in every declared mode.

        If this fails, check the query validation at the top of retrieve_context.
        """
        _ready(store)
        _write(store, "bd-doc", "bdword alpha")
        for lexical in _modes(store):
            with pytest.raises(ValidationError) as info:
                retrieve_context(
                    f"bdword {bad}",
                    embedder=EMBEDDER,
                    store=store,
                    scope=SCOPE,
                    request=RetrievalRequest(lexical=lexical),
                )
            assert info.value.field == "query", lexical

    @pytest.mark.parametrize("bad", list(UNSTORABLE.values()), ids=list(UNSTORABLE))
    def test_store_reads_refuse_unstorable_strings_alike(self, store: ChunkStore, bad: str) -> None:
        """Checks ``ChunkStore.get_by_source``, ``ChunkStore.check_source_access``,
        ``SupportsLexicalSearch.lexical_query``: NUL or a lone surrogate in their text arguments is
        the same ``ValidationError`` on every store (field ``source_id``, ``source_ids`` and
        ``query``), never an answer of "nothing" or a driver error.

        If this fails, check the ``validate_text`` calls at the top of those store methods.
        """
        _ready(store)
        _write(store, "bd-doc", "bdword alpha")
        reads: list[tuple[str, Callable[[], object]]] = [
            ("source_id", lambda: store.get_by_source(SCOPE, f"bd-doc{bad}")),
        ]
        if store.capabilities.authorization == "acl":
            who = Authorization("bd-reader", SCOPE.tenant_id)
            reads.append(
                ("source_ids", lambda: store.check_source_access(SCOPE, ["bd-doc", bad], who))
            )
        if supports(store, "lexical"):
            mode = store.capabilities.lexical_modes[0]
            reads.append(
                (
                    "query",
                    lambda: store.lexical_query(  # type: ignore[attr-defined]
                        SCOPE, f"bdword {bad}", limit=4, mode=mode
                    ),
                )
            )
        for field, read in reads:
            with pytest.raises(ValidationError) as info:
                read()
            assert info.value.field == field

    def test_the_metadata_cap_counts_utf8_the_same_in_chunking_and_writes(
        self, store: ChunkStore
    ) -> None:
        """Checks ``ChunkStore.get_by_source``, ``replace_source``, ``index_derived``: metadata of
        6,000 × "é" fits a ``metadata_bytes`` cap of its exact compact-JSON UTF-8 size and reads
        back whole, and one byte less is ``ValidationError(limit="metadata_bytes")`` in
        ``chunk_text``, ``replace_source`` and ``index_derived`` alike.

        If this fails, check that chunk_text, replace_source and index_derived all measure
        with ragport.domain.model.metadata_bytes.
        """
        _ready(store)
        fits, short = Limits(metadata_bytes=EXACT_BYTES), Limits(metadata_bytes=EXACT_BYTES - 1)
        chunks = chunk_text("bdword text", source_id="bd-doc", metadata=EXACT, limits=fits)
        replace_source(
            source_id="bd-doc",
            chunks=chunks,
            embedder=EMBEDDER,
            store=store,
            scope=SCOPE,
            runtime=Runtime(limits=fits),
        )
        _derive_with(store, EXACT, fits)
        assert [r.metadata for r in store.get_by_source(SCOPE, "bd-doc")] == [EXACT]
        refusals: list[Callable[[], object]] = [
            lambda: chunk_text("text", source_id="bd-doc", metadata=EXACT, limits=short),
            lambda: replace_source(
                source_id="bd-doc",
                chunks=chunks,
                embedder=EMBEDDER,
                store=store,
                scope=SCOPE,
                runtime=Runtime(limits=short),
            ),
            lambda: _derive_with(store, EXACT, short),
        ]
        for refusal in refusals:
            with pytest.raises(ValidationError) as info:
                refusal()
            assert info.value.limit == "metadata_bytes"

    @pytest.mark.parametrize(
        "rows",
        [
            [[0.5] * EMBEDDER.dimensions, [0.5] * (EMBEDDER.dimensions - 1)],
            [[object()] * EMBEDDER.dimensions] * 2,
            [[{"x": 1}] * EMBEDDER.dimensions] * 2,
        ],
        ids=["ragged", "objects", "mappings"],
    )
    def test_embedder_rows_numpy_cannot_stack_are_an_embedder_error(
        self, store: ChunkStore, rows: Any
    ) -> None:
        """Checks ``Embedder.embed``, ``ChunkStore.get_by_source``, ``replace_source``,
        ``retrieve_context``: ragged or non-numeric embedder rows are an ``EmbedderError`` (not
        retryable, unchained) in indexing and retrieval, and nothing is written.

        Nothing is written and retrieval with such an embedder fails the same way. If this
        fails, check check_vectors in ragport/application/_support.py.
        """
        _ready(store)
        _write(store, "bd-doc", "the previous version")
        ragged = _RaggedEmbedder(rows)
        attempts: list[Callable[[], object]] = [
            lambda: replace_source(
                source_id="bd-doc",
                chunks=[Chunk.of("bd-doc", 0, "one"), Chunk.of("bd-doc", 1, "two")],
                embedder=ragged,
                store=store,
                scope=SCOPE,
            ),
            lambda: retrieve_context("previous", embedder=ragged, store=store, scope=SCOPE),
        ]
        for attempt in attempts:
            with pytest.raises(EmbedderError) as info:
                attempt()
            assert info.value.retryable is False
            assert info.value.__cause__ is None and info.value.__context__ is None
        assert _texts(store, "bd-doc") == ["the previous version"]

    @pytest.mark.parametrize("error", [RuntimeError, ValidationError], ids=["foreign", "ours"])
    def test_a_reranker_error_quoting_a_hit_is_reported_by_type_only(
        self, store: ChunkStore, error: type[Exception]
    ) -> None:
        """Checks ``Reranker.rerank``, ``retrieve_context``: a reranker failing with a hit's text is
        a ``RerankError`` without that text anywhere.

        Not in the message, not in ``__cause__``/``__context__`` (both ``None``), whether
        the reranker's error is a foreign exception or one of ragport's own types. If this
        fails, check the error branch at the end of rerank_hits (application/rerank.py).
        """
        _ready(store)
        _write(store, "bd-doc", f"bdword {SECRET}")
        with pytest.raises(RerankError) as info:
            retrieve_context(
                "bdword",
                embedder=EMBEDDER,
                store=store,
                scope=SCOPE,
                reranker=_QuotingReranker(error),
            )
        assert error_mentions(info.value, SECRET) == []
        assert info.value.__cause__ is None and info.value.__context__ is None

    def test_a_reranker_cannot_rewrite_what_is_rendered_or_stored(self, store: ChunkStore) -> None:
        """Checks ``Reranker.rerank``, ``ChunkStore.get_by_source``, ``retrieve_context``: a
        reranker writing to its hits (``object.__setattr__``) changes only its own copies, never the
        rendered text, the returned hits, their citations and trust, or the stored metadata; only
        the order is its own.

        The rendered text, the returned hits and citations come from the store's records; the
        order is the reranker's; trust stays untrusted; the stored metadata is unchanged. If
        this fails, check that rerank_hits hands the reranker copies and returns the caller's
        hits, and build_hits/render in application/answer.py.
        """
        _ready(store)
        _write(store, "bd-doc", "bdword first text", "bdword second text")
        plain = retrieve_context("bdword", embedder=EMBEDDER, store=store, scope=SCOPE)
        reranked = retrieve_context(
            "bdword",
            embedder=EMBEDDER,
            store=store,
            scope=SCOPE,
            reranker=_ScribblingReranker(),
        )
        assert [h.id for h in reranked.hits] == [h.id for h in reversed(plain.hits)]
        assert "INJECTED" not in reranked.text
        expected = {h.id: (h.text, h.source_id, h.metadata) for h in plain.hits}
        for hit in reranked.hits:
            assert (hit.text, hit.source_id, hit.metadata) == expected[hit.id]
            assert hit.provenance.citation_id == hit.id
            assert hit.trust.untrusted and Trust().untrusted
        assert [c.id for c in reranked.citations] == [h.id for h in reranked.hits]
        assert reranked.trust.untrusted
        assert {r.id: r.metadata for r in store.get_by_source(SCOPE, "bd-doc")} == {
            "bd-doc#0001": {"n": 0},
            "bd-doc#0002": {"n": 1},
        }
        again = retrieve_context("bdword", embedder=EMBEDDER, store=store, scope=SCOPE)
        assert again.text == plain.text


def _derive_with(store: ChunkStore, metadata: dict[str, Any], limits: Limits) -> None:
    index_derived(
        record_id="bd-sum",
        text="a summary",
        lineage=["bd-doc"],
        metadata=metadata,
        embedder=EMBEDDER,
        store=store,
        scope=SCOPE,
        runtime=Runtime(limits=limits),
    )


def _write_metadata(store: ChunkStore, metadata: dict[str, Any]) -> None:
    replace_source(
        source_id="bd-doc",
        chunks=[Chunk.of("bd-doc", 0, "new text", metadata=metadata)],
        embedder=EMBEDDER,
        store=store,
        scope=SCOPE,
    )
