"""Chunking: invariants (hypothesis), boundary and heading rules, and every failure mode."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ragport.domain.chunking import chunk_markdown, chunk_text
from ragport.domain.errors import ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, Limits
from ragport.domain.model import Chunk

Chunker = Callable[..., tuple[Chunk, ...]]
CHUNKERS = [pytest.param(chunk_text, id="text"), pytest.param(chunk_markdown, id="markdown")]

# ---------------------------------------------------------------------------------------------
# Strategies: pieces that exercise CRLF, tabs, non-ASCII, sentence ends, headings and fences.

_TEXT_PIECES = [
    "word",
    "Sätze",
    "naïve",
    "café",
    "日本語",
    "😀",
    "👍🏽",
    "👩\u200d💻",
    "e\u0301",
    "x" * 23,
    "end.",
    "why?",
    "wow!",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\n\n",
    "\r\n\r\n",
    "\n \t\n",
    "\u00a0",
    "\u2028",
    ".",
    " " * 130,
]
_MARKDOWN_PIECES = [
    *_TEXT_PIECES,
    "\n# Title\n",
    "\n## Sub #\n",
    "\n### Deep ###\r\n",
    "\n   #### Indented\n",
    "\n    # four spaces is code\n",
    "\n####### seven\n",
    "\n#\n",
    "#",
    "\n```\n",
    "\n```python\n",
    "\n~~~\n",
    "\n~~~~\n",
    "\n``` a`b\n",
    "\n# In fence?\n",
]


def _docs(pieces: Sequence[str]) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(pieces), max_size=80).map("".join)


@st.composite
def _size_and_overlap(draw: st.DrawFn) -> tuple[int, int]:
    size = draw(st.integers(min_value=1, max_value=120))
    overlap = draw(st.integers(min_value=0, max_value=size - 1))
    return size, overlap


# ---------------------------------------------------------------------------------------------
# A naive, line-based reference for Markdown headings (independent of the regex scanner).

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")


def _reference_headings(doc: str) -> list[tuple[int, int, str]]:
    """(position of '#', level, text) of every ATX heading outside fenced code."""
    found: list[tuple[int, int, str]] = []
    fence: tuple[str, int] | None = None
    pos = 0
    for line in _LINE.findall(doc):
        if not line:
            break
        body = line.rstrip("\r\n")
        indent = len(body) - len(body.lstrip(" "))
        stripped = body[indent:] if indent <= 3 else ""
        run = len(stripped) - len(stripped.lstrip(stripped[:1])) if stripped else 0
        if fence is not None:
            if stripped[:1] == fence[0] and run >= fence[1] and not stripped[run:].strip(" \t"):
                fence = None
        elif stripped[:1] in ("`", "~") and run >= 3:
            if not (stripped[0] == "`" and "`" in stripped[run:]):
                fence = (stripped[0], run)
        elif stripped.startswith("#"):
            hashes = len(stripped) - len(stripped.lstrip("#"))
            after = stripped[hashes:]
            if hashes <= 6 and (not after or after[0] in " \t"):
                text = after.strip()
                if text and set(text) == {"#"}:
                    text = ""
                elif text.endswith("#") and text.rstrip("#")[-1:] in (" ", "\t"):
                    text = text.rstrip("#").strip()
                found.append((pos + indent, hashes, text))
        pos += len(line)
    return found


def _reference_stack(doc: str, start: int, end: int) -> list[str]:
    """The documented heading rule, written the slow and obvious way."""
    headings = _reference_headings(doc)
    before = [i for i, h in enumerate(headings) if h[0] <= start]
    if not before:
        return []
    last = before[-1]
    if "\n" not in doc[headings[last][0] : start] and "\r" not in doc[headings[last][0] : start]:
        # The chunk opens on a heading line: directly following heading lines open it too.
        while last + 1 < len(headings) and headings[last + 1][0] < end:
            line_end = headings[last][0]
            while line_end < len(doc) and doc[line_end] not in "\r\n":
                line_end += 1
            if doc[line_end : headings[last + 1][0]].strip():
                break
            last += 1
    stack: list[tuple[int, str]] = []
    for _, level, text in headings[: last + 1]:
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, text))
    return [text for _, text in stack]


# ---------------------------------------------------------------------------------------------
# Invariants shared by both chunkers.


def _assert_invariants(doc: str, chunks: tuple[Chunk, ...], size: int, source_id: str) -> None:
    if not doc.strip():
        assert chunks == ()
        return
    assert chunks, "non-blank input must give at least one chunk"
    covered = bytearray(len(doc))
    previous_start = previous_end = -1
    for i, chunk in enumerate(chunks):
        assert doc[chunk.start : chunk.end] == chunk.text
        assert 0 < chunk.end - chunk.start <= size
        assert not chunk.text[0].isspace() and not chunk.text[-1].isspace()
        assert chunk.index == i
        assert chunk.id == f"{source_id}#{i + 1:04d}"
        assert chunk.source_id == source_id
        assert chunk.start > previous_start
        assert chunk.end > previous_end, "every chunk must add text the previous one lacks"
        previous_start, previous_end = chunk.start, chunk.end
        covered[chunk.start : chunk.end] = b"\x01" * (chunk.end - chunk.start)
    missing = [i for i, ch in enumerate(doc) if not ch.isspace() and not covered[i]]
    assert missing == []


@settings(max_examples=300, deadline=None)
@given(doc=_docs(_TEXT_PIECES), params=_size_and_overlap())
def test_chunk_text_invariants(doc: str, params: tuple[int, int]) -> None:
    """Plain chunks: exact offsets, size, coverage, determinism. If this fails, check _Engine."""
    size, overlap = params
    chunks = chunk_text(doc, source_id="src", size=size, overlap=overlap)
    _assert_invariants(doc, chunks, size, "src")
    assert chunk_text(doc, source_id="src", size=size, overlap=overlap) == chunks
    assert all(chunk.metadata == {} for chunk in chunks)


@settings(max_examples=300, deadline=None)
@given(doc=_docs(_MARKDOWN_PIECES), params=_size_and_overlap())
def test_chunk_markdown_invariants(doc: str, params: tuple[int, int]) -> None:
    """Markdown chunks keep every plain invariant. If this fails, check _Engine with _Outline."""
    size, overlap = params
    chunks = chunk_markdown(doc, source_id="md", size=size, overlap=overlap)
    _assert_invariants(doc, chunks, size, "md")
    assert chunk_markdown(doc, source_id="md", size=size, overlap=overlap) == chunks


@settings(max_examples=300, deadline=None)
@given(doc=_docs(_MARKDOWN_PIECES), params=_size_and_overlap())
def test_chunk_markdown_heading_rules(doc: str, params: tuple[int, int]) -> None:
    """Stacks match a reference; no overlap across headings. If this fails, check _Outline."""
    size, overlap = params
    chunks = chunk_markdown(doc, source_id="md", size=size, overlap=overlap)
    positions = [h[0] for h in _reference_headings(doc)]
    for chunk in chunks:
        assert chunk.metadata["heading"] == _reference_stack(doc, chunk.start, chunk.end)
    for previous, chunk in itertools.pairwise(chunks):
        assert not [h for h in positions if chunk.start < h < previous.end]
        following = len(doc) - len(doc[previous.end :].lstrip())
        if following in positions:
            assert chunk.start == following
            assert chunk.text.startswith("#")


# ---------------------------------------------------------------------------------------------
# Examples.


def _prose(chars: int) -> str:
    """Deterministic prose of exactly ``chars`` characters: words, sentences and paragraphs."""
    words = ["policy", "leave", "approval", "manager", "request", "days", "notice", "records"]
    out: list[str] = []
    n = i = 0
    while n < chars:
        end = "." if i % 9 == 8 else ""
        sep = "\n\n" if i % 40 == 39 else " "
        piece = words[(i * 5 + i // 8) % len(words)] + end + sep
        out.append(piece)
        n += len(piece)
        i += 1
    text = "".join(out)[:chars].rstrip()
    return text + "x" * (chars - len(text))


def test_defaults_on_2500_chars_share_context() -> None:
    """2,500 chars, defaults: <=1,000 each, context shared. If this fails, check _next_start."""
    doc = _prose(2500)
    assert len(doc) == 2500
    chunks = chunk_text(doc, source_id="guide")
    assert len(chunks) >= 3
    assert [c.id for c in chunks][:2] == ["guide#0001", "guide#0002"]
    for previous, chunk in itertools.pairwise(chunks):
        assert len(previous.text) <= DEFAULT_LIMITS.chunk_size
        shared = doc[chunk.start : previous.end]
        assert 0 < len(shared) <= DEFAULT_LIMITS.overlap
        assert previous.text.endswith(shared) and chunk.text.startswith(shared)
    assert chunks[-1].end == len(doc)


def test_heading_stack_parent_first() -> None:
    """# Policy / ## 3.2 Leave gives both, parent first. If this fails, check _Outline.lead."""
    (chunk,) = chunk_markdown("# Policy\n## 3.2 Leave\ntext", source_id="hr")
    assert chunk.metadata["heading"] == ["Policy", "3.2 Leave"]


