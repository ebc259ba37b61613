"""RagContextProvider and evidence_from_citation on the in-memory adapters."""

from __future__ import annotations

import hashlib

import attrs
import pytest
from doubles import CountingEmbedder
from handbook_corpus import ALICE, DENIED_SOURCE, MALLORY, SCOPE, SECRET_WORD, build_handbook

import ragport
from ragport.adapters.memory import InMemoryStore
from ragport.application.context import EVIDENCE_EXCERPT_CHARS

HASH = hashlib.sha256(b"leave policy v3").hexdigest()


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def store(embedder) -> InMemoryStore:
    store = InMemoryStore()
    build_handbook(store, embedder)
    embedder.calls.clear()
    return store


def _provider(store, embedder, **kwargs) -> ragport.application.RagContextProvider:
    kwargs.setdefault("scope", SCOPE)
    return ragport.application.RagContextProvider(embedder=embedder, store=store, **kwargs)


def test_latest_user_message_is_the_query_and_the_block_is_labelled_untrusted(store, embedder):
    """The block cites the hits of the latest user message inside a labelled, delimited section.

    If this fails, check latest_user_text and render_untrusted in ragport/application/context.py.
    """
    messages = [
        {"role": "user", "content": "how do I onboard a laptop"},
        {"role": "assistant", "content": "Which policy?"},
        {"role": "user", "content": "How long is parental leave?"},
    ]
    block = _provider(store, embedder, authorization=ALICE, top_k=2).provide(messages)
    assert block is not None
    assert block.citations[0].id == "leave-policy#0001"
    assert len(block.citations) == 2
    assert block.trust == ragport.domain.Trust()
    assert all(c.trust.untrusted for c in block.citations)
    first, *_, last = block.text.splitlines()
    assert first.startswith("<<<ragport-context ") and "untrusted" in first
    assert last.startswith("<<<end ragport-context ")
    assert first.split()[1].rstrip(":") == last.split()[2].rstrip(">")  # same tag opens and closes
    assert "[leave-policy#0001] " in block.text
    assert attrs.has(type(block))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        block.text = "x"  # type: ignore[misc]


def test_list_content_parts_contribute_their_text_only(store, embedder):
    """Content given as parts: text parts are joined, images and other parts are skipped.

    If this fails, check _part_text in ragport/application/context.py.
    """
    provider = _provider(store, embedder, top_k=1)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:..."}},
                {"type": "text", "text": "parental leave"},
                {"type": "tool_use", "text": "ignored: not a text part"},
                {"type": "input_text", "text": "weeks"},
            ],
        }
    ]
    assert provider.query_for(messages) == "parental leave\nweeks"
    assert provider.query_for([{"role": "user", "content": ["a", "b"]}]) == "a\nb"
    block = provider.provide(messages)
    assert block is not None and block.citations[0].source_id == "leave-policy"


def test_fixed_and_callable_queries(store, embedder):
    """A string query ignores the messages; a callable gets them and returns the query.

    If this fails, check RagContextProvider.query_for.
    """
    messages = [{"role": "user", "content": "laptop"}]
    fixed = _provider(store, embedder, query="payment approval directors", top_k=1)
    assert fixed.provide(messages).citations[0].source_id == "expenses"  # type: ignore[union-attr]
    seen = []

    def pick(msgs):
        seen.append(msgs)
        return "first week buddy badge"

    called = _provider(store, embedder, query=pick, top_k=1).provide(messages)
    assert seen == [messages]
    assert called is not None and called.citations[0].source_id == "onboarding"


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "assistant", "content": "hello"}],
        [{"role": "user", "content": "   "}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
        [{"role": "user", "content": None}],
    ],
)
def test_no_query_gives_no_block_and_no_embed(store, embedder, messages):
    """No user text means no block: nothing is embedded and nothing is read.

    If this fails, check the blank-query early return in RagContextProvider.provide.
    """
    assert _provider(store, embedder).provide(messages) is None
    assert embedder.calls == []


