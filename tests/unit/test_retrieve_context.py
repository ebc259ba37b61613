"""retrieve_context against the in-memory adapters: arguments, rendering, provenance, access."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
from doubles import CallLog, CountingEmbedder, CountingStore, Delegating, GuardedCallLog
from flat_options import flat

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.contract_tests.plugin import FixedClock
from ragport.domain.model import AccessDecision
from ragport.ports.store import ScoredRecord, SupportsGuardedQuery

SCOPE = ragport.Scope("tenant-1", "kb", "docs")
SCOPE_B = ragport.Scope("tenant-1", "kb", "notes")
FOREIGN = ragport.Scope("tenant-2", "kb", "docs")
ALICE = ragport.Authorization("alice", "tenant-1")
SECRET = "sk-SECRET"
NOW = datetime(2024, 5, 17, 9, 30, tzinfo=UTC)

HANDBOOK = [
    "vacation days accrue monthly for every employee",
    "vacation requests need manager approval two weeks ahead",
    "unused vacation days carry over until march",
]
SECURITY = [
    "security badges must be worn inside the office",
    "report lost security badges to the front desk",
]
QUERY = "vacation days approval"


# -- fakes ---------------------------------------------------------------------------------------


class CrossScopeStore(Delegating):
    """A broken store whose query answers from another scope."""

    def __init__(self, inner: InMemoryStore, leak_from: ragport.Scope) -> None:
        super().__init__(inner)
        self._leak_from = leak_from

    def query(self, scope: ragport.Scope, vector: Any, **kwargs: Any) -> Any:
        return self._inner.query(self._leak_from, vector, **kwargs)


class NoAclStore(Delegating):
    """A store that does not declare ACL support."""

    @property
    def capabilities(self) -> ragport.domain.Capabilities:
        return ragport.domain.Capabilities(
            lexical_modes=(), authorization="none", generations=True, transactions=True
        )


class GateStore(Delegating):
    """check_source_access denies ``revoked`` sources (a revocation after the query) or raises."""

    def __init__(
        self,
        inner: InMemoryStore,
        *,
        revoked: Sequence[str] = (),
        raises: BaseException | None = None,
    ) -> None:
        super().__init__(inner)
        self._revoked = set(revoked)
        self._raises = raises
        self.checks: list[list[str]] = []

    def check_source_access(
        self, scope: ragport.Scope, source_ids: Sequence[str], auth: ragport.Authorization
    ) -> Any:
        self.checks.append(list(source_ids))
        if self._raises is not None:
            raise self._raises
        decisions = dict(self._inner.check_source_access(scope, source_ids, auth))
        for source in self._revoked:
            if source in decisions:
                decisions[source] = AccessDecision(source, False, "no_grant")
        return decisions


class StaleQueryStore(Delegating):
    """A store whose query serves a stale answer captured earlier (ignores later tombstones)."""

    def __init__(self, inner: InMemoryStore) -> None:
        super().__init__(inner)
        self.stale: tuple[ScoredRecord, ...] = ()

    def capture(self, scope: ragport.Scope, query: str) -> None:
        vector = HashEmbedder().embed([query])[0]
        self.stale = tuple(self._inner.query(scope, vector, limit=128))

    def query(self, scope: ragport.Scope, vector: Any, **kwargs: Any) -> Any:
        return self.stale


# -- helpers -------------------------------------------------------------------------------------


def add_source(
    store: Any,
    source_id: str,
    texts: Sequence[str],
    *,
    scope: ragport.Scope = SCOPE,
    embedder: Any = None,
    metadata: dict[str, Any] | None = None,
) -> None:
    chunks = []
    start = 0
    for i, text in enumerate(texts):
        chunks.append(ragport.Chunk.of(source_id, i, text, start=start, metadata=metadata))
        start += len(text)
    ragport.application.replace_source(
        source_id=source_id,
        chunks=chunks,
        embedder=embedder or HashEmbedder(),
        store=store,
        scope=scope,
    )


def add_derived(store: InMemoryStore, record_id: str, text: str, roots: tuple[str, ...]) -> None:
    embedder = HashEmbedder()
    with store.unit_of_work(SCOPE) as uow:
        generation = uow.generations.stage()
        record = ragport.domain.Record(
            id=record_id,
            scope=SCOPE,
            source_id=record_id,
            kind="derived",
            text=text,
            embedder_id=embedder.id,
            dimensions=embedder.dimensions,
            generation=generation,
            lineage=roots,
            roots=roots,
        )
        uow.records.add([record], embedder.embed([text]))
        uow.generations.publish(generation)
        uow.commit()


def retrieve(query: str = QUERY, **kwargs: Any) -> ragport.RetrievalResult:
    kwargs.setdefault("embedder", HashEmbedder())
    if "scopes" not in kwargs:
        kwargs.setdefault("scope", SCOPE)
    return ragport.application.retrieve_context(query, **flat(**kwargs))


@pytest.fixture
def store() -> InMemoryStore:
    s = InMemoryStore()
    add_source(s, "handbook", HANDBOOK)
    add_source(s, "security", SECURITY)
    return s


def sources(result: ragport.RetrievalResult) -> set[str]:
    return {h.source_id for h in result.hits}


# -- arguments -----------------------------------------------------------------------------------


def test_scope_and_scopes_are_exclusive(store: InMemoryStore) -> None:
    """Exactly one of scope/scopes is required. If this fails, check retrieval_request._scopes."""
    with pytest.raises(ragport.ValidationError):
        ragport.application.retrieve_context(
            QUERY, embedder=HashEmbedder(), store=store, scope=SCOPE, scopes=[SCOPE]
        )
    with pytest.raises(ragport.ValidationError):
        ragport.application.retrieve_context(QUERY, embedder=HashEmbedder(), store=store)


def test_empty_scopes_returns_empty_without_io(store: InMemoryStore) -> None:
    """scopes=[] is an empty result, no embed, no store read. If this fails, check step 1."""
    counting = CountingStore(store)
    embedder = CountingEmbedder()
    result = retrieve(scopes=[], store=counting, embedder=embedder)
    assert result.hits == () and result.citations == ()
    assert result.text == ""
    assert result.truncated is False
    assert embedder.calls == []
    assert sum(counting.calls.values()) == 0


def test_nine_distinct_scopes_are_refused(store: InMemoryStore) -> None:
    """More than 8 distinct scopes fails by limit. If this fails, check scopes_per_retrieve."""
    nine = [ragport.Scope("tenant-1", "kb", f"c{i}") for i in range(9)]
    embedder = CountingEmbedder()
    with pytest.raises(ragport.ValidationError) as info:
        retrieve(scopes=nine, store=store, embedder=embedder)
    assert info.value.limit == "scopes_per_retrieve"
    assert embedder.calls == []
    assert retrieve(scopes=nine[:8], store=store).hits == ()


def test_duplicate_scopes_are_dropped(store: InMemoryStore) -> None:
    """Repeated scopes are queried once each, embed once. If this fails, check _scopes dedupe."""
    add_source(store, "notes", ["vacation days planning notes"], scope=SCOPE_B)
    counting = CountingStore(store)
    embedder = CountingEmbedder()
    result = retrieve(scopes=[SCOPE, SCOPE_B, SCOPE, SCOPE_B], store=counting, embedder=embedder)
    assert len(embedder.calls) == 1
    assert counting.calls[("query", SCOPE)] == 1
    assert counting.calls[("query", SCOPE_B)] == 1
    assert counting.count("query") == 2
    keys = [(h.scope, h.id) for h in result.hits]
    assert len(keys) == len(set(keys))
    assert {h.scope for h in result.hits} == {SCOPE, SCOPE_B}


def test_same_record_id_in_two_scopes_are_two_hits(store: InMemoryStore) -> None:
    """De-duplication keys on (scope, id). If this fails, check the candidates merge key."""
    add_source(store, "handbook", HANDBOOK, scope=SCOPE_B)
    result = retrieve(scopes=[SCOPE, SCOPE_B], store=store, top_k=32)
    handbook_hits = [(h.scope, h.id) for h in result.hits if h.source_id == "handbook"]
    assert len(handbook_hits) == 6
    assert {scope for scope, _ in handbook_hits} == {SCOPE, SCOPE_B}


def test_collapse_duplicates_keeps_the_best_copy_and_fills_top_k() -> None:
    """Two copies of one file (same text, whitespace apart) under two names: by default both
    fill the top-k; collapsed, only the better-ranked copy stays and a distinct hit moves up.
    Only after the access gate: a denied copy never hides a permitted one."""
    store = InMemoryStore()
    text = "Parental leave lasts sixteen weeks at full pay."
    add_source(store, "leave.md", [text])
    add_source(store, "copy-of-leave.md", ["Parental  leave lasts sixteen weeks\nat full pay."])
    add_source(store, "travel.md", ["Parental leave and travel: book trains for trips."])
    plain = retrieve("parental leave sixteen weeks", store=store, top_k=2)
    assert {h.source_id for h in plain.hits} == {"leave.md", "copy-of-leave.md"}
    collapsed = retrieve(
        "parental leave sixteen weeks", store=store, top_k=2, collapse_duplicates=True
    )
    assert len(collapsed.hits) == 2 and collapsed.hits[1].source_id == "travel.md"
    assert collapsed.hits[0].source_id == plain.hits[0].source_id

    best = plain.hits[0].source_id
    other = "copy-of-leave.md" if best == "leave.md" else "leave.md"
    store.set_source_access(
        SCOPE,
        [
            ragport.Grant(best, principal_ids=("bob",)),
            ragport.Grant(other, principal_ids=("alice",)),
            ragport.Grant("travel.md", principal_ids=("alice",)),
        ],
    )
    alice = ragport.Authorization("alice", SCOPE.tenant_id)
    gated = retrieve(
        "parental leave sixteen weeks",
        store=store,
        top_k=2,
        collapse_duplicates=True,
        authorization=alice,
    )
    assert [h.source_id for h in gated.hits] == [other, "travel.md"]
    with pytest.raises(ragport.ValidationError):
        retrieve(store=store, collapse_duplicates="yes")


@pytest.mark.parametrize(
    ("kwargs", "limit"),
    [
        ({"top_k": 33}, "top_k"),
        ({"top_k": 0}, "top_k"),
        ({"query_candidates": 129}, "query_candidates"),
        ({"max_result_bytes": 524_289}, "result_bytes"),
        ({"max_context_tokens": 8_001}, "context_tokens"),
        ({"rrf_k": 1_001}, "rrf_k"),
        ({"max_rerank_bytes": 262_145}, "rerank_bytes"),
        ({"max_rerank_ms": 300_001}, "rerank_ms"),
        ({"rerank_concurrency": 9}, "rerank_concurrency"),
    ],
)
def test_values_past_hard_ceilings_are_refused(
    store: InMemoryStore, kwargs: dict[str, int], limit: str
) -> None:
    """A per-call value past its ceiling names the limit. If this fails, check check_limit calls."""
    embedder = CountingEmbedder()
    with pytest.raises(ragport.ValidationError) as info:
        retrieve(store=store, embedder=embedder, **kwargs)
    assert info.value.limit == limit
    assert embedder.calls == []


@pytest.mark.parametrize("mode", ["fts5", "semantic"])
def test_unadvertised_lexical_mode_is_a_capability_error(store: InMemoryStore, mode: str) -> None:
    """A lexical mode the store lacks fails closed. If this fails, check the lexical_modes check."""
    assert mode not in store.capabilities.lexical_modes
    embedder = CountingEmbedder()
    with pytest.raises(ragport.CapabilityError):
        retrieve(store=store, embedder=embedder, lexical=mode)
    assert embedder.calls == []


@pytest.mark.parametrize("mode", ["", "BM25", "bm 25", "9fts", "x" * 33, None, 25])
def test_a_malformed_lexical_mode_is_a_validation_error(store: InMemoryStore, mode: Any) -> None:
    """A mode is 'off' or a lower-case name; anything else is refused when the request is
    built. If this fails, check check_lexical_mode (ragport/domain/lexical.py)."""
    with pytest.raises(ragport.ValidationError) as info:
        ragport.RetrievalRequest(lexical=mode)
    assert info.value.field == "lexical"


def test_a_mode_the_store_does_not_declare_is_a_capability_error(store: InMemoryStore) -> None:
    """Any well-formed name may be a store's mode; one this store does not declare fails
    closed before any embed. If this fails, check the lexical check of retrieve_context."""
    embedder = CountingEmbedder()
    with pytest.raises(ragport.CapabilityError) as info:
        retrieve(store=store, embedder=embedder, lexical="fts5")
    assert info.value.capability == "lexical"
    assert embedder.calls == []


def test_an_object_without_rerank_is_refused_before_embedding(store: InMemoryStore) -> None:
    """A reranker without rerank() is a ValidationError. If this fails, check the reranker guard."""
    embedder = CountingEmbedder()
    with pytest.raises(ragport.ValidationError) as info:
        retrieve(store=store, embedder=embedder, reranker=object())
    assert info.value.field == "reranker"
    assert embedder.calls == []


@pytest.mark.parametrize("blank", ["", "   ", "\n\t "])
def test_blank_query_is_empty_without_embedding(store: InMemoryStore, blank: str) -> None:
    """A blank query returns nothing and embeds nothing. If this fails, check step 1."""
    counting = CountingStore(store)
    embedder = CountingEmbedder()
    result = retrieve(blank, store=counting, embedder=embedder)
    assert result.hits == () and result.text == "" and result.truncated is False
    assert embedder.calls == []
    assert counting.count("query") == 0


# -- rendering -----------------------------------------------------------------------------------


def test_rendering_blocks_order_and_ranks(store: InMemoryStore) -> None:
    """Blocks are '[id] text' by descending score, ranks 1..n. If this fails, check answer.render."""
    result = retrieve(store=store, top_k=32)
    assert len(result.hits) == 5
    scores = [h.score for h in result.hits]
    assert scores == sorted(scores, reverse=True)
    assert [h.retrieval_rank for h in result.hits] == [1, 2, 3, 4, 5]
    assert result.text == "\n\n".join(f"[{h.id}] {h.text}" for h in result.hits)
    assert [c.id for c in result.citations] == [h.provenance.citation_id for h in result.hits]
    assert result.hits[0].source_id == "handbook"
    assert result.truncated is False
    assert result.query == QUERY
    texts = {h.id: h.text for h in result.hits}
    assert texts["handbook#0001"] == HANDBOOK[0]
    assert texts["security#0002"] == SECURITY[1]


def test_top_k_cut_is_not_truncation(store: InMemoryStore) -> None:
    """Stopping at top_k leaves truncated False. If this fails, check answer.render's truncated flag."""
    full = retrieve(store=store, top_k=32)
    result = retrieve(store=store, top_k=2)
    assert [h.id for h in result.hits] == [h.id for h in full.hits[:2]]
    assert len(result.citations) == 2
    assert result.truncated is False