def test_heading_stack_pops_same_and_deeper_levels() -> None:
    """Level n closes levels >= n. If this fails, check _Outline.stack."""
    doc = "# A\n\nintro text here.\n\n### C\n\nmore.\n\n## B ##\n\nbody text that follows B."
    chunks = chunk_markdown(doc, source_id="d", size=30, overlap=0)
    by_start = {c.text.split("\n")[0]: c.metadata["heading"] for c in chunks}
    assert by_start["## B ##"] == ["A", "B"]
    assert chunks[-1].metadata["heading"] == ["A", "B"]


def test_caller_heading_is_preserved() -> None:
    """A caller's heading wins; other metadata is copied. If this fails, check chunk_markdown."""
    doc = "# Policy\n\n" + _prose(3000)
    chunks = chunk_markdown(doc, source_id="hr", metadata={"heading": ["X"], "team": "people"})
    assert len(chunks) > 1
    assert all(c.metadata == {"heading": ["X"], "team": "people"} for c in chunks)


def test_heading_inside_fenced_code_is_ignored() -> None:
    """# lines in ``` and ~~~ fences are code. If this fails, check _fenced_ranges."""
    code = "```python\n# Fake one\n~~~\n# Fake two\n```\n"
    tilde = "~~~~\n# Fake three\n~~~\n# Fake four\n~~~~~\n"
    doc = "# Real\n\n" + code + "\n" + _prose(300) + "\n\n" + tilde + _prose(300)
    chunks = chunk_markdown(doc, source_id="d", size=120, overlap=20)
    assert len(chunks) > 4
    assert all(c.metadata["heading"] == ["Real"] for c in chunks)
    unclosed = chunk_markdown(
        "# Top\n```\n# Not a heading\n" + _prose(400), source_id="d", size=50, overlap=10
    )
    assert all(c.metadata["heading"] == ["Top"] for c in unclosed)


