"""`memory://?lexical_language=english`: the in-memory store's BM25 analyzer from its URL, so
`ragport eval` reproduces bench/quality.py's in-memory figures (docs/evaluation.md)."""

from __future__ import annotations

import pytest

from ragport.adapters.embedders import HashEmbedder
from ragport.application import replace_source
from ragport.bootstrap import open_stores
from ragport.cli import main
from ragport.domain.errors import ValidationError
from ragport.domain.model import Chunk, Scope

SCOPE = Scope("t", "r", "c")


def _lexical_ids(url: str, query: str) -> list[str]:
    with open_stores(url) as stores:
        store = stores.chunks
        for i, text in enumerate(["the engines were running", "a running engine"]):
            replace_source(
                source_id=f"d{i}", chunks=[Chunk.of(f"d{i}", 0, text)], embedder=HashEmbedder(),
                store=store, scope=SCOPE,
            )  # fmt: skip
        return [h.record.source_id for h in store.lexical_query(SCOPE, query, limit=5)]


def test_the_english_analyzer_stems_and_the_default_does_not():
    """`engine` matches `engines` only with lexical_language=english.

    If this fails, check _memory_language and is_memory_url in ragport/bootstrap/stores.py."""
    assert _lexical_ids("memory://", "engine") == ["d1"]
    assert set(_lexical_ids("memory://?lexical_language=english", "engine")) == {"d0", "d1"}
    assert _lexical_ids("memory://?lexical_language=simple", "engine") == ["d1"]


@pytest.mark.parametrize(
    "url",
    ["memory://?lexical_language=klingon", "memory://?top=1", "memory://?x", "memory://?a=1&a"],
)
def test_other_options_are_refused_naming_the_store(url, capsys):
    """An unknown option or language is a ValidationError(field="store"); the CLI exits 2.

    If this fails, check _memory_language's refusal."""
    with pytest.raises(ValidationError) as caught, open_stores(url):
        pass
    assert caught.value.field == "store"
    assert main(["status", "--store", url]) == 2
