"""The lexical leg: ``ChunkStoreLexicalContract`` (stores that advertise ``lexical_modes``):
BM25 / full-text order and scores, per-scope statistics, the one tokenizer
(``tokenize_lexical``), and every declared mode usable through ``retrieve_context``.
"""

from typing import ClassVar

import numpy as np
import pytest

from ragport.application.retrieval import retrieve_context
from ragport.application.retrieval_request import RetrievalRequest
from ragport.contract_tests._support import (
    ContractEmbedder,
    granted,
    publish_sources,
)
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    ALICE,
    OTHER_CORPUS,
    OTHER_TENANT,
    QUERY_ALL,
    SCOPE,
    _require_acl,
    _require_implemented,
)
from ragport.domain.errors import CapabilityError, ValidationError
from ragport.domain.lexical import tokenize_lexical
from ragport.domain.model import AccessDecision, Grant, Tombstone
from ragport.ports.store import ChunkStore, SupportsLexicalSearch

__all__ = ["ChunkStoreLexicalContract"]

_EMBEDDER = ContractEmbedder()

# A scope where "walrus" and "ice" are rare, and noise that makes "walrus" common elsewhere.
LEXICAL_SCOPE_TEXTS: dict[str, str] = {
    "lst-a": "walrus colonies haul out on the ice floes",
    "lst-b": "a walrus walrus herd",
    "lst-c": "ice ice and more ice on the fjord",
    "lst-d": "walrus research on sea ice and walrus diets in the arctic summer season",
    **{f"lst-fill-{i}": f"penguin colony number {i} nests far inland" for i in range(8)},
}
LEXICAL_NOISE_SOURCES = 40
# Texts whose tokens tokenize_lexical decides: accents kept, casefolded (ß becomes ss).
TOKENIZER_TEXTS: dict[str, str] = {
    "tok-cafe": "un café au lait",
    "tok-strasse": "die Straße entlang",
    "tok-plain": "a cafe and a strasse sign",
}
TOKENIZER_QUERIES = ("cafe", "café", "CAFÉ", "strasse", "Straße", "STRASSE")


_Answers = dict[str, list[tuple[str, float]]]


def _answers(store: ChunkStore, modes: tuple[str, ...]) -> _Answers:
    """Each mode's answer to "walrus ice" in ``SCOPE``: (record id, score), best first."""
    assert isinstance(store, SupportsLexicalSearch)
    return {
        mode: [
            (item.record.id, item.score)
            for item in store.lexical_query(SCOPE, "walrus ice", limit=QUERY_ALL, mode=mode)
        ]
        for mode in modes
    }


def _assert_same_answers(before: _Answers, after: _Answers) -> None:
    """The same records in the same order with the same scores (within 1e-9), every mode."""
    for mode, found in before.items():
        assert [rid for rid, _ in after[mode]] == [rid for rid, _ in found], mode
        for (rid, old), (_, new) in zip(found, after[mode], strict=True):
            assert abs(new - old) <= 1e-9, (mode, rid, old, new)


