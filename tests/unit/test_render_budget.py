"""``render`` stops at exactly the block the byte or the token ceiling refuses."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from ragport.application.answer import BLOCK_SEPARATOR, render
from ragport.domain.hits import ranked_hits
from ragport.domain.model import Record, Scope, Trust

SCOPE = Scope("t", "r", "c")


def _reference(texts: list[str], top_k: int, max_bytes: int, max_tokens: int) -> int:
    """How many blocks fit, by the rule as written: bytes so far plus the block (and its
    separator) within max_bytes, and ceil(bytes / 4) within max_tokens."""
    used, shown = 0, 0
    for i, text in enumerate(texts[:top_k]):
        block = f"[d#{i:04d}] {text}"
        extra = len(block.encode("utf-8")) + (len(BLOCK_SEPARATOR) if shown else 0)
        if used + extra > max_bytes or math.ceil((used + extra) / 4) > max_tokens:
            break
        used += extra
        shown += 1
    return shown


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(
        st.text(st.characters(categories=("L", "N", "P", "Zs", "So")), min_size=1, max_size=40),
        max_size=8,
    ),
    top_k=st.integers(1, 10),
    max_bytes=st.integers(1, 400),
    max_tokens=st.integers(1, 100),
)
def test_render_shows_what_the_written_rule_allows(
    texts: list[str], top_k: int, max_bytes: int, max_tokens: int
) -> None:
    """Against the rule written out with ``math.ceil``: the same blocks, the same
    ``truncated`` and ``dropped``, the citations of the hits shown.

    If this fails, check render's single byte budget min(max_bytes, 4 * max_tokens).
    """
    records = [
        Record(id=f"d#{i:04d}", scope=SCOPE, source_id="d", kind="chunk", text=t)
        for i, t in enumerate(texts)
    ]
    hits = ranked_hits(
        [(SCOPE, r, 1.0, "vector") for r in records],
        provider="memory",
        retrieved_at=datetime(2026, 1, 1, tzinfo=UTC),
        trust=Trust(),
    )
    result = render("q", hits, top_k=top_k, max_bytes=max_bytes, max_tokens=max_tokens)
    shown = _reference(texts, top_k, max_bytes, max_tokens)
    wanted = min(top_k, len(texts))
    assert [h.id for h in result.hits] == [r.id for r in records[:shown]]
    assert [c.chunk_id for c in result.citations] == [r.id for r in records[:shown]]
    assert result.truncated is (shown < wanted)
    assert result.dropped == wanted - shown
    assert result.text == BLOCK_SEPARATOR.join(f"[{r.id}] {r.text}" for r in records[:shown])
