"""Deterministic character chunking of plain text and Markdown.

Invariants every chunk keeps (pinned by property tests):

- ``chunk.text == document[chunk.start:chunk.end]``: offsets are exact character offsets into
  the caller's string, which is never normalised (CRLF, tabs and non-ASCII text stay as they are);
- ``chunk.end - chunk.start <= size``; a chunk neither starts nor ends with whitespace and is
  never whitespace only;
- every non-whitespace character of the document lies in at least one chunk;
- starts strictly increase, ``index`` runs 0..n-1 and ids are ``f"{source_id}#{index + 1:04d}"``.

A window ``[start, start + size]`` is cut at the latest boundary of the best class: for Markdown
a heading first (ATX ``# Title`` or setext, a paragraph underlined with ``===`` or ``---`` as
CommonMark defines it; always acceptable), then for both functions a blank line, a sentence end,
any whitespace and finally a hard cut at ``size``. Non-heading boundaries are looked for in the
second half of the window first and only then in its second quarter, so chunks are not tiny.
The next chunk starts ``overlap`` characters before the previous end, moved forward to the
start of a word; in Markdown it never reaches back across a heading.

All positions (whitespace runs, blank lines, sentence ends, headings outside fenced code) are
computed once per document, and each cut is a handful of ``bisect`` look-ups, so chunking is
linear in the document length.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

from ragport.domain.errors import ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, Limits, check_limit
from ragport.domain.model import (
    Chunk,
    freeze_metadata,
    metadata_bytes,
    validate_id,
    validate_text,
)

__all__ = ["chunk_markdown", "chunk_text"]

# Maximal runs of whitespace (``\s`` on str patterns is exactly ``str.isspace``).
_WS_RUN = re.compile(r"\s+")
# The start of a whitespace run holding a blank line: a line break, optional spaces/tabs,
# another line break (``\r(?!\n)`` keeps one CRLF from counting as two breaks). Linear: the
# lazy ``\s*?`` only walks the one run that follows a non-space.
_BLANK_RUN = re.compile(r"(?<=\S)\s*?(?:\r\n|\r(?!\n)|\n)[ \t]*(?:\r\n|\r(?!\n)|\n)")
# A sentence end: its match end is the start of the whitespace run after the punctuation.
_SENTENCE = re.compile(r"[.!?](?=\s)")
# ATX heading and code fence lines (up to 3 spaces of indent). Group 1 is the hashes or the
# fence run, group 2 the rest of the fence line. The leading line break keeps the scan fast;
# the first line of the document is matched separately with ``match``.
_HEADING = re.compile(r"[\r\n] {0,3}(#{1,6})(?=[ \t\r\n]|\Z)")
_FIRST_HEADING = re.compile(r" {0,3}(#{1,6})(?=[ \t\r\n]|\Z)")
_FENCE = re.compile(r"[\r\n] {0,3}(`{3,}|~{3,})([^\r\n]*)")
_FIRST_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})([^\r\n]*)")
_LINE_BREAK = re.compile(r"[\r\n]")
# A setext underline line (up to 3 spaces of indent, only ``=`` or only ``-``, trailing blanks).
_SETEXT = re.compile(r"(?<=[\r\n]) {0,3}(=+|-+)[ \t]*(?=\r\n|\r|\n|\Z)")
# A line that cannot be (part of) a setext heading's text: blank, indented code, a list item,
# a block quote, an ATX heading, a fence, a thematic break or another underline.
_NOT_SETEXT_TEXT = re.compile(
    r"[ \t]*$| {4}|\t| {0,3}(?:[-+*][ \t]|[-+*]$|\d{1,9}[.)](?:[ \t]|$)|>|#{1,6}(?:[ \t]|$)"
    r"|`{3}|~{3}|(?:[-*_][ \t]*){3,}$|=+[ \t]*$)"
)
# The rest of a line plus every heading line that directly follows it (only whitespace
# between). Each repetition starts with a line break, so it cannot loop on empty input.
_HEADING_CHAIN = re.compile(
    r"[^\r\n]*(?:[\r\n]\s*?(?<=[\r\n]) {0,3}#{1,6}(?=[ \t\r\n]|\Z)[^\r\n]*)*"
)
# How far a hard cut may step back so that it does not split a combining sequence.
_GRAPHEME_BACKOFF = 8
_JOINERS = frozenset("\u200c\u200d")


def chunk_text(
    text: str,
    *,
    source_id: str,
    size: int = DEFAULT_LIMITS.chunk_size,
    overlap: int = DEFAULT_LIMITS.overlap,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[Chunk, ...]:
    """Split plain ``text`` into chunks of at most ``size`` characters, ``overlap`` repeated.

    Boundaries, best first: blank line, sentence end (``.``, ``!``, ``?`` then whitespace), any
    whitespace, hard cut. ``metadata`` (JSON) is deep-copied onto every chunk; nothing is added.
    Raises ``ValidationError`` for bad arguments or a crossed ceiling (``.limit`` names it).
    """
    base = _validate(text, "text", source_id, size, overlap, metadata, limits)
    if not text.strip():
        return ()
    engine = _Engine(text, size, overlap, None)
    return _build(text, source_id, engine.spans(limits.chunks_per_source), base, None, limits)


def chunk_markdown(
    markdown: str,
    *,
    source_id: str,
    size: int = DEFAULT_LIMITS.chunk_size,
    overlap: int = DEFAULT_LIMITS.overlap,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[Chunk, ...]:
    """Split ``markdown`` like :func:`chunk_text`, preferring ATX headings as boundaries.

    A chunk cut at a heading starts at that heading's ``#`` with no overlap, and overlap never
    reaches back across a heading. Every chunk gets ``metadata["heading"]``, the parent-first
    stack of heading texts in effect at its first character, counting the heading lines that
    open the chunk (headings in fenced code are ignored), unless the caller's ``metadata``
    already has a ``heading`` key.
    """
    base = _validate(markdown, "markdown", source_id, size, overlap, metadata, limits)
    if not markdown.strip():
        return ()
    outline = _Outline(markdown)
    engine = _Engine(markdown, size, overlap, outline)
    spans = engine.spans(limits.chunks_per_source)
    return _build(markdown, source_id, spans, base, None if "heading" in base else outline, limits)


def _validate(
    text: object,
    name: str,
    source_id: object,
    size: int,
    overlap: int,
    metadata: Mapping[str, Any] | None,
    limits: object,
) -> dict[str, Any]:
    """Check every argument before any work; return the frozen caller metadata."""
    text = validate_text(text, field=name)
    validate_id(source_id, field="source_id")
    if not isinstance(limits, Limits):
        raise ValidationError("limits must be a Limits instance", field="limits")
    check_limit("chunk_size", size)
    check_limit("overlap", overlap)
    if overlap >= size:
        raise ValidationError("overlap must be smaller than size", field="overlap", limit="overlap")
    if len(text) > limits.document_chars:
        raise ValidationError(
            f"document is longer than {limits.document_chars} characters",
            field="document_chars",
            limit="document_chars",
        )
    base = freeze_metadata(metadata)
    _check_metadata_bytes(base, limits)
    return base


def _check_metadata_bytes(metadata: Mapping[str, Any], limits: Limits) -> None:
    size = metadata_bytes(metadata)
    if size > limits.metadata_bytes:
        raise ValidationError(
            f"chunk metadata is {size} bytes, over {limits.metadata_bytes}",
            field="metadata_bytes",
            limit="metadata_bytes",
        )


def _build(
    text: str,
    source_id: str,
    spans: Sequence[tuple[int, int]],
    base: dict[str, Any],
    outline: _Outline | None,
    limits: Limits,
) -> tuple[Chunk, ...]:
    """Turn spans into chunks; with an ``outline`` every chunk gets its ``heading`` stack."""
    chunks: list[Chunk] = []
    for index, (start, end) in enumerate(spans):
        meta = base
        if outline is not None:
            meta = {**base, "heading": outline.stack(start, end)}
            _check_metadata_bytes(meta, limits)
        # Chunk.of deep-copies the metadata (JSON round trip): chunks never share objects.
        chunks.append(Chunk.of(source_id, index, text[start:end], start=start, metadata=meta))
    return tuple(chunks)


class _Engine:
    """One document's precomputed boundaries and the cutting loop over them."""

    def __init__(self, text: str, size: int, overlap: int, outline: _Outline | None) -> None:
        self.text = text
        self.size = size
        self.overlap = overlap
        self.outline = outline
        self.headings: Sequence[int] = outline.positions if outline is not None else ()
        spans = [m.span() for m in _WS_RUN.finditer(text)]
        self.run_starts = list(map(itemgetter(0), spans))
        self.run_ends = list(map(itemgetter(1), spans))
        blank = [m.start() for m in _BLANK_RUN.finditer(text)]
        sentence = [m.end() for m in _SENTENCE.finditer(text)]
        # Boundary classes, best first; each lists whitespace-run starts (where a chunk ends).
        self.classes: tuple[Sequence[int], ...] = (blank, sentence, self.run_starts)

    def spans(self, max_chunks: int) -> list[tuple[int, int]]:
        """The ``(start, end)`` of every chunk; raises once more than ``max_chunks`` are needed."""
        text = self.text
        content_end = len(text.rstrip())
        start = self._next_content(0)
        fresh = start  # first character the next chunk must cover (not yet in any chunk)
        out: list[tuple[int, int]] = []
        while True:
            if len(out) >= max_chunks:
                raise ValidationError(
                    f"document needs more than {max_chunks} chunks",
                    field="chunks_per_source",
                    limit="chunks_per_source",
                )
            if content_end - start <= self.size:
                out.append((start, content_end))
                return out
            end, fresh_next = self._cut(start, fresh)
            out.append((start, end))
            if fresh_next >= content_end:
                return out
            start = self._next_start(start, end, fresh_next)
            fresh = fresh_next

    def _cut(self, start: int, fresh: int) -> tuple[int, int]:
        """Where the chunk at ``start`` ends, and where the following text begins."""
        limit = start + self.size
        headings = self.headings
        if self.outline is not None and headings:
            # The latest heading in the window, unless it is one of the headings that open
            # this chunk (cutting there would leave a chunk of bare headings).
            lead = self.outline.lead(start, limit)  # a position, or -1
            floor = max(fresh, lead)
            i = bisect_right(headings, limit) - 1
            # Cut before a whole run of headings (only whitespace between them), so no chunk
            # ends on a bare heading whose section starts in the next chunk.
            while (
                i > 0 and headings[i - 1] > floor and self._adjacent(headings[i - 1], headings[i])
            ):
                i -= 1
            if i >= 0 and headings[i] > floor:
                return self._trimmed_end(headings[i]), headings[i]
        # Prefer the second half of the window; only then accept the second quarter.
        for lowest in (start + self.size // 2, start + max(1, self.size // 4)):
            floor = max(lowest, fresh + 1)
            for positions in self.classes:
                i = bisect_right(positions, limit) - 1
                if i >= 0 and positions[i] >= floor:
                    run_start = positions[i]
                    run_end = self.run_ends[bisect_left(self.run_starts, run_start)]
                    return run_start, run_end
        cut = self._hard_cut(limit, fresh + 1)
        return self._trimmed_end(cut), self._next_content(cut)

    def _adjacent(self, first: int, second: int) -> bool:
        """True when only whitespace separates the heading line at ``first`` from ``second``."""
        return not self.text[_line_end(self.text, first) : second].strip()

    def _next_start(self, start: int, end: int, fresh: int) -> int:
        """Start of the chunk after ``[start, end)``; ``fresh`` is the first new character."""
        if self.overlap == 0:
            return fresh
        lowest = max(end - self.overlap, start + 1)
        nxt = -1
        headings = self.headings
        if headings:
            # Never reach back across a heading: start at the latest one in the overlap region.
            i = bisect_right(headings, fresh) - 1
            if i >= 0 and headings[i] >= lowest:
                nxt = headings[i]
        if nxt < 0:
            if lowest >= end:
                nxt = fresh
            else:
                run = self._run_at(lowest)
                if run >= 0:
                    nxt = self.run_ends[run]
                elif not self.text[lowest - 1].isspace():
                    # Mid-word: move forward to the next word start inside the previous chunk.
                    k = bisect_left(self.run_starts, lowest)
                    within = k < len(self.run_starts) and self.run_ends[k] < end
                    nxt = self.run_ends[k] if within else lowest
                else:
                    nxt = lowest
        if nxt <= start or nxt > fresh or nxt + self.size <= fresh:
            # A whitespace gap wider than the window, or a defensive guard: no overlap.
            nxt = fresh
        return nxt

    def _hard_cut(self, cut: int, floor: int) -> int:
        """``cut``, stepped back a little if it would split a combining sequence."""
        text = self.text
        for pos in range(cut, max(floor, cut - _GRAPHEME_BACKOFF) - 1, -1):
            ch = text[pos]
            joined = (
                unicodedata.category(ch) in ("Mn", "Mc", "Me")
                or ch in _JOINERS
                or text[pos - 1] in _JOINERS
                or "\ufe00" <= ch <= "\ufe0f"
                or "\U0001f3fb" <= ch <= "\U0001f3ff"
            )
            if not joined:
                return pos
        return cut

    def _run_at(self, pos: int) -> int:
        """Index of the whitespace run containing ``pos``, or -1."""
        i = bisect_right(self.run_starts, pos) - 1
        if i >= 0 and self.run_ends[i] > pos:
            return i
        return -1

    def _trimmed_end(self, cut: int) -> int:
        """``cut`` moved back over trailing whitespace."""
        run = self._run_at(cut - 1) if cut > 0 else -1
        return self.run_starts[run] if run >= 0 else cut

    def _next_content(self, pos: int) -> int:
        """``pos`` moved forward over whitespace."""
        run = self._run_at(pos)
        return self.run_ends[run] if run >= 0 else pos


class _Outline:
    """The headings of one Markdown document outside fenced code, in document order.

    ``positions`` holds each heading's start (an ATX heading's first ``#``, a setext heading's
    first text character); ``by_level[k]`` the positions of level-``k`` headings. Texts and
    stacks are only worked out for the few headings chunks carry.
    """

    def __init__(self, markdown: str) -> None:
        self.markdown = markdown
        spans = [m.span(1) for m in _HEADING.finditer(markdown)]
        first = _FIRST_HEADING.match(markdown)
        if first:
            spans.insert(0, first.span(1))
        # Setext headings: position -> (level, end of the heading text).
        self.setext: dict[int, tuple[int, int]] = {}
        self.setext = _setext_headings(markdown)
        if self.setext:
            setext_spans = [(a, a + level) for a, (level, _end) in self.setext.items()]
            spans = sorted({*spans, *setext_spans})
        fences = _fenced_ranges(markdown)
        if fences:
            spans = _outside(spans, fences)
        self.positions = [a for a, _ in spans]
        self.by_level: list[list[int]] = [[] for _ in range(7)]
        for a, b in spans:
            self.by_level[b - a].append(a)

    def text_at(self, position: int, level: int) -> str:
        """The text of the heading that starts at ``position``."""
        setext = self.setext.get(position)
        if setext is not None:
            return " ".join(
                line.strip() for line in self.markdown[position : setext[1]].splitlines()
            )
        return _heading_text(self.markdown[position + level : _line_end(self.markdown, position)])

    def lead(self, start: int, end: int) -> int:
        """Position of the heading whose stack the chunk ``[start, end)`` carries, or -1.

        That is the last heading at or before ``start``; when the chunk begins on a heading
        line, the headings that directly follow it (only whitespace between) inside the chunk
        open it too: a chunk opening with ``# Policy``, then ``## Leave``, carries both.
        """
        positions, text = self.positions, self.markdown
        i = bisect_right(positions, start) - 1
        if i < 0:
            return -1
        if _LINE_BREAK.search(text, positions[i], start) is None:
            chain = _HEADING_CHAIN.match(text, start, end)
            if chain is not None:  # always: the pattern matches the empty string
                i = bisect_left(positions, chain.end(), i + 1) - 1
        return positions[i]

    def stack(self, start: int, end: int) -> list[str]:
        """The ``heading`` metadata of the chunk ``[start, end)``: texts, parent first."""
        at = self.lead(start, end)
        if at < 0:
            return []
        # A heading is on the stack at ``at`` iff no shallower heading comes after it.
        titles: list[str] = []
        latest = -1
        for level in range(1, 7):
            found = self.by_level[level]
            i = bisect_right(found, at) - 1
            if i >= 0 and found[i] > latest:
                latest = found[i]
                titles.append(self.text_at(latest, level))
        return titles


def _setext_headings(markdown: str) -> dict[int, tuple[int, int]]:
    """Setext headings: start of the text -> (level, end of the text before the underline).

    The text is the paragraph directly above an underline of ``=`` (level 1) or ``-`` (level 2):
    the run of lines back to a blank line or a line that cannot continue a paragraph. With no
    such line above, the underline is a thematic break (or stray), not a heading. Underlines
    in fenced code are dropped later, with the ATX headings.
    """
    found: dict[int, tuple[int, int]] = {}
    for m in _SETEXT.finditer(markdown):
        text_end = _break_before(markdown, m.start())
        first = -1
        line_end = text_end
        while True:
            line_start = _line_start(markdown, line_end)
            if _NOT_SETEXT_TEXT.match(markdown, line_start, line_end):
                break
            first = line_start
            if line_start == 0:
                break
            line_end = _break_before(markdown, line_start)
        if first < 0 or not markdown[first:text_end].strip():
            # No line above, or only whitespace CommonMark does not call blank (a no-break
            # space): nothing a heading stack or a chunk could start with.
            continue
        first += len(markdown[first:text_end]) - len(markdown[first:text_end].lstrip())
        found[first] = (1 if m.group(1)[0] == "=" else 2, text_end)
    return found


def _break_before(text: str, line_start: int) -> int:
    """Where the line break before the line starting at ``line_start`` begins (CRLF aware)."""
    if line_start >= 2 and text[line_start - 1] == "\n" and text[line_start - 2] == "\r":
        return line_start - 2
    return line_start - 1


def _line_start(text: str, line_end: int) -> int:
    """Start of the line that ends (before its break) at ``line_end``."""
    return max(text.rfind("\n", 0, line_end), text.rfind("\r", 0, line_end)) + 1


def _line_end(text: str, pos: int) -> int:
    """End of the line holding ``pos`` (before its line break)."""
    eol = _LINE_BREAK.search(text, pos)
    return eol.start() if eol else len(text)


def _outside(
    spans: list[tuple[int, int]], ranges: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The ``spans`` that start outside every one of the sorted, disjoint ``ranges``."""
    starts = [a for a, _ in spans]
    kept: list[tuple[int, int]] = []
    done = 0
    for low, high in ranges:
        cut = bisect_left(starts, low, done)
        kept.extend(spans[done:cut])
        done = max(cut, bisect_left(starts, high, cut))
    kept.extend(spans[done:])
    return kept


def _fenced_ranges(markdown: str) -> list[tuple[int, int]]:
    """``[open, close)`` of every fenced code block; an unclosed fence runs to the end."""
    ranges: list[tuple[int, int]] = []
    fence: tuple[str, int, int] | None = None  # (character, length, start) while inside one
    first = _FIRST_FENCE.match(markdown)
    for m in itertools.chain((first,) if first else (), _FENCE.finditer(markdown)):
        run, rest = m.group(1), m.group(2)
        if fence is None:
            if not (run[0] == "`" and "`" in rest):  # backtick info strings hold no "`"
                fence = (run[0], len(run), m.start(1))
        elif run[0] == fence[0] and len(run) >= fence[1] and not rest.strip(" \t"):
            ranges.append((fence[2], m.end()))
            fence = None
    if fence is not None:
        ranges.append((fence[2], len(markdown)))
    return ranges


def _heading_text(rest: str) -> str:
    """Heading content without surrounding whitespace or an optional closing ``#`` sequence."""
    content = rest.strip()
    bare = content.rstrip("#")
    if len(bare) < len(content) and (not bare or bare[-1] in " \t"):
        content = bare.strip()
    return content
