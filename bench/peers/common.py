"""What the driver and every worker of ``bench_peers.py`` share: the data, the vectors, the
wire protocol and the metrics. numpy and the standard library only: the peers' workers import
it from their own virtual environment, where ragport is not installed.

The data (seeded, as in the reference run of issue 45): ``sources`` sources of 10 chunks;
each chunk is its source's marker word and 79 words drawn from a 6,000-word pseudo-word
vocabulary with Zipf exponent 1.1. Vectors: 384-d feature hashing (blake2b of each word ->
bucket and sign, L2-normalised), computed here for every text and handed to each system
through its own embedder interface as a lookup by text.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DIMS = 384
VOCAB = 6000
ZIPF = 1.1
WORDS_PER_CHUNK = 79
CHUNKS_PER_SOURCE = 10
UPDATED_CHUNKS = 8
N_TAGS = 100
N_GROUPS = 20
TOP_K = 10
CANDIDATES = 20  # per leg, for every system's hybrid
RRF_K = 60
HNSW_M = 24
HNSW_EF_CONSTRUCTION = 128
EF_SEARCH = 200
SEED = 20261207
QUERY_WORDS = 6
KINDS = ("vector", "filter", "hybrid", "access")
RAGPORT_KINDS = ("team_filter", "group_filter")
"""ragport only: workload 7's rows (the user's two groups) by a metadata filter instead of
grants: ``team_filter`` the equality filter ``{"team": ...}`` (workload 7's target: the same
query with and without the access check), ``group_filter`` ``owner_group`` ``$in`` the two."""
WORD = re.compile(r"\w+")


def log(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


# -- data ---------------------------------------------------------------------------------------
_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"


def vocabulary(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct pseudo-words of 2-4 consonant-vowel syllables (no q or x in them)."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < n:
        syllables = int(rng.integers(2, 5))
        word = "".join(
            _CONSONANTS[int(rng.integers(len(_CONSONANTS)))] + _VOWELS[int(rng.integers(5))]
            for _ in range(syllables)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def marker(i: int) -> str:
    """Source ``i``'s marker word: ``qx`` and its number in letters (no vocabulary word)."""
    letters = ""
    n = i
    for _ in range(5):
        letters = "abcdefghijklmnopqrstuvwxyz"[n % 26] + letters
        n //= 26
    return "qx" + letters


def team(group: str) -> str:
    """Groups ``g2k`` and ``g2k+1`` form team ``kNN``: a user in both (workload 7) reads
    exactly the rows the equality filter ``{"team": "kNN"}`` selects."""
    return f"k{int(group[1:]) // 2:02d}"


def team_groups(name: str) -> list[str]:
    k = int(name[1:])
    return [f"g{2 * k:02d}", f"g{2 * k + 1:02d}"]


def source_id(i: int) -> str:
    return f"s{i:06d}"


def chunk_key(source: str, index: int) -> str:
    """The id every system reports a chunk by (ragport's chunk id form)."""
    return f"{source}#{index + 1:04d}"