def _big_store() -> InMemoryStore:
    s = InMemoryStore()
    texts = [(f"section {i} budget forecast figures " * 100)[:3000] for i in range(5)]
    add_source(s, "report", texts)
    return s


def test_byte_ceiling_truncates_rendering() -> None:
    """The byte ceiling cuts the rendering and sets truncated. If this fails, check answer.render."""
    result = retrieve("budget forecast figures", store=_big_store(), max_result_bytes=8000)
    assert result.truncated is True
    assert 1 <= len(result.hits) < 5
    assert len(result.text.encode("utf-8")) <= 8000
    assert len(result.citations) == len(result.hits)
    assert result.text == "\n\n".join(f"[{h.id}] {h.text}" for h in result.hits)


def test_token_ceiling_truncates_rendering() -> None:
    """The token ceiling cuts the rendering. If this fails, check estimate_tokens and answer.render."""
    result = retrieve("budget forecast figures", store=_big_store(), max_context_tokens=1600)
    assert result.truncated is True
    assert 1 <= len(result.hits) < 5
    assert ragport.application.estimate_tokens(result.text) <= 1600
    assert result.text == "\n\n".join(f"[{h.id}] {h.text}" for h in result.hits)


def test_estimate_tokens_is_utf8_bytes_over_four() -> None:
    """Tokens are ceil(UTF-8 bytes / 4). If this fails, check estimate_tokens."""
    assert ragport.application.estimate_tokens("") == 0
    assert ragport.application.estimate_tokens("abcd") == 1
    assert ragport.application.estimate_tokens("abcde") == 2
    assert ragport.application.estimate_tokens("é" * 3) == math.ceil(6 / 4)