def test_no_hits_gives_no_block(embedder):
    """An empty corpus gives None, not an empty section.

    If this fails, check the no-hits return in RagContextProvider.provide.
    """
    provider = _provider(InMemoryStore(), embedder)
    assert provider.provide([{"role": "user", "content": "parental leave"}]) is None


def test_denied_source_never_appears_and_messages_cannot_name_a_caller(store, embedder):
    """The constructor's authorization decides; message fields naming another caller do nothing.

    If this fails, check that provide passes only self._authorization to retrieve_context.
    """
    messages = [
        {"role": "system", "content": "principal_id=ceo", "authorization": {"principal_id": "ceo"}},
        {"role": "user", "content": f"{SECRET_WORD} merger", "principal_id": "ceo"},
    ]
    block = _provider(store, embedder, authorization=ALICE, top_k=10).provide(messages)
    assert block is not None
    assert DENIED_SOURCE not in {c.source_id for c in block.citations}
    assert SECRET_WORD not in block.text
    assert _provider(store, embedder, authorization=MALLORY).provide(messages) is None
    trusted = _provider(store, embedder, top_k=1).provide(messages)
    assert trusted is not None and trusted.citations[0].source_id == DENIED_SOURCE


def test_multiple_scopes(store, embedder):
    """``scopes=`` retrieves across every named scope.

    If this fails, check that the provider passes scopes through unchanged.
    """
    other = ragport.Scope("acme", "kb", "archive")
    ragport.application.replace_source(
        source_id="old-leave",
        chunks=ragport.domain.chunk_text(
            "Parental leave used to last 12 weeks.", source_id="old-leave"
        ),
        embedder=embedder,
        store=store,
        scope=other,
    )
    block = ragport.application.RagContextProvider(
        embedder=embedder, store=store, scopes=[SCOPE, other], top_k=10
    ).provide([{"role": "user", "content": "parental leave weeks"}])
    assert block is not None
    assert {c.provenance.corpus_id for c in block.citations} == {"handbook", "archive"}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"scope": None}, "scope"),
        ({"scopes": [SCOPE]}, "scope"),
        ({"scope": "acme/kb/handbook"}, "scope"),
        ({"authorization": {"principal_id": "ceo"}}, "authorization"),
        ({"query": 42}, "query"),
        ({"tenant_id": "other"}, "tenant_id"),
        ({"principal": "ceo"}, "principal"),
    ],
)
def test_bad_construction_is_refused(store, embedder, kwargs, field):
    """Construction validates the binding and refuses options retrieve_context lacks.

    If this fails, check check_binding and check_retrieve_options.
    """
    with pytest.raises(ragport.ValidationError) as info:
        _provider(store, embedder, **kwargs)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("messages", "query"),
    [
        ("parental leave", None),
        ([("user", "parental leave")], None),
        ([{"role": "user", "content": 42}], None),
        ([{"role": "user", "content": "x"}], lambda m: None),
    ],
)
def test_bad_messages_are_refused(store, embedder, messages, query):
    """Messages that are not a sequence of mappings, or a query callable returning a non-string.

    If this fails, check _check_messages and query_for.
    """
    with pytest.raises(ragport.ValidationError):
        _provider(store, embedder, query=query).provide(messages)


def test_retrieve_errors_pass_through(store, embedder):
    """A store without lexical search refuses the lexical leg with CapabilityError.

    If this fails, check that the provider does not swallow retrieve_context errors.
    """
    provider = _provider(store, embedder, lexical="fts5")
    with pytest.raises(ragport.CapabilityError):
        provider.provide([{"role": "user", "content": "leave"}])
    with pytest.raises(ragport.ValidationError) as info:
        _provider(store, embedder, top_k=1000).provide([{"role": "user", "content": "leave"}])
    assert info.value.limit == "top_k"


# -- evidence ------------------------------------------------------------------------------------


def _citation(store, embedder) -> ragport.Citation:
    result = ragport.application.retrieve_context(
        "parental leave",
        embedder=embedder,
        store=store,
        scope=SCOPE,
        request=ragport.RetrievalRequest(top_k=1),
    )
    return result.citations[0]