def test_fence_closes_only_on_a_matching_bare_fence() -> None:
    """Only a bare fence of the same char and >= length closes. If this fails, check _FENCE."""
    doc = (
        "# Real\n````\ncode\n```\n# Fake one\n~~~~\n# Fake two\n````python\n# Fake three\n"
        "````` \n## Sub\n``` a`b\n### Deep\ntext here"
    )
    (chunk,) = chunk_markdown(doc, source_id="d")
    assert chunk.metadata["heading"] == ["Real"]
    tail = chunk_markdown(doc, source_id="d", size=20, overlap=0)[-1]
    assert tail.text.endswith("text here")
    assert tail.metadata["heading"] == ["Real", "Sub", "Deep"]


def test_leading_headings_are_not_cut_off_alone() -> None:
    """A chunk opening # A / ## B keeps its body. If this fails, check the lead floor in _cut."""
    doc = "# A\n## B\n" + _prose(1500)
    chunks = chunk_markdown(doc, source_id="d", size=200, overlap=20)
    assert chunks[0].text.startswith("# A\n## B\n")
    assert len(chunks[0].text) > 100
    assert all(c.metadata["heading"] == ["A", "B"] for c in chunks)


def test_chunk_cut_at_heading_starts_at_heading() -> None:
    """Sections split at the heading, no overlap. If this fails, check the heading class in _cut."""
    first = "# One\n\n" + _prose(600)
    second = "# Two\n\n" + _prose(600)
    doc = first + "\n\n" + second
    chunks = chunk_markdown(doc, source_id="d", size=1000, overlap=100)
    assert [c.text for c in chunks] == [first, second]
    assert chunks[1].start == doc.index("# Two")
    assert [c.metadata["heading"] for c in chunks] == [["One"], ["Two"]]


