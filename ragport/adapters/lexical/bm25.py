"""Bm25Index: an incremental, vectorised Okapi BM25 that scores exactly like rank_bm25.

Scores equal ``rank_bm25.BM25Okapi(corpus, k1, b, epsilon).get_scores(query)`` on the same
tokens, including its quirks: ``idf = log(N - n + 0.5) - log(n + 0.5)``; a term with negative
idf gets ``epsilon * average_idf`` where the average runs over the raw idf of every term in the
corpus; empty documents count in ``N`` and in the average length.

Layout: each document lives in a slot (an index into ``numpy`` arrays of lengths and liveness);
each term keeps postings (slot and term-frequency arrays). ``add`` groups a whole batch by term
with one argsort and appends one pending chunk per term; ``remove`` tombstones the slot and
marks the document's terms stale. A query folds pending chunks and drops tombstoned slots only
for the terms it touches. When tombstones outnumber live documents the slots are renumbered
once (amortised O(1) per removal).

``average_idf`` depends on every term, but only through the multiset of document frequencies,
so a histogram ``{df: number of terms}`` is kept up to date and the average is recomputed
lazily, once after mutations, in O(distinct df values).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from itertools import chain
from typing import cast

import numpy as np
import numpy.typing as npt

from ragport.domain.errors import ValidationError
from ragport.domain.lexical import tokenize_lexical

__all__ = ["Bm25Index"]

_IntArray = npt.NDArray[np.intp]
_FloatArray = npt.NDArray[np.float64]
_MIN_CAPACITY = 1024
_COMPACT_MIN_DEAD = 1024


class _Postings:
    """The documents one term occurs in: consolidated arrays plus not-yet-folded additions."""

    __slots__ = ("df", "pending", "slots", "stale", "tfs")

    def __init__(self) -> None:
        self.df = 0  # live documents containing the term
        self.slots: _IntArray = np.empty(0, dtype=np.intp)
        self.tfs: _FloatArray = np.empty(0, dtype=np.float64)
        self.pending: list[tuple[_IntArray, _FloatArray]] = []
        self.stale = False  # some slot in ``slots`` or ``pending`` may be tombstoned

    def arrays(self, alive: npt.NDArray[np.bool_]) -> tuple[_IntArray, _FloatArray]:
        if self.pending:
            self.slots = np.concatenate([self.slots, *(slots for slots, _ in self.pending)])
            self.tfs = np.concatenate([self.tfs, *(tfs for _, tfs in self.pending)])
            self.pending = []
        if self.stale:
            keep = alive[self.slots]
            self.slots = self.slots[keep]
            self.tfs = self.tfs[keep]
            self.stale = False
        return self.slots, self.tfs


def _histogram_drop(histogram: dict[int, int], df: int) -> None:
    count = histogram[df]
    if count == 1:
        del histogram[df]
    else:
        histogram[df] = count - 1


def _check_param(value: float, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"{name} must be a number", field=name)
    if not (math.isfinite(value) and low <= value <= high):
        raise ValidationError(f"{name} must be finite and in [{low}, {high}]", field=name)
    return float(value)


def _check_strings(values: object, name: str) -> Sequence[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Collection):
        raise ValidationError(f"{name} must be a collection of strings, not one string", field=name)
    if not all(isinstance(value, str) for value in values):
        raise ValidationError(f"every item of {name} must be a string", field=name)
    return list(values)


class Bm25Index:
    """Okapi BM25 over ``tokenize_lexical`` tokens; implements ``ragport.ports.LexicalIndex``."""

    def __init__(
        self,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
        *,
        analyzer: Callable[[str], list[str]] = tokenize_lexical,
    ):
        # Bounds keep every score finite: the denominator tf + k1 * (1 - b + b * dl / avgdl)
        # is at least tf >= 1 for a matching document.
        self._k1 = _check_param(k1, "k1", 0.0, math.inf)
        self._b = _check_param(b, "b", 0.0, 1.0)
        self._epsilon = _check_param(epsilon, "epsilon", 0.0, math.inf)
        self._analyzer = analyzer
        self._lock = threading.Lock()
        self._slot_of: dict[str, int] = {}
        self._slot_ids: list[str | None] = []
        self._slot_terms: list[tuple[str, ...] | None] = []
        self._lengths: _FloatArray = np.zeros(_MIN_CAPACITY, dtype=np.float64)
        self._alive: npt.NDArray[np.bool_] = np.zeros(_MIN_CAPACITY, dtype=np.bool_)
        self._total_length = 0
        self._postings: dict[str, _Postings] = {}  # only terms with df >= 1
        # document frequency -> number of terms with it; no zero counts, so a refresh costs
        # O(distinct document frequencies), not O(vocabulary)
        self._df_histogram: dict[int, int] = {}
        self._average_idf: float | None = None  # None: recompute before the next query

    def __repr__(self) -> str:
        return (
            f"Bm25Index(k1={self._k1!r}, b={self._b!r}, epsilon={self._epsilon!r}, "
            f"documents={len(self)})"
        )

    def __len__(self) -> int:
        with self._lock:
            return len(self._slot_of)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return isinstance(key, str) and key in self._slot_of

    # -- mutations ---------------------------------------------------------------------------

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        id_list = _check_strings(ids, "ids")
        text_list = _check_strings(texts, "texts")
        if len(id_list) != len(text_list):
            raise ValidationError("ids and texts must have the same length", field="texts")
        latest = dict(zip(id_list, text_list, strict=True))  # a repeated id: the last text wins
        tokenized = [self._analyzer(text) for text in latest.values()]
        with self._lock:
            for doc_id in latest:
                if doc_id in self._slot_of:
                    self._remove_one(doc_id)
            self._append(list(latest), tokenized)
            self._average_idf = None

    def remove(self, ids: Sequence[str]) -> int:
        id_list = _check_strings(ids, "ids")
        removed = 0
        with self._lock:
            for doc_id in dict.fromkeys(id_list):
                if doc_id in self._slot_of:
                    self._remove_one(doc_id)
                    removed += 1
            if removed:
                self._average_idf = None
                dead = len(self._slot_ids) - len(self._slot_of)
                if dead > max(_COMPACT_MIN_DEAD, len(self._slot_of)):
                    self._compact()
        return removed

    def _append(self, ids: list[str], tokenized: list[list[str]]) -> None:
        first, count = len(self._slot_ids), len(ids)
        if not count:
            return
        self._reserve(first + count)
        counters = [Counter(tokens) for tokens in tokenized]
        # One row per (document, distinct term), grouped by term with one argsort.
        row_terms = list(chain.from_iterable(counters))
        vocabulary = list(dict.fromkeys(row_terms))
        position = {term: i for i, term in enumerate(vocabulary)}
        rows = len(row_terms)
        row_term = np.fromiter(map(position.__getitem__, row_terms), dtype=np.intp, count=rows)
        row_tf = np.fromiter(
            chain.from_iterable(counter.values() for counter in counters),
            dtype=np.float64,
            count=rows,
        )
        row_slot = np.repeat(
            np.arange(first, first + count, dtype=np.intp),
            np.fromiter(map(len, counters), dtype=np.intp, count=count),
        )
        order = np.argsort(row_term, kind="stable")
        slots_by_term, tfs_by_term = row_slot[order], row_tf[order]
        bounds = np.zeros(len(vocabulary) + 1, dtype=np.intp)
        np.cumsum(np.bincount(row_term, minlength=len(vocabulary)), out=bounds[1:])
        all_postings, histogram = self._postings, self._df_histogram
        for term, lo, hi in zip(vocabulary, bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            postings = all_postings.get(term)
            if postings is None:
                postings = all_postings[term] = _Postings()
            postings.pending.append((slots_by_term[lo:hi], tfs_by_term[lo:hi]))
            if postings.df:
                _histogram_drop(histogram, postings.df)
            postings.df += hi - lo
            histogram[postings.df] = histogram.get(postings.df, 0) + 1
        lengths = [len(tokens) for tokens in tokenized]
        self._lengths[first : first + count] = lengths
        self._alive[first : first + count] = True
        self._total_length += sum(lengths)
        self._slot_of.update(zip(ids, range(first, first + count), strict=True))
        self._slot_ids.extend(ids)
        self._slot_terms.extend(tuple(counter) for counter in counters)

    def _reserve(self, size: int) -> None:
        capacity = len(self._lengths)
        if size > capacity:
            capacity = max(size, 2 * capacity)
            self._lengths = np.concatenate(
                (self._lengths, np.zeros(capacity - len(self._lengths), dtype=np.float64))
            )
            self._alive = np.concatenate(
                (self._alive, np.zeros(capacity - len(self._alive), dtype=np.bool_))
            )

    def _remove_one(self, doc_id: str) -> None:
        slot = self._slot_of.pop(doc_id)
        terms = self._slot_terms[slot]
        assert terms is not None
        all_postings, histogram = self._postings, self._df_histogram
        for term in terms:
            postings = all_postings[term]
            _histogram_drop(histogram, postings.df)
            postings.df -= 1
            if postings.df:
                histogram[postings.df] = histogram.get(postings.df, 0) + 1
                postings.stale = True
            else:
                del all_postings[term]
        self._total_length -= int(self._lengths[slot])
        self._lengths[slot] = 0.0
        self._alive[slot] = False
        self._slot_ids[slot] = None
        self._slot_terms[slot] = None

    def _compact(self) -> None:
        used = len(self._slot_ids)
        alive = self._alive[:used]
        remap = np.full(used, -1, dtype=np.intp)
        live_slots = np.flatnonzero(alive)
        remap[live_slots] = np.arange(len(live_slots), dtype=np.intp)
        for postings in self._postings.values():
            postings.stale = True
            slots, tfs = postings.arrays(self._alive)
            postings.slots = remap[slots]
            postings.tfs = tfs
        capacity = max(_MIN_CAPACITY, 2 * len(live_slots))
        lengths = np.zeros(capacity, dtype=np.float64)
        lengths[: len(live_slots)] = self._lengths[live_slots]
        self._lengths = lengths
        self._alive = np.zeros(capacity, dtype=np.bool_)
        self._alive[: len(live_slots)] = True
        kept = live_slots.tolist()
        self._slot_ids = [self._slot_ids[slot] for slot in kept]
        self._slot_terms = [self._slot_terms[slot] for slot in kept]
        self._slot_of = {
            doc_id: slot for slot, doc_id in enumerate(self._slot_ids) if doc_id is not None
        }

    # -- queries -----------------------------------------------------------------------------

    def search(
        self, query: str, *, limit: int, candidates: Collection[str] | None = None
    ) -> list[tuple[str, float]]:
        if not isinstance(query, str):
            raise ValidationError("query must be a string", field="query")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError("limit must be an integer >= 1", field="limit")
        allowed = None if candidates is None else _check_strings(candidates, "candidates")
        query_counts = Counter(self._analyzer(query))
        with self._lock:
            scores, matched = self._score(query_counts)
            if scores is None or matched is None:
                return []
            if allowed is not None:
                mask = np.zeros(len(matched), dtype=np.bool_)
                slot_of = self._slot_of
                mask[[slot_of[doc_id] for doc_id in allowed if doc_id in slot_of]] = True
                matched &= mask
            hits = np.flatnonzero(matched)
            hit_scores = scores[hits]
            if len(hits) > limit:
                # Keep everything tied with the limit-th best score, then break ties by id.
                kth = np.partition(hit_scores, len(hits) - limit)[len(hits) - limit]
                keep = hit_scores >= kth
                hits, hit_scores = hits[keep], hit_scores[keep]
            ids = cast("list[str]", self._slot_ids)  # hits are live slots: never None
            ranked = [
                (ids[slot], score)
                for slot, score in zip(hits.tolist(), hit_scores.tolist(), strict=True)
            ]
        ranked.sort(key=lambda pair: (-pair[1], pair[0]))
        return ranked[:limit]

    def _score(
        self, query_counts: Counter[str]
    ) -> tuple[_FloatArray | None, npt.NDArray[np.bool_] | None]:
        n_docs = len(self._slot_of)
        terms = [term for term in query_counts if term in self._postings]
        if not n_docs or not terms:
            return None, None
        used = len(self._slot_ids)
        avgdl = self._total_length / n_docs
        floor = self._epsilon * self._mean_idf(n_docs)
        k1, b = self._k1, self._b
        scores = np.zeros(used, dtype=np.float64)
        matched = np.zeros(used, dtype=np.bool_)
        for term in terms:
            postings = self._postings[term]
            idf = math.log(n_docs - postings.df + 0.5) - math.log(postings.df + 0.5)
            if idf < 0:
                idf = floor
            slots, tfs = postings.arrays(self._alive)
            norm = k1 * (1 - b + b * self._lengths[slots] / avgdl)
            scores[slots] += query_counts[term] * idf * (tfs * (k1 + 1) / (tfs + norm))
            matched[slots] = True
        return scores, matched

    def _mean_idf(self, n_docs: int) -> float:
        if self._average_idf is None:
            dfs = np.fromiter(self._df_histogram.keys(), dtype=np.float64)
            counts = np.fromiter(self._df_histogram.values(), dtype=np.float64)
            idfs = np.log(n_docs - dfs + 0.5) - np.log(dfs + 0.5)
            self._average_idf = float(np.dot(counts, idfs) / counts.sum())
        return self._average_idf