class ChunkStoreLexicalContract(_ChunkStoreContractBase):
    """The lexical leg of stores that advertise ``lexical_modes``.

    ``bm25_tokens`` says whose tokens the store's ``bm25`` mode matches: ``"tokenize_lexical"``
    (the default: ragport's tokenizer, then maybe stop words and stemming; checked by
    ``test_lexical_bm25_matches_exactly_the_tokens_of_tokenize_lexical``) or ``"engine"`` (the
    engine's own analyzer, such as PostgreSQL's text-search configuration: that test skips,
    and the store documents its analyzer). Every other test runs either way.
    """

    bm25_tokens: ClassVar[str] = "tokenize_lexical"

    def _modes(self, store: ChunkStore) -> tuple[str, ...]:
        modes = tuple(store.capabilities.lexical_modes)
        if not modes:
            pytest.skip(
                f"{type(store).__name__} advertises no capabilities.lexical_modes, so it has no "
                "lexical leg: the lexical section does not apply"
            )
        _require_implemented(store, "lexical")
        return modes

    def _seed(self, store: ChunkStore) -> None:
        publish_sources(
            store,
            SCOPE,
            {
                "lex-walrus": ["walrus colonies haul out on ice floes"],
                "lex-penguin": ["penguin colonies nest on the ice"],
                "lex-secret": ["walrus walrus walrus tusks and walrus ivory"],
                "lex-old": ["walrus herds in the old edition"],
                "lex-gone": ["walrus research that was forgotten"],
            },
        )
        publish_sources(store, SCOPE, {"lex-old": ["seals in the new edition"]})
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add([Tombstone("lex-gone", "forgotten")])
            uow.commit()

    def test_lexical_query_finds_term_matches_with_the_store_predicate(
        self, store: ChunkStore
    ) -> None:
        """Checks ``SupportsLexicalSearch.lexical_query``: in the first declared mode, the records
        containing the term come back with finite scores, best first and ties by id; retired
        versions and forgotten sources do not, and another corpus answers ``()``.

        If this fails, check that lexical_query applies visibility and tombstones like query.
        """
        for mode in self._modes(store):
            self._seed(store)
            assert isinstance(store, SupportsLexicalSearch)
            found = store.lexical_query(SCOPE, "walrus", limit=QUERY_ALL, mode=mode)
            sources = {item.record.source_id for item in found}
            assert sources == {"lex-walrus", "lex-secret"}
            assert all(np.isfinite(item.score) for item in found)
            ordered = [(-item.score, item.record.id) for item in found]
            assert ordered == sorted(ordered)
            assert store.lexical_query(OTHER_CORPUS, "walrus", limit=QUERY_ALL, mode=mode) == ()
            return

    def test_lexical_query_applies_grants_before_the_limit(self, store: ChunkStore) -> None:
        """Checks ``SupportsLexicalSearch.lexical_query``: the grant predicate applies before
        ``limit``: with limit 1 a denied better match never crowds out the allowed one, and
        ``on_denied`` receives the denied source.

        If this fails, check that the grant predicate is inside the lexical leg, not after it.
        """
        modes = self._modes(store)
        _require_acl(store)
        self._seed(store)
        store.set_source_access(
            SCOPE, granted(SCOPE, [Grant("lex-walrus", principal_ids=("alice",))])
        )
        assert isinstance(store, SupportsLexicalSearch)
        denied: list[AccessDecision] = []
        found = store.lexical_query(
            SCOPE, "walrus", limit=1, mode=modes[0], authorization=ALICE, on_denied=denied.extend
        )
        assert [item.record.source_id for item in found] == ["lex-walrus"]
        assert {d.source_id for d in denied} == {"lex-secret"}
        assert all(not d.allowed for d in denied)

    def test_lexical_order_and_scores_ignore_other_scopes_documents(
        self, store: ChunkStore
    ) -> None:
        """Checks ``SupportsLexicalSearch.lexical_query``: documents written to another tenant and
        to another corpus leave a scope's answer as it was, the same records in the same order with
        the same scores (within 1e-9), in every mode: BM25 statistics (document count, average
        length, document frequencies) are per exact scope.

        If this fails, check where the store's corpus statistics come from: table-wide
        statistics (SQLite FTS5's ``bm25()``, one index shared by every scope) let another
        tenant's documents reorder this scope's results and reveal how often it uses a word.
        """
        modes = self._modes(store)
        assert isinstance(store, SupportsLexicalSearch)
        publish_sources(store, SCOPE, {sid: [text] for sid, text in LEXICAL_SCOPE_TEXTS.items()})

        def answers() -> dict[str, list[tuple[str, float]]]:
            return _answers(store, modes)

        before = answers()
        assert all(len(found) >= 4 for found in before.values()), before
        noise = {
            f"lst-noise-{i}": [f"walrus walrus walrus walrus tusk {i}"]
            for i in range(LEXICAL_NOISE_SOURCES)
        }
        for other in (OTHER_TENANT, OTHER_CORPUS):
            publish_sources(store, other, noise)
        after = answers()
        _assert_same_answers(before, after)

    def test_forgotten_records_leave_the_lexical_statistics(self, store: ChunkStore) -> None:
        """Checks ``SupportsLexicalSearch.lexical_query``: records withheld by a ``forgotten``
        tombstone on their source id count nowhere in the statistics: once forgotten, the scope answers as it did before they were written,
        the same records with the same scores (within 1e-9), in every mode.

        If this fails, check that the statistics (document count, average length, document
        frequencies) are taken over the records the query may return, not every visible row:
        a forgotten document that still counts changes every score, and shows how often the
        erased text used a word.
        """
        modes = self._modes(store)
        assert isinstance(store, SupportsLexicalSearch)
        publish_sources(store, SCOPE, {sid: [text] for sid, text in LEXICAL_SCOPE_TEXTS.items()})

        def answers() -> dict[str, list[tuple[str, float]]]:
            return _answers(store, modes)

        before = answers()
        forgotten = {f"lst-gone-{i}": [f"walrus walrus ice tusk {i}"] for i in range(6)}
        publish_sources(store, SCOPE, forgotten)
        assert answers() != before, "the new sources should change the statistics"
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add([Tombstone(sid, "forgotten") for sid in forgotten])
            uow.commit()
        after = answers()
        _assert_same_answers(before, after)

    def test_lexical_query_with_a_non_positive_limit_is_the_empty_tuple(
        self, store: ChunkStore
    ) -> None:
        """Checks ``SupportsLexicalSearch.lexical_query``: ``limit`` 0 or -1 returns ``()``, in
        every mode, not an error.

        If this fails, check the limit handling at the top of lexical_query.
        """
        modes = self._modes(store)
        assert isinstance(store, SupportsLexicalSearch)
        self._seed(store)
        for mode in modes:
            assert store.lexical_query(SCOPE, "walrus", limit=QUERY_ALL, mode=mode) != ()
            for limit in (0, -1):
                assert store.lexical_query(SCOPE, "walrus", limit=limit, mode=mode) == (), limit

    def test_lexical_bm25_matches_exactly_the_tokens_of_tokenize_lexical(
        self, store: ChunkStore
    ) -> None:
        """Checks ``SupportsLexicalSearch.lexical_query``: in mode ``bm25`` a query matches exactly
        the texts that share a ``tokenize_lexical`` token with it, so ``cafe`` does not match
        ``café`` (accents are kept) and ``strasse`` matches ``Straße`` (casefolding), whatever the
        engine's own tokenizer would do. Skips for stores without mode ``bm25`` and for test
        classes that set ``bm25_tokens = "engine"``.

        If this fails, check the store's tokenizer: tokenize texts and queries with
        ragport.domain.lexical.tokenize_lexical (an analyzer may then drop stop words or stem
        each token). SQLite FTS5's default ``unicode61`` folds accents and keeps ``ß``.
        """
        if "bm25" not in self._modes(store):
            pytest.skip(
                f"{type(store).__name__} offers no lexical mode 'bm25', the mode whose tokens "
                "are tokenize_lexical's"
            )
        if self.bm25_tokens == "engine":
            pytest.skip(
                f"the test class of {type(store).__name__} declares bm25_tokens = 'engine': its "
                "bm25 leg tokenizes with the engine's own analyzer"
            )
        assert isinstance(store, SupportsLexicalSearch)
        publish_sources(store, SCOPE, {sid: [text] for sid, text in TOKENIZER_TEXTS.items()})
        expected: dict[str, set[str]] = {}
        for query in TOKENIZER_QUERIES:
            terms = set(tokenize_lexical(query))
            expected[query] = {
                sid for sid, text in TOKENIZER_TEXTS.items() if terms & set(tokenize_lexical(text))
            }
        # The cases discriminate: some query misses a text that another spelling matches.
        assert len({frozenset(want) for want in expected.values()}) >= 2, expected
        for query, want in expected.items():
            found = store.lexical_query(SCOPE, query, limit=QUERY_ALL, mode="bm25")
            assert {item.record.source_id for item in found} == want, query

    def test_every_declared_lexical_mode_works_through_retrieve_context(
        self, store: ChunkStore
    ) -> None:
        """Checks ``Capabilities.lexical_modes``, ``SupportsLexicalSearch.hybrid_query``,
        ``retrieve_context``: every mode a store declares works through ``retrieve_context``
        (``RetrievalRequest(lexical=mode)``), and lexical-only retrieval in it (``fusion_weights``
        ``{"vector": 0}``) returns the records containing the term, as hits found by the lexical
        leg.

        If this fails, check that ``lexical_query`` and ``hybrid_query`` accept every name in
        ``capabilities.lexical_modes`` (any name is allowed: ``bm25``, ``fts``, ``fts5``...;
        retrieval refuses only a mode the store does not declare, with ``CapabilityError``).
        """
        modes = self._modes(store)
        self._seed(store)
        for mode in modes:
            try:
                result = retrieve_context(
                    "walrus",
                    embedder=_EMBEDDER,
                    store=store,
                    scope=SCOPE,
                    request=RetrievalRequest(
                        lexical=mode, fusion_weights={"vector": 0.0}, top_k=10
                    ),
                )
            except (ValidationError, CapabilityError) as exc:
                raise AssertionError(
                    f"capabilities.lexical_modes declares {mode!r} but retrieve_context "
                    f"refuses it: {type(exc).__name__}(field={getattr(exc, 'field', None)!r})"
                ) from None
            sources = {hit.source_id for hit in result.hits}
            assert sources == {"lex-walrus", "lex-secret"}, (mode, sources)
            assert {hit.provenance.retrieval for hit in result.hits} <= {"lexical", "hybrid"}

    def test_unknown_lexical_mode_is_a_capability_error(self, store: ChunkStore) -> None:
        """Checks ``SupportsLexicalSearch.lexical_query``: a mode the store does not declare is a
        ``CapabilityError``.

        If this fails, check that lexical_query validates ``mode``.
        """
        self._modes(store)
        assert isinstance(store, SupportsLexicalSearch)
        with pytest.raises(CapabilityError):
            store.lexical_query(SCOPE, "walrus", limit=5, mode="no-such-mode")
