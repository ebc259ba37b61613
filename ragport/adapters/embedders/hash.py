"""HashEmbedder: deterministic signed feature hashing; the zero-dependency test embedder."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ragport.domain.errors import ValidationError
from ragport.ports.embedder import VectorMatrix

__all__ = ["HashEmbedder"]

_WORD = re.compile(r"\w+", re.UNICODE)
_TRIGRAM_WEIGHT = 0.5


@lru_cache(maxsize=262_144)
def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    # blake2b, not hash(): the same feature lands in the same bucket in every process.
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dimensions, (1.0 if (value >> 63) & 1 else -1.0)


class HashEmbedder:
    """Lower-cased word tokens and their character trigrams, hashed into ``dimensions`` signed
    buckets, L2-normalised. Same text, same vector, in every process. Not semantic."""

    def __init__(self, dimensions: int = 256):
        if (
            isinstance(dimensions, bool)
            or not isinstance(dimensions, int)
            or not 8 <= dimensions <= 4096
        ):
            raise ValidationError("dimensions must be an integer in 8..4096", field="dimensions")
        self._dimensions = dimensions

    @property
    def id(self) -> str:
        return f"hash-v1:{self._dimensions}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def __repr__(self) -> str:
        return f"HashEmbedder(dimensions={self._dimensions})"

    def embed(self, texts: Sequence[str]) -> VectorMatrix:
        if isinstance(texts, str):
            raise ValidationError("embed takes a sequence of texts, not one string", field="texts")
        out = np.zeros((len(texts), self._dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValidationError("every text must be a string", field="texts")
            vec = out[row]
            for word in _WORD.findall(text.lower()):
                index, sign = _bucket("w:" + word, self._dimensions)
                vec[index] += sign
                padded = f" {word} "
                for i in range(len(padded) - 2):
                    index, sign = _bucket("t:" + padded[i : i + 3], self._dimensions)
                    vec[index] += sign * _TRIGRAM_WEIGHT
            norm = float(np.linalg.norm(vec))
            if norm > 0:
                vec /= norm
        return out
