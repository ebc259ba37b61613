"""The one lexical tokenizer: every BM25 index, lexical query and lexical fake uses it.

Rules, applied in this order:

1. Unicode NFKC normalisation (full-width ``Ａ`` becomes ``A``, the ligature ``ﬁ`` becomes
   ``fi``, ``²`` becomes ``2``).
2. ``str.casefold`` (``Straße`` becomes ``strasse``).
3. Split into maximal runs of word characters: ``\\w`` (letters, digits and underscore in any
   script) plus combining marks (Unicode category ``M``). Python's ``\\w`` alone excludes
   marks, which would cut ``हिन्दी`` into consonant fragments and drop its vowel signs.
   Everything else (spaces, punctuation, symbols) separates tokens.
4. Drop tokens made only of underscores.

Accents are kept (``café`` stays ``café``), digits are kept (``2024``, ``v2``), and there is no
stemming and no stop-word list: BM25's idf already weighs down words that occur everywhere, and
a fixed list would be wrong for some language. The output is a pure function of the input (for
one Python, hence one Unicode database), so an index and its queries always agree on tokens.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

from ragport.domain.errors import ValidationError

__all__ = ["check_lexical_mode", "tokenize_lexical"]

_MODE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def check_lexical_mode(name: object, *, field: str = "lexical") -> str:
    """``name`` if it is a lexical mode name: lower-case ASCII letters, digits, ``_`` or
    ``-``, starting with a letter, at most 32 characters (``bm25``, ``fts``, ``fts5``, ...);
    ``ValidationError(field=field)`` otherwise. ``off`` is the name of no lexical leg."""
    if not isinstance(name, str) or not _MODE_NAME.fullmatch(name):
        raise ValidationError(
            "a lexical mode is 'off' or a name of lower-case letters, digits, '_' or '-' "
            "(at most 32, starting with a letter), such as 'bm25'",
            field=field,
        )
    return name


_ASCII_WORD = re.compile(r"[A-Za-z0-9_]+")
# Combining marks live in planes 0, 1 and 14 only; scanning them takes ~15 ms, once.
_MARK_PLANES = (range(0x0, 0x20000), range(0xE0000, 0xE1000))


@cache
def _word_pattern() -> re.Pattern[str]:
    ranges: list[tuple[int, int]] = []
    for plane in _MARK_PLANES:
        for code in plane:
            if unicodedata.category(chr(code))[0] != "M":
                continue
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    marks = "".join(
        re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
        for lo, hi in ranges
    )
    return re.compile(rf"[\w{marks}]+", re.UNICODE)


def tokenize_lexical(text: str) -> list[str]:
    """The tokens of ``text`` in order, repeats kept, per the module rules."""
    if text.isascii():
        # Same rules, 3x faster: ASCII is NFKC-stable, casefolds like lower() and has no marks.
        folded = text.lower()
        tokens = _ASCII_WORD.findall(folded)
    else:
        folded = unicodedata.normalize("NFKC", text).casefold()
        tokens = _word_pattern().findall(folded)
    if "_" not in folded:
        return tokens
    return [token for token in tokens if token.strip("_")]
