"""The reranking seam: permutation-only answers, caps, deadline, concurrency, second access gate."""

from __future__ import annotations

import math
import threading
import time

import pytest

import ragport
from ragport import Authorization, Chunk, Grant, RetrievalRequest, Runtime, Scope
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryStore
from ragport.adapters.rerankers import EmbeddingReranker, FakeReranker
from ragport.application import replace_source, rerank_hits, retrieve_context
from ragport.domain.errors import RerankError

SCOPE = Scope("t", "r", "c")
EMBEDDER = HashEmbedder(64)


def _store() -> InMemoryStore:
    store = InMemoryStore()
    for source, text in [("a", "alpha cats"), ("b", "beta cats and dogs"), ("c", "gamma dogs")]:
        replace_source(
            source_id=source,
            chunks=[Chunk.of(source, 0, text)],
            embedder=EMBEDDER,
            store=store,
            scope=SCOPE,
        )
    return store


def _hits() -> tuple[ragport.Hit, ...]:
    return retrieve_context(
        "cats dogs",
        embedder=EMBEDDER,
        store=_store(),
        scope=SCOPE,
        request=RetrievalRequest(top_k=10),
    ).hits


class Answer:
    def __init__(self, fn):
        self.fn = fn

    def rerank(self, query, hits):
        return self.fn(hits)


def test_a_reversing_reranker_returns_the_same_objects_reversed():
    """The result is the reranker's order of the very same Hit objects.

    If this fails, check `_order` in ragport/application/rerank.py.
    """
    hits = _hits()
    out = rerank_hits("q", hits, reranker=Answer(lambda h: list(reversed(h))))
    assert [id(h) for h in out] == [id(h) for h in reversed(hits)]


@pytest.mark.parametrize(
    "answer",
    [
        lambda h: [h[0], h[0], h[1]],  # duplicate
        lambda h: list(h[:-1]),  # missing
        lambda h: [
            *h[:-1],
            ragport.Hit(
                **{
                    f: getattr(h[-1], f)
                    for f in (
                        "id",
                        "source_id",
                        "text",
                        "metadata",
                        "score",
                        "retrieval_rank",
                        "provenance",
                        "trust",
                    )
                }
            ),
        ],  # a copy
        lambda h: [(x, math.nan) for x in h],  # non-finite score
        lambda h: [(x, "high") for x in h],  # non-numeric score
        lambda h: "abc",  # not a sequence of hits
        lambda h: None,
    ],
)
def test_malformed_answers_fail_closed(answer):
    """Unknown, duplicate or missing hits and bad scores are RerankError, never the old order.

    If this fails, check `_order` in ragport/application/rerank.py.
    """
    with pytest.raises(RerankError):
        rerank_hits("q", _hits(), reranker=Answer(answer))


def test_a_raising_reranker_is_a_rerank_error_without_its_message():
    """An exception inside the reranker becomes RerankError naming only its type.

    If this fails, check the error path of rerank_hits.
    """

    def boom(hits):
        raise RuntimeError("secret document text")

    with pytest.raises(RerankError) as info:
        rerank_hits("q", _hits(), reranker=Answer(boom))
    assert "secret document text" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None


def test_a_reranker_writing_to_its_hits_changes_none_of_the_callers():
    """rerank_hits gives the reranker copies and returns the caller's own, untouched hits.

    If this fails, check _copy_for_reranker and the mapping back at the end of rerank_hits.
    """
    hits = _hits()
    before = [(h.text, h.source_id, dict(h.metadata), h.provenance.citation_id) for h in hits]

    def scribble(given):
        for hit in given:
            object.__setattr__(hit, "text", "INJECTED")
            object.__setattr__(hit, "source_id", "INJECTED")
            hit.metadata["x"] = "INJECTED"
            object.__setattr__(hit.provenance, "citation_id", "INJECTED")
            object.__setattr__(hit.trust, "untrusted", False)
        return list(reversed(given))

    out = rerank_hits("q", hits, reranker=Answer(scribble))
    assert [id(h) for h in out] == [id(h) for h in reversed(hits)]
    after = [(h.text, h.source_id, dict(h.metadata), h.provenance.citation_id) for h in hits]
    assert after == before
    assert all(h.trust.untrusted for h in hits) and ragport.domain.Trust().untrusted


def test_input_over_max_bytes_is_refused_before_the_reranker_runs():
    """Query plus candidate texts over max_bytes is RerankError with zero reranker calls.

    If this fails, check the size check in rerank_hits.
    """
    calls = []
    with pytest.raises(RerankError):
        rerank_hits(
            "q", _hits(), reranker=Answer(lambda h: calls.append(1) or list(h)), max_bytes=10
        )
    assert calls == []