def test_multibyte_text_respects_byte_ceiling() -> None:
    """The byte ceiling counts UTF-8 bytes, not characters. If this fails, check answer.render."""
    s = InMemoryStore()
    add_source(s, "zh", [("预算 预测 数字 " * 200)[:1000] for _ in range(3)])
    result = retrieve("预算 预测", store=s, max_result_bytes=4000)
    assert result.truncated is True
    assert len(result.text.encode("utf-8")) <= 4000
    assert len(result.hits) == 1


# -- provenance and trust ------------------------------------------------------------------------


def test_provenance_and_trust_on_every_hit(store: InMemoryStore) -> None:
    """Hits and citations carry full provenance and trust. If this fails, check answer.render."""
    result = retrieve(store=store, top_k=32, clock=FixedClock(NOW))
    assert result.hits
    assert (result.trust.untrusted, result.trust.inert, result.trust.injection_capable) == (
        True,
        True,
        True,
    )
    for hit, citation in zip(result.hits, result.citations, strict=True):
        p = hit.provenance
        assert p.source_id == hit.source_id
        assert p.chunk_id == hit.id
        assert p.citation_id == citation.id
        assert f"[{p.citation_id}] {hit.text}" in result.text
        assert p.provider == "memory"
        assert (p.tenant_id, p.resource_id, p.corpus_id) == (
            SCOPE.tenant_id,
            SCOPE.resource_id,
            SCOPE.corpus_id,
        )
        assert p.retrieval == "vector"
        assert p.retrieved_at == NOW
        assert citation.source_id == hit.source_id
        assert citation.chunk_id == hit.id
        assert citation.provenance == p
        for trust in (hit.trust, citation.trust):
            assert (trust.untrusted, trust.inert, trust.injection_capable) == (True, True, True)