def test_blank_line_beats_later_sentence_and_space() -> None:
    """A blank line beats later sentence ends. If this fails, check _Engine.classes order."""
    para = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu."  # 67 chars
    doc = para + "\r\n\r\n" + "One sentence. Two sentence. " + "nu xi omicron pi rho sigma tau"
    chunks = chunk_text(doc, source_id="d", size=100, overlap=0)
    assert chunks[0].text == para


def test_sentence_end_beats_later_space() -> None:
    """A sentence end beats later whitespace. If this fails, check _SENTENCE and class order."""
    doc = "alpha beta gamma delta epsilon zeta. eta theta iota kappa lambda mu nu xi omicron pi rho"
    chunks = chunk_text(doc, source_id="d", size=60, overlap=0)
    assert chunks[0].text == "alpha beta gamma delta epsilon zeta."


def test_early_boundaries_do_not_make_tiny_chunks() -> None:
    """An early boundary is skipped for a later one. If this fails, check the bands in _cut."""
    doc = "Intro.\n\n" + " ".join(["alpha", "beta", "gamma", "delta"] * 40)
    chunks = chunk_text(doc, source_id="d", size=100, overlap=0)
    assert chunks[0].text != "Intro."
    assert all(len(c.text) >= 50 for c in chunks[:-1])


def test_overlap_starts_at_a_word() -> None:
    """Overlap is moved forward to the start of a word. If this fails, check _Engine._next_start."""
    doc = _prose(2500)
    chunks = chunk_text(doc, source_id="d", size=300, overlap=50)
    assert len(chunks) > 5
    assert all(doc[c.start - 1].isspace() for c in chunks[1:])


def test_whitespace_gap_wider_than_window() -> None:
    """Text past a gap wider than size starts afresh. If this fails, check _next_start guards."""
    doc = "alpha" + " " * 500 + "beta"
    chunks = chunk_text(doc, source_id="d", size=100, overlap=50)
    assert [c.text for c in chunks] == ["alpha", "beta"]


def test_hard_cut_without_whitespace() -> None:
    """A long token is cut hard at size. If this fails, check _Engine._hard_cut."""
    chunks = chunk_text("x" * 250, source_id="d", size=100, overlap=0)
    assert [(c.start, c.end) for c in chunks] == [(0, 100), (100, 200), (200, 250)]


def test_hard_cut_keeps_combining_marks_with_their_base() -> None:
    """No chunk starts with a combining accent. If this fails, check _Engine._hard_cut."""
    doc = "e\u0301" * 60
    chunks = chunk_text(doc, source_id="d", size=9, overlap=0)
    _assert_invariants(doc, chunks, 9, "d")
    assert all(c.text[0] == "e" for c in chunks)