def test_caps_past_hard_ceilings_are_validation_errors():
    """max_bytes, max_ms and concurrency past their ceilings name the limit.

    If this fails, check check_limit calls in rerank_hits.
    """
    for kwargs, limit in [
        ({"max_bytes": 262_145}, "rerank_bytes"),
        ({"max_ms": 300_001}, "rerank_ms"),
        ({"concurrency": 9}, "rerank_concurrency"),
    ]:
        with pytest.raises(ragport.ValidationError) as info:
            rerank_hits("q", _hits(), reranker=FakeReranker(), **kwargs)
        assert info.value.limit == limit


def test_a_slow_reranker_times_out():
    """A reranker slower than max_ms is RerankError after about max_ms.

    If this fails, check the deadline loop in rerank_hits.
    """
    started = time.monotonic()
    with pytest.raises(RerankError):
        rerank_hits("q", _hits(), reranker=Answer(lambda h: time.sleep(1.0) or list(h)), max_ms=50)
    assert time.monotonic() - started < 0.9


def test_an_abort_during_rerank_is_a_rerank_error():
    """Setting abort while the reranker runs stops the wait with RerankError.

    If this fails, check the abort polling in rerank_hits.
    """
    abort = threading.Event()

    def slow(hits):
        abort.set()
        time.sleep(0.5)
        return list(hits)

    with pytest.raises(RerankError):
        rerank_hits("q", _hits(), reranker=Answer(slow), runtime=Runtime(abort=abort), max_ms=5000)


def test_concurrency_is_capped_per_reranker_object():
    """With concurrency=2, at most two calls of one reranker run at the same time.

    If this fails, check `_acquire`/`_release` in rerank_hits.
    """
    lock = threading.Lock()
    active, peak = [0], [0]

    def tracked(hits):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return list(hits)

    reranker = Answer(tracked)
    hits = _hits()
    errors = []

    def call():
        try:
            rerank_hits("q", hits, reranker=reranker, concurrency=2, max_ms=5000)
        except RerankError as exc:  # pragma: no cover - would fail the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and peak[0] == 2


def test_empty_input_returns_empty_without_calling():
    """No hits: nothing to rerank, the reranker is not called.

    If this fails, check the early return in rerank_hits.
    """
    calls = []
    assert rerank_hits("q", [], reranker=Answer(lambda h: calls.append(1) or [])) == ()
    assert calls == []


def test_fake_and_embedding_rerankers_are_deterministic_permutations():
    """FakeReranker and EmbeddingReranker return every input once, the same way twice.

    If this fails, check ragport/adapters/rerankers/simple.py.
    """
    hits = _hits()
    for reranker in (FakeReranker(), EmbeddingReranker(EMBEDDER)):
        first = rerank_hits("alpha cats", hits, reranker=reranker)
        second = rerank_hits("alpha cats", hits, reranker=reranker)
        assert [id(h) for h in first] == [id(h) for h in second]
        assert sorted(map(id, first)) == sorted(map(id, hits))
    top = rerank_hits("alpha cats", hits, reranker=FakeReranker())[0]
    assert top.source_id == "a"


def test_retrieve_keeps_retrieval_rank_and_uses_the_reranked_order():
    """After a reversing reranker, hits come reversed and retrieval_rank keeps the old order.

    If this fails, check steps 9-11 of retrieve_context.
    """
    store = _store()
    plain = retrieve_context(
        "cats dogs", embedder=EMBEDDER, store=store, scope=SCOPE, request=RetrievalRequest(top_k=3)
    )
    reranked = retrieve_context(
        "cats dogs",
        embedder=EMBEDDER,
        store=store,
        scope=SCOPE,
        reranker=Answer(lambda h: list(reversed(h))),
        request=RetrievalRequest(top_k=3),
    )
    assert [h.id for h in reranked.hits] == [h.id for h in reversed(plain.hits)]
    assert [h.retrieval_rank for h in reranked.hits] == [3, 2, 1]


def test_a_revoke_issued_inside_the_reranker_keeps_the_source_out():
    """The reranker revokes a source, then returns: the post-rerank gate withholds it.

    If this fails, check the second access gate in retrieve_context.
    """
    store = _store()
    store.set_source_access(SCOPE, [Grant(s, principal_ids=("alice",)) for s in "abc"])
    denials = []

    def revoke_then_answer(hits):
        store.set_source_access(SCOPE, [Grant("b")])  # empty grant: revoked
        return list(hits)

    result = retrieve_context(
        "cats dogs",
        embedder=EMBEDDER,
        store=store,
        scope=SCOPE,
        authorization=Authorization("alice", "t"),
        reranker=Answer(revoke_then_answer),
        on_access_denied=denials.append,
        request=RetrievalRequest(top_k=5),
    )
    assert "b" not in {h.source_id for h in result.hits}
    assert "beta" not in result.text
    assert [(d.source_id, d.reason) for d in denials] == [("b", "no_grant")]