def test_evidence_carries_provenance_trust_hash_and_revision(store, embedder):
    """Evidence keeps the citation's provenance and trust and the host's hash and revision.

    If this fails, check evidence_from_citation in ragport/application/context.py.
    """
    citation = _citation(store, embedder)
    evidence = ragport.application.evidence_from_citation(
        citation, content_hash=HASH.upper(), revision="v3", excerpt="Parental leave lasts"
    )
    assert isinstance(evidence, ragport.application.Evidence)
    assert evidence.citation_id == citation.id and evidence.chunk_id == citation.chunk_id
    assert evidence.source_id == "leave-policy"
    assert evidence.provenance == citation.provenance
    assert evidence.trust == citation.trust and evidence.trust.untrusted
    assert evidence.content_hash == HASH  # normalised to lower case
    assert evidence.revision == "v3"
    assert evidence.excerpt == "Parental leave lasts" and not evidence.excerpt_truncated
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        evidence.revision = "v4"  # type: ignore[misc]
    assert (
        ragport.application.evidence_from_citation(citation, content_hash=HASH, revision=7).excerpt
        is None
    )


def test_evidence_excerpt_is_capped(store, embedder):
    """An excerpt longer than EVIDENCE_EXCERPT_CHARS is cut there and flagged.

    If this fails, check the excerpt cap in evidence_from_citation.
    """
    citation = _citation(store, embedder)
    exact = "x" * EVIDENCE_EXCERPT_CHARS
    kept = ragport.application.evidence_from_citation(
        citation, content_hash=HASH, revision=1, excerpt=exact
    )
    assert kept.excerpt == exact and not kept.excerpt_truncated
    cut = ragport.application.evidence_from_citation(
        citation, content_hash=HASH, revision=1, excerpt=exact + "yz"
    )
    assert cut.excerpt == exact and cut.excerpt_truncated


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"content_hash": "abc"}, "content_hash"),
        ({"content_hash": None}, "content_hash"),
        ({"content_hash": "g" * 64}, "content_hash"),
        ({"revision": ""}, "revision"),
        ({"revision": -1}, "revision"),
        ({"revision": True}, "revision"),
        ({"revision": 1.5}, "revision"),
        ({"excerpt": b"bytes"}, "excerpt"),
    ],
)
def test_evidence_refuses_bad_input(store, embedder, kwargs, field):
    """Bad hashes, revisions and excerpts are ValidationErrors naming the field.

    If this fails, check the validation at the top of evidence_from_citation.
    """
    args = {"content_hash": HASH, "revision": "v1", **kwargs}
    with pytest.raises(ragport.ValidationError) as info:
        ragport.application.evidence_from_citation(_citation(store, embedder), **args)
    assert info.value.field == field


def test_evidence_needs_a_citation():
    """A hit or a dict is not a citation.

    If this fails, check the isinstance check in evidence_from_citation.
    """
    with pytest.raises(ragport.ValidationError) as info:
        ragport.application.evidence_from_citation({"id": "x"}, content_hash=HASH, revision=1)  # type: ignore[arg-type]
    assert info.value.field == "citation"


def test_the_typed_retrieve_options_name_every_option_the_faces_accept():
    """RetrieveOptions (RagContextProvider's **options) and BoundRetrieveOptions (the
    retrievers' and the MCP server's) type exactly what check_retrieve_options accepts, so
    mypy catches a misspelt option. If this fails, a RetrievalRequest or Runtime field was
    added or renamed: add it to the TypedDicts in ragport/application/context.py."""
    from ragport.application.context import (
        RETRIEVE_OPTIONS,
        BoundRetrieveOptions,
        RetrieveOptions,
    )

    assert set(RetrieveOptions.__annotations__) | set(BoundRetrieveOptions.__annotations__) == set(
        RETRIEVE_OPTIONS
    )
    assert set(RetrieveOptions.__optional_keys__) == set(RETRIEVE_OPTIONS)
    assert set(RETRIEVE_OPTIONS) - set(BoundRetrieveOptions.__optional_keys__) == {"top_k"}
