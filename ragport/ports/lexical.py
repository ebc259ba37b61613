"""The LexicalIndex port: a BM25 index over ``(id, text)`` pairs that a store can compose."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol, runtime_checkable

__all__ = ["LexicalIndex"]


@runtime_checkable
class LexicalIndex(Protocol):
    """A mutable lexical (BM25) index keyed by string id.

    Every text and every query goes through ``ragport.domain.lexical.tokenize_lexical``, so
    all lexical paths agree on tokens. Promises:

    - ``add(ids, texts)`` indexes ``texts[i]`` under ``ids[i]``. An id already present is
      replaced (its old text stops counting); a repeated id inside one call behaves like
      sequential adds, so the last text wins. Both arguments must be sequences of ``str`` of
      equal length, else ``ValidationError`` and nothing changes. A text with no tokens is
      still a document: it counts in ``len`` and in the corpus statistics, and never matches.
    - ``remove(ids)`` forgets those ids and returns how many distinct ids were present;
      unknown ids are ignored.
    - ``len(index)`` is the number of documents; ``id in index`` says whether ``id`` is one.
    - ``search(query, limit=k, candidates=c)`` returns at most ``k`` pairs ``(id, score)``:
      every document that contains at least one query token and (when ``c`` is not ``None``)
      whose id is in ``c``, ordered by score descending, then id ascending. ``c`` restricts
      which documents may be returned (the caller's scope, visibility and access predicate),
      and it is applied before the cut to ``k``, so allowed documents are never crowded out
      by disallowed ones; ids in ``c`` that are not indexed are ignored. Corpus statistics
      (document count, average length, document frequencies) always cover the whole index,
      not only ``c``, so a document's score does not depend on who asks.
    - Scores are Okapi BM25 as computed by ``rank_bm25.BM25Okapi.get_scores`` over the same
      tokens (within 1e-6), including its idf floor: a term in more than half of the documents
      scores ``epsilon * average_idf``, which is negative when the average idf is, so in tiny
      or repetitive corpora a matching document can score ``<= 0``. It is still returned: a
      result means "contains a query token", not "score above zero". A repeated query token
      counts once per repeat. Scores are finite Python floats.
    - A query with no tokens, or ``len(index) == 0``, returns ``[]``. ``limit`` must be an
      ``int >= 1``, else ``ValidationError``.
    - Safe to call from several threads; each call sees the index before or after any
      concurrent ``add``/``remove``, never in between.
    """

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Index ``texts[i]`` under ``ids[i]``, replacing an id already present."""
        ...

    def remove(self, ids: Sequence[str]) -> int:
        """Forget ``ids``; returns how many distinct ids were present."""
        ...

    def __len__(self) -> int:
        """The number of indexed documents."""
        ...

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is an indexed id."""
        ...

    def search(
        self, query: str, *, limit: int, candidates: Collection[str] | None = None
    ) -> list[tuple[str, float]]:
        """At most ``limit`` ``(id, score)`` pairs containing a query token, best first,
        restricted to ``candidates`` before the cut (statistics over the whole index)."""
        ...