def test_provenance_names_each_hits_own_scope(store: InMemoryStore) -> None:
    """Multi-scope hits carry their own scope. If this fails, check Provenance scope fields."""
    add_source(store, "notes", ["vacation days planning notes"], scope=SCOPE_B)
    result = retrieve(scopes=[SCOPE, SCOPE_B], store=store, top_k=32)
    by_source = {h.source_id: h.provenance.scope for h in result.hits}
    assert by_source["notes"] == SCOPE_B
    assert by_source["handbook"] == SCOPE


# -- embedder drift ------------------------------------------------------------------------------


def test_other_dimension_is_an_embedder_mismatch() -> None:
    """Records of hash-v1:64 refuse a 256 query. If this fails, check the drift guard."""
    s = InMemoryStore()
    add_source(s, "handbook", HANDBOOK, embedder=HashEmbedder(64))
    with pytest.raises(ragport.EmbedderMismatchError) as info:
        retrieve(store=s, embedder=HashEmbedder(256))
    err = info.value
    assert err.code == "ERR_RAG_EMBEDDER_MISMATCH"
    assert err.expected_id == "hash-v1:256"
    assert err.found_id == "hash-v1:64"
    assert err.expected_dimensions == 256
    assert err.found_dimensions == 64
    assert "replace_source" in str(err)
    assert all(text not in str(err) for text in HANDBOOK)


def test_same_dimension_other_id_is_an_embedder_mismatch(store: InMemoryStore) -> None:
    """Same dimension, other model id still mismatches. If this fails, check the drift guard."""
    other = CountingEmbedder(HashEmbedder(256), id="other:256")
    with pytest.raises(ragport.EmbedderMismatchError) as info:
        retrieve(store=store, embedder=other)
    assert info.value.code == "ERR_RAG_EMBEDDER_MISMATCH"
    assert info.value.expected_id == "other:256"
    assert info.value.found_id == "hash-v1:256"
    assert "replace_source" in str(info.value)