class Dataset:
    """Texts, metadata and the workload plan for ``sources`` sources (seeded).

    ``text[(source, version, index)]``; version 1 has 10 chunks, version 2 (the replaced
    sources of workloads 2 and 3) has 8 with different words.
    """

    def __init__(self, sources: int, *, seed: int = SEED, updated: int = 100, deleted: int = 10):
        rng = np.random.default_rng(seed)
        self.n_sources = sources
        self.vocab = vocabulary(VOCAB, rng)
        ranks = np.arange(1, VOCAB + 1, dtype=np.float64)
        self.p = ranks**-ZIPF / np.sum(ranks**-ZIPF)
        self.ids = [source_id(i) for i in range(sources)]
        self.tag = {s: f"t{int(rng.integers(N_TAGS)):03d}" for s in self.ids}
        self.group = {s: f"g{int(rng.integers(N_GROUPS)):02d}" for s in self.ids}
        self.marker = {s: marker(i) for i, s in enumerate(self.ids)}
        order = [self.ids[int(i)] for i in rng.permutation(sources)]
        updated = min(updated, sources // 4)
        deleted = min(deleted, sources // 10)
        self.updates = sorted(order[:updated])  # workload 2
        self.reader_updates = sorted(order[updated : 2 * updated])  # workload 3
        self.deletes = sorted(order[2 * updated : 2 * updated + deleted])  # workload 4
        self.texts: dict[tuple[str, int, int], str] = {}
        for s in self.ids:
            for index in range(CHUNKS_PER_SOURCE):
                self.texts[(s, 1, index)] = self._text(rng, s)
        for s in [*self.updates, *self.reader_updates]:
            for index in range(UPDATED_CHUNKS):
                self.texts[(s, 2, index)] = self._text(rng, s)
        self.rng = rng

    def _text(self, rng: np.random.Generator, s: str) -> str:
        words = rng.choice(VOCAB, size=WORDS_PER_CHUNK, p=self.p)
        return " ".join([self.marker[s], *(self.vocab[int(w)] for w in words)])

    def chunks(self, s: str, version: int) -> list[dict[str, Any]]:
        """The chunks of ``s`` at ``version``: key, text and metadata."""
        n = CHUNKS_PER_SOURCE if version == 1 else UPDATED_CHUNKS
        return [
            {
                "key": chunk_key(s, i) if version == 1 else chunk_key(s, 100 + i),
                "text": self.texts[(s, version, i)],
                "source": s,
                "version": version,
                "chunk": i,
                "tag": self.tag[s],
                "owner_group": self.group[s],
                "team": team(self.group[s]),
            }
            for i in range(n)
        ]

    def final_live(self) -> list[dict[str, Any]]:
        """Every chunk live after workloads 2-4."""
        replaced = set(self.updates) | set(self.reader_updates)
        gone = set(self.deletes)
        out: list[dict[str, Any]] = []
        for s in self.ids:
            if s in gone:
                continue
            out.extend(self.chunks(s, 2 if s in replaced else 1))
        return out

    def queries(self, n: int) -> list[dict[str, Any]]:
        """``n`` queries: six consecutive words of a live chunk, its tag, and its team (the
        user of workload 7 is in the team's two groups)."""
        live = self.final_live()
        rng = np.random.default_rng(SEED + 1)
        out = []
        for i in rng.choice(len(live), size=min(n, len(live)), replace=False):
            c = live[int(i)]
            words = c["text"].split()[1:]
            start = int(rng.integers(0, len(words) - QUERY_WORDS))
            out.append(
                {
                    "text": " ".join(words[start : start + QUERY_WORDS]),
                    "tag": c["tag"],
                    "team": c["team"],
                    "groups": team_groups(c["team"]),
                }
            )
        return out


# -- vectors ------------------------------------------------------------------------------------
def feature_hash(texts: Sequence[str], dims: int = DIMS) -> np.ndarray:
    """One L2-normalised row per text: each word (lower-cased ``\\w+``) adds +-1 to one of
    ``dims`` buckets, both from the blake2b of the word."""
    cache: dict[str, tuple[int, float]] = {}
    out = np.zeros((len(texts), dims), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in WORD.findall(text.lower()):
            hit = cache.get(word)
            if hit is None:
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
                hit = cache[word] = (h % dims, 1.0 if (h >> 32) & 1 else -1.0)
            out[row, hit[0]] += hit[1]
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return out / norms


class VectorTable:
    """Text -> precomputed vector: what every system's embedder looks up."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray):
        self._index = {t: i for i, t in enumerate(texts)}
        self.vectors = vectors

    @classmethod
    def load(cls, folder: Path, name: str) -> VectorTable:
        texts = json.loads((folder / f"{name}.texts.json").read_text())
        return cls(texts, np.load(folder / f"{name}.vectors.npy"))

    @staticmethod
    def save(folder: Path, name: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        (folder / f"{name}.texts.json").write_text(json.dumps(list(texts)))
        np.save(folder / f"{name}.vectors.npy", vectors.astype(np.float32))

    def __call__(self, texts: Iterable[str]) -> np.ndarray:
        rows = [self._index[t] for t in texts]
        if not rows:
            return np.empty((0, self.vectors.shape[1]), dtype=np.float32)
        return self.vectors[rows]

    def one(self, text: str) -> list[float]:
        return [float(x) for x in self.vectors[self._index[text]]]


# -- metrics ------------------------------------------------------------------------------------
def exact_top(
    matrix: np.ndarray, keys: Sequence[str], query: np.ndarray, mask: np.ndarray | None, k: int
) -> tuple[list[str], float]:
    """The exact cosine top-``k`` keys (ties by position) among rows passing ``mask``, and
    the ``k``-th score (``-inf`` when fewer rows pass)."""
    scores = matrix @ query
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    top = [keys[int(i)] for i in order if np.isfinite(scores[int(i)])]
    kth = float(scores[int(order[-1])]) if len(order) == k else -math.inf
    return top, kth


def recall_at_k(found: Sequence[str], truth: Sequence[str], k: int = TOP_K) -> float:
    """Share of the true top-``k`` (at most ``k``) found in the first ``k`` results."""
    if not truth:
        return 1.0
    return len(set(found[:k]) & set(truth[:k])) / min(k, len(truth))


def ndcg_at_k(ranked: Sequence[str], gains: Mapping[str, float], k: int = TOP_K) -> float:
    """nDCG@k with linear gains (the judged grade) and the log2 discount; duplicates count once."""
    seen: set[str] = set()
    dcg = 0.0
    position = 0
    for doc in ranked:
        if doc in seen:
            continue
        seen.add(doc)
        if position >= k:
            break
        dcg += gains.get(doc, 0.0) / math.log2(position + 2)
        position += 1
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


# -- the wire: one JSON object per line --------------------------------------------------------
def send(stream: Any, obj: Mapping[str, Any]) -> None:
    stream.write(json.dumps(obj) + "\n")
    stream.flush()


def receive(stream: Any) -> dict[str, Any]:
    line = stream.readline()
    if not line:
        raise EOFError("worker closed its pipe")
    result: dict[str, Any] = json.loads(line)
    return result