def test_crlf_tabs_and_emoji_are_kept_verbatim() -> None:
    """CRLF, tabs and emoji are never normalised. If this fails, check for text rewrites."""
    doc = "Première ligne.\r\n\r\n\tDeuxième 😀 ligne avec des mots.\r\nTroisième 👩\u200d💻 ligne."
    chunks = chunk_text(doc, source_id="d", size=25, overlap=5)
    _assert_invariants(doc, chunks, 25, "d")
    assert any("\r\n" in c.text for c in chunks)


def test_large_overlap_still_makes_progress() -> None:
    """overlap = size - 1 terminates, ends increase. If this fails, check _next_start guards."""
    doc = _prose(400)
    chunks = chunk_text(doc, source_id="d", size=50, overlap=49)
    _assert_invariants(doc, chunks, 50, "d")
    ends = [c.end for c in chunks]
    assert ends == sorted(set(ends))


def test_metadata_is_copied_not_shared() -> None:
    """Each chunk gets its own deep copy of metadata. If this fails, check _build and Chunk.of."""
    caller: dict[str, Any] = {"tags": ["a"], "nested": {"k": 1}}
    chunks = chunk_markdown(_prose(2500), source_id="d", metadata=caller)
    assert len(chunks) > 1
    chunks[0].metadata["tags"].append("changed")
    assert chunks[1].metadata["tags"] == ["a"]
    assert caller["tags"] == ["a"]
    assert chunks[1].metadata == {"tags": ["a"], "nested": {"k": 1}, "heading": []}


def test_chunks_are_frozen() -> None:
    """Chunks are immutable. If this fails, check Chunk in domain/model.py."""
    (chunk,) = chunk_text("hello", source_id="d")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        chunk.text = "other"  # type: ignore[misc]


@pytest.mark.parametrize("chunker", CHUNKERS)
@pytest.mark.parametrize("doc", ["", " ", "\r\n\t \u00a0\n"])
def test_empty_or_whitespace_gives_no_chunks(chunker: Chunker, doc: str) -> None:
    """Empty or whitespace-only input gives (). If this fails, check the early return."""
    assert chunker(doc, source_id="d") == ()


def test_one_megabyte_markdown() -> None:
    """A ~1 MB Markdown document chunks (untimed). If this fails, check for quadratic scans."""
    section = (
        "## Section {n}\n\n" + _prose(700) + "\n\n```sh\n# not a heading\necho hi\n```\n\n"
        "### Detail {n}\n\n" + _prose(500) + "\r\n\r\n"
    )
    parts: list[str] = []
    total = 0
    n = 0
    while total < 1_000_000:
        piece = section.format(n=n)
        parts.append(piece)
        total += len(piece)
        n += 1
    doc = "# Handbook\n\n" + "".join(parts)
    doc = doc[: DEFAULT_LIMITS.document_chars]
    chunks = chunk_markdown(doc, source_id="big")
    assert 1000 < len(chunks) <= DEFAULT_LIMITS.chunks_per_source
    assert chunks[-1].end == len(doc.rstrip())
    for chunk in chunks[::97]:
        assert doc[chunk.start : chunk.end] == chunk.text
        assert chunk.metadata["heading"][0] == "Handbook"
        assert "not a heading" not in chunk.metadata["heading"]


# ---------------------------------------------------------------------------------------------
# Failure modes: match on type and .limit / .field, never on message text.