def test_mismatch_in_one_of_several_scopes_stops_retrieval(store: InMemoryStore) -> None:
    """Drift in any requested scope stops the query. If this fails, check the drift guard loop."""
    add_source(store, "notes", ["vacation notes"], scope=SCOPE_B, embedder=HashEmbedder(64))
    with pytest.raises(ragport.EmbedderMismatchError) as info:
        retrieve(scopes=[SCOPE, SCOPE_B], store=store)
    assert info.value.found_id == "hash-v1:64"


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "plain"])
def test_drift_guard_reads_once_per_scope_on_either_path(
    store: InMemoryStore, guarded: bool
) -> None:
    """A guarded store answers the drift guard with its vector leg; a plain one gets a read
    first; a hybrid query answers it with its legs. A plain store always gets the tombstone
    re-read, a guarded one whenever a lexical leg is involved; both refuse another embedder.
    If this fails, check steps 3, 5 and 7 of retrieve_context."""
    log = GuardedCallLog(store) if guarded else CallLog(store)
    assert isinstance(log, SupportsGuardedQuery), "delegation answers isinstance either way"
    assert sources(retrieve(store=log)) == {"handbook", "security"}
    calls = [c for c in log.calls if c != "capabilities"]
    if guarded:
        assert calls == ["guarded_query"], "one statement, one snapshot: nothing to re-read"
    else:
        assert calls == ["foreign_embedders", "query", "list_invalidated_ids"]
    log.calls.clear()
    assert sources(retrieve(store=log, lexical="bm25")) == {"handbook", "security"}
    calls = [c for c in log.calls if c != "capabilities"]
    # Hybrid: the guard and both legs come from one snapshot (hybrid_query), on either path.
    assert calls == ["hybrid_query", "list_invalidated_ids"]
    log.calls.clear()
    other = CountingEmbedder(HashEmbedder(256), id="other:256")
    with pytest.raises(ragport.EmbedderMismatchError) as info:
        retrieve(store=log, embedder=other)
    assert info.value.found_id == "hash-v1:256"
    # Nothing was fused or returned: the mismatch is raised from the leg's own answer.
    assert "list_invalidated_ids" not in log.calls
    assert other.calls == ([["vacation days approval"]] if guarded else [])


# -- filters and scope guards --------------------------------------------------------------------


def test_metadata_filter_is_shallow_equality() -> None:
    """metadata_filter matches top-level keys by equality. If this fails, check store.query."""
    s = InMemoryStore()
    add_source(s, "en", ["vacation days policy"], metadata={"lang": "en", "tags": ["hr", "pto"]})
    add_source(s, "fr", ["vacation days policy fr"], metadata={"lang": "fr", "tags": ["hr"]})
    add_source(s, "bare", ["vacation days policy bare"])

    assert sources(retrieve(store=s, metadata_filter={"lang": "en"})) == {"en"}
    assert sources(retrieve(store=s, metadata_filter={"tags": ["hr"]})) == {"fr"}
    assert sources(retrieve(store=s, metadata_filter={"tags": ["hr", "pto"]})) == {"en"}
    assert sources(retrieve(store=s, metadata_filter={"lang": "en", "tags": ["hr"]})) == set()
    assert sources(retrieve(store=s, metadata_filter={"missing": None})) == set()
    assert sources(retrieve(store=s, metadata_filter={})) == {"en", "fr", "bare"}


def test_record_from_another_scope_is_a_scope_error(store: InMemoryStore) -> None:
    """A store answering from another scope fails closed. If this fails, check step 6."""
    empty = ragport.Scope("tenant-1", "kb", "empty")
    with pytest.raises(ragport.domain.errors.ScopeError):
        retrieve(scope=empty, store=CrossScopeStore(store, leak_from=SCOPE))


def test_authorization_without_acl_is_a_capability_error(store: InMemoryStore) -> None:
    """An authorization needs an ACL store. If this fails, check the capabilities check."""
    embedder = CountingEmbedder()
    with pytest.raises(ragport.CapabilityError):
        retrieve(store=NoAclStore(store), embedder=embedder, authorization=ALICE)
    assert embedder.calls == []
    assert retrieve(store=NoAclStore(store)).hits


def test_authorization_for_another_tenant_is_a_scope_error(store: InMemoryStore) -> None:
    """The caller's tenant must equal every scope's. If this fails, check the tenancy check."""
    store.set_source_access(SCOPE, [ragport.Grant("handbook", principal_ids=["alice"])])
    outsider = ragport.Authorization("alice", "tenant-2")
    embedder = CountingEmbedder()
    with pytest.raises(ragport.domain.errors.ScopeError):
        retrieve(store=store, embedder=embedder, authorization=outsider)
    with pytest.raises(ragport.domain.errors.ScopeError):
        retrieve(scopes=[SCOPE, FOREIGN], store=store, embedder=embedder, authorization=ALICE)
    assert embedder.calls == []


# -- grants and the access gate ------------------------------------------------------------------


def test_source_without_grant_is_never_returned(store: InMemoryStore) -> None:
    """Ungranted sources are filtered by the store and reported once with hits=0.

    If this fails, check the store's grant predicate and its on_denied report.
    """
    store.set_source_access(SCOPE, [ragport.Grant("handbook", principal_ids=["alice"])])
    denials: list[ragport.AccessDenial] = []
    result = retrieve(
        "security badges vacation",
        store=store,
        top_k=32,
        authorization=ALICE,
        on_access_denied=denials.append,
    )
    assert sources(result) == {"handbook"}
    assert len(result.hits) == 3
    assert [(d.source_id, d.reason, d.hits, d.scope) for d in denials] == [
        ("security", "no_grant", 0, SCOPE)
    ]
    assert sources(retrieve("security badges vacation", store=store, top_k=32)) == {
        "handbook",
        "security",
    }


