"""``ChunkStoreHybridSnapshotContract``: both legs of a hybrid query read one snapshot.

A writer replaces one source over and over, alternating between 2 and 8 chunks, while readers
run ``hybrid_query`` and hybrid ``retrieve_context``. Every answer must hold chunks of one
version of the source only: the vector leg and the lexical leg see the same pointer and the
same tombstones. The test runs for ``hybrid_snapshot_seconds`` (5 s by default; override the
class attribute to run longer).

Part of ``ChunkStoreContract``; needs ``transactions``, ``generations`` and a lexical mode.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Iterable
from typing import ClassVar

import pytest

from ragport.application.retrieval import retrieve_context
from ragport.application.retrieval_request import RetrievalRequest
from ragport.contract_tests._support import (
    CONTRACT_DIMENSIONS,
    CONTRACT_EMBEDDER_ID,
    ContractEmbedder,
    hash_vector,
    publish_sources,
)
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    QUERY_ALL,
    SCOPE,
    WRITER_TIMEOUT_S,
    _require_generations,
    _require_implemented,
    _require_transactions,
)
from ragport.domain.model import Record
from ragport.ports.store import ChunkStore, SupportsLexicalSearch

__all__ = ["ChunkStoreHybridSnapshotContract"]

WORD = "hyword"
SOURCE = "hy-s"
SIZES = (2, 8)


def _texts(version: int) -> list[str]:
    return [f"{WORD} version {version} part {j}" for j in range(SIZES[version % 2])]


def _versions(records: Iterable[Record]) -> set[str]:
    """The version tags of ``SOURCE``'s chunks among ``records``."""
    return {r.text.split(" part ", 1)[0] for r in records if r.source_id == SOURCE}


class ChunkStoreHybridSnapshotContract(_ChunkStoreContractBase):
    """Hybrid answers never mix two versions of a source, however fast it is replaced."""

    hybrid_snapshot_seconds: ClassVar[float] = 5.0
    """How long the writer and the readers race (the test's wall time)."""

    # Allow-listed function shape (pyproject [tool.ruff.lint]): one contract scenario checked step by step.
    def test_hybrid_answers_never_mix_two_versions_of_a_source(self, store: ChunkStore) -> None:  # noqa: PLR0915
        """Checks ``SupportsLexicalSearch.hybrid_query``, ``retrieve_context``: while a writer
        alternates a source between 2 and 8 chunks, no ``hybrid_query`` answer and no hybrid
        ``retrieve_context`` result holds chunks of two versions.

        If this fails, check that ``hybrid_query`` reads the drift guard, the vector leg and
        the lexical leg from one snapshot (one pointer, one set of tombstones): one
        REPEATABLE READ transaction, one immutable in-memory snapshot, never two statements
        in autocommit.
        """
        _require_transactions(store)
        _require_generations(store)
        modes = store.capabilities.lexical_modes
        if not modes:
            pytest.skip(
                f"{type(store).__name__} declares no lexical_modes, so it makes no hybrid "
                "promise; declare one and this test must pass"
            )
        _require_implemented(store, "lexical")
        assert isinstance(store, SupportsLexicalSearch)
        mode = modes[0]
        publish_sources(store, SCOPE, {SOURCE: _texts(0)})
        probe = hash_vector(WORD)
        embedder = ContractEmbedder()
        stop = threading.Event()
        errors: list[BaseException] = []
        mixed: list[tuple[str, set[str]]] = []
        reads = {"store": 0, "retrieve": 0}
        writes = [0]
        count_lock = threading.Lock()

        def writer() -> None:
            try:
                version = 0
                while not stop.is_set():
                    version += 1
                    publish_sources(store, SCOPE, {SOURCE: _texts(version)})
                    writes[0] += 1
            except BaseException as exc:
                errors.append(exc)

        def reader(use_case: bool) -> None:
            try:
                while not stop.is_set():
                    if use_case:
                        result = retrieve_context(
                            WORD,
                            embedder=embedder,
                            store=store,
                            scope=SCOPE,
                            request=RetrievalRequest(
                                top_k=QUERY_ALL,
                                query_candidates=QUERY_ALL,
                                lexical=mode,
                                max_context_tokens=8_000,
                            ),
                        )
                        seen = {h.provenance.citation_id: h for h in result.hits}
                        tags = {
                            h.text.split(" part ", 1)[0]
                            for h in seen.values()
                            if h.source_id == SOURCE
                        }
                        reads["retrieve"] += 1
                        if len(tags) > 1:
                            mixed.append(("retrieve_context", tags))
                    else:
                        answer = store.hybrid_query(
                            SCOPE,
                            probe,
                            WORD,
                            embedder_id=CONTRACT_EMBEDDER_ID,
                            dimensions=CONTRACT_DIMENSIONS,
                            limit=QUERY_ALL,
                            mode=mode,
                        )
                        tags = _versions(s.record for s in [*answer.vector, *answer.lexical])
                        with count_lock:
                            reads["store"] += 1
                        if len(tags) > 1:
                            mixed.append(("hybrid_query", tags))
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=writer, daemon=True),
            threading.Thread(target=reader, args=(False,), daemon=True),
            threading.Thread(target=reader, args=(False,), daemon=True),
            threading.Thread(target=reader, args=(True,), daemon=True),
        ]
        for thread in threads:
            thread.start()
        time.sleep(self.hybrid_snapshot_seconds)
        stop.set()
        for thread in threads:
            thread.join(WRITER_TIMEOUT_S)
        hung = [t for t in threads if t.is_alive()]
        assert not hung, "the writer or a reader hung; where they wait:\n" + _stacks(hung)
        assert not errors, f"a thread raised: {errors[0]!r}"
        assert not mixed, (
            f"{len(mixed)} of {sum(reads.values())} hybrid reads mixed two versions of "
            f"{SOURCE!r}, e.g. {mixed[0]}"
        )
        assert writes[0] >= 10, f"the writer replaced the source only {writes[0]} times"
        assert min(reads.values()) >= 10, f"too few reads to mean anything: {reads}"
        print(  # the counts behind a pass, for whoever reads -s output
            f"hybrid snapshot: {writes[0]} replacements, {reads['store']} hybrid_query and "
            f"{reads['retrieve']} retrieve_context reads, 0 mixed"
        )


def _stacks(threads: list[threading.Thread]) -> str:
    """Where each of ``threads`` is now: file, line and function of its innermost frames (code
    locations only, no local values), to find what a hung thread waits for."""
    frames = sys._current_frames()
    out = []
    for thread in threads:
        frame = frames.get(thread.ident or -1)
        summary = traceback.extract_stack(frame)[-14:] if frame is not None else []
        out.append(
            f"{thread.name}:\n"
            + "\n".join(f"  {f.filename}:{f.lineno} in {f.name}" for f in summary)
        )
    return "\n".join(out)