@pytest.mark.parametrize("chunker", CHUNKERS)
@pytest.mark.parametrize(
    ("kwargs", "field", "limit"),
    [
        ({"source_id": ""}, "source_id", None),
        ({"source_id": "   "}, "source_id", None),
        ({"source_id": "a\x00b"}, "source_id", None),
        ({"source_id": 7}, "source_id", None),
        ({"size": 0}, "chunk_size", "chunk_size"),
        ({"size": 16_385}, "chunk_size", "chunk_size"),
        ({"size": True}, "chunk_size", "chunk_size"),
        ({"size": 10.5}, "chunk_size", "chunk_size"),
        ({"overlap": -1}, "overlap", "overlap"),
        ({"size": 16_384, "overlap": 4_097}, "overlap", "overlap"),
        ({"size": 100, "overlap": 100}, "overlap", "overlap"),
        ({"size": 100, "overlap": 150}, "overlap", "overlap"),
        ({"metadata": {"bad": object()}}, "metadata", None),
        ({"metadata": {"nan": float("nan")}}, "metadata", None),
        ({"metadata": ["not", "a", "mapping"]}, "metadata", None),
        ({"metadata": {"big": "x" * 9000}}, "metadata_bytes", "metadata_bytes"),
        ({"limits": "default"}, "limits", None),
    ],
)
def test_invalid_arguments(
    chunker: Chunker, kwargs: dict[str, Any], field: str, limit: str | None
) -> None:
    """Bad arguments raise ValidationError(field, limit). If this fails, check _validate."""
    arguments: dict[str, Any] = {"source_id": "d", **kwargs}
    with pytest.raises(ValidationError) as info:
        chunker("some text", **arguments)
    assert (info.value.field, info.value.limit) == (field, limit)


@pytest.mark.parametrize("chunker", CHUNKERS)
@pytest.mark.parametrize("doc", [b"bytes", None, 42])
def test_text_must_be_a_string(chunker: Chunker, doc: object) -> None:
    """Non-string documents are rejected. If this fails, check the isinstance in _validate."""
    with pytest.raises(ValidationError) as info:
        chunker(doc, source_id="d")
    assert info.value.field == ("text" if chunker is chunk_text else "markdown")
    assert info.value.limit is None


@pytest.mark.parametrize("chunker", CHUNKERS)
def test_document_chars_ceiling(chunker: Chunker) -> None:
    """Over limits.document_chars is rejected. If this fails, check _validate."""
    with pytest.raises(ValidationError) as info:
        chunker("x" * (DEFAULT_LIMITS.document_chars + 1), source_id="d")
    assert info.value.limit == "document_chars"
    assert info.value.field == "document_chars"
    small = Limits(document_chars=10)
    assert chunker("x" * 10, source_id="d", limits=small)
    with pytest.raises(ValidationError) as info:
        chunker("x" * 11, source_id="d", limits=small)
    assert info.value.limit == "document_chars"


@pytest.mark.parametrize("chunker", CHUNKERS)
def test_chunks_per_source_ceiling_rejects_instead_of_truncating(chunker: Chunker) -> None:
    """Too many chunks raises, never truncates. If this fails, check _Engine.spans."""
    limit = DEFAULT_LIMITS.chunks_per_source
    assert len(chunker("x" * limit, source_id="d", size=1, overlap=0)) == limit
    with pytest.raises(ValidationError) as info:
        chunker("x" * (limit + 1), source_id="d", size=1, overlap=0)
    assert (info.value.field, info.value.limit) == ("chunks_per_source", "chunks_per_source")
    with pytest.raises(ValidationError) as info:
        chunker("word " * 40, source_id="d", size=10, overlap=0, limits=Limits(chunks_per_source=3))
    assert info.value.limit == "chunks_per_source"


def test_metadata_bytes_counts_the_heading_stack() -> None:
    """The heading stack counts toward metadata_bytes. If this fails, check _build."""
    limits = Limits(metadata_bytes=40)
    assert chunk_markdown("# Short\ntext", source_id="d", metadata={"a": 1}, limits=limits)
    with pytest.raises(ValidationError) as info:
        chunk_markdown("# " + "H" * 40 + "\ntext", source_id="d", metadata={"a": 1}, limits=limits)
    assert (info.value.field, info.value.limit) == ("metadata_bytes", "metadata_bytes")
    # The same document through chunk_text carries no heading, so it fits.
    assert chunk_text("# " + "H" * 40 + "\ntext", source_id="d", metadata={"a": 1}, limits=limits)