def test_group_grant_and_version_are_enforced(store: InMemoryStore) -> None:
    """Group grants allow; a version mismatch denies. If this fails, check query grants."""
    store.set_source_access(
        SCOPE,
        [
            ragport.Grant("handbook", group_ids=["staff"], access_version=2),
            ragport.Grant("security", group_ids=["staff"], access_version=1),
        ],
    )
    staff_v2 = ragport.Authorization("bob", "tenant-1", group_ids=["staff"], access_version=2)
    result = retrieve("security badges vacation", store=store, top_k=32, authorization=staff_v2)
    assert sources(result) == {"handbook"}
    outsider = ragport.Authorization("eve", "tenant-1", group_ids=["guests"])
    assert retrieve(store=store, top_k=32, authorization=outsider).hits == ()


def test_gate_denial_reports_once_per_source(store: InMemoryStore) -> None:
    """A gate denial withholds and reports once. If this fails, check _access_gate."""
    store.set_source_access(
        SCOPE,
        [
            ragport.Grant("handbook", principal_ids=["alice"]),
            ragport.Grant("security", principal_ids=["alice"]),
        ],
    )
    gate = GateStore(store, revoked=["handbook"])
    denials: list[ragport.AccessDenial] = []
    result = retrieve(
        "security badges vacation",
        store=gate,
        top_k=32,
        authorization=ALICE,
        on_access_denied=denials.append,
    )
    assert sources(result) == {"security"}
    assert len(result.hits) == 2
    assert len(denials) == 1
    denial = denials[0]
    assert (denial.source_id, denial.scope, denial.reason, denial.hits) == (
        "handbook",
        SCOPE,
        "no_grant",
        3,
    )
    assert len(gate.checks) == 1
    assert sorted(gate.checks[0]) == ["handbook", "security"]


class GuardedGateStore(GateStore):
    """A guarded ``GateStore`` (its class defines ``guarded_query``) that records the
    ``limit`` each vector leg asked for."""

    limits: list[int]

    def guarded_query(self, scope: ragport.Scope, vector: Any, **kwargs: Any) -> Any:
        self.__dict__.setdefault("limits", []).append(kwargs["limit"])
        return self._inner.guarded_query(scope, vector, **kwargs)


def _granted(store: InMemoryStore) -> None:
    store.set_source_access(
        SCOPE,
        [
            ragport.Grant("handbook", principal_ids=["alice"]),
            ragport.Grant("security", principal_ids=["alice"]),
        ],
    )


def test_access_checked_leg_asks_for_top_k(store: InMemoryStore) -> None:
    """With an authorization a guarded store's vector leg screens grants itself, so retrieval
    asks it for top_k, not query_candidates (issue 45), and still gates what came back.

    If this fails, check retrieval._narrowed.
    """
    _granted(store)
    gate = GuardedGateStore(store)
    result = retrieve(store=gate, top_k=2, query_candidates=20, authorization=ALICE)
    assert len(result.hits) == 2
    assert gate.limits == [2]
    assert len(gate.checks) == 1
    # with a denial callback the store reports what it screened among all its candidates
    retrieve(store=gate, top_k=2, query_candidates=20, authorization=ALICE, on_access_denied=print)
    assert gate.limits == [2, 20]


def test_gate_withholding_a_narrowed_hit_reads_the_full_candidates(store: InMemoryStore) -> None:
    """A hit the store's predicate let through but the gate withholds (a revoke in between)
    makes retrieval read query_candidates again: the answer is the one the full candidates
    give, never short of allowed hits. If this fails, check the re-read in retrieve_context.
    """
    _granted(store)
    gate = GuardedGateStore(store, revoked=["handbook"])
    result = retrieve(
        "vacation days", store=gate, top_k=2, query_candidates=20, authorization=ALICE
    )
    assert gate.limits == [2, 20]
    assert sources(result) == {"security"}
    assert len(result.hits) == 2
    assert len(gate.checks) == 2


def test_gate_without_authorization_is_not_run(store: InMemoryStore) -> None:
    """A trusted caller has no recheck gate. If this fails, check authorization=None handling."""
    gate = GateStore(store, revoked=["handbook"])
    result = retrieve("security badges vacation", store=gate, top_k=32)
    assert sources(result) == {"handbook", "security"}
    assert gate.checks == []


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError(f"connect postgres://app:{SECRET}@db failed " + "x" * 600),
        ragport.CapabilityError(f"grant backend refused token {SECRET} " + "y" * 600),
    ],
    ids=["foreign", "ragport"],
)
def test_failed_access_check_withholds_everything(store: InMemoryStore, exc: BaseException) -> None:
    """A raising check withholds all, reason check_failed. If this fails, check _access_gate."""
    store.set_source_access(
        SCOPE,
        [
            ragport.Grant("handbook", principal_ids=["alice"]),
            ragport.Grant("security", principal_ids=["alice"]),
        ],
    )
    gate = GateStore(store, raises=exc)
    denials: list[ragport.AccessDenial] = []
    result = retrieve(
        "security badges vacation",
        store=gate,
        top_k=32,
        authorization=ALICE,
        on_access_denied=denials.append,
        secrets=[SECRET],
    )
    assert result.hits == () and result.text == ""
    assert {d.source_id: d.hits for d in denials} == {"handbook": 3, "security": 2}
    for denial in denials:
        assert denial.reason == "check_failed"
        assert denial.scope == SCOPE
        assert denial.error is not None
        assert len(denial.error) <= 256
        assert SECRET not in denial.error
        assert all(text not in denial.error for text in HANDBOOK + SECURITY)


