"""Values that enter the domain: NUL and lone surrogates, metadata keys, the metadata byte cap.

Every string a store keeps (ids, texts, metadata keys and values at any depth) is refused at
the domain boundary when it holds a NUL or a lone surrogate, so the in-memory store and
PostgreSQL (which cannot hold either) give the same ``ValidationError``. The store-facing half
of these promises runs on both stores in ``ragport.contract_tests.chunk_store.boundary``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ragport
from ragport.domain.errors import ScopeError, ValidationError
from ragport.domain.model import (
    Record,
    Rename,
    Tombstone,
    freeze_metadata,
    metadata_bytes,
    validate_id,
    validate_text,
)

BAD = {"nul": "a\x00b", "lone-high": "a\ud800b", "lone-low": "\udfff"}
SCOPE = ragport.Scope("t", "r", "c")


def _record(**changes: Any) -> Record:
    values: dict[str, Any] = {
        "id": "doc#0001",
        "scope": SCOPE,
        "source_id": "doc",
        "kind": "chunk",
        "text": "fine",
    }
    values.update(changes)
    return Record(**values)


BUILDERS: dict[str, tuple[Callable[[str], object], str]] = {
    "scope": (lambda v: ragport.Scope("t", v, "c"), "resource_id"),
    "source-id": (lambda v: ragport.Chunk.of(v, 0, "x"), "source_id"),
    "chunk-text": (lambda v: ragport.Chunk.of("doc", 0, v), "text"),
    "metadata-key": (lambda v: ragport.Chunk.of("doc", 0, "x", metadata={v: 1}), "metadata"),
    "metadata-value": (lambda v: ragport.Chunk.of("doc", 0, "x", metadata={"k": v}), "metadata"),
    "nested-key": (
        lambda v: ragport.Chunk.of("doc", 0, "x", metadata={"k": [{"ok": {v: 1}}]}),
        "metadata",
    ),
    "nested-value": (
        lambda v: ragport.Chunk.of("doc", 0, "x", metadata={"k": {"l": ["ok", v]}}),
        "metadata",
    ),
    "record-id": (lambda v: _record(id=v), "id"),
    "record-text": (lambda v: _record(text=v), "text"),
    "record-metadata": (lambda v: _record(metadata={"k": {"l": v}}), "metadata"),
    "record-lineage": (lambda v: _record(kind="derived", lineage=(v,)), "lineage"),
    "principal-id": (lambda v: ragport.Authorization(v, "t"), "principal_id"),
    "group-id": (lambda v: ragport.Authorization("p", "t", group_ids=("g", v)), "group_ids"),
    "grant-source": (lambda v: ragport.Grant(v, principal_ids=("p",)), "source_id"),
    "grant-principal": (lambda v: ragport.Grant("doc", principal_ids=(v,)), "principal_ids"),
    "grant-group": (lambda v: ragport.Grant("doc", group_ids=(v,)), "group_ids"),
    "tombstone-id": (lambda v: Tombstone(v), "id"),
    "rename": (lambda v: Rename("a", v), "to_id"),
    "chunk-text-document": (
        lambda v: ragport.domain.chunk_text(f"ok {v} ok", source_id="d"),
        "text",
    ),
    "chunk-markdown-document": (
        lambda v: ragport.domain.chunk_markdown(f"# ok\n{v}", source_id="d"),
        "markdown",
    ),
}


@pytest.mark.parametrize("bad", list(BAD.values()), ids=list(BAD))
@pytest.mark.parametrize("where", list(BUILDERS))
def test_nul_and_lone_surrogates_are_refused_where_values_enter(where: str, bad: str) -> None:
    """Each entry point refuses NUL and lone surrogates with a ValidationError naming the field.

    If this fails, check validate_id, validate_text and freeze_metadata in domain/model.py.
    """
    build, field = BUILDERS[where]
    with pytest.raises(ValidationError) as info:
        build(bad)
    assert info.value.field == field
    if where == "scope":
        assert isinstance(info.value, ScopeError)
    assert bad not in str(info.value)


def test_text_that_is_merely_unusual_is_accepted() -> None:
    """Other control characters, astral characters and paired surrogates' code points pass.

    If this fails, check _unencodable in domain/model.py (only NUL and lone surrogates fail).
    """
    text = "tab\there\nnew line \x01 \U0001f600 é"
    assert validate_text(text, field="text") == text
    assert ragport.Chunk.of("doc", 0, text, metadata={"k": text}).metadata == {"k": text}
    assert validate_id("\U0001f600-id", field="id") == "\U0001f600-id"


@pytest.mark.parametrize(
    "metadata",
    [
        {1: "a", "1": "b"},
        {None: "x", "null": "y"},
        {True: "x"},
        {1.5: "x"},
        {("a",): "x"},
        {"outer": {2: "x"}},
        {"outer": [{"ok": 1}, {None: "x"}]},
    ],
    ids=["int", "none", "bool", "float", "tuple", "nested", "nested-in-list"],
)
def test_non_string_metadata_keys_are_refused_not_coerced(metadata: dict[Any, Any]) -> None:
    """json.dumps would coerce 1 to "1" and None to "null" and drop the colliding value.

    If this fails, check _freeze_object in domain/model.py.
    """
    with pytest.raises(ValidationError) as info:
        freeze_metadata(metadata)
    assert info.value.field == "metadata"
    with pytest.raises(ValidationError):
        ragport.Chunk.of("doc", 0, "x", metadata=metadata)


def test_freeze_metadata_copies_json_values_like_a_round_trip() -> None:
    """Tuples become lists, subclasses their base types, nothing is aliased; non-JSON is refused.

    If this fails, check _freeze_value in domain/model.py.
    """

    class Name(str):
        pass

    inner = {"list": [1, 2.5, None, True, Name("n")], "tuple": ("a", ("b",))}
    frozen = freeze_metadata({"k": inner})
    assert frozen == {"k": {"list": [1, 2.5, None, True, "n"], "tuple": ["a", ["b"]]}}
    assert type(frozen["k"]["list"][4]) is str
    assert frozen["k"] is not inner
    loop: dict[str, Any] = {}
    loop["self"] = loop
    for bad in ({"x": float("nan")}, {"x": object()}, {"x": {1, 2}}, loop):
        with pytest.raises(ValidationError):
            freeze_metadata(bad)
    deep: Any = "leaf"
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ValidationError):
        freeze_metadata({"deep": deep})


def test_metadata_bytes_is_utf8_of_compact_json() -> None:
    """6,000 × "é" is 12,000 UTF-8 bytes plus the JSON around it, never its \\u escapes.

    If this fails, check metadata_bytes in domain/model.py.
    """
    assert metadata_bytes({"k": "é" * 6000}) == len('{"k":""}') + 12_000
    assert metadata_bytes({"a": [1, 2], "b": None}) == len('{"a":[1,2],"b":null}')


EXACT = {"k": "é" * 6000}
EXACT_BYTES = 12_008


def _replace(metadata: dict[str, Any], limits: ragport.Limits) -> object:
    from ragport.adapters.embedders import HashEmbedder
    from ragport.adapters.memory import InMemoryStore

    return ragport.application.replace_source(
        source_id="doc",
        chunks=[ragport.Chunk.of("doc", 0, "text", metadata=metadata)],
        embedder=HashEmbedder(8),
        store=InMemoryStore(),
        scope=SCOPE,
        runtime=ragport.Runtime(limits=limits),
    )


def _derive(metadata: dict[str, Any], limits: ragport.Limits) -> object:
    from ragport.adapters.embedders import HashEmbedder
    from ragport.adapters.memory import InMemoryStore

    store = InMemoryStore()
    ragport.application.replace_source(  # the lineage must name a source with records
        source_id="doc",
        chunks=[ragport.Chunk.of("doc", 0, "the doc")],
        embedder=HashEmbedder(8),
        store=store,
        scope=SCOPE,
    )
    return ragport.application.index_derived(
        record_id="summary",
        text="a summary",
        lineage=["doc"],
        metadata=metadata,
        embedder=HashEmbedder(8),
        store=store,
        scope=SCOPE,
        runtime=ragport.Runtime(limits=limits),
    )


CAPPED: dict[str, Callable[[dict[str, Any], ragport.Limits], object]] = {
    "chunk_text": lambda m, lim: ragport.domain.chunk_text(
        "text", source_id="d", metadata=m, limits=lim
    ),
    "chunk_markdown": lambda m, lim: ragport.domain.chunk_markdown(
        "# T\ntext", source_id="d", metadata={**m, "heading": []}, limits=lim
    ),
    "replace_source": _replace,
    "index_derived": _derive,
}


@pytest.mark.parametrize("where", list(CAPPED))
def test_the_metadata_cap_counts_the_same_everywhere(where: str) -> None:
    """6,000 × "é" fits a cap of its exact UTF-8 size and not one byte less, in every entry.

    If this fails, check that chunking and the use cases all call domain metadata_bytes.
    """
    run = CAPPED[where]
    extra = len(',"heading":[]') if where == "chunk_markdown" else 0
    assert run(EXACT, ragport.Limits(metadata_bytes=EXACT_BYTES + extra))
    with pytest.raises(ValidationError) as info:
        run(EXACT, ragport.Limits(metadata_bytes=EXACT_BYTES + extra - 1))
    assert info.value.limit == "metadata_bytes"