def test_the_reranker_sees_redacted_text_only():
    """secrets= are removed before the reranker receives the candidates.

    If this fails, check that hits are built with redacted text before rerank_hits.
    """
    store = InMemoryStore()
    replace_source(
        source_id="s",
        chunks=[Chunk.of("s", 0, "token sk-123 cats")],
        embedder=EMBEDDER,
        store=store,
        scope=SCOPE,
    )
    seen = []
    retrieve_context(
        "cats sk-123",
        embedder=EMBEDDER,
        store=store,
        scope=SCOPE,
        reranker=Answer(lambda h: seen.extend(x.text for x in h) or list(h)),
        runtime=Runtime(secrets=["sk-123"]),
    )
    assert seen and all("sk-123" not in text for text in seen)


def test_a_reranker_without_a_rerank_method_is_refused_by_name():
    """Anything that is not a Reranker (no rerank method) is a ValidationError naming
    ``reranker``, before any hit is looked at. If this fails, check rerank_hits' argument check."""
    with pytest.raises(ragport.ValidationError) as info:
        rerank_hits("query", [], reranker=object())  # type: ignore[arg-type]
    assert info.value.field == "reranker"


class _BlockingEmbedder:
    """HashEmbedder vectors; the first embed call waits until ``release`` is set."""

    def __init__(self):
        self.inner = HashEmbedder(64)
        self.id, self.dimensions = self.inner.id, self.inner.dimensions
        self.entered, self.release = threading.Event(), threading.Event()
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        self.entered.set()
        self.release.wait(30)
        return self.inner.embed(texts)


class _Watched:
    """Delegates rerank_interruptible and records how the call ended (error, done)."""

    def __init__(self, inner):
        self.inner, self.error, self.done = inner, None, threading.Event()

    def rerank(self, query, hits):  # pragma: no cover - the seam calls rerank_interruptible
        return self.inner.rerank(query, hits)

    def rerank_interruptible(self, query, hits, stop):
        try:
            return self.inner.rerank_interruptible(query, hits, stop)
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.done.set()


def test_a_timed_out_embedding_rerank_embeds_no_further_batch():
    """A rerank the seam stopped waiting for ends at its next batch: rerank_hits sets the stop
    signal of an interruptible reranker, and EmbeddingReranker embeds no further batch
    (AbortedError in its thread) instead of running to the end in a thread nobody waits for.

    If this fails, check the stop event of rerank_hits and EmbeddingReranker.rerank_interruptible.
    """
    embedder = _BlockingEmbedder()
    watched = _Watched(EmbeddingReranker(embedder, batch_size=1))
    hits = _hits()
    assert len(hits) >= 2  # so that 1 + len(hits) texts make several batches
    with pytest.raises(RerankError) as info:
        rerank_hits("cats", hits, reranker=watched, max_ms=50)
    assert info.value.reason == "timeout" and embedder.entered.is_set()
    embedder.release.set()
    assert watched.done.wait(30)
    assert isinstance(watched.error, ragport.AbortedError) and embedder.calls == 1


def test_embedding_reranker_batches_give_the_one_call_order_and_scores():
    """Any batch_size gives the scores of one embed call; a batch_size outside 1..128 is refused.

    If this fails, check EmbeddingReranker.rerank_interruptible in simple.py.
    """
    hits = _hits()
    whole = EmbeddingReranker(EMBEDDER, batch_size=128).rerank("alpha cats", hits)
    for size in (1, 2, 3):
        assert EmbeddingReranker(EMBEDDER, batch_size=size).rerank("alpha cats", hits) == whole
    for bad in (0, 129, True, 2.0):
        with pytest.raises(ragport.ValidationError) as info:
            EmbeddingReranker(EMBEDDER, batch_size=bad)
        assert info.value.field == "batch_size"


def test_every_rerank_error_of_the_seam_names_its_reason():
    """RerankError.reason: too_large, malformed, failed, aborted, timeout.

    If this fails, check the reason= of each RerankError raised in ragport/application/rerank.py.
    """
    hits = _hits()
    abort = threading.Event()
    abort.set()

    def boom(hits):
        raise RuntimeError("secret")

    cases = [
        ({"reranker": FakeReranker(), "max_bytes": 10}, "too_large"),
        ({"reranker": Answer(lambda h: list(h)[:-1])}, "malformed"),
        ({"reranker": Answer(boom)}, "failed"),
        ({"reranker": FakeReranker(), "runtime": Runtime(abort=abort)}, "aborted"),
        ({"reranker": Answer(lambda h: time.sleep(0.5) or list(h)), "max_ms": 20}, "timeout"),
    ]
    for kwargs, reason in cases:
        with pytest.raises(RerankError) as info:
            rerank_hits("q", hits, **kwargs)
        assert info.value.reason == reason