SUMMARY = "summary of vacation days and security badges"


def test_derived_record_needs_every_root(store: InMemoryStore) -> None:
    """A derived record is visible only if all roots are granted. If this fails, check roots ACL."""
    add_derived(store, "summary-1", SUMMARY, ("handbook", "security"))
    store.set_source_access(SCOPE, [ragport.Grant("handbook", principal_ids=["alice"])])
    denials: list[ragport.AccessDenial] = []

    denied = retrieve(
        SUMMARY, store=store, top_k=32, authorization=ALICE, on_access_denied=denials.append
    )
    assert "summary-1" not in {h.id for h in denied.hits}
    assert sources(denied) == {"handbook"}
    # filtered by the store's predicate and reported once (its root and its chunks are one source)
    assert [(d.source_id, d.reason, d.hits) for d in denials] == [("security", "no_grant", 0)]
    denials.clear()

    store.set_source_access(SCOPE, [ragport.Grant("security", group_ids=["staff"])])
    staff_alice = ragport.Authorization("alice", "tenant-1", group_ids=["staff"])
    allowed = retrieve(
        SUMMARY, store=store, top_k=32, authorization=staff_alice, on_access_denied=denials.append
    )
    assert "summary-1" in {h.id for h in allowed.hits}
    summary = next(h for h in allowed.hits if h.id == "summary-1")
    assert summary.source_id == "summary-1"
    assert denials == []

    trusted = retrieve(SUMMARY, store=store, top_k=32)
    assert "summary-1" in {h.id for h in trusted.hits}


@pytest.mark.parametrize(
    ("revoked", "visible"), [((), True), (("security",), False)], ids=["granted", "revoked"]
)
def test_gate_checks_a_derived_records_roots(
    store: InMemoryStore, revoked: tuple[str, ...], visible: bool
) -> None:
    """The gate checks a derived record's roots. If this fails, check access_sources in the gate."""
    add_derived(store, "summary-1", SUMMARY, ("handbook", "security"))
    store.set_source_access(
        SCOPE,
        [
            ragport.Grant("handbook", principal_ids=["alice"]),
            ragport.Grant("security", principal_ids=["alice"]),
        ],
    )
    gate = GateStore(store, revoked=revoked)
    denials: list[ragport.AccessDenial] = []
    # One candidate only: the derived record itself (its text is the query).
    result = retrieve(
        SUMMARY,
        store=gate,
        top_k=32,
        query_candidates=1,
        authorization=ALICE,
        on_access_denied=denials.append,
    )
    assert [h.id for h in result.hits] == (["summary-1"] if visible else [])
    assert len(gate.checks) == 1
    assert sorted(gate.checks[0]) == ["handbook", "security"]
    if visible:
        assert denials == []
    else:
        assert [(d.source_id, d.reason, d.hits) for d in denials] == [("security", "no_grant", 1)]


# -- tombstones ----------------------------------------------------------------------------------


def _tombstone(store: InMemoryStore, tombstone: ragport.domain.Tombstone) -> None:
    with store.unit_of_work(SCOPE) as uow:
        uow.tombstones.add([tombstone])
        uow.commit()


@pytest.mark.parametrize("target", ["handbook", "handbook#0001"])
def test_forgotten_tombstone_withholds_even_stale_answers(
    store: InMemoryStore, target: str
) -> None:
    """A forgotten id is dropped even if query returns it. If this fails, check step 7."""
    stale = StaleQueryStore(store)
    stale.capture(SCOPE, "security badges vacation")
    assert "handbook#0001" in {s.record.id for s in stale.stale}
    _tombstone(store, ragport.domain.Tombstone(target, "forgotten"))

    result = retrieve("security badges vacation", store=stale, top_k=32)

    ids = {h.id for h in result.hits}
    assert "handbook#0001" not in ids
    assert {"security#0001", "security#0002"} <= ids
    if target == "handbook":
        assert "handbook" not in sources(result)


def test_forgotten_lineage_edge_withholds_derived(store: InMemoryStore) -> None:
    """A derived record resting on a forgotten source is dropped. If this fails, check lineage."""
    add_derived(store, "summary-1", "summary of vacation days", ("handbook",))
    stale = StaleQueryStore(store)
    stale.capture(SCOPE, "summary of vacation days")
    assert "summary-1" in {s.record.id for s in stale.stale}
    _tombstone(store, ragport.domain.Tombstone("handbook", "forgotten"))
    result = retrieve("summary of vacation days", store=stale, top_k=32)
    assert "summary-1" not in {h.id for h in result.hits}


