"""What a retrieve reads from the SQLite example store (examples/sqlite_store), with its
``search_vectors`` pushdown and without any (``BackendStore(backend, pushdown=False)``).

Issue 41: with no pushdown at all, a retrieve reads the scope's state (the drift guard reads
the embedder claim there), never ``rows()``; the vector leg is ``nearest()``. With the
pushdown it reads neither: the scope's searchable rows come from the matrix cached for the
scope's stamp. Hybrid retrieval works on both, through the engine's BM25 leg.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from ragport_sqlite import SqliteBackend

from ragport import Chunk, Scope
from ragport.adapters.embedders import HashEmbedder
from ragport.application import RetrievalRequest, replace_source, retrieve_context
from ragport.engine import BackendStore

SCOPE = Scope("acme", "kb", "reads")
EMBEDDER = HashEmbedder(32)
MEMBERS = ("state", "rows", "nearest", "grants", "tombstones")


class CountingBackend(SqliteBackend):
    """The example's backend, counting the reader members its read views are asked."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: Counter[str] = Counter()

    @contextmanager
    def _counted(self, block: Any) -> Iterator[Any]:
        with block as view:
            for name in MEMBERS:
                setattr(view, name, self._count(name, getattr(view, name)))
            yield view

    def _count(self, name: str, member: Any) -> Any:
        def counted(*args: Any, **kw: Any) -> Any:
            self.calls[name] += 1
            return member(*args, **kw)

        return counted

    def read(self, scope: Scope) -> Any:
        return self._counted(super().read(scope))


def _corpus(store: BackendStore) -> None:
    for n in range(3):
        source = f"doc-{n}"
        chunks = [Chunk.of(source, i, f"leave policy {n} part {i} badge") for i in range(20)]
        replace_source(source_id=source, chunks=chunks, embedder=EMBEDDER, store=store, scope=SCOPE)
    memo = [Chunk.of("memo", 0, "quarantine rules for visitors")]
    replace_source(source_id="memo", chunks=memo, embedder=EMBEDDER, store=store, scope=SCOPE)


@pytest.mark.parametrize("pushdown", [False, True], ids=["generic", "pushdown"])
def test_a_vector_retrieve_reads_the_state_not_the_rows(tmp_path: Path, pushdown: bool) -> None:
    """One retrieve_context (vector leg): no rows() call, one state() read; without the
    pushdown the leg streams nearest(), with it nothing else.

    If this fails, check the drift guard (it must read GenerationState.embedders, which the
    example stores in the generations table) and SqliteBackend.search_vectors."""
    backend = CountingBackend(tmp_path / "store.db")
    store = BackendStore(backend, pushdown=pushdown)
    _corpus(store)
    backend.calls.clear()
    found = retrieve_context(
        "leave policy", embedder=EMBEDDER, store=store, scope=SCOPE, request=RetrievalRequest()
    )
    assert found.hits
    assert backend.calls["rows"] == 0
    assert backend.calls["state"] == 1
    assert backend.calls["nearest"] == (0 if pushdown else 1)


@pytest.mark.parametrize("pushdown", [False, True], ids=["generic", "pushdown"])
def test_hybrid_retrieval_works_on_the_example(tmp_path: Path, pushdown: bool) -> None:
    """The engine's bm25 leg gives the example hybrid search (no lexical code of its own).

    If this fails, check BackendStore's lexical leg over rows()."""
    store = BackendStore(CountingBackend(tmp_path / "store.db"), pushdown=pushdown)
    _corpus(store)
    assert "bm25" in store.capabilities.lexical_modes
    found = retrieve_context(
        "quarantine",
        embedder=EMBEDDER,
        store=store,
        scope=SCOPE,
        request=RetrievalRequest(lexical="bm25", top_k=5),
    )
    legs = {h.id: h.provenance.retrieval for h in found.hits}
    assert legs.get("memo#0001") in ("lexical", "hybrid"), legs