def test_metadata_bytes_measures_compact_utf8_json() -> None:
    """Compact UTF-8 JSON is measured exactly. If this fails, check _check_metadata_bytes."""
    exact = {"k": "v" * 14}  # {"k":"vvvvvvvvvvvvvv"} is 22 bytes
    assert chunk_text("text", source_id="d", metadata=exact, limits=Limits(metadata_bytes=22))
    with pytest.raises(ValidationError) as info:
        chunk_text("text", source_id="d", metadata=exact, limits=Limits(metadata_bytes=21))
    assert info.value.limit == "metadata_bytes"


def test_a_run_of_headings_is_never_left_dangling_at_a_chunk_end():
    """A cut before `## B\n\n### B.1` happens before `## B`, not between the two headings.

    If this fails, check `_Engine._cut` and its walk back over adjacent headings.
    """
    doc = "# A\n\n" + "alpha words here. " * 12 + "\n\n## B\n\n### B.1\n\n" + "beta text. " * 20
    chunks = chunk_markdown(doc, source_id="doc", size=260, overlap=20)
    assert len(chunks) >= 2
    for chunk in chunks:
        last_line = chunk.text.rstrip().splitlines()[-1]
        assert not last_line.lstrip().startswith("#"), chunk.text
    assert any(c.text.startswith("## B\n\n### B.1") for c in chunks)
    assert any(c.metadata["heading"] == ["A", "B", "B.1"] for c in chunks)


def test_setext_headings_join_the_heading_stack() -> None:
    """``===`` / ``---`` underlined paragraphs are level 1 / 2 headings, CRLF too.

    If this fails, check _setext_headings and _Outline.text_at.
    """
    doc = "Project\n=======\n\nIntro.\n\nUsage\r\nguide\r\n-----\r\n\r\nRun it.\n"
    chunks = chunk_markdown(doc, source_id="readme", size=20, overlap=0)
    stacks = {c.text.splitlines()[0]: c.metadata["heading"] for c in chunks}
    assert stacks["Project"] == ["Project"]
    assert stacks["Usage"] == ["Project", "Usage guide"]
    assert chunks[-1].metadata["heading"] == ["Project", "Usage guide"]


def test_thematic_breaks_lists_and_fences_are_not_setext_headings() -> None:
    """``---`` after a blank line, under a list item or inside a fence is no heading.

    If this fails, check _NOT_SETEXT_TEXT and the fence filter in _Outline.
    """
    doc = "# Top\n\ntext\n\n---\n\n- item\n---\n```\ncode\n---\n```\n> quote\n===\nend"
    (chunk,) = chunk_markdown(doc, source_id="d")
    assert chunk.metadata["heading"] == ["Top"]
    tail = chunk_markdown(doc, source_id="d", size=12, overlap=0)
    assert all(c.metadata["heading"] == ["Top"] for c in tail)


_SETEXT_PIECES = [
    *_MARKDOWN_PIECES,
    "\n===\n",
    "\n---\n",
    "\nTitle line\n=====\n",
    "\nSub title\r\n---\r\n",
    "\n- item\n---\n",
    "\n> quote\n===\n",
    "=",
    "-",
]


@settings(max_examples=300, deadline=None)
@given(doc=_docs(_SETEXT_PIECES), params=_size_and_overlap())
@example(doc="\n``` a`b\n\xa0\n===\n", params=(5, 0))
def test_chunk_markdown_invariants_with_setext_underlines(
    doc: str, params: tuple[int, int]
) -> None:
    """Setext underlines anywhere keep every invariant; heading texts are single lines.

    If this fails, check _setext_headings (positions must be sorted, unique, inside the text).
    """
    size, overlap = params
    chunks = chunk_markdown(doc, source_id="md", size=size, overlap=overlap)
    _assert_invariants(doc, chunks, size, "md")
    for chunk in chunks:
        assert all(
            isinstance(t, str) and "\n" not in t and "\r" not in t
            for t in chunk.metadata["heading"]
        )
    assert chunk_markdown(doc, source_id="md", size=size, overlap=overlap) == chunks