def test_corrected_tombstone_does_not_withhold(store: InMemoryStore) -> None:
    """A corrected tombstone withholds nothing. If this fails, check list_invalidated_ids."""
    stale = StaleQueryStore(store)
    stale.capture(SCOPE, "security badges vacation")
    _tombstone(store, ragport.domain.Tombstone("handbook", "corrected"))
    assert sources(retrieve("security badges vacation", store=stale, top_k=32)) == {
        "handbook",
        "security",
    }
    assert sources(retrieve("security badges vacation", store=store, top_k=32)) == {
        "handbook",
        "security",
    }


# -- hit metadata and private reads ---------------------------------------------------------------


class _HandsOutItsRows(InMemoryStore):
    """Declares no private_reads; with hand_out patched away its reads return its own rows."""

    @property
    def capabilities(self) -> ragport.domain.Capabilities:
        return attrs.evolve(super().capabilities, private_reads=False)


def test_hits_copy_the_metadata_of_a_store_without_private_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store that does not declare private_reads may hand out its own rows: writing to a
    hit's nested metadata must still leave the stored record alone (the hit holds a copy).

    If this fails, check build_hits: it may take the record's metadata only when the store
    declares Capabilities.private_reads.
    """
    import ragport.engine.store as engine_store

    monkeypatch.setattr(engine_store, "hand_out", lambda record: record)
    store = _HandsOutItsRows()
    add_source(store, "handbook", HANDBOOK, metadata={"heading": ["Leave"]})
    result = retrieve(store=store)
    assert result.hits
    for hit in result.hits:
        hit.metadata["heading"].append("scribbled")
    stored = store.get_by_source(SCOPE, "handbook")
    assert stored[0] is store.get_by_source(SCOPE, "handbook")[0]  # its own rows indeed
    assert [r.metadata for r in stored] == [{"heading": ["Leave"]}] * len(stored)


def test_hits_of_a_private_reads_store_hold_metadata_of_their_own(store: InMemoryStore) -> None:
    """On the in-memory store (private_reads), hits take the read's copies: no two hits share
    a container, and writing to them changes neither the store nor the next retrieval.

    If this fails, check hand_out (one copy per record handed out) and build_hits.
    """
    assert store.capabilities.private_reads
    add_source(store, "leave", HANDBOOK, metadata={"heading": ["Leave"], "tags": {"a": [1]}})
    first = retrieve(store=store, top_k=8)
    nested = [c for h in first.hits for c in (h.metadata, h.metadata.get("heading"))]
    nested = [c for c in nested if c is not None]
    assert len({id(c) for c in nested}) == len(nested)
    for hit in first.hits:
        if "heading" in hit.metadata:
            hit.metadata["heading"].append("scribbled")
            hit.metadata["tags"]["a"].clear()
    again = retrieve(store=store, top_k=8)
    meta = {"heading": ["Leave"], "tags": {"a": [1]}}
    assert any(h.metadata == meta for h in again.hits)
    assert all(h.metadata in ({}, meta) for h in again.hits)
    assert all(r.metadata == meta for r in store.get_by_source(SCOPE, "leave"))


class _ReadLog(InMemoryStore):
    """Counts the vector reads retrieval makes; ``borrowed`` sets the declaration."""

    def __init__(self, *, borrowed: bool) -> None:
        super().__init__()
        self.borrowed, self.reads = borrowed, []

    @property
    def capabilities(self) -> ragport.domain.Capabilities:
        return attrs.evolve(super().capabilities, borrowed_query=self.borrowed)

    def guarded_query(self, *args: Any, **kwargs: Any) -> Any:
        self.reads.append("guarded_query")
        return super().guarded_query(*args, **kwargs)

    def borrowed_query(self, *args: Any, **kwargs: Any) -> Any:
        self.reads.append("borrowed_query")
        return super().borrowed_query(*args, **kwargs)


def test_retrieval_borrows_the_vector_only_leg_where_declared_and_copies_metadata() -> None:
    """A vector-only retrieval reads through borrowed_query where declared (else
    guarded_query), with the same hits either way; each hit holds a metadata copy, so writing
    to it leaves the lent record alone. A hybrid retrieval reads neither.

    If this fails, check the choice of read in retrieval._search and build_hits'
    private_reads argument (off for lent records).
    """
    results = {}
    for borrowed in (True, False):
        store = _ReadLog(borrowed=borrowed)
        add_source(store, "leave", HANDBOOK, metadata={"heading": ["Leave"], "tags": {"a": [1]}})
        result = retrieve(store=store, top_k=4)
        assert store.reads == ["borrowed_query" if borrowed else "guarded_query"]
        assert result.hits
        for hit in result.hits:
            hit.metadata["heading"].append("scribbled")
            hit.metadata["tags"]["a"].clear()
        stored = store.get_by_source(SCOPE, "leave")
        assert all(r.metadata == {"heading": ["Leave"], "tags": {"a": [1]}} for r in stored)
        results[borrowed] = [(h.id, h.score, h.text) for h in result.hits]
        store.reads.clear()
        retrieve(store=store, lexical="bm25")
        assert store.reads == []
    assert results[True] == results[False]
