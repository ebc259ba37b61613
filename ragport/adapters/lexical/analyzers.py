"""Lexical analyzers: ``tokenize_lexical`` tokens, optionally without stop words and stemmed.

The default analyzer is ``tokenize_lexical`` itself (language-neutral). ``english_analyzer``
adds an English stop-word list and the Snowball English stemmer (``snowballstemmer``, in the
``ragport[lexical]`` extra), roughly what PostgreSQL's ``english`` text-search configuration
does, so the in-memory BM25 leg and the PostgreSQL FTS leg treat English alike.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import lru_cache
from typing import Protocol, cast

from ragport.domain.errors import CapabilityError, ValidationError
from ragport.domain.lexical import tokenize_lexical

__all__ = ["ENGLISH_STOP_WORDS", "english_analyzer", "make_analyzer"]

ENGLISH_STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your
    yours yourself yourselves""".split()  # noqa: SIM905
)


class _Stemmer(Protocol):
    def stemWord(self, word: str) -> str: ...


class _Snowball(Protocol):
    """What ragport uses of ``snowballstemmer`` (which ships no type information)."""

    def stemmer(self, lang: str) -> _Stemmer: ...


def english_analyzer() -> Callable[[str], list[str]]:
    """``tokenize_lexical``, minus English stop words, Snowball-stemmed."""
    try:
        snowballstemmer = cast(_Snowball, importlib.import_module("snowballstemmer"))
    except ImportError as exc:
        raise CapabilityError(
            "the english analyzer needs snowballstemmer: pip install 'ragport[lexical]'",
            capability="lexical",
        ) from exc
    stemmer = snowballstemmer.stemmer("english")

    @lru_cache(maxsize=200_000)
    def stem(word: str) -> str:
        return str(stemmer.stemWord(word))

    def analyze(text: str) -> list[str]:
        return [stem(token) for token in tokenize_lexical(text) if token not in ENGLISH_STOP_WORDS]

    return analyze


def make_analyzer(language: str | None) -> Callable[[str], list[str]]:
    """The analyzer for ``language``: ``None``/``"simple"`` (no stemming) or ``"english"``."""
    if language in (None, "simple"):
        return tokenize_lexical
    if language == "english":
        return english_analyzer()
    raise ValidationError(
        f"unknown lexical language {language!r} (use simple or english)", field="lexical_language"
    )
